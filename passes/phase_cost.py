"""Estimated time of one phase of one chunk: the latency-aware cost model the scheduling passes balance with.

It follows the analytical runtime's rules (latency x hops + bytes / link bandwidth per step, the link model of
each building block, no contention), in closed form per algorithm (each algorithm's `cost_steps`, algorithms/), so
a pass can weigh a chunk's phases without lowering them. Trees are estimated (height-many latency steps, half the
data per tree); the others are exact for evenly split sizes.
"""
from __future__ import annotations

from .. import algorithms
from ..network import blocks
from ..network.kinds import WHOLE_CHUNK
from ..network.units import gbps_to_bytes_per_ns


def _link(block: str, k: int, gbps: float) -> float:
    """Bytes per ns of one link: the NPU's bandwidth over the links that share it (network/blocks/; a Graph's
    per-NPU bandwidth is an estimate: its messages take paths whose links the lowering knows)."""
    return gbps_to_bytes_per_ns(gbps / blocks.BLOCKS[block].link_share(k))


def phase_steps(kind: str, algorithm: str, block: str, k: int, gbps: float, latency_ns: float,
                region: float, endpoint_ns: float = 0.0) -> list[tuple[float, float]]:
    """(latency, transfer) in ns of every step of a `kind` phase of `algorithm` on a k-member dimension, for a chunk
    region of `region` bytes (the algorithm's own cost model, algorithms/). Trees are one entry for all steps. A
    step's latency holds the topology's endpoint delay once (its messages pay it side by side)."""
    kind_of_block = blocks.BLOCKS[block]
    hop = lambda d: latency_ns * kind_of_block.cost_hops(k, d) + endpoint_ns  # noqa: E731
    return algorithms.for_phase(algorithm, flat=False).cost_steps(kind, kind_of_block, k, _link(block, k, gbps),
                                                                  hop, region)


def phase_time_ns(kind: str, algorithm: str, block: str, k: int, gbps: float, latency_ns: float,
                  region: float, active: int = 1, endpoint_ns: float = 0.0) -> float:
    """How long a phase occupies its dimension. With one active chunk per dimension a step holds the links for its
    latency and its transfer; with `active` chunks in progress the links serve other chunks' steps while a step's
    latency elapses, so a step costs max(transfer, (latency + transfer) / active) in steady state."""
    return sum(max(t, (lat + t) / active)
               for lat, t in phase_steps(kind, algorithm, block, k, gbps, latency_ns, region, endpoint_ns))


def region_sizes(kind: str, dims_in_order: list[int], shape: list[int], chunk: float) -> list[float]:
    """Region entering each phase of a chunk visiting `dims_in_order` (reduce-scatter shrinks, all-gather grows)."""
    if kind in WHOLE_CHUNK:
        return [chunk] * len(dims_in_order)
    if kind == "reduce_scatter":
        out, region = [], chunk
        for d in dims_in_order:
            out.append(region)
            region /= shape[d]
        return out
    grown = region_sizes("reduce_scatter", dims_in_order[::-1], shape, chunk)
    return grown[::-1]
