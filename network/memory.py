"""Local memory of an accelerator (ASTRA-sim 2.0, "Memory Models", local memory model) and ASTRA-sim's reduction term.

A load or store of S bytes in local memory (HBM) takes access latency + S / bandwidth, the paper's equation. The
bandwidth is the one the compute roofline uses (`--mem-bw`, GB/s of 2^30 B), so one figure describes the HBM.

ASTRA-sim also charges a collective's reductions to local memory: every received packet that is reduced into the
buffer costs one write and two reads of its bytes (astra-sim's PacketBundle: mem_write + 2 x mem_read) before
the packet is forwarded, at its system file's `local-mem-bw`. That key counts decimal GB/s (bytes per ns) where
its network files count GB/s of 2^30 B: a 1 GiB ring all-reduce on Ring(8)_Ring(8) at 100 GB/s, 500 ns, 4 chunks,
baseline schedule, with local-mem-bw 1600 lands at 19289.6 us here against ASTRA-sim's 19290.2 us read that way
(19169 us if it were 2^30 B). The term is off unless a run asks for it (`--local-mem-bw`, or a system file's
`local-mem-bw`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import UserError, show
from .units import MAX_LATENCY_NS, gbps_to_bytes_per_ns, link_range_error

# a reduced packet is written once and read twice (the packet and the buffer it is added into)
REDUCTION_ACCESSES = 3
# where a load or store goes: the accelerator's own HBM, or the remote memory pool (network/memory_pool.py)
LOCATIONS = ("local", "remote")


@dataclass(frozen=True)
class LocalMemory:
    """An accelerator's HBM: access latency (ns) and bandwidth (GB/s of 2^30 B)."""
    latency_ns: float = 0.0
    gbps: float = 1896.0   # A100-80GB: 2039 GB/s decimal, the roofline's default

    def __post_init__(self):
        why = link_range_error(self.gbps, self.latency_ns)
        if why is not None:
            raise UserError(f"local memory: {why}")

    def access_ns(self, nbytes: float) -> float:
        """A load or a store of `nbytes` bytes."""
        return self.latency_ns + nbytes / gbps_to_bytes_per_ns(self.gbps)


def reduction_ns(nbytes, local_mem_gbps: float | None):
    """ASTRA-sim's local-memory time of reducing `nbytes` received bytes (scalar or numpy array); 0 when the term
    is off (None). `local_mem_gbps` is ASTRA-sim's decimal GB/s (bytes per ns)."""
    if local_mem_gbps is None:
        return nbytes * 0.0
    return REDUCTION_ACCESSES * nbytes / local_mem_gbps


def check_local_mem_gbps(value: float, what: str = "--local-mem-bw") -> float:
    """A reduction bandwidth a run can use, or one UserError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 1e-3 <= value <= 1e12:
        raise UserError(f"{what}: local memory bandwidth must be a number of GB/s between 0.001 and 1e12, got {show(value)}")
    return float(value)


def check_latency_ns(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= MAX_LATENCY_NS:
        raise UserError(f"{what}: latency must be a number of ns between 0 and {MAX_LATENCY_NS:g}, got {show(value)}")
    return float(value)


@dataclass(frozen=True)
class MemorySystem:
    """Where a load or store goes: the accelerator's local memory, or the remote pool (network/memory_pool.py; None:
    the system has none)."""
    local: LocalMemory = LocalMemory()
    pool: object | None = None

    def time_ns(self, location: str, nbytes: float, sharers: int = 1) -> float:
        """A load's or store's time. A remote one is timed as the pool serves it when every GPU of the pool moves
        the same bytes at once (ASTRA-sim 2.0's model: SPMD training steps do); sharers > 1: the pool's switches gather
        (reduce) the tensor for groups of that many GPUs (in-switch collectives)."""
        if location == "local":
            return self.local.access_ns(nbytes)
        if self.pool is None:
            raise UserError("the step loads or stores remote memory but the system has no memory pool: give --pool "
                            "pool.yaml (docs/memory.md)")
        return self.pool.transfer(nbytes, sharers).total_ns
