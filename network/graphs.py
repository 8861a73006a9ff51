"""Graph topologies: NPUs and switches joined by explicit links, for networks that are not a stack of dimensions.

A graph topology is one dimension of block `Graph` over its NPUs, carrying the link graph. Every collective on it is
routed: a message takes a shortest path (fewest links; network/links.py picks the same path everywhere), so the
per-dimension algorithms become algorithms over ranks (ring in rank order, direct, halving-doubling, double binary
tree) and MultiTree allocates its tree edges (NPU to NPU, through switches) so that no link carries two in a step.

Built-in graphs:
- `MxN_bigraph` (EFLOPS's BiGraph, as the MultiTree evaluation builds it): N switches in two groups of N/2, M NPUs
  on each switch, every switch linked to every switch of the other group; M x N NPUs (4x8_bigraph: 32, the
  evaluation's network; its simulator's `--bigraph-m 4 --bigraph-n 8`). NPU rank = switch x M + slot, switches
  0..N/2-1 forming the first group. NPUs on one switch are two links apart, on switches of different groups three,
  of the same group four.
- `dgx1`, `N_dgx1`: DGX-1's hybrid cube-mesh of 8 GPUs (NVLink: each quad fully connected, GPU i linked to i+4);
  N boxes add one switch joined to every GPU (the network between boxes).
- an edge-list file `*.edges`: one undirected link per line, `a b [GB/s] [ns]`; integer nodes are NPUs (0..N-1,
  all present), other names are switches.
Links are bidirectional: one directed link each way, each with the line's (or --bandwidth's) GB/s and latency.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import UserError
from .units import MAX_GBPS, MAX_LATENCY_NS, MIN_GBPS, link_range_error
from .user_files import read_text

NPU_ID = re.compile(r"^(0|[1-9][0-9]*)$", re.ASCII)  # an NPU in an edge list; other names are switches
BIGRAPH_RE = re.compile(r"^(\d+)x(\d+)_bigraph$", re.IGNORECASE)
DGX_RE = re.compile(r"^(?:(\d+)_)?dgx1$", re.IGNORECASE)


@dataclass(frozen=True)
class Graph:
    names: tuple[str, ...]  # node names: NPUs first ("npu0", ...), then switches
    npus: int
    src: np.ndarray         # int64, directed links
    dst: np.ndarray
    gbps: np.ndarray        # float64, per link
    latency_ns: np.ndarray  # float64, per link

    @property
    def nodes(self) -> int:
        return len(self.names)

    def injection_gbps(self) -> float:
        """The smallest total bandwidth of the links leaving an NPU (the per-NPU bandwidth of the network)."""
        out = np.bincount(self.src, weights=self.gbps, minlength=self.nodes)[:self.npus]
        return float(out.min())

    def to_dict(self) -> dict:
        return {"names": list(self.names), "npus": self.npus, "src": self.src.tolist(), "dst": self.dst.tolist(),
                "gbps": self.gbps.tolist(), "latency_ns": self.latency_ns.tolist()}

    @staticmethod
    def from_dict(d: dict) -> "Graph":
        try:
            return make_graph(list(d["names"]), int(d["npus"]), d["src"], d["dst"], d["gbps"], d["latency_ns"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"graph topology needs names, npus, src, dst, gbps and latency_ns ({e})") from None


# A graph topology is scheduled whole (trees rooted at every NPU, routes between every pair): its structures grow
# with the square of its nodes, so a graph past this many is refused before it is built.
MAX_GRAPH_NODES = 2**14
MAX_EDGE_FILE_BYTES = 256 * 2**20


def check_graph_size(nodes: int, what: str) -> None:
    if nodes > MAX_GRAPH_NODES:
        raise UserError(f"{what} has {nodes} nodes; a graph topology is scheduled whole (a tree per NPU, a route "
                        f"per pair), which astra-compile does for at most {MAX_GRAPH_NODES} nodes")


def make_graph(names, npus, src, dst, gbps, latency_ns) -> Graph:
    """Check a directed link list and build the Graph (every NPU reachable from every NPU)."""
    check_graph_size(len(names), "the graph topology")
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    gbps, lat = np.asarray(gbps, np.float64), np.asarray(latency_ns, np.float64)
    n = len(names)
    if npus < 2:
        raise UserError(f"a graph topology needs at least 2 NPUs, got {npus}")
    if not (len(src) == len(dst) == len(gbps) == len(lat)) or not len(src):
        raise UserError("graph topology: src, dst, gbps and latency_ns must be equally long and not empty")
    if src.min() < 0 or dst.min() < 0 or max(src.max(), dst.max()) >= n or np.any(src == dst):
        raise UserError("graph topology: a link joins a node that does not exist, or a node to itself")
    bad = ~(np.isfinite(gbps) & (gbps >= MIN_GBPS) & (gbps <= MAX_GBPS) & np.isfinite(lat) & (lat >= 0)
            & (lat <= MAX_LATENCY_NS))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise UserError(f"graph topology: link {i}: {link_range_error(float(gbps[i]), float(lat[i]))}")
    if len(set(zip(src.tolist(), dst.tolist()))) != len(src):
        raise UserError("graph topology: two links join the same pair of nodes in the same direction")
    graph = Graph(tuple(names), npus, src, dst, gbps, lat)
    _check_connected(graph)
    return graph


def reachable(nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Which of nodes 0..nodes-1 the directed edges src -> dst reach from node 0 (breadth-first, by arrays)."""
    seen = np.zeros(nodes, bool)
    seen[0], frontier = True, np.array([0])
    while len(frontier):
        nxt = np.unique(dst[np.isin(src, frontier)])
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
    return seen


