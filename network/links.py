"""The physical links of a topology and the route of every message over them, for the congestion runtime and the
link-conflict check.

Every possible directed link has a fixed integer id, so routes can be computed for all messages at once with numpy
and both execution engines see the same numbering. Per dimension d with k members, each NPU owns `slots` ids:
- Switch: 2 (slot 0 its uplink to the group's switch, slot 1 its downlink from it);
- FullyConnected: k (slot j its link to the member with coordinate j; its own slot is unused);
- Ring and Mesh: 2 (slot 0 the link to its next neighbour, slot 1 to its previous one).
id = offset[d] + npu * slots[d] + slot.

A Graph topology (compiler/graphs.py) numbers its directed links as listed; every message takes its shortest
path (fewest links, ties to the lowest-numbered link), the same wherever it is routed.

`representative` routes (symmetric execution, only NPU 0's messages) use NPU 0's links of each class: its uplink and
downlink for a switch hop, its link to each FC peer, its own link per ring direction for every hop.
"""
from __future__ import annotations

import numpy as np


RING, SWITCH, FC, MESH = 0, 1, 2, 3
ROUTED = -1         # the `dim` of a message routed across dimensions (dimension order)
LANE_SHORTEST = 2   # a routed message's lane: each Ring leg the shorter way (0: all forward, 1: all backward)
BLOCK_CODE = {"Ring": RING, "Switch": SWITCH, "FullyConnected": FC, "Mesh": MESH}


_PATH_TABLES: dict = {}  # graph -> (dist, next): breadth-first searches are the costly part of routing a graph


class LinkMap:
    def __init__(self, meta: dict, representative: bool = False):
        dims = meta["topology"]["dims"]
        self.representative = representative
        self.blocks = [d["block"] for d in dims]
        self.shape = np.array([d["size"] for d in dims], np.int64)
        self.strides = np.array([int(np.prod(self.shape[:d])) for d in range(len(dims))], np.int64)
        self.npus = int(np.prod(self.shape)) if len(dims) else 1
        self.slots = np.array([k if b == "FullyConnected" else 2 for b, k in zip(self.blocks, self.shape)], np.int64)
        self.offset = np.concatenate([[0], np.cumsum(self.slots * self.npus)]).astype(np.int64)
        self.dim_latency = np.array([d["latency_ns"] for d in dims], np.float64)
        graph = meta["topology"].get("graph")
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
        for d, block in enumerate(self.blocks):
            k, st = int(self.shape[d]), int(self.strides[d])
            cs, cd = (cur // st) % k, (dst // st) % k
            nxt = cur + (cd - cs) * st
            fwd = (cd - cs) % k
            leg_lane = np.where(lane == LANE_SHORTEST, np.where(fwd <= k - fwd, 0, 1), lane)
            if block == "Ring":
                hops = np.where(leg_lane == 0, fwd, (k - fwd) % k)
            elif block == "Mesh":
                hops = np.abs(cd - cs)
            else:
                hops = np.full(len(src), 2 if block == "Switch" else 1)
            i = np.flatnonzero(cs != cd)
            parts.append((i, cur[i], nxt[i], np.full(len(i), d), leg_lane[i], hops[i]))
            cur = nxt
        cols = [np.concatenate([p[j] for p in parts]).astype(np.int64) for j in range(6)]
        order = np.argsort(cols[0], kind="stable")
        return cols[0][order], tuple(c[order] for c in cols[1:])

    def _single(self, src, dst, dim, lane, hops) -> tuple[np.ndarray, np.ndarray]:
        """Routes of messages along one dimension each."""
        n = len(src)
        code = np.array([BLOCK_CODE.get(b, 0) for b in self.blocks], np.int64)[dim] if n else np.zeros(0, np.int64)
        switch, fc = code == SWITCH, code == FC
        length = np.where(switch, 2, np.where(fc, 1, hops))
        start = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
        ids = np.empty(int(start[-1]), np.int64)
        if not n:
            return start, ids
        k, stride, slots, off = self.shape[dim], self.strides[dim], self.slots[dim], self.offset[dim]
        dst_link_owner = src if self.representative else dst  # representative: NPU 0's downlink stands for all
        # switch: uplink of the sender, downlink of the receiver
        i = np.flatnonzero(switch)
        ids[start[i]] = off[i] + src[i] * 2
        ids[start[i] + 1] = off[i] + dst_link_owner[i] * 2 + 1
        # fully connected: the sender's link to the receiver's coordinate
        i = np.flatnonzero(fc)
        ids[start[i]] = off[i] + src[i] * slots[i] + (dst[i] // stride[i]) % k[i]
        # ring and mesh: one link per hop, walking from the sender (rings by lane, meshes towards the receiver)
        i = np.flatnonzero(~switch & ~fc)
        if len(i):
            c0 = (src[i] // stride[i]) % k[i]
            mesh = code[i] == MESH
            towards = np.where((dst[i] // stride[i]) % k[i] > c0, 1, -1)
            step = np.where(mesh, towards, np.where(lane[i] == 0, 1, -1))
            lane_i = np.where(step == 1, 0, 1)
            if np.all(hops[i] == 1):  # neighbour transfers (the common case): the sender's own link
                ids[start[i]] = off[i] + src[i] * 2 + lane_i
                return start, ids
            per = np.repeat(np.arange(len(i)), hops[i])
            h = np.arange(len(per)) - np.repeat(_starts(hops[i]), hops[i])  # hop index within each route
            if self.representative:
                node = src[i][per]
            else:
                node = src[i][per] + (((c0[per] + step[per] * h) % k[i][per]) - c0[per]) * stride[i][per]
            ids[np.repeat(start[i], hops[i]) + h] = off[i][per] + node * 2 + lane_i[per]
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

    def describe(self, link: int) -> str:
        if self.graph is not None:
            return f"{self.names[self.graph['src'][link]]}->{self.names[self.graph['dst'][link]]}"
        d = int(self.dim_of(link))
        npu, slot = divmod(int(link) - int(self.offset[d]), int(self.slots[d]))
        block = self.blocks[d]
        if block == "Switch":
            return f"dim{d} npu{npu}->switch" if slot == 0 else f"dim{d} switch->npu{npu}"
        if block == "FullyConnected":
            stride, k = int(self.strides[d]), int(self.shape[d])
            peer = npu + (slot - (npu // stride) % k) * stride
            return f"dim{d} npu{npu}->npu{peer}"
        return f"dim{d} npu{npu}->{'next' if slot == 0 else 'prev'}"


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Start of each group in a concatenation of groups of the given lengths."""
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
