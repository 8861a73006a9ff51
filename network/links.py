"""The one link numbering of the project and the route of every message over it: the lowering, both runtimes, the
tree builders and the link-conflict check all use these ids.

Per dimension d with k members each NPU owns `slots` ids (its block says how many and what each is, network/blocks/):
id = offset[d] + npu * slots[d] + slot. Switch: slot 0 the NPU's uplink, 1 its downlink; FullyConnected: slot j its
link to the member with coordinate j (its own slot unused); Ring and Mesh: slot 0 to the next member, 1 to the
previous one. Routes are computed for all messages at once with numpy.

A Graph topology (network/graphs.py) numbers its directed links as listed; every message takes its shortest path
(fewest links, ties to the lowest-numbered link), the same wherever it is routed.

`representative` routes (symmetric execution, only NPU 0's messages) use NPU 0's links of each class: its uplink and
downlink for a switch hop, its link to each FC peer, its own link per ring direction for every hop.

`LinkGraph` lists the same links as (src node, dst node) pairs with switch nodes, in the order tree and cycle
searches visit them, each with its id here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import blocks
from .blocks import SHORTEST
from .coords import coordinate, strides

ROUTED = -1                # the `dim` of a message routed across dimensions (dimension order)
LANE_SHORTEST = SHORTEST   # a routed message's lane: each Ring leg the shorter way (0: all forward, 1: all backward)


def link_offsets(slots, npus: int) -> np.ndarray:
    """First id of each dimension's links (and, last, the number of ids)."""
    return np.concatenate([[0], np.cumsum(np.asarray(slots, np.int64) * npus)]).astype(np.int64)


@dataclass(frozen=True)
class Link:
    """One directed physical link (for readable iteration over small graphs)."""

    src: int
    dst: int
    dim: int
    gbps: float
    latency_ns: float
    lane: int = 0  # distinguishes the two parallel links of a Ring(2)


@dataclass(frozen=True)
class LinkGraph:
    """All directed physical links of a topology as parallel numpy arrays (Topology.links()).

    Nodes 0..npus-1 are NPUs; nodes npus..num_nodes-1 are switches, one per group of a Switch dimension: the
    switches of each Switch dimension are numbered consecutively after those of earlier dimensions, ordered by the
    group's rank in the shape with that dimension removed. `id` is each link's id in the one numbering (LinkMap).
    Arrays rather than objects because large topologies have tens of thousands of links.
    """

    num_nodes: int
    npus: int
    src: np.ndarray         # int64
    dst: np.ndarray         # int64
    dim: np.ndarray         # int64, dimension the link belongs to
    lane: np.ndarray        # int64, 0 except the second parallel link of Ring(2)
    gbps: np.ndarray        # float64, bandwidth of the link
    latency_ns: np.ndarray  # float64
    id: np.ndarray          # int64, the link's id in the numbering of LinkMap

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_switches(self) -> int:
        return self.num_nodes - self.npus

    def as_links(self) -> list[Link]:
        return [
            Link(int(s), int(d), int(k), float(g), float(l), int(n))
            for s, d, k, g, l, n in zip(self.src, self.dst, self.dim, self.gbps, self.latency_ns, self.lane)
        ]


_PATH_TABLES: dict = {}  # graph -> (dist, next): breadth-first searches are the costly part of routing a graph