def _check_connected(g: Graph) -> None:
    seen = reachable(g.nodes, g.src, g.dst)
    if not seen[:g.npus].all():
        missing = int(np.flatnonzero(~seen[:g.npus])[0])
        raise UserError(f"graph topology: NPU {missing} cannot be reached from NPU 0")


def undirected(pairs: list[tuple[int, int]], gbps: float, latency: float):
    """Both directions of each undirected link, in pair order."""
    a = np.array(pairs, np.int64).reshape(-1, 2)
    src = np.stack([a[:, 0], a[:, 1]], axis=1).ravel()
    dst = np.stack([a[:, 1], a[:, 0]], axis=1).ravel()
    return src, dst, np.full(len(src), float(gbps)), np.full(len(src), float(latency))


def bigraph(per_switch: int, switches: int, gbps: float, latency: float) -> Graph:
    """`switches` switches in two equal groups, complete bipartite between the groups, `per_switch` NPUs on each
    switch. NPU rank = switch * per_switch + slot; switches 0..switches/2-1 are the first group."""
    if per_switch < 1 or switches < 2 or switches % 2:
        raise UserError(f"an MxN_bigraph needs M >= 1 NPUs per switch and an even number N >= 2 of switches, "
                        f"got {per_switch}x{switches}")
    npus, half = per_switch * switches, switches // 2
    check_graph_size(npus + switches, f"{per_switch}x{switches}_bigraph")
    pairs = [(n, npus + n // per_switch) for n in range(npus)]
    pairs += [(npus + a, npus + b) for a in range(half) for b in range(half, switches)]
    names = [f"npu{i}" for i in range(npus)] + [f"sw{g}.{s}" for g in range(2) for s in range(half)]
    return make_graph(names, npus, *undirected(pairs, gbps, latency))


def bigraph_shape(graph: Graph) -> tuple[int, int] | None:
    """(M, N) when `graph` is exactly the MxN BiGraph `bigraph` builds (the same NPUs, switches and links), else
    None: recognised by its links, not by its name, so an equal edge list is one too."""
    switches = graph.nodes - graph.npus
    if switches < 2 or switches % 2 or graph.npus % switches:
        return None
    m = graph.npus // switches
    ref = bigraph(m, switches, 1.0, 0.0)
    if sorted(zip(ref.src.tolist(), ref.dst.tolist())) != sorted(zip(graph.src.tolist(), graph.dst.tolist())):
        return None
    return m, switches


def dgx1(boxes: int, gbps: float, latency: float) -> Graph:
    """DGX-1 hybrid cube-mesh boxes (8 GPUs each); with several boxes one switch joins every GPU."""
    if boxes < 1:
        raise UserError("dgx1 needs at least one box")
    check_graph_size(8 * boxes + (boxes > 1), f"{boxes}_dgx1")
    pairs = []
    for b in range(boxes):
        g = 8 * b
        for quad in (0, 4):
            pairs += [(g + quad + i, g + quad + j) for i in range(4) for j in range(i + 1, 4)]
        pairs += [(g + i, g + i + 4) for i in range(4)]
    npus = 8 * boxes
    names = [f"npu{i}" for i in range(npus)]
    if boxes > 1:
        pairs += [(n, npus) for n in range(npus)]
        names.append("sw0")
    return make_graph(names, npus, *undirected(pairs, gbps, latency))


def read_edge_list(path: str, gbps: float, latency: float) -> Graph:
    """An edge-list file (see the module docstring); a line's own GB/s and ns win over the defaults given."""
    # past MAX_EDGE_FILE_BYTES: more links than a graph of MAX_GRAPH_NODES nodes scheduled whole can use
    lines = read_text(path, "an edge list: lines 'a b [GB/s] [ns]'", "topology file ", MAX_EDGE_FILE_BYTES).splitlines()
    edges, npu_ids, switch_names = [], set(), []
    for no, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) not in (2, 3, 4):
            raise UserError(f"{path}:{no}: expected 'a b [GB/s] [ns]', got '{line.strip()}'")
        try:
            bw = float(words[2]) if len(words) > 2 else gbps
            lat = float(words[3]) if len(words) > 3 else latency
        except ValueError:
            raise UserError(f"{path}:{no}: bandwidth and latency must be numbers, got '{line.strip()}'") from None
        problem = link_range_error(bw, lat)
        if problem:
            raise UserError(f"{path}:{no}: {problem} ('{line.strip()}')")
        for w in words[:2]:
            if NPU_ID.match(w):
                npu_ids.add(int(w))
            elif any(ch.isdigit() for ch in w) and all(ch.isdigit() for ch in w):
                # '00', '٣', '²': digits Python reads as numbers but that would key a different node than they say
                raise UserError(f"{path}:{no}: NPU '{w}' must be written in ASCII digits without leading zeros")
            elif w not in switch_names:
                switch_names.append(w)
        edges.append((words[0], words[1], bw, lat, no))
    if not edges:
        raise UserError(f"{path}: no links")
    npus = len(npu_ids)
    check_graph_size(npus + len(switch_names), f"topology file '{path}'")
    if npu_ids != set(range(npus)):
        raise UserError(f"{path}: NPUs must be numbered 0..{npus - 1} without gaps")
    index = {str(i): i for i in range(npus)} | {s: npus + j for j, s in enumerate(switch_names)}
    src, dst, bws, lats = [], [], [], []
    for a, b, bw, lat, _ in edges:
        src += [index[a], index[b]]
        dst += [index[b], index[a]]
        bws += [bw, bw]
        lats += [lat, lat]
    names = [f"npu{i}" for i in range(npus)] + switch_names
    try:
        return make_graph(names, npus, src, dst, bws, lats)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
