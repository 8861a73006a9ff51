"""A cluster (`--cluster NAME:NODES`, docs/clusters.md): the GPU each NPU is, one node's fabric and the network
that joins the nodes, as two topology dimensions.

The presets are clusters.json beside this file: per name, the node's GPU (a gpus.json preset), its GPU count, the
intra-node fabric (a Switch of the node's GPUs for NVSwitch, FullyConnected for AMD's xGMI mesh) with its
bandwidth per GPU per direction and latency, and the scale-out network (one NIC per GPU; a rail-optimised fat tree
seen from one rank is a Switch of the nodes over its rail) with the NIC's bandwidth and a latency; every number
with its source, and per dimension the achieved collective efficiency fitted to published nccl-tests/rccl-tests
logs of that machine (`astra-compile calibrate`, docs/clusters.md), or none where the repository has no log of it
(the line rate then stands). `resolve` is the one reader of `--cluster`'s value; `Cluster.topology()` with `bandwidth()` and
`latency()` are what `--topology`, `--bandwidth` and `--latency` would say for it.

Units: the file holds the datasheets' own (decimal GB/s, decimal Gb/s); `bandwidth()` gives the project's GB/s of
2^30 B (network/units.py), as `--bandwidth` takes it.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from .errors import UserError, show
from .units import GIB

PRESETS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clusters.json")
PRESET_SOURCE = "vendor datasheets, docs/clusters.md"
BLOCKS = ("Switch", "FullyConnected")   # the intra-node fabrics a preset may name
# what a preset's `sources` names: every number and choice it holds, and the collective efficiency it leaves out
NUMBERS = ("gpu", "gpus_per_node", "intra_gb_s", "intra_latency_ns", "nic_gbit_s", "nic_latency_ns", "efficiency")   # efficiency: both dimensions' (fitted or not)
# the most GPUs a cluster may have: ten times the largest training clusters built; beyond it a topology of that many
# NPUs is a typing mistake, refused here before any stage sizes arrays by the NPU count
MAX_GPUS = 1 << 20
USAGE = "expected NAME:NODES or NAME:NODESxGPUS, e.g. dgx-h100:16 or dgx-a100:1x4 (docs/clusters.md)"


@dataclass(frozen=True)
class Cluster:
    name: str
    description: str
    gpu: str                  # a gpus.json preset (network/devices.py)
    gpus_per_node: int
    intra_block: str          # Switch | FullyConnected
    intra_gb_s: float         # decimal GB/s per GPU per direction, over all its links in the node
    intra_latency_ns: float   # ns per hop
    nic_gbit_s: float         # decimal Gb/s per GPU (one NIC each)
    nic_latency_ns: float     # ns per hop
    # the fraction of the line rate NCCL/RCCL reached in the fitted logs, per dimension; None: not fitted (1.0)
    intra_efficiency: float | None = None
    nic_efficiency: float | None = None
    sources: tuple = ()       # (field, text) pairs
    nodes: int = 1
    in_use: int | None = None   # GPUs of each node the job runs on (NAME:NODESxGPUS); None: all of them

    @property
    def per_node(self) -> int:
        """GPUs of each node the job runs on."""
        return self.gpus_per_node if self.in_use is None else self.in_use

    @property
    def gpus(self) -> int:
        """GPUs the job runs on (one GPU alone is placed on NPU 0 of its node's fabric: topology())."""
        return self.nodes * self.per_node

    def _dimensions(self) -> list[tuple[str, float, float]]:
        """(block, GB/s of 2^30 B, ns per hop) per dimension: the GPUs in use of each node over its fabric, then
        the nodes' switch (none for one node: a dimension needs 2 NPUs). Part of a node's GPUs keep their own
        bandwidth on a switch; in a FullyConnected mesh each has a link to every other GPU of the node (the
        preset's bandwidth is over all of them) and uses those to the GPUs in use only. One GPU of one node, which
        no dimension holds, is the node's whole fabric (the step placed on NPU 0: compiler/api/api.py,
        where no collective moves anything)."""
        intra, nic = (1.0 if e is None else e for e in (self.intra_efficiency, self.nic_efficiency))
        used = self.per_node if self.gpus > 1 else self.gpus_per_node
        links = (used - 1) / (self.gpus_per_node - 1) if self.intra_block == "FullyConnected" else 1.0
        dims = [(f"{self.intra_block}({used})", self.intra_gb_s * intra * links * 1e9 / GIB,
                 self.intra_latency_ns)] if used > 1 else []
        if self.nodes > 1:
            dims.append((f"Switch({self.nodes})", self.nic_gbit_s * nic * 1e9 / 8 / GIB, self.nic_latency_ns))
        return dims

    def topology(self) -> str:
        """The topology notation of the cluster, e.g. "Switch(8)_Switch(16)"."""
        return "_".join(block for block, _, _ in self._dimensions())

    def bandwidth(self) -> str:
        """`--bandwidth` for topology(): GB/s of 2^30 B per dimension, exact (repr reads back to the same float)."""
        return ",".join(repr(gbps) for _, gbps, _ in self._dimensions())

    def latency(self) -> str:
        """`--latency` for topology(): ns per hop per dimension."""
        return ",".join(repr(ns) for _, _, ns in self._dimensions())

    def describe(self) -> dict:
        """The report's "cluster" object."""
        fitted = [dim for dim, e in (("node fabric", self.intra_efficiency), ("NICs", self.nic_efficiency))
                  if e is not None]
        also = f"; {' and '.join(fitted)} at the efficiency fitted to published nccl-tests logs" if fitted else ""
        part = "" if self.in_use is None else \
            f"; {self.in_use} of {'the' if self.nodes == 1 else 'each'} node's {self.gpus_per_node} GPUs in use"
        return {"name": self.name, "nodes": self.nodes, "gpus": self.gpus, "description": self.description + part,
                "source": f"preset {self.name} ({PRESET_SOURCE}{also})"}


def presets() -> dict[str, Cluster]:
    """Every preset by name (clusters.json), each of one node."""
    with open(PRESETS_FILE, encoding="utf-8") as f:
        table = json.load(f)["presets"]
    return {name: _preset(name, data) for name, data in table.items()}


def resolve(spec) -> Cluster:
    """`--cluster`'s value: "NAME:NODES" (a preset's name and a whole number of nodes >= 1), "NAME:NODESxGPUS"
    (GPUS of each node's in use, 1 to all of them: a job on part of a node), or a Cluster."""
    if isinstance(spec, Cluster):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise UserError(f"--cluster {show(spec)}: {USAGE}")
    name, _, count = spec.partition(":")
    table = presets()
    cluster = table.get(name.strip().lower())
    if cluster is None:
        raise UserError(f"--cluster {show(spec)}: unknown cluster {show(name)}; known: {', '.join(table)}")
    count, cross, used = count.strip().lower().partition("x")
    nodes = _whole(spec, count, "the node count")
    per_node = cluster.gpus_per_node
    if cross:
        per_node = _whole(spec, used, "the GPUs in use of each node")
        if per_node > cluster.gpus_per_node:
            raise UserError(f"--cluster {show(spec)}: a {cluster.name} node has {cluster.gpus_per_node} GPUs, "
                            f"not {per_node}")
    if nodes * per_node > MAX_GPUS:
        raise UserError(f"--cluster {show(spec)}: {nodes} nodes of {per_node} GPUs is {nodes * per_node} GPUs; "
                        f"at most {MAX_GPUS} are modelled ({MAX_GPUS // per_node} nodes)")
    return dataclasses.replace(cluster, nodes=nodes,
                               in_use=None if per_node == cluster.gpus_per_node else per_node)


def _whole(spec, count: str, what: str) -> int:
    """A count of `spec` (a node count, GPUs in use): a whole number >= 1, else one UserError."""
    count = count.strip()
    # digits only, and few of them: int() of a long string is slow, and such a count is over MAX_GPUS anyway
    if not (count.isascii() and count.isdigit()) or len(count) > 9 or int(count) < 1:
        raise UserError(f"--cluster {show(spec)}: {what} must be a whole number >= 1, got {show(count)}")
    return int(count)


def _preset(name: str, data: dict) -> Cluster:
    """A preset from clusters.json; a malformed one is the repository's mistake, said in one line."""
    where = f"network/clusters.json: preset {name}"
    fields = {f.name for f in dataclasses.fields(Cluster)} - {"name", "nodes", "in_use"}
    if set(data) != fields:
        raise UserError(f"{where}: fields {sorted(data)}; expected {sorted(fields)}")
    if data["intra_block"] not in BLOCKS:
        raise UserError(f"{where}: intra_block {show(data['intra_block'])}; expected one of {', '.join(BLOCKS)}")
    for field in ("intra_efficiency", "nic_efficiency"):   # a fraction of the line rate, or null: not fitted
        value = data[field]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or
                                  not 0 < value <= 1):
            raise UserError(f"{where}: {field} {show(value)}; expected a number in (0, 1] or null (not fitted)")
    if set(data["sources"]) != set(NUMBERS):
        raise UserError(f"{where}: sources name {sorted(data['sources'])}; expected {', '.join(NUMBERS)}")
    return Cluster(name=name, **{**data, "sources": tuple(data["sources"].items())})
