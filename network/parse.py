"""Every notation of a network, parsed into the one Topology (network/topology.py).

`parse_topology` accepts the notations people use with ASTRA-sim (block strings, "8x8_torus" style shorthands,
"Ring_FC:4x2" shape notation, the 2.x network .yml and the older .json) and graph topologies (network/graphs.py:
MxN_bigraph, dgx1, N_dgx1, .edges files). Block names come from the block registry (network/blocks/).
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Sequence

from . import blocks as registry
from . import graphs
from .errors import UserError, show
from .graphs import Graph
from .topology import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_NS, DEFAULT_LINKS, Dimension, Topology
from .units import parse_number_list
from .user_files import read_json, read_yaml

_BLOCK_TOKEN_RE = re.compile(r"^([A-Za-z]+)\s*\((.*)\)$")
_SHORTHAND_RE = re.compile(r"^(\d+(?:x\d+)*)_([A-Za-z]+)$", re.IGNORECASE)
_SHAPE_NOTATION_RE = re.compile(r"^([A-Za-z_]+)\s*:\s*(\S+)$")
MAX_FILE_BYTES = 1 << 20   # an ASTRA-sim network file is a few lines


def _listed(word: Any) -> str | None:
    """The canonical name of a block the notation may name (Ring, FC, ...; not Graph), or None."""
    name = registry.canonical(word)
    return name if name is not None and registry.BLOCKS[name].listed else None


def _block_name(word: str, shown: str) -> str:
    canon = _listed(word)
    if canon is None:
        raise UserError(f"unknown topology block '{shown}'; {registry.expected()}")
    return canon


def _parse_blocks(spec: str) -> tuple[list[str], list[int]]:
    """'Ring(4)_FC(2)_Switch(8)' -> (['Ring', 'FullyConnected', 'Switch'], [4, 2, 8])."""
    blocks, sizes = [], []
    for token in (t.strip() for t in spec.split("_")):
        if not token:
            raise UserError(f"malformed topology '{spec}': empty block between '_' separators")
        m = _BLOCK_TOKEN_RE.match(token)
        if m is None:
            if token.isalpha() and _listed(token):
                raise UserError(
                    f"topology block '{token}' in '{spec}' has no size; write {token}(k), "
                    f"or give all sizes at once as in 'Ring_FC:4x2'")
            where = "" if token == spec else f" in '{spec}'"
            raise UserError(f"malformed topology block '{token}'{where}; {registry.expected()}")
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
        elif _listed(kind):
            block = _listed(kind)
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
    canon = _listed(value)
    if canon is None:
        raise UserError(f"{source}: unknown topology block {show(value)}; {registry.expected(False)}")
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


def _load_yaml(path: str) -> dict:
    """ASTRA-sim 2.x network .yml: topology, npus_count, bandwidth (GB/s), latency (ns)."""
    data = read_yaml(path, "an ASTRA-sim network .yml", "topology file ", MAX_FILE_BYTES)
    if not isinstance(data, dict):
        raise UserError(f"topology file '{path}' must be a YAML mapping with keys topology and npus_count")
    known = ("topology", "npus_count", "bandwidth", "latency", "links_count")
    # Reject unknown keys: a typo such as 'bandwith' would otherwise silently
    # fall back to the default bandwidth.
    for key in data:
        if key not in known:
            raise UserError(f"topology file '{path}': unknown key {show(key)}; expected {', '.join(known)}")
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


def network_yml(topology: Topology, comment: str = "") -> str:
    """The topology as an ASTRA-sim 2.x network .yml, which _load_yaml reads back to the same topology (bandwidth:
    GB/s per NPU per dimension, as astra-compile reads it)."""
    if topology.graph is not None:
        raise UserError("a graph topology has no ASTRA-sim network .yml form")
    def row(values):
        return "[" + ", ".join(values) + "]"
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    lines += [f"topology: {row(d.block for d in topology.dims)}",
              f"npus_count: {row(str(d.size) for d in topology.dims)}",
              f"bandwidth: {row(repr(float(d.bandwidth_gbps)) for d in topology.dims)}  # GB/s",
              f"latency: {row(repr(float(d.latency_ns)) for d in topology.dims)}  # ns"]
    if any(d.links != 1 for d in topology.dims):
        lines.append(f"links_count: {row(str(d.links) for d in topology.dims)}")
    return "\n".join(lines) + "\n"


def _load_json(path: str) -> dict:
    """Older ASTRA-sim network .json ("topologies-per-dim", "units-count", ...).

    Those files carry many fields this compiler does not model (hbm-*, nic-latency,
    ...), so unknown keys are ignored here rather than rejected.
    """
    data = read_json(path, "an ASTRA-sim network .json", "topology file ", MAX_FILE_BYTES)
    if not isinstance(data, dict):
        raise UserError(f"topology file '{path}' must be a JSON object with topologies-per-dim and units-count")
    for key in ("topologies-per-dim", "units-count"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise UserError(f"topology file '{path}': '{key}' must be a non-empty list")
    ndims = len(data["topologies-per-dim"])
    if "dimensions-count" in data:
        declared = data["dimensions-count"]
        if isinstance(declared, bool) or not isinstance(declared, int) or declared != ndims:
            raise UserError(f"topology file '{path}': dimensions-count is {show(declared)} but "
                            f"topologies-per-dim lists {ndims} dimensions")
    return {
        "blocks": _file_values(data, "topologies-per-dim", ndims, path),
        "sizes": _file_values(data, "units-count", ndims, path),
        "bandwidth": _file_values(data, "link-bandwidth", ndims, path),
        "latency": _file_values(data, "link-latency", ndims, path),
        "links": _file_values(data, "links-count", ndims, path),
    }


def _load_file(path: str) -> dict:
    if not os.path.exists(path):
        raise UserError(f"topology file '{path}' not found")
    if path.lower().endswith(".json"):
        return _load_json(path)
    return _load_yaml(path)


def parse_topology(
    spec: str,
    bandwidth: str | Sequence[float] | float | None = None,
    latency: str | Sequence[float] | float | None = None,
    links: str | Sequence[float] | int | None = None,
    endpoint_delay: str | float | None = None,
) -> Topology:
    """`_parse` below, with `endpoint_delay` (ns, one value for the whole network: Topology.endpoint_delay_ns)."""
    return with_endpoint_delay(_parse(spec, bandwidth, latency, links), endpoint_delay)


def with_endpoint_delay(topology: Topology, endpoint_delay: str | float | None) -> Topology:
    """`topology` with its endpoint delay set (--endpoint-delay: a number of ns); unchanged for None."""
    if endpoint_delay is None:
        return topology
    delay = parse_number_list(endpoint_delay, "endpoint delay", count=1, positive=False)[0]
    return dataclasses.replace(topology, endpoint_delay_ns=delay)


def _parse(
    spec: str,
    bandwidth: str | Sequence[float] | float | None,
    latency: str | Sequence[float] | float | None,
    links: str | Sequence[float] | int | None,
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
            raise UserError(f"{source}: dimension {k} ({blocks[k]}({show(sizes[k])})): {e}") from None
    try:
        return Topology(tuple(dims))
    except UserError as e:   # the dimensions together: more NPUs than 32 bits number
        raise UserError(f"{source}: {e}") from None


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
