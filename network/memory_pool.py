"""Remote (pooled) memory: ASTRA-sim 2.0's hierarchical memory pool (HierMem) and ZeRO-Infinity's per-node CPU memory or
NVMe, with the paper's pipelined transfer model.

HierMem (ASTRA-sim 2.0, "Remote Memory Model", Fig. "remote memory model illustration"): `nodes` nodes of
`gpus_per_node` GPUs; each node's GPUs hang off an in-node switch (in-node pooled fabric, per GPU link); every
node links to each of `out_node_switches` out-node switches (GPU-side out-node fabric, per link); every one of
`remote_groups` remote memory groups links to each out-node switch (memory-side out-node fabric, per link) and
reads its memory at `remote_group_gbps`. Data is sharded evenly over the groups and spread evenly over the
switches. When every GPU loads W bytes (the paper's example: 256 GPUs in 16 nodes, 4 switches, 8 groups):
- a group holds 256 W / 8 = 32 W and sends 32 W / 4 = 8 W on each of its switch links;
- each node needs 16 W, so each switch-to-node link carries 16 W / 4 = 4 W;
- each GPU's in-node link carries W.
With in-switch collectives (ASTRA-sim 2.0, "In-switch Collective Communication") a load gathers the GPUs' shards as it
goes (all-gather while loading): the tensor every GPU ends with is T = 256 W, a group link still carries
T / (8 x 4) = 8 W, a switch-to-node link T / 4 = 64 W (the switch has gathered every group's part) and each GPU
link T = 256 W (the in-node switch broadcasts). A store is the mirror image (reduce-scatter while storing).
Generally the tensor is shared by `sharers` GPUs (an FSDP group; the paper's example: all 256): the pool serves
T x GPUs / sharers (one copy per group), and a node needs min(gpus_per_node, GPUs / sharers) of the distinct
tensors (the groups' members spread over the nodes, as a mesh's outer axis is); sharers = 1 is a plain load.

Pipelined transfer (Fig. "pipelined data transfer"): the bytes move in chunks of `chunk_bytes` through the stages
memory read -> group link -> switch-to-node link -> GPU link. The number of pipeline steps is the group link's
bytes over the chunk size (the paper's "Number of Pipeline Stages"), each stage moves 1/steps of its link's bytes
per step (the paper's TX_rem2outSW, TX_outSW2inSW, TX_inSW2GPU; a group's memory read serves its S switch links),
and the transfer takes the sum of the stage times (the first chunk's way through) plus steps - 1 times the
longest stage (the critical path), plus the pool's access latency.

ZeRO-Infinity (ASTRA-sim 2.0, Fig. 3): each node keeps the offloaded tensors in its CPU memory or on its NVMe drives,
and each GPU reaches its node's memory over its own PCIe link: the stages are the node memory (shared by the
node's GPUs) and the GPU's PCIe link. It has no switches, so no in-switch collectives.

ASTRA-sim 2.x's analytical remote memory (AstraSimRemote, read from its remote-memory JSON by pool_file.py): an
access of S bytes takes latency + S / bandwidth, and the accesses that share a memory are served one at a time:
each NPU its own memory (PER_NPU_MEMORY_EXPANSION), the NPUs of a node one (PER_NODE_MEMORY_EXPANSION), every NPU
one pool (MEMORY_POOL). When every NPU moves the same bytes at once (as above) the last of the k sharers is served
after k accesses; NO_MEMORY_EXPANSION has no remote memory at all.

Bandwidths are GB/s of 2^30 B (network/units.py), sizes bytes, latency ns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import UserError
from .units import gbps_to_bytes_per_ns


@dataclass(frozen=True)
class Stage:
    name: str
    link_bytes: float    # bytes one link (or one memory) of this stage carries for the whole transfer
    gbps: float

    def step_ns(self, steps: int) -> float:
        return self.link_bytes / steps / gbps_to_bytes_per_ns(self.gbps)


@dataclass(frozen=True)
class Transfer:
    """A pipelined transfer: its stages, the number of chunk steps and the time."""
    stages: tuple
    steps: int
    latency_ns: float

    @property
    def stage_ns(self) -> list[float]:
        return [s.step_ns(self.steps) for s in self.stages]

    @property
    def total_ns(self) -> float:
        if self.steps == 0:
            return 0.0
        t = self.stage_ns
        return self.latency_ns + sum(t) + (self.steps - 1) * max(t)


def _steps(link_bytes: float, chunk_bytes: int) -> int:
    """Pipeline steps: the group link's bytes in chunks (a last partial chunk is one more step)."""
    return 0 if link_bytes <= 0 else max(1, math.ceil(link_bytes / chunk_bytes - 1e-9))


