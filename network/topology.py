"""Multi-dimensional networks stacked from ASTRA-sim 2.0 building blocks.

A topology is a list of dimensions, each a Ring, FullyConnected or Switch block
of `size` NPUs, or a Mesh: a Ring without its wrap-around link (a line of NPUs,
so `8x8_mesh` is Mesh(8)_Mesh(8) as `8x8_torus` is Ring(8)_Ring(8)).  Dimension 0 is the innermost (fastest-varying) one, so NPU
rank = c0 + s0*(c1 + s1*(c2 + ...)) as in ASTRA-sim.

`parse_topology` accepts the notations people use with ASTRA-sim (block
strings, "8x8_torus" style shorthands, "Ring_FC:4x2" shape notation, the 2.x
network .yml and the older .json) and always produces the same `Topology`.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import graphs
from .errors import UserError
from .graphs import Graph
from .units import parse_number_list

BLOCKS = ("Ring", "FullyConnected", "Switch", "Mesh", "Graph")  # Graph: explicit links (graphs.py), never stacked
DEFAULT_ALGORITHM = {"Ring": "ring", "FullyConnected": "direct", "Switch": "halving_doubling", "Mesh": "ring",
                     "Graph": "ring"}
NEIGHBOUR_BLOCKS = ("Ring", "Mesh")  # blocks whose NPUs link to their next and previous neighbour

# Defaults when neither the spec, a file nor an override gives a value.
DEFAULT_BANDWIDTH_GBPS = 50.0
DEFAULT_LATENCY_NS = 500.0
DEFAULT_LINKS = 1

# Lower-case spelling -> canonical block name.
_BLOCK_ALIASES = {
    "ring": "Ring",
    "fullyconnected": "FullyConnected",
    "fc": "FullyConnected",
    "switch": "Switch",
    "sw": "Switch",
    "mesh": "Mesh",
    "line": "Mesh",
}
_EXPECTED_BLOCKS = "expected Ring(k), FullyConnected(k)/FC(k), Switch(k)/SW(k) or Mesh(k)/Line(k)"


def _whole(value: Any, what: str) -> int:
    """`value` as an int, accepting integral floats (YAML/JSON may write 8.0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UserError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise UserError(f"{what} must be a whole number, got {value!r}")
    return int(value)


def _real(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UserError(f"{what} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise UserError(f"{what} must be finite, got {value!r}")
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
        if self.block not in BLOCKS:
            raise UserError(f"unknown topology block {self.block!r}; {_EXPECTED_BLOCKS}")
        size = _whole(self.size, "size")
        if size < 2:
            raise UserError(f"size must be at least 2 NPUs, got {size}")
        bw = _real(self.bandwidth_gbps, "bandwidth")
        if bw <= 0:
            raise UserError(f"bandwidth must be positive (GB/s), got {bw:g}")
        lat = _real(self.latency_ns, "latency")
        if lat < 0:
            raise UserError(f"latency must be >= 0 ns, got {lat:g}")
        links = _whole(self.links, "links")
        if links < 1:
            raise UserError(f"links must be at least 1, got {links}")
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "bandwidth_gbps", bw)
        object.__setattr__(self, "latency_ns", lat)
        object.__setattr__(self, "links", links)

    @property
    def notation(self) -> str:
        return f"{self.block}({self.size})"

    @property
    def default_algorithm(self) -> str:
        """The block's own algorithm (select-algorithm's default)."""
        return DEFAULT_ALGORITHM[self.block]

    @property
    def effective_gbps(self) -> float:
        """Per-NPU bandwidth of this dimension: bandwidth_gbps * links."""
        return self.bandwidth_gbps * self.links

    def link_gbps(self) -> float:
        """Bandwidth of ONE physical link an NPU uses in this dimension."""
        if self.block in NEIGHBOUR_BLOCKS:
            # Two links per NPU (next and previous neighbour) share the bandwidth;
            # for a Ring(2) these are two parallel links to the same neighbour.
            # A Mesh's end NPUs have one of the two.
            return self.effective_gbps / 2
        if self.block == "FullyConnected":
            return self.effective_gbps / (self.size - 1)
        return self.effective_gbps  # Switch: a single NPU<->switch link; Graph: the NPU's links together

    def hops(self, a: int, b: int) -> int:
        """Link hops between coordinates a and b along this dimension (0 if a == b)."""
        for c in (a, b):
            if not 0 <= c < self.size:
                raise UserError(f"coordinate {c} out of range for {self.notation}")
        if a == b:
            return 0
        if self.block == "Ring":
            d = abs(a - b)
            return min(d, self.size - d)
        if self.block == "Mesh":
            return abs(a - b)
        if self.block == "FullyConnected":
            return 1
        if self.block == "Graph":
            raise UserError("hops on a graph topology depend on its links: route with runtime.links.LinkMap")
        return 2  # Switch: NPU -> switch -> NPU


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
    """All directed physical links of a topology as parallel numpy arrays.

    Nodes 0..npus-1 are NPUs; nodes npus..num_nodes-1 are switches, one per
    group of a Switch dimension: the switches of each Switch dimension are
    numbered consecutively after those of earlier dimensions, ordered by the
    group's rank in the shape with that dimension removed.  Arrays rather than objects because large
    topologies have tens of thousands of links.
    """

    num_nodes: int
    npus: int
    src: np.ndarray         # int64
    dst: np.ndarray         # int64
    dim: np.ndarray         # int64, dimension the link belongs to
    lane: np.ndarray        # int64, 0 except the second parallel link of Ring(2)
    gbps: np.ndarray        # float64, bandwidth of the link
    latency_ns: np.ndarray  # float64

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


@dataclass(frozen=True)
class Topology:
    dims: tuple[Dimension, ...]
    name: str = ""  # canonical notation; derived from dims when left empty
    graph: Graph | None = field(default=None, compare=False)  # the links of a Graph topology (one Graph dimension)
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
        if not self.name:
            object.__setattr__(self, "name", "_".join(d.notation for d in dims))
        strides, s = [], 1
        for d in dims:
            strides.append(s)
            s *= d.size
        object.__setattr__(self, "_strides", tuple(strides))

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
            raise UserError(f"NPU rank must be an integer, got {rank!r}") from None
        if not 0 <= r < self.npus:
            raise UserError(f"NPU rank {r} out of range for {self.name} ({self.npus} NPUs)")
        return r

    def _check_dim(self, dim: int) -> int:
        if not 0 <= dim < self.ndims:
            raise UserError(f"dimension {dim} out of range for {self.name} ({self.ndims} dimensions)")
        return dim

    def coords(self, rank: int) -> tuple[int, ...]:
        r = self._check_rank(rank)
        return tuple((r // st) % d.size for st, d in zip(self._strides, self.dims))

    def rank(self, coords: Sequence[int]) -> int:
        try:
            coords = tuple(operator.index(c) for c in coords)
        except TypeError:
            raise UserError(f"coordinates must be integers, got {coords!r}") from None
        if len(coords) != self.ndims:
            raise UserError(f"expected {self.ndims} coordinates for {self.name}, got {coords}")
        for c, d in zip(coords, self.dims):
            if not 0 <= c < d.size:
                raise UserError(f"coordinates {coords} out of range for {self.name}")
        return sum(c * st for c, st in zip(coords, self._strides))

    def coords_array(self) -> np.ndarray:
        """Coordinates of every NPU, shape (npus, ndims), row i = coords(i)."""
        ranks = np.arange(self.npus, dtype=np.int64)[:, None]
        strides = np.asarray(self._strides, dtype=np.int64)[None, :]
        shape = np.asarray(self.shape, dtype=np.int64)[None, :]
        return (ranks // strides) % shape

    def peer(self, rank: int, dim: int, coord: int) -> int:
        """The NPU equal to `rank` except for coordinate `coord` in dimension `dim`."""
        r = self._check_rank(rank)
        self._check_dim(dim)
        if not 0 <= coord < self.dims[dim].size:
            raise UserError(f"coordinate {coord} out of range for dimension {dim} ({self.dims[dim].notation})")
        st = self._strides[dim]
        return r + (coord - (r // st) % self.dims[dim].size) * st

    def links(self) -> LinkGraph:
        """Every directed physical link, built with array operations (no per-NPU loop).

        Ring(k): each NPU links to its next and previous neighbour (lane 0 and 1;
        for k == 2 both go to the single neighbour).  Mesh(k): the same without
        the wrap-around pair (the ends have one neighbour).  FullyConnected(k): one link
        to every other group member.  Switch(k): one switch node per group, with
        an NPU->switch and a switch->NPU link per member.
        """
        if self.graph is not None:
            g = self.graph
            zeros = np.zeros(len(g.src), np.int64)
            return LinkGraph(g.nodes, g.npus, g.src, g.dst, zeros, zeros, g.gbps, g.latency_ns)
        n = self.npus
        ranks = np.arange(n, dtype=np.int64)
        parts: list[tuple[np.ndarray, ...]] = []
        next_switch = n
        for k, d in enumerate(self.dims):
            st = self._strides[k]
            c = (ranks // st) % d.size
            base = ranks - c * st  # rank with this coordinate set to 0
            if d.block == "Ring":
                src = np.concatenate([ranks, ranks])
                dst = np.concatenate([base + (c + 1) % d.size * st, base + (c - 1) % d.size * st])
                lane = np.repeat(np.array([0, 1], dtype=np.int64), n)
            elif d.block == "Mesh":
                # next neighbour (lane 0) from all but the last NPU, previous (lane 1) from all but the first
                fwd, back = ranks[c < d.size - 1], ranks[c > 0]
                src = np.concatenate([fwd, back])
                dst = np.concatenate([fwd + st, back - st])
                lane = np.concatenate([np.zeros(fwd.shape, dtype=np.int64), np.ones(back.shape, dtype=np.int64)])
            elif d.block == "FullyConnected":
                # Block j (j = 1..size-1) links every NPU to the member j places further on.
                offsets = np.repeat(np.arange(1, d.size, dtype=np.int64), n)
                src = np.tile(ranks, d.size - 1)
                dst = np.tile(base, d.size - 1) + (np.tile(c, d.size - 1) + offsets) % d.size * st
                lane = np.zeros(src.shape, dtype=np.int64)
            else:  # Switch
                # Group index = rank with this dimension's coordinate removed,
                # i.e. the rank in the remaining (reduced) shape.
                group = ranks % st + (ranks // (st * d.size)) * st
                switch = next_switch + group
                next_switch += n // d.size
                src = np.concatenate([ranks, switch])
                dst = np.concatenate([switch, ranks])
                lane = np.zeros(src.shape, dtype=np.int64)
            m = src.shape[0]
            parts.append((
                src, dst, np.full(m, k, dtype=np.int64), lane,
                np.full(m, d.link_gbps(), dtype=np.float64),
                np.full(m, d.latency_ns, dtype=np.float64),
            ))
        cols = [np.concatenate(col) for col in zip(*parts)]
        return LinkGraph(next_switch, n, *cols)

    def describe(self) -> str:
        """One line per dimension, e.g. 'dim 0: Switch(8)  50 GB/s  1 ns  links 1'."""
        return "\n".join(
            f"dim {k}: {d.notation}  {d.bandwidth_gbps:g} GB/s  {d.latency_ns:g} ns  links {d.links}"
            for k, d in enumerate(self.dims)
        )

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
        return Topology(tuple(dims), d.get("name") or "", graph)


# --------------------------------------------------------------------------- parsing

_BLOCK_TOKEN_RE = re.compile(r"^([A-Za-z]+)\s*\((.*)\)$")
_SHORTHAND_RE = re.compile(r"^(\d+(?:x\d+)*)_([A-Za-z]+)$", re.IGNORECASE)
_SHAPE_NOTATION_RE = re.compile(r"^([A-Za-z_]+)\s*:\s*(\S+)$")


def _block_name(word: str, shown: str) -> str:
    canon = _BLOCK_ALIASES.get(word.strip().lower())
    if canon is None:
        raise UserError(f"unknown topology block '{shown}'; {_EXPECTED_BLOCKS}")
    return canon


def _parse_blocks(spec: str) -> tuple[list[str], list[int]]:
    """'Ring(4)_FC(2)_Switch(8)' -> (['Ring', 'FullyConnected', 'Switch'], [4, 2, 8])."""
    blocks, sizes = [], []
    for token in (t.strip() for t in spec.split("_")):
        if not token:
            raise UserError(f"malformed topology '{spec}': empty block between '_' separators")
        m = _BLOCK_TOKEN_RE.match(token)
        if m is None:
            if token.isalpha() and token.lower() in _BLOCK_ALIASES:
                raise UserError(
                    f"topology block '{token}' in '{spec}' has no size; write {token}(k), "
                    f"or give all sizes at once as in 'Ring_FC:4x2'")
            where = "" if token == spec else f" in '{spec}'"
            raise UserError(f"malformed topology block '{token}'{where}; {_EXPECTED_BLOCKS}")
        word, arg = m.groups()
        blocks.append(_block_name(word, token))
        if not re.fullmatch(r"\s*\d+\s*", arg):
            raise UserError(f"malformed topology block '{token}': the size must be an integer >= 2, e.g. Ring(8)")
        sizes.append(int(arg))
    return blocks, sizes


def _parse_shape(text: str, spec: str) -> list[int]:
    if not re.fullmatch(r"\d+(?:x\d+)*", text, re.IGNORECASE):
        raise UserError(f"malformed shape '{text}' in topology '{spec}'; expected sizes like 4x4x4")
    return [int(s) for s in re.split(r"[xX]", text)]


def _parse_notation(spec: str) -> tuple[list[str], list[int]]:
    """Block strings, shorthands ('8x8_torus') and shape notation ('Ring_FC:4x2')."""
    m = _SHORTHAND_RE.match(spec)
    if m is not None:
        shape = _parse_shape(m.group(1), spec)
        kind = m.group(2).lower()
        if kind == "torus":
            block = "Ring"
        elif kind in _BLOCK_ALIASES:
            block = _BLOCK_ALIASES[kind]
        else:
            raise UserError(f"unknown topology shorthand '{spec}'; expected e.g. 8x8_torus, "
                            f"8x8_mesh, 64_switch, 8_ring or 8x4_fc")
        return [block] * len(shape), shape

    m = _SHAPE_NOTATION_RE.match(spec)
    if m is not None:
        words = [w.strip() for w in m.group(1).split("_")]
        if any(not w for w in words):
            raise UserError(f"malformed topology '{spec}': empty block name between '_' separators")
        blocks = [_block_name(w, w) for w in words]
        shape = _parse_shape(m.group(2), spec)
        if len(shape) != len(blocks):
            raise UserError(f"topology '{spec}' has {len(blocks)} blocks but its shape "
                            f"'{m.group(2)}' has {len(shape)} dimension(s)")
        return blocks, shape

    return _parse_blocks(spec)


def _file_block(value: Any, source: str) -> str:
    canon = _BLOCK_ALIASES.get(value.strip().lower()) if isinstance(value, str) else None
    if canon is None:
        raise UserError(f"{source}: unknown topology block {value!r}; expected Ring, FullyConnected, Switch or Mesh")
    return canon


def _file_values(data: dict, key: str, ndims: int, path: str) -> list | None:
    """A per-dimension list from a config file; a scalar applies to every dimension."""
    if key not in data or data[key] is None:
        return None
    value = data[key]
    if not isinstance(value, list):
        return [value] * ndims
    if len(value) != ndims:
        raise UserError(f"topology file '{path}': '{key}' has {len(value)} entries but the "
                        f"network has {ndims} dimensions")
    return value


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def _load_yaml(path: str) -> dict:
    """ASTRA-sim 2.x network .yml: topology, npus_count, bandwidth (GB/s), latency (ns)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key written twice (YAML keeps the last one without a word)."""

    def mapping(loader, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in keys:
                raise UserError(f"topology file '{path}' line {key_node.start_mark.line + 1}: key '{key}' is given "
                                f"twice")
            keys.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=StrictLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        raise UserError(f"topology file '{path}' is not valid YAML: {_one_line(e)}") from None
    except UnicodeDecodeError:
        raise UserError(f"topology file '{path}' is not text (a binary file?)") from None
    except RecursionError:
        raise UserError(f"topology file '{path}' nests too deeply") from None
    if not isinstance(data, dict):
        raise UserError(f"topology file '{path}' must be a YAML mapping with keys topology and npus_count")
    known = ("topology", "npus_count", "bandwidth", "latency", "links_count")
    # Reject unknown keys: a typo such as 'bandwith' would otherwise silently
    # fall back to the default bandwidth.
    for key in data:
        if key not in known:
            raise UserError(f"topology file '{path}': unknown key '{key}'; expected {', '.join(known)}")
    for key in ("topology", "npus_count"):
        if data.get(key) is None:
            raise UserError(f"topology file '{path}' is missing '{key}'")
    topo, counts = data["topology"], data["npus_count"]
    # Dimension count comes from whichever of topology/npus_count is a list;
    # a scalar in the other one applies to every dimension.
    lengths = [len(v) for v in (topo, counts) if isinstance(v, list)]
    ndims = lengths[0] if lengths else 1
    if ndims == 0:
        raise UserError(f"topology file '{path}': 'topology' and 'npus_count' must not be empty")
    return {
        "blocks": _file_values(data, "topology", ndims, path),
        "sizes": _file_values(data, "npus_count", ndims, path),
        "bandwidth": _file_values(data, "bandwidth", ndims, path),
        "latency": _file_values(data, "latency", ndims, path),
        "links": _file_values(data, "links_count", ndims, path),
    }


def _load_json(path: str) -> dict:
    """Older ASTRA-sim network .json ("topologies-per-dim", "units-count", ...).

    Those files carry many fields this compiler does not model (hbm-*, nic-latency,
    ...), so unknown keys are ignored here rather than rejected.
    """
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if twice is not None:
            raise UserError(f"topology file '{path}': key '{twice}' is given twice")
        return dict(pairs)

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise UserError(f"topology file '{path}' is not valid JSON: {_one_line(e)}") from None
    except UnicodeDecodeError:
        raise UserError(f"topology file '{path}' is not text (a binary file?)") from None
    except RecursionError:
        raise UserError(f"topology file '{path}' nests too deeply") from None
    if not isinstance(data, dict):
        raise UserError(f"topology file '{path}' must be a JSON object with topologies-per-dim and units-count")
    for key in ("topologies-per-dim", "units-count"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise UserError(f"topology file '{path}': '{key}' must be a non-empty list")
    ndims = len(data["topologies-per-dim"])
    if "dimensions-count" in data:
        declared = data["dimensions-count"]
        if isinstance(declared, bool) or not isinstance(declared, int) or declared != ndims:
            raise UserError(f"topology file '{path}': dimensions-count is {declared!r} but "
                            f"topologies-per-dim lists {ndims} dimensions")
    return {
        "blocks": _file_values(data, "topologies-per-dim", ndims, path),
        "sizes": _file_values(data, "units-count", ndims, path),
        "bandwidth": _file_values(data, "link-bandwidth", ndims, path),
        "latency": _file_values(data, "link-latency", ndims, path),
        "links": _file_values(data, "links-count", ndims, path),
    }


def _load_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise UserError(f"topology file '{path}' not found")
    try:
        if path.lower().endswith(".json"):
            return _load_json(path)
        return _load_yaml(path)
    except OSError as e:
        raise UserError(f"cannot read topology file '{path}': {e.strerror}") from None


def parse_topology(
    spec: str,
    bandwidth: str | Sequence[float] | float | None = None,
    latency: str | Sequence[float] | float | None = None,
    links: str | Sequence[float] | int | None = None,
) -> Topology:
    """Build a Topology from a notation string or an ASTRA-sim network file.

    `spec` may be:
      * blocks joined by '_': Ring(k), FullyConnected(k)/FC(k), Switch(k)/SW(k),
        Mesh(k)/Line(k) (case-insensitive), e.g. 'Ring(4)_FC(2)_Switch(8)';
        dimension 0 first;
      * a shorthand: '8x8_torus' (all Ring), '8x8_mesh' (all Mesh), '64_switch',
        '8x8_switch', '8_ring', '8x4_fc';
      * ASTRA-sim 2.0 shape notation: 'Ring_FC_Ring_Switch:2x8x8x4';
      * a path to an ASTRA-sim 2.x network .yml/.yaml or an older .json file.

    `bandwidth` (GB/s, 2^30 B/s), `latency` (ns per hop) and `links` (links-count)
    are comma-separated strings or lists with one value per dimension; a single
    value applies to every dimension.  They override values from a file.  When
    neither gives a value the defaults are 50 GB/s, 500 ns and 1 link per
    dimension.  Every problem raises UserError with a one-line message.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("empty topology; expected e.g. 'Ring(8)_Switch(4)', '8x8_torus' or a .yml/.json file")
    spec = spec.strip()
    graph = _parse_graph(spec, bandwidth, latency)
    if graph is not None:
        if links is not None:
            raise UserError(f"--links does not apply to {spec}: a graph topology lists its links")
        return graph
    if spec.lower().endswith((".yml", ".yaml", ".json")):
        source = f"topology file '{spec}'"
        values = _load_file(spec)
        blocks = [_file_block(b, source) for b in values["blocks"]]
        sizes = values["sizes"]
    else:
        if os.path.isfile(spec):
            raise UserError(f"topology file '{spec}' must end in .yml, .yaml or .json")
        source = f"topology '{spec}'"
        values = {"bandwidth": None, "latency": None, "links": None}
        blocks, sizes = _parse_notation(spec)

    ndims = len(blocks)

    def per_dim(override: Any, from_file: list | None, default: float, what: str, positive: bool) -> list:
        if override is not None:
            return parse_number_list(override, what, count=ndims, positive=positive)
        if from_file is not None:
            return from_file  # checked per value by Dimension
        return [default] * ndims

    bws = per_dim(bandwidth, values["bandwidth"], DEFAULT_BANDWIDTH_GBPS, "bandwidth", True)
    lats = per_dim(latency, values["latency"], DEFAULT_LATENCY_NS, "latency", False)
    lnks = per_dim(links, values["links"], DEFAULT_LINKS, "links", True)

    dims = []
    for k in range(ndims):
        try:
            dims.append(Dimension(blocks[k], sizes[k], bws[k], lats[k], lnks[k]))
        except UserError as e:
            raise UserError(f"{source}: dimension {k} ({blocks[k]}({sizes[k]})): {e}") from None
    return Topology(tuple(dims))


def _parse_graph(spec: str, bandwidth, latency) -> Topology | None:
    """A graph topology (graphs.py): MxN_bigraph, dgx1, N_dgx1 or an .edges file; None for anything else. One
    bandwidth and latency apply to every link (an edge list's own values win)."""
    big, dgx = graphs.BIGRAPH_RE.match(spec), graphs.DGX_RE.match(spec)
    if not (big or dgx or spec.lower().endswith(".edges")):
        return None
    bw = parse_number_list(bandwidth, "bandwidth", count=1, positive=True)[0] if bandwidth is not None \
        else DEFAULT_BANDWIDTH_GBPS
    lat = parse_number_list(latency, "latency", count=1, positive=False)[0] if latency is not None \
        else DEFAULT_LATENCY_NS
    if big:
        graph, name = graphs.bigraph(int(big.group(1)), int(big.group(2)), bw, lat), spec.lower()
    elif dgx:
        graph, name = graphs.dgx1(int(dgx.group(1) or 1), bw, lat), spec.lower()
    else:
        graph, name = graphs.read_edge_list(spec, bw, lat), os.path.basename(spec)
    return graph_topology(graph, name)


def graph_topology(graph: Graph, name: str) -> Topology:
    """One Graph dimension over the graph's NPUs: its bandwidth is the smallest per-NPU injection bandwidth and its
    latency the smallest link latency (what the report's ideal time and the dimension-level passes use)."""
    dim = Dimension("Graph", graph.npus, graph.injection_gbps(), float(graph.latency_ns.min()))
    return Topology((dim,), name, graph)