class LinkMap:
    def __init__(self, topology: dict, representative: bool = False):
        """`topology`: the serialised topology (Topology.to_dict(), as meta.json and the IR hold it)."""
        dims = topology["dims"]
        self.representative = representative
        self.blocks = [d["block"] for d in dims]
        self.shape = np.array([d["size"] for d in dims], np.int64)
        self.strides = np.array(strides(self.shape), np.int64)
        self.npus = int(np.prod(self.shape)) if len(dims) else 1
        self.kinds = [blocks.block(b) for b in self.blocks]  # an unknown block is refused, never routed as a Ring
        self.slots = np.array([b.slots(int(k)) if b.stackable else 0 for b, k in zip(self.kinds, self.shape)],
                              np.int64)
        self.offset = link_offsets(self.slots, self.npus)
        self.dim_latency = np.array([d["latency_ns"] for d in dims], np.float64)
        graph = topology.get("graph")
        self.graph = None
        if graph is not None:  # a Graph topology: link ids are the graph's directed links
            self.graph = {k: np.asarray(graph[k], np.float64 if k in ("gbps", "latency_ns") else np.int64)
                          for k in ("src", "dst", "gbps", "latency_ns")}
            self.names = list(graph["names"])
            self.offset = np.array([0, len(self.graph["src"])], np.int64)
            self._dist = self._next = None

    def routes(self, src, dst, dim, lane, hops) -> tuple[np.ndarray, np.ndarray]:
        """Routes of messages given as arrays: (start, ids) in CSR form, message i takes the links
        ids[start[i]:start[i+1]] in order. A routed message (dim -1) takes its legs one dimension after another."""
        src, dst, dim, lane, hops = (np.asarray(a, np.int64) for a in (src, dst, dim, lane, hops))
        if self.graph is not None:  # every message takes its shortest path
            return self._paths(src, dst)
        routed = dim == ROUTED
        if not routed.any():
            return self._single(src, dst, dim, lane, hops)
        if self.representative:
            raise ValueError("routed messages have no representative links (their schedules are not symmetric)")
        owner, legs = self.legs(src[routed], dst[routed], lane[routed])
        seg_msg = np.concatenate([np.flatnonzero(~routed), np.flatnonzero(routed)[owner]])
        seg = [np.concatenate([a[~routed], b]) for a, b in zip((src, dst, dim, lane, hops), legs)]
        order = np.argsort(seg_msg, kind="stable")  # a message's legs stay in dimension order
        seg_start, ids = self._single(*(a[order] for a in seg))
        length = np.bincount(seg_msg[order], weights=np.diff(seg_start), minlength=len(src)).astype(np.int64)
        return np.concatenate([[0], np.cumsum(length)]).astype(np.int64), ids

    def legs(self, src, dst, lane):
        """Dimension-order routing of routed messages: per message, one leg per dimension in which sender and
        receiver differ, taken in dimension order. Returns (message index of each leg, (src, dst, dim, lane, hops)
        of the legs), legs of one message in dimension order. On a Ring the message's lane says the direction
        (0 forward, 1 backward, 2 the shorter way, ties forward); a Mesh leg walks towards the receiver."""
        src, dst, lane = (np.asarray(a, np.int64) for a in (src, dst, lane))
        if self.graph is not None:  # one leg: the shortest path
            i = np.flatnonzero(src != dst)
            return i, (src[i], dst[i], np.zeros(len(i), np.int64), lane[i], self.distance(src[i], dst[i]))
        cur = src.copy()
        parts = []
        for d, kind in enumerate(self.kinds):
            k, st = int(self.shape[d]), int(self.strides[d])
            cs, cd = coordinate(cur, k, st), coordinate(dst, k, st)
            nxt = cur + (cd - cs) * st
            i = np.flatnonzero(cs != cd)
            hops, leg_lane = kind.path(k, cs[i], cd[i], lane[i])
            parts.append((i, cur[i], nxt[i], np.full(len(i), d), leg_lane, hops))
            cur = nxt
        cols = [np.concatenate([p[j] for p in parts]).astype(np.int64) for j in range(6)]
        order = np.argsort(cols[0], kind="stable")
        return cols[0][order], tuple(c[order] for c in cols[1:])

    def _single(self, src, dst, dim, lane, hops) -> tuple[np.ndarray, np.ndarray]:
        """Routes of messages along one dimension each: each dimension's block lists the links."""
        n = len(src)
        length = np.zeros(n, np.int64)
        dims = sorted(set(dim.tolist()))  # not np.unique: its first 1-D call imports numpy.ma (start-up time)
        for d in dims:
            i = np.flatnonzero(dim == d)
            length[i] = self.kinds[d].lengths(hops[i])
        start = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
        ids = np.empty(int(start[-1]), np.int64)
        for d in dims:
            i = np.flatnonzero(dim == d)
            k, st = int(self.shape[d]), int(self.strides[d])
            owner, slot = self.kinds[d].route(k, st, src[i], dst[i], lane[i], hops[i], self.representative)
            at = np.repeat(start[i], length[i]) + (np.arange(int(length[i].sum())) -
                                                    np.repeat(_starts(length[i]), length[i]))
            ids[at] = self.offset[d] + owner * self.slots[d] + slot
        return start, ids

    # ---- graph topologies: shortest paths ------------------------------------------------------------------

    def _tables(self) -> None:
        """Per destination NPU t, breadth-first from t over the links backwards: dist[u, t] links from node u to t,
        and next[u, t] the first link of u's path (the lowest-numbered link that starts a shortest path), so every
        message between two NPUs always takes the same path."""
        g = self.graph
        key = (self.npus, g["src"].tobytes(), g["dst"].tobytes())
        if key in _PATH_TABLES:  # every table of a schedule, and every schedule of a run, shares one graph
            self._dist, self._next = _PATH_TABLES[key]
            return
        nodes = int(max(g["src"].max(), g["dst"].max())) + 1
        dist = np.full((nodes, self.npus), -1, np.int64)
        nxt = np.full((nodes, self.npus), -1, np.int64)
        for t in range(self.npus):
            dist[t, t] = 0
            frontier, d = np.array([t]), 0
            while len(frontier):
                d += 1
                cand = np.flatnonzero(np.isin(g["dst"], frontier) & (dist[g["src"], t] < 0))
                node, first = np.unique(g["src"][cand], return_index=True)
                dist[node, t], nxt[node, t] = d, cand[first]
                frontier = node
        self._dist, self._next = dist, nxt
        if len(_PATH_TABLES) >= 8:
            _PATH_TABLES.pop(next(iter(_PATH_TABLES)))
        _PATH_TABLES[key] = (dist, nxt)

    def distance(self, src, dst) -> np.ndarray:
        """Links on the path from node src to NPU dst (graph topologies)."""
        if self._dist is None:
            self._tables()
        return self._dist[np.asarray(src, np.int64), np.asarray(dst, np.int64)]

    def _paths(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        length = self.distance(src, dst)
        start = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
        ids = np.empty(int(start[-1]), np.int64)
        cur = src.copy()
        for h in range(int(length.max()) if len(length) else 0):
            act = np.flatnonzero(length > h)
            link = self._next[cur[act], dst[act]]
            ids[start[act] + h] = link
            cur[act] = self.graph["dst"][link]
        return start, ids

    def latency(self, link) -> np.ndarray:
        """Latency of each link (ns)."""
        link = np.asarray(link, np.int64)
        if self.graph is not None:
            return self.graph["latency_ns"][link]
        return self.dim_latency[self.dim_of(link)]

    def dim_of(self, link) -> np.ndarray:
        return np.searchsorted(self.offset, np.asarray(link, np.int64), side="right") - 1

    @property
    def classes(self) -> int:
        """Link classes: one per (dimension, slot), the same on every NPU (an NPU's link of class c is its slot of
        that dimension); a Graph's links have no classes."""
        return 0 if self.graph is not None else int(self.slots.sum())

    def class_dims(self) -> np.ndarray:
        """The dimension of each link class."""
        return np.repeat(np.arange(len(self.slots), dtype=np.int64), self.slots)

    def owner_class(self, link) -> tuple[np.ndarray, np.ndarray]:
        """(owning NPU, class) of each link: the pair names one physical link (link sharing's resource)."""
        link = np.asarray(link, np.int64)
        d = self.dim_of(link)
        npu, slot = np.divmod(link - self.offset[d], self.slots[d])
        return npu, np.concatenate([[0], np.cumsum(self.slots)])[d] + slot

    def describe(self, link: int) -> str:
        if self.graph is not None:
            return f"{self.names[self.graph['src'][link]]}->{self.names[self.graph['dst'][link]]}"
        d = int(self.dim_of(link))
        npu, slot = divmod(int(link) - int(self.offset[d]), int(self.slots[d]))
        return self.kinds[d].describe(d, npu, slot, int(self.shape[d]), int(self.strides[d]))


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Start of each group in a concatenation of groups of the given lengths."""
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
