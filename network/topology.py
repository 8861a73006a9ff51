"""Multi-dimensional networks stacked from ASTRA-sim 2.0 building blocks: the one network model of the project.

A topology is a tuple of dimensions, each `size` NPUs joined by one building block (network/blocks/: Ring,
FullyConnected, Switch, Mesh, ...; a Graph of explicit links stands alone). Dimension 0 is the innermost
(fastest-varying) one, so NPU rank = c0 + s0*(c1 + s1*(c2 + ...)) as in ASTRA-sim. Everything about a block
(bandwidth per link, hops, links, routes, default algorithm, symmetry) is asked of its Block; nothing here
branches on a block's name.

network/parse.py builds a Topology from the notations people use with ASTRA-sim; `to_dict`/`from_dict` are its one
serialised form (meta.json, the IR's module attributes).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import blocks
from .blocks import Block
from .coords import coordinate, coords as coords_of, group_base, strides as strides_of
from .errors import UserError, show
from .graphs import Graph
from .links import LinkGraph, link_offsets
from .units import MAX_LATENCY_NS, link_range_error

# Defaults when neither the spec, a file nor an override gives a value.
DEFAULT_BANDWIDTH_GBPS = 50.0
DEFAULT_LATENCY_NS = 500.0
DEFAULT_LINKS = 1
# NPUs are numbered in 32 bits (the tables' npu and peer columns)
MAX_NPUS = 2**31 - 1
# ASTRA-sim's links-count: parallel links per neighbour. A switch radix bounds it in any real machine.
MAX_LINKS = 1024


def _whole(value: Any, what: str) -> int:
    """`value` as an int, accepting integral floats (YAML/JSON may write 8.0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UserError(f"{what} must be a whole number, got {show(value)}")
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise UserError(f"{what} must be a whole number, got {show(value)}")
    return int(value)


def _real(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UserError(f"{what} must be a number, got {show(value)}")
    if not math.isfinite(float(value)):
        raise UserError(f"{what} must be finite, got {show(value)}")
    return float(value)


@dataclass(frozen=True)
class Dimension:
    """One network dimension: `size` NPUs connected by one building block."""

    block: str             # one of BLOCKS (canonical names)
    size: int              # NPUs along this dimension (>= 2)
    bandwidth_gbps: float  # per-NPU bandwidth of this dimension in GB/s (2^30 B/s), > 0
    latency_ns: float      # per-hop link latency in ns, >= 0
    links: int = 1         # ASTRA-sim links-count; multiplies bandwidth_gbps

    def __post_init__(self) -> None:
        # Validate here so every way of building a Dimension (parser, from_dict,
        # direct construction) enforces the same rules; normalise the types so
        # equal dimensions compare equal whatever the source wrote (8 vs 8.0).
        kind = blocks.block(self.block)  # an unknown block is refused, never routed as another
        size = _whole(self.size, "size")
        if size < 2:
            raise UserError(f"size must be at least 2 NPUs, got {size}")
        kind.check_size(size)
        bw = _real(self.bandwidth_gbps, "bandwidth")
        if bw <= 0:
            raise UserError(f"bandwidth must be positive (GB/s), got {bw:g}")
        lat = _real(self.latency_ns, "latency")
        if lat < 0:
            raise UserError(f"latency must be >= 0 ns, got {lat:g}")
        links = _whole(self.links, "links")
        if not 1 <= links <= MAX_LINKS:
            raise UserError(f"links must be between 1 and {MAX_LINKS}, got {links}")
        problem = link_range_error(bw, lat)
        if problem:
            raise UserError(problem)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "bandwidth_gbps", bw)
        object.__setattr__(self, "latency_ns", lat)
        object.__setattr__(self, "links", links)

    @property
    def notation(self) -> str:
        return f"{self.block}({self.size})"

    @property
    def kind(self) -> Block:
        """The building block (network/blocks/) that joins this dimension's NPUs."""
        return blocks.BLOCKS[self.block]

    @property
    def default_algorithm(self) -> str:
        """The block's own algorithm for a group of this size (select-algorithm's default)."""
        return self.kind.default_algorithm(self.size)

    @property
    def effective_gbps(self) -> float:
        """Per-NPU bandwidth of this dimension: bandwidth_gbps * links."""
        return self.bandwidth_gbps * self.links

    def link_gbps(self) -> float:
        """Bandwidth of ONE physical link an NPU uses in this dimension (the NPU's bandwidth over the links that
        share it: a Ring's two neighbour links, a FullyConnected's k-1, a Switch's one uplink)."""
        return self.effective_gbps / self.kind.link_share(self.size)

    def hops(self, a: int, b: int) -> int:
        """Link hops between coordinates a and b along this dimension, the shorter way (0 if a == b)."""
        for c in (a, b):
            if not 0 <= c < self.size:
                raise UserError(f"coordinate {c} out of range for {self.notation}")
        if a == b:
            return 0
        if not self.kind.stackable:
            raise UserError("hops on a graph topology depend on its links: route with network.links.LinkMap")
        hops, _ = self.kind.path(self.size, np.array([a]), np.array([b]), np.array([blocks.SHORTEST]))
        return int(hops[0])


@dataclass(frozen=True)
class Topology:
    dims: tuple[Dimension, ...]
    name: str = ""  # canonical notation; derived from dims when left empty
    graph: Graph | None = field(default=None, compare=False)  # the links of a Graph topology (one Graph dimension)
    # ns every message spends at its endpoints besides the links' latency (ASTRA-sim's endpoint-delay: the NPU's
    # own send/receive processing, paid once per message however many hops it takes; 0 by default)
    endpoint_delay_ns: float = 0.0
    _strides: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dims = tuple(self.dims)
        if not dims:
            raise UserError("a topology needs at least one dimension")
        if not all(isinstance(d, Dimension) for d in dims):
            raise UserError("topology dimensions must be Dimension objects")
        graph_dims = sum(d.block == "Graph" for d in dims)
        if graph_dims and (len(dims) != 1 or self.graph is None or self.graph.npus != dims[0].size):
            raise UserError("a Graph dimension stands alone and comes with its links (e.g. 4x8_bigraph, dgx1, a "
                            ".edges file)")
        if self.graph is not None and not graph_dims:
            raise UserError("links given for a topology without a Graph dimension")
        object.__setattr__(self, "dims", dims)
        delay = self.endpoint_delay_ns
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= MAX_LATENCY_NS:
            raise UserError(f"endpoint delay must be a number of ns between 0 and {MAX_LATENCY_NS:g}, got {show(delay)}")
        object.__setattr__(self, "endpoint_delay_ns", float(delay))
        npus = math.prod(d.size for d in dims)
        if npus > MAX_NPUS:
            raise UserError(f"a topology of {npus} NPUs: astra-compile numbers NPUs in 32 bits (tables, IR), so at "
                            f"most {MAX_NPUS}")
        if not self.name:
            object.__setattr__(self, "name", "_".join(d.notation for d in dims))
        object.__setattr__(self, "_strides", strides_of([d.size for d in dims]))

    @property
    def npus(self) -> int:
        return math.prod(self.shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def ndims(self) -> int:
        return len(self.dims)

    def strides(self) -> tuple[int, ...]:
        """Rank stride of each dimension (1 for dimension 0)."""
        return self._strides

    def _check_rank(self, rank: Any) -> int:
        try:
            r = operator.index(rank)
        except TypeError:
            raise UserError(f"NPU rank must be an integer, got {show(rank)}") from None
        if not 0 <= r < self.npus:
            raise UserError(f"NPU rank {r} out of range for {self.name} ({self.npus} NPUs)")
        return r

    def _check_dim(self, dim: int) -> int:
        if not 0 <= dim < self.ndims:
            raise UserError(f"dimension {dim} out of range for {self.name} ({self.ndims} dimensions)")
        return dim

    def coords(self, rank: int) -> tuple[int, ...]:
        r = self._check_rank(rank)
        return tuple(coordinate(r, d.size, st) for st, d in zip(self._strides, self.dims))

    def rank(self, coords: Sequence[int]) -> int:
        try:
            coords = tuple(operator.index(c) for c in coords)
        except TypeError:
            raise UserError(f"coordinates must be integers, got {show(coords)}") from None
        if len(coords) != self.ndims:
            raise UserError(f"expected {self.ndims} coordinates for {self.name}, got {coords}")
        for c, d in zip(coords, self.dims):
            if not 0 <= c < d.size:
                raise UserError(f"coordinates {coords} out of range for {self.name}")
        return sum(c * st for c, st in zip(coords, self._strides))

    def coords_array(self) -> np.ndarray:
        """Coordinates of every NPU, shape (npus, ndims), row i = coords(i)."""
        return coords_of(np.arange(self.npus, dtype=np.int64), self.shape)

    def peer(self, rank: int, dim: int, coord: int) -> int:
        """The NPU equal to `rank` except for coordinate `coord` in dimension `dim`."""
        r = self._check_rank(rank)
        self._check_dim(dim)
        if not 0 <= coord < self.dims[dim].size:
            raise UserError(f"coordinate {coord} out of range for dimension {dim} ({self.dims[dim].notation})")
        st = self._strides[dim]
        return r + (coord - coordinate(r, self.dims[dim].size, st)) * st

    def links(self) -> LinkGraph:
        """Every directed physical link, built with array operations (no per-NPU loop), each carrying its id in
        the one link numbering (network/links.py). Per dimension, the block lists its links (network/blocks/);
        switch nodes are numbered after the NPUs, dimension by dimension."""
        if self.graph is not None:
            g = self.graph
            zeros = np.zeros(len(g.src), np.int64)
            return LinkGraph(g.nodes, g.npus, g.src, g.dst, zeros, zeros, g.gbps, g.latency_ns,
                             np.arange(len(g.src), dtype=np.int64))
        n = self.npus
        ranks = np.arange(n, dtype=np.int64)
        offsets = link_offsets([d.kind.slots(d.size) for d in self.dims], n)
        parts: list[tuple[np.ndarray, ...]] = []
        next_switch = n
        for k, d in enumerate(self.dims):
            st = self._strides[k]
            c, base = coordinate(ranks, d.size, st), group_base(ranks, d.size, st)
            src, dst, lane, owner, slot, switches = d.kind.physical_links(ranks, c, base, d.size, st, next_switch)
            next_switch += switches
            m = src.shape[0]
            parts.append((
                src, dst, np.full(m, k, dtype=np.int64), lane,
                np.full(m, d.link_gbps(), dtype=np.float64),
                np.full(m, d.latency_ns, dtype=np.float64),
                offsets[k] + owner * d.kind.slots(d.size) + slot,
            ))
        cols = [np.concatenate(col) for col in zip(*parts)]
        return LinkGraph(next_switch, n, *cols)

    def describe(self) -> str:
        """One line per dimension, e.g. 'dim 0: Switch(8)  50 GB/s  1 ns  links 1'."""
        return "\n".join(
            f"dim {k}: {d.notation}  {d.bandwidth_gbps:g} GB/s  {d.latency_ns:g} ns  links {d.links}"
            for k, d in enumerate(self.dims)
        )

    def within(self, parts: dict[int, tuple[int, int]]) -> "Topology":
        """The network one process group sees when it covers part of some dimensions: parts maps a dimension to
        (members, stride) of the group along it (stride 1: consecutive coordinates). Each such dimension becomes a
        dimension of `members` NPUs whose bandwidth and latency its block gives for the group while every group
        of that shape works at once (Block.subgroup); the others are unchanged."""
        dims = list(self.dims)
        for d, (size, stride) in sorted(parts.items()):
            dim = dims[d]
            got = dim.kind.subgroup(dim.size, size, stride, dim.bandwidth_gbps, dim.latency_ns)
            if got is None:
                raise UserError(f"a process group of {size} of the {dim.size} NPUs of dimension {d} "
                                f"({dim.notation}): groups inside a {dim.block} dimension are not modelled; give a "
                                "--mesh whose axes cover its whole dimensions")
            dims[d] = Dimension(dim.block, size, got[0], got[1], dim.links)
        return Topology(tuple(dims), endpoint_delay_ns=self.endpoint_delay_ns)

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "dims": [
                {"block": d.block, "size": d.size, "bandwidth_gbps": d.bandwidth_gbps,
                 "latency_ns": d.latency_ns, "links": d.links}
                for d in self.dims
            ],
        }
        if self.graph is not None:
            out["graph"] = self.graph.to_dict()
        if self.endpoint_delay_ns:   # written only when set: a network without it serialises as it always has
            out["endpoint_delay_ns"] = self.endpoint_delay_ns
        return out

    @staticmethod
    def from_dict(d: Any) -> "Topology":
        if not isinstance(d, dict) or not isinstance(d.get("dims"), list):
            raise UserError("topology dict must have a 'dims' list")
        dims = []
        for k, entry in enumerate(d["dims"]):
            keys = ("block", "size", "bandwidth_gbps", "latency_ns")
            if not isinstance(entry, dict) or any(key not in entry for key in keys):
                raise UserError(f"topology dict: dimension {k} must have keys {', '.join(keys)}")
            try:
                dims.append(Dimension(entry["block"], entry["size"], entry["bandwidth_gbps"],
                                      entry["latency_ns"], entry.get("links", 1)))
            except UserError as e:
                raise UserError(f"topology dict: dimension {k}: {e}") from None
        graph = Graph.from_dict(d["graph"]) if d.get("graph") is not None else None
        return Topology(tuple(dims), d.get("name") or "", graph, d.get("endpoint_delay_ns", 0.0))


