"""MultiTree (ISCA'21, seed 003): one spanning tree per root, built top-down as link allocation per time step.

In time step t every tree may grow by edges from nodes it already held before t, each directed link carries at
most one new edge per step, and each node starts at most `ports` new edges per step (None: one per link). Trees
take turns, one edge per turn, so the link budget of a step is shared fairly. Tree r carries block r of the
buffer: the all-gather broadcasts it down the tree (edge added in step t used in step t), the reduce-scatter
reduces it up the tree in reverse (step T - t), so each step is contention-free in both directions.

Works on topologies whose links join NPUs directly (Ring and FullyConnected dimensions: tori, meshes of rings,
fully connected boxes); switch dimensions would route through switch nodes and are rejected by the lowering.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import Transfers, same_units


@dataclass(frozen=True)
class Trees:
    parent: np.ndarray   # (roots, nodes): parent of each node in each tree, -1 for the root
    step: np.ndarray     # (roots, nodes): time step (1-based) in which the node joined the tree
    link: np.ndarray     # (roots, nodes): link id of the edge parent -> node
    steps: int

    def heights(self) -> np.ndarray:
        return self.step.max(axis=1)


def build_trees(npus: int, src: np.ndarray, dst: np.ndarray, ports: int | None = None) -> Trees:
    """Top-down link allocation over the directed links (src[i] -> dst[i]) between NPUs."""
    out = [[] for _ in range(npus)]
    for lid, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        out[a].append((b, lid))
    parent = np.full((npus, npus), -1, dtype=np.int64)
    step = np.zeros((npus, npus), dtype=np.int64)
    link = np.full((npus, npus), -1, dtype=np.int64)
    in_tree = np.zeros((npus, npus), dtype=bool)
    in_tree[np.arange(npus), np.arange(npus)] = True
    members = [[r] for r in range(npus)]     # nodes of each tree, in the order they joined
    # per tree, per member: the next outgoing link to try (links before it lead into the tree already)
    cursor = [dict() for _ in range(npus)]
    left = npus * (npus - 1)
    t = 0
    while left:
        t += 1
        used = np.zeros(len(src), dtype=bool)
        ports_used = np.zeros(npus, dtype=np.int64)
        holders = [list(m) for m in members]  # only nodes that held the data before this step may send
        growing = True
        while growing:
            growing = False
            for k in range(npus):
                r = (k + t) % npus  # rotate which tree goes first, so no tree always gets the best links
                if len(members[r]) == npus:
                    continue
                if _grow(r, t, holders[r], out, used, ports_used, ports, in_tree, parent, step, link, members,
                         cursor):
                    growing = True
                    left -= 1
        if not growing and t > npus * len(src):
            raise ValueError("the topology is not connected: some trees cannot span it")
    return Trees(parent, step, link, t)


def _grow(r, t, holders, out, used, ports_used, ports, in_tree, parent, step, link, members, cursor) -> bool:
    """Add one edge to tree r in step t, from a node that held the data before t; True if one was added."""
    tree = in_tree[r]
    for u in holders:
        if ports is not None and ports_used[u] >= ports:
            continue
        start = cursor[r].get(u, 0)
        links = out[u]
        # skip links into the tree for good; they never become useful again
        while start < len(links) and tree[links[start][0]]:
            start += 1
        cursor[r][u] = start
        for v, lid in links[start:]:
            if not tree[v] and not used[lid]:
                used[lid] = True
                ports_used[u] += 1
                tree[v] = True
                parent[r, v], step[r, v], link[r, v] = u, t, lid
                members[r].append(v)
                return True
    return False


def template(kind: str, trees: Trees) -> Transfers:
    """Reduce-scatter up the trees (reverse step order) or all-gather down them, tree r carrying block r."""
    npus = trees.parent.shape[0]
    rows = []
    for r in range(npus):
        for v in range(npus):
            p = trees.parent[r, v]
            if p < 0:
                continue
            t = int(trees.step[r, v])
            lid = int(trees.link[r, v])
            if kind == "reduce_scatter":  # child v sends its partial sum of block r to its parent
                rows.append(same_units(trees.steps - t, v, p, r, r + 1) + (lid,))
            else:  # parent sends block r to child v
                rows.append(same_units(t - 1, p, v, r, r + 1) + (lid,))
    return Transfers.build(npus, rows, reduce=(kind == "reduce_scatter"))
