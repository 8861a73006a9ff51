"""MultiTree (ISCA'21): one spanning tree per root, built top-down as link allocation per time step.

In time step t every tree may grow by edges from nodes it already held before t, each directed link carries at
most one new edge per step, and each node starts at most `ports` new edges per step (None: one per link). Trees
take turns, one edge per turn, so the link budget of a step is shared fairly; the trees with fewest nodes take
their turns first (on a 3x5 mesh 8 steps instead of 11, a 4x4 mesh 9 instead of 10, a 32-NPU BiGraph 34 instead
of 36; never worse on the networks tried). Tree r carries block r of the buffer: the all-gather broadcasts it
down the tree (edge added in step t used in step t), the reduce-scatter reduces it up the tree in reverse (step
T - t), so each step is contention-free in both directions.

Works on links that join NPUs directly (Ring, FullyConnected and Mesh dimensions) and, given each edge's path, where
NPUs meet through switches: Switch dimensions and graph topologies (`path_trees`). The allocate-trees pass calls
`allocate` and records the trees in the IR (comm.trees); the lowering only expands them.
"""
from __future__ import annotations

from itertools import islice

import numpy as np

from ..network.blocks import Symmetry
from ..network.errors import UserError
from ..network.graphs import reachable
from ..network.links import LANE_SHORTEST, ROUTED, LinkMap
from .base import NETWORK, Algorithm, Transfers
from .trees import Trees


