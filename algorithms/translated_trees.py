"""MultiTree's trees on vertex-transitive networks (tori, FullyConnected stacks): one tree, translated to every root.

On a torus every NPU sees the same network, and a link is a generator: (dimension, lane, offset), the same from
every NPU. Build tree 0 top-down in time steps under one extra rule, each generator used at most once per step,
and give root r the translation of tree 0 by r's coordinates. Two trees then never share a directed link in a
step: trees r1 != r2 using the same generator in step t would need tree 0 to use it twice. So the trees keep
MultiTree's constraints (an edge leaves a node that held the data before the step; each directed link carries one
edge per step) and cost O(N) to build instead of O(N^2) turns. Tree 0 grows from its oldest members first; on the
tori tried (4x4 to 32x32, 4x4x4) this meets the link-count bound ceil(N(N-1) / links), one step under the greedy
construction on 4x4 and 8x8.
"""
from __future__ import annotations

import numpy as np

from .trees import Trees


def translated_trees(topology, links, ports: int | None = None) -> Trees | None:
    """The translated trees, or None when some dimension is not a Ring or FullyConnected block (a switch or a
    mesh has no translation symmetry). `ports` caps the new edges a node starts per step: an edge of tree 0 in
    step t becomes one edge out of every node in step t, so tree 0 may add at most `ports` edges per step."""
    if not all(d.kind.translatable for d in topology.dims):
        return None
    n = topology.npus
    gen = _generators(topology, links)
    ngen = int(gen.max()) + 1
    link_of = np.full((n, ngen), -1, dtype=np.int64)
    link_of[links.src, gen] = np.arange(len(links))
    head = np.full((n, ngen), -1, dtype=np.int64)
    head[links.src, gen] = links.dst
    parent0, step0, gen0 = _tree0(n, head.tolist(), ngen, ports)
    translate = _translations(topology)
    parent = np.full((n, n), -1, dtype=np.int64)
    step = np.zeros((n, n), dtype=np.int64)
    link = np.full((n, n), -1, dtype=np.int64)
    v = np.arange(1, n)
    rows = np.arange(n)[:, None]
    cols = translate[:, v]
    tails = translate[:, parent0[v]]
    parent[rows, cols] = tails
    step[rows, cols] = step0[v]
    link[rows, cols] = link_of[tails, gen0[v]]
    return Trees(parent, step, link, int(step0.max()) if n > 1 else 0)


def _generators(topology, links) -> np.ndarray:
    """Each link's generator, (dimension, lane, offset) as one number: the same from every NPU on a torus."""
    shape, coords = np.asarray(topology.shape, dtype=np.int64), topology.coords_array()
    dims = links.dim
    offset = (coords[links.dst, dims] - coords[links.src, dims]) % shape[dims]
    _, gen = np.unique(np.stack([dims, links.lane, offset], axis=1), axis=0, return_inverse=True)
    return gen.ravel()


def _translations(topology) -> np.ndarray:
    """translate[r, v]: node v moved by root r's coordinates (n x n)."""
    shape, coords = np.asarray(topology.shape, dtype=np.int64), topology.coords_array()
    strides = np.asarray(topology.strides(), dtype=np.int64)
    return (((coords[:, None, :] + coords[None, :, :]) % shape) * strides).sum(axis=2)


def _tree0(n: int, head: list[list[int]], ngen: int, ports: int | None):
    """Tree rooted at NPU 0: per step, each generator adds one edge from the oldest member whose neighbour along
    it is still outside the tree (up to `ports` edges in all per step)."""
    in_tree = bytearray(n)
    in_tree[0] = 1
    members = [0]
    parent, step, gen = [-1] * n, [0] * n, [-1] * n
    # per generator: members before this index have their neighbour along it in the tree already
    scan = [0] * ngen
    left, t = n - 1, 0
    while left:
        t += 1
        held = len(members)
        for g in range(ngen):
            if ports is not None and len(members) - held >= ports:
                break
            i = scan[g]
            while i < held and in_tree[head[members[i]][g]]:
                i += 1
            scan[g] = i
            if i < held:
                u = members[i]
                v = head[u][g]
                in_tree[v] = 1
                members.append(v)
                parent[v], step[v], gen[v] = u, t, g
                left -= 1
        if held == len(members):
            raise ValueError("the topology is not connected: tree 0 cannot span it")
    return np.asarray(parent, dtype=np.int64), np.asarray(step, dtype=np.int64), np.asarray(gen, dtype=np.int64)


def is_translated(topology, links, trees: Trees) -> bool:
    """Is every tree the translation of tree 0 by its root's coordinates: the same parents, steps and link
    generators, moved? Then every NPU's part in the schedule is NPU 0's, moved, and NPU 0's table stands for all
    (symmetric execution). Checked on the trees the module records, whoever built them."""
    if not all(d.kind.translatable for d in topology.dims):
        return False
    n, translate = topology.npus, _translations(topology)   # node v of tree 0 sits at translate[r, v] in tree r
    parent0, step0, link0 = trees.parent[0], trees.step[0], trees.link[0]
    if parent0[0] != -1 or (parent0[1:] < 0).any() or (link0[1:] < 0).any():
        return False
    rows, moved = np.arange(n)[:, None], translate[:, 1:]
    if (trees.parent[rows, moved] != translate[:, parent0[1:]]).any() or (trees.step[rows, moved] != step0[1:]).any():
        return False
    if (trees.parent[np.arange(n), np.arange(n)] != -1).any():
        return False
    generator, got = _generators(topology, links), trees.link[rows, moved]
    return bool((got >= 0).all() and (generator[got] == generator[link0[1:]]).all())