class _Pool:
    """What both designs share: the GPUs they serve, and a transfer pipelined in chunks over the design's stages
    (`stages`: the stages, and the bytes whose chunks set the number of pipeline steps)."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def transfer(self, nbytes: float, sharers: int = 1) -> Transfer:
        stages, pipelined = self.stages(nbytes, sharers)
        return Transfer(stages, _steps(pipelined, self.chunk_bytes), self.latency_ns)


@dataclass(frozen=True)
class HierMem(_Pool):
    nodes: int
    gpus_per_node: int
    in_node_gbps: float
    out_node_switches: int
    remote_groups: int
    remote_group_gbps: float
    gpu_side_out_gbps: float
    mem_side_out_gbps: float
    chunk_bytes: int
    latency_ns: float = 0.0

    def describe(self) -> str:
        """One line: the design and its sizes (the report's `pool`)."""
        return (f"hiermem, {self.nodes} nodes x {self.gpus_per_node} GPUs, in-node {self.in_node_gbps:g} GB/s, "
                f"{self.out_node_switches} out-node switches, {self.remote_groups} groups x "
                f"{self.remote_group_gbps:g} GB/s")

    def link_bytes(self, nbytes: float, sharers: int = 1) -> dict[str, float]:
        """Bytes on one link of each kind when every GPU loads (or stores) `nbytes`; with sharers > 1 (in-switch),
        `nbytes` is the gathered tensor that each group of `sharers` GPUs shares (each member's shard is
        nbytes / sharers)."""
        g, s = self.remote_groups, self.out_node_switches
        copies = self.gpus / sharers                             # distinct tensors the pool serves
        pool = nbytes * copies
        return {"memory": pool / g,                              # what one group reads
                "group_link": pool / (g * s),
                "node_link": nbytes * min(self.gpus_per_node, copies) / s,
                "gpu_link": nbytes}

    def stages(self, nbytes: float, sharers: int = 1) -> tuple[tuple, float]:
        """Group memory, group link, switch-to-node link, GPU link; the group link's bytes set the steps."""
        b = self.link_bytes(nbytes, sharers)
        return (Stage("memory", b["memory"], self.remote_group_gbps),
                Stage("group_link", b["group_link"], self.mem_side_out_gbps),
                Stage("node_link", b["node_link"], self.gpu_side_out_gbps),
                Stage("gpu_link", b["gpu_link"], self.in_node_gbps)), b["group_link"]


@dataclass(frozen=True)
class ZeroInfinity(_Pool):
    nodes: int
    gpus_per_node: int
    pcie_gbps: float          # each GPU's link to its node's memory
    memory_gbps: float        # the node's CPU memory (memory: cpu) or NVMe drives (memory: nvme), all GPUs share it
    memory: str               # cpu | nvme
    chunk_bytes: int
    latency_ns: float = 0.0

    def describe(self) -> str:
        return (f"zero-infinity, {self.nodes} nodes x {self.gpus_per_node} GPUs, {self.memory} {self.memory_gbps:g} "
                f"GB/s per node, PCIe {self.pcie_gbps:g} GB/s")

    def link_bytes(self, nbytes: float, sharers: int = 1) -> dict[str, float]:
        if sharers > 1:
            raise UserError("a ZeRO-Infinity pool has no switches: in-switch collectives need a hiermem pool")
        return {"memory": nbytes * self.gpus_per_node, "pcie": nbytes}

    def stages(self, nbytes: float, sharers: int = 1) -> tuple[tuple, float]:
        """The node's memory, then the GPU's PCIe link, whose bytes set the steps."""
        b = self.link_bytes(nbytes, sharers)
        return (Stage(self.memory, b["memory"], self.memory_gbps), Stage("pcie", b["pcie"], self.pcie_gbps)), b["pcie"]


ASTRA_SIM_TYPES = {"NO_MEMORY_EXPANSION": "none", "PER_NPU_MEMORY_EXPANSION": "per_npu",
                   "PER_NODE_MEMORY_EXPANSION": "per_node", "MEMORY_POOL": "pool"}


@dataclass(frozen=True)
class AstraSimRemote(_Pool):
    memory_type: str          # none | per_npu | per_node | pool (ASTRA_SIM_TYPES)
    nodes: int                # per_node: the file's num-nodes; otherwise every NPU of the run (for_npus)
    gpus_per_node: int
    gbps: float               # one memory's bandwidth
    latency_ns: float = 0.0   # per access
    source: str = ""          # the file, for messages

    def describe(self) -> str:
        kind = next(k for k, v in ASTRA_SIM_TYPES.items() if v == self.memory_type)
        return (f"astra-sim {kind}" + (f", {self.nodes} nodes x {self.gpus_per_node} NPUs"
                                       if self.memory_type == "per_node" else "")
                + (f", {self.gbps:g} GB/s, {self.latency_ns:g} ns per access" if self.memory_type != "none" else ""))

    def for_npus(self, npus: int) -> "AstraSimRemote":
        """The memory of a run on `npus` NPUs: a per-NPU memory or a pool serves all of them."""
        if self.memory_type == "per_node":
            return self
        return AstraSimRemote(self.memory_type, npus, 1, self.gbps, self.latency_ns, self.source)

    def transfer(self, nbytes: float, sharers: int = 1) -> Transfer:
        if self.memory_type == "none":
            raise UserError(f"{self.source}: memory-type NO_MEMORY_EXPANSION has no remote memory, but the step "
                            "loads or stores remote memory (ASTRA-sim stops there too)")
        if sharers > 1:
            raise UserError(f"{self.source}: an ASTRA-sim remote memory has no switches: in-switch collectives need "
                            "a hiermem pool")
        queue = {"per_npu": 1, "per_node": self.gpus_per_node, "pool": self.gpus}[self.memory_type]
        return Transfer((Stage("memory", nbytes * queue, self.gbps),), 1, self.latency_ns * queue)