def step_lower_bound(npus: int, src: np.ndarray, dst: np.ndarray, ports: int | None = None) -> int:
    """No allocation finishes sooner: the N(N-1) tree edges spread over all directed links, and every NPU takes
    one edge from each of the other N-1 trees through its own incoming links (a mesh corner has two); with a
    port limit, N nodes start at most N x ports edges per step."""
    if npus < 2:
        return 0
    indegree = np.bincount(np.asarray(dst)[np.asarray(dst) < npus], minlength=npus)
    bound = max(-(-npus * (npus - 1) // len(src)), -(-(npus - 1) // int(indegree.min())))
    return bound if ports is None else max(bound, -(-(npus - 1) // ports))


def build_trees(npus: int, src: np.ndarray, dst: np.ndarray, ports: int | None = None,
                paths: list[tuple[int, ...]] | None = None, resources: int = 0, rotate: bool = True) -> Trees:
    """Top-down link allocation over the directed links (src[i] -> dst[i]) between NPUs. Equally grown trees take
    their turns in root order, rotated by one every step (`rotate`) or not.

    With `paths`, edge i (src[i] -> dst[i], NPUs joined through switches) takes the resources paths[i] (ids below
    `resources`) instead of a link of its own: it may join a step only when none of them is taken yet."""
    out = [[] for _ in range(npus)]
    for lid, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        out[a].append((b, lid))
    # with paths, per node the resources its edges start with: when all are taken it has nothing to give in this
    # step, found without scanning its edges (a switch network's NPU has one uplink, and N-1 edges behind it)
    exits = None if paths is None else [tuple({paths[lid][0] for _, lid in edges}) for edges in out]
    # plain lists and bytearrays: this loop touches single elements millions of times, where numpy is slow
    parent = [[-1] * npus for _ in range(npus)]
    step = [[0] * npus for _ in range(npus)]
    link = [[-1] * npus for _ in range(npus)]
    in_tree = [bytearray(npus) for _ in range(npus)]
    for r in range(npus):
        in_tree[r][r] = 1
    members = [[r] for r in range(npus)]     # nodes of each tree, in the order they joined
    # per tree, per member: the next outgoing link to try (links before it lead into the tree already)
    cursor = [[0] * npus for _ in range(npus)]
    # per tree: the members that may still have a link out of the tree (the others never will again)
    frontier = [[r] for r in range(npus)]
    fresh = [[] for _ in range(npus)]        # joined in the current step: holders from the next step on
    left = npus * (npus - 1)
    t = 0
    while left:
        t += 1
        used = bytearray(len(src) if paths is None else resources)
        ports_used = [0] * npus
        for r in range(npus):
            tree, cur = in_tree[r], cursor[r]
            keep = []
            for u in frontier[r] + fresh[r]:
                links = out[u]
                c = cur[u]
                while c < len(links) and tree[links[c][0]]:
                    c += 1
                cur[u] = c
                if c < len(links):
                    keep.append(u)
            frontier[r], fresh[r] = keep, []
        # within a step links only get used and trees only grow, so a holder with nothing left to add in this
        # step never has again: each tree skips past it for the rest of the step
        first = [0] * npus
        added = 0
        # the trees furthest from done go first (they bound the step count), ties in root order, by default
        # rotated every step so no tree always gets the best links; a tree that cannot grow any more in this step
        # drops out of the step's remaining turns. One turn adds one edge (inlined: this loop runs once per tree
        # edge, a million times on a 32x32 torus)
        shift = t if rotate else 0
        active = sorted(((k + shift) % npus for k in range(npus) if len(members[(k + shift) % npus]) < npus),
                        key=lambda r: len(members[r]))
        while active:
            still = []
            for r in active:
                tree, holders, cur = in_tree[r], frontier[r], cursor[r]
                f, nholders, v = first[r], len(holders), -1
                while f < nholders:
                    u = holders[f]
                    if ((ports is None or ports_used[u] < ports)
                            and (exits is None or not all(used[x] for x in exits[u]))):
                        # links before the cursor lead into the tree (the refresh at each step moves it past them)
                        for v, lid in islice(out[u], cur[u], None):
                            if not tree[v] and (not used[lid] if paths is None
                                                else not any(used[x] for x in paths[lid])):
                                break
                        else:
                            v = -1
                        if v >= 0:
                            if paths is None:
                                used[lid] = 1
                            else:
                                for x in paths[lid]:
                                    used[x] = 1
                            ports_used[u] += 1
                            tree[v] = 1
                            parent[r][v], step[r][v], link[r][v] = u, t, lid
                            break
                    f += 1  # u has nothing more to give tree r in this step
                first[r] = f
                if v >= 0:
                    fresh[r].append(v)
                    members[r].append(v)
                    left -= 1
                    added += 1
                    if len(members[r]) < npus:
                        still.append(r)
            active = still
        if not added:
            raise ValueError("the topology is not connected: some trees cannot span it")
    return Trees(np.array(parent, dtype=np.int64), np.array(step, dtype=np.int64), np.array(link, dtype=np.int64), t)


def template(kind: str, trees: Trees) -> Transfers:
    """Reduce-scatter up the trees (reverse step order) or all-gather down them, tree r carrying block r. Built
    from arrays (N(N-1) transfers: 1M on a 32x32 torus)."""
    npus = trees.parent.shape[0]
    r, v = np.nonzero(trees.parent >= 0)
    p, t, lid = trees.parent[r, v], trees.step[r, v], trees.link[r, v]
    if kind == "reduce_scatter":  # child v sends its partial sum of block r to its parent
        step, src, dst = trees.steps - t, v, p
    else:  # parent sends block r to child v
        step, src, dst = t - 1, p, v
    return Transfers.from_columns(npus, (step, src, dst, r, r + 1, r, r + 1, np.zeros_like(r), lid),
                                  reduce=(kind == "reduce_scatter"))


# trees through switches weigh every NPU pair: seconds at 128 NPUs (benchmarks/tree_construction.py prints the times)
PATH_TREES_MAX_NPUS = 256


def routed(topology) -> bool:
    """Do tree edges run through switches (paths the runtime routes) rather than over single links?"""
    return not all(d.kind.direct for d in topology.dims)


def allocate(topology, ports: int | None = None) -> tuple[Trees, str]:
    """(trees, method) for MultiTree on `topology`. Direct networks: on tori one tree translated to every root
    (fast, and at the link-count bound on the tori tried); otherwise, or when that misses the bound, the greedy
    turns; the fewer steps win. Through switches: greedy over routed NPU-to-NPU paths (`path_trees`)."""
    from .translated_trees import translated_trees
    npus = topology.npus
    if routed(topology):
        if npus > PATH_TREES_MAX_NPUS:
            raise UserError(f"multitree through switches weighs every pair of NPUs and is meant for at most "
                            f"{PATH_TREES_MAX_NPUS} NPUs; {topology.name} has {npus}")
        return path_trees(topology, ports), "paths"
    lg = topology.links()
    bound = step_lower_bound(npus, lg.src, lg.dst, ports)
    trees, method = translated_trees(topology, lg, ports), "translated"
    if trees is None or trees.steps > bound:
        greedy = build_trees(npus, lg.src, lg.dst, ports)
        if trees is None or greedy.steps < trees.steps:
            trees, method = greedy, "greedy"
    if trees.steps > bound:   # each NPU's links in a scrambled order (as path_trees: 4x4 mesh 9 -> 8 steps)
        src, dst = np.asarray(lg.src), np.asarray(lg.dst)
        order = np.lexsort((_mix(src.astype(np.uint64) * np.uint64(npus) + dst.astype(np.uint64)), src))
        for rotate in (False, True):
            other = build_trees(npus, src[order], dst[order], ports, rotate=rotate)
            if other.steps < trees.steps:
                # the trees name links by their index in the order given: back to the topology's link ids
                trees, method = Trees(other.parent, other.step, np.where(other.link >= 0, order[other.link], -1),
                                      other.steps), "greedy"
            if trees.steps <= bound:
                break
    return trees, method


def route_of_pairs(topology, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(dim, lane) of routed NPU-to-NPU messages: a graph's shortest path, or across a stack dimension by
    dimension, each Ring leg the shorter way."""
    if topology.graph is not None:
        return np.zeros(n, np.int64), np.zeros(n, np.int64)
    return np.full(n, ROUTED, np.int64), np.full(n, LANE_SHORTEST, np.int64)


def path_trees(topology, ports: int | None = None) -> Trees:
    """MultiTree where NPUs meet through switches: a tree edge joins two NPUs along their route (a graph's shortest
    path, a stack's dimension-order route; switches forward but do not reduce). An edge takes the links of its path
    for the all-gather and those of the path back for the reduce-scatter (which runs the trees upwards in mirrored
    steps), so both directions stay contention-free. Nearer NPUs are tried first. Edges are routed, so the trees
    name no link (-1).

    Greedy allocation is a heuristic, so a few variants run and the fewest steps win (the first on a tie): the NPU
    pairs at most D links apart, for the two smallest D that join all NPUs and for all pairs (long paths hold many
    links for one edge), with the tie order of the trees fixed or rotated, equally near pairs in NPU order; then,
    short of the bound, at the best D with equally near pairs in a scrambled order. On the 4x8 BiGraph, leaving out
    the 4-link pairs (two switches of one group) in fixed order meets the bound of 31 steps; all pairs, rotated,
    take 34."""
    npus = topology.npus
    links = LinkMap(topology.to_dict())
    u, v = np.divmod(np.arange(npus * npus), npus)
    keep = u != v
    u, v = u[keep], v[keep]
    dim, lane = route_of_pairs(topology, len(u))
    zeros = np.zeros(len(u), np.int64)
    fs, fwd = links.routes(u, v, dim, lane, zeros)
    bs, back = links.routes(v, u, dim, lane, zeros)
    distance = np.diff(fs)
    nlinks = int(links.offset[-1])
    lg = topology.links()
    bound = step_lower_bound(npus, lg.src, lg.dst, ports)
    # the two shortest caps that join all NPUs, and no cap: more rarely pays (on 16-NPU rings of switches nothing
    # did), and each variant is a full allocation
    caps = [c for c in np.unique(distance).tolist() if reachable(npus, u[distance <= c], v[distance <= c]).all()]
    best, won = None, None

    def attempt(tie, cap: int, rotate: bool) -> bool:
        """Allocate with the pairs at most `cap` links apart, nearer first, ties by `tie`; True at the bound."""
        nonlocal best, won
        pick = np.lexsort((tie, distance, u))
        pick = pick[distance[pick] <= cap].tolist()
        trees = build_trees(npus, u[pick], v[pick], ports, resources=2 * nlinks, rotate=rotate,
                            paths=[tuple(fwd[fs[i]:fs[i + 1]].tolist()) +
                                   tuple((back[bs[i]:bs[i + 1]] + nlinks).tolist()) for i in pick])
        if best is None or trees.steps < best.steps:
            best, won = Trees(trees.parent, trees.step, np.full_like(trees.link, -1), trees.steps), cap
        return best.steps <= bound

    for cap in sorted(set(caps[:2] + caps[-1:])):
        for rotate in (False, True):
            if attempt(v, cap, rotate):
                return best
    # ties in NPU order crowd every tree onto the same low-numbered NPUs first; ties scrambled by a fixed hash of
    # the pair spread them (8x8 BiGraph 78 -> 67 steps, 4 DGX-1 boxes 10 -> 9, Ring(8)_Switch(8) 30 -> 29), and
    # cost two more allocations at the best cap
    scrambled = _mix(u.astype(np.uint64) * np.uint64(npus) + v.astype(np.uint64))
    for rotate in (False, True):
        if attempt(scrambled, won, rotate):
            break
    return best


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fixed, well-spread scramble of distinct uint64 keys (the same on every machine)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Multitree(Algorithm):
    """Registered as --algorithm multitree; the trees are allocated over the physical links (or routed paths
    through switches) of the whole network by the allocate-trees pass."""
    order = 10
    name = "multitree"
    scope = NETWORK
    takes_ports = True
    planned_by = "allocate-trees"
    label = "multitree (graph)"

    reduce_scatter_reverses_links = True   # the reduce-scatter runs each tree edge child to parent

    def plan(self, topology, ports: int | None) -> tuple[Trees, str]:
        return allocate(topology, ports)

    def footprint(self, kind, k, bidirectional=False):
        return k * (k - 1)  # k trees of k-1 edges

    def plan_size(self, npus):
        return npus * npus  # a parent, step and link per (tree, node), and the candidate edges while growing them

    def read_plan(self, topology, attributes, links) -> Trees:
        """The spanning trees allocate-trees recorded (comm.trees). Their links are ids of the network's numbering;
        the templates index Topology.links(), so each id is mapped back, and must join the node to its parent."""
        n = topology.npus
        parent = np.asarray(attributes["parent"], np.int64).reshape(n, n)
        step = np.asarray(attributes["step"], np.int64).reshape(n, n)
        link = np.asarray(attributes["link"], np.int64).reshape(n, n)
        if not routed(topology):
            lg = links()
            index = np.full(int(lg.id.max()) + 1, -1, np.int64)
            index[lg.id] = np.arange(len(lg))
            edge = parent >= 0
            ok = (link >= 0) & (link < len(index))
            link = np.where(ok, index[np.clip(link, 0, len(index) - 1)], -1)
            nodes = np.broadcast_to(np.arange(n), (n, n))
            bad = edge & ((link < 0) | (lg.src[np.maximum(link, 0)] != parent) |
                          (lg.dst[np.maximum(link, 0)] != nodes))
            if bad.any():
                r, v = (int(x[0]) for x in np.nonzero(bad))
                raise UserError(f"comm.trees: the link of node {v} in tree {r} does not join it to its parent")
        return Trees(parent, step, link, int(attributes["steps"]))

    def network_template(self, kind, topology, plan, links):
        return template(kind, plan)

    def network_symmetry(self, topology, plan, links):
        """Trees on a torus that are all one tree translated to every root: every NPU runs NPU 0's steps, moved
        (STEPS; the congestion runtime's representative links are not claimed for trees)."""
        from .translated_trees import is_translated
        if not routed(topology) and is_translated(topology, links(), plan):
            return Symmetry.STEPS
        return Symmetry.NONE

    def routes(self, topology, n):
        return route_of_pairs(topology, n) if routed(topology) else None   # tree edges are routed paths
