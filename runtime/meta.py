"""meta.json, the description of a table directory: one schema, one reader and one writer (this module).

`Meta` is what the runtime knows about a schedule besides its tables: the NPU count, the topology (in the network
layer's one serialised form, Topology.to_dict), the latency per dimension, whether NPU 0's table stands for every
NPU's, and per collective its kind, buffer, chunks, group and chain of phases. The lowering builds it; write_dir
writes it with `to_json`; `Meta.read` reads it back and checks every key, type and range first (a meta.json of
another format version is refused by name). Its JSON Schema ships beside this file (meta.schema.json) and the tests
validate every written meta.json against it.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace

import numpy as np

from ..network import blocks
from ..network.errors import show
from ..network.kinds import PHASE_KINDS, ROOTED, SHARDED
from ..network.topology import MAX_LINKS, MAX_NPUS
from ..network.units import MAX_LATENCY_NS, link_range_error
from . import run_record
from .errors import TableError, read_table_json

FORMAT = "astra-compile-tables"
VERSION = 1
SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "meta.schema.json")
KEYS = {"format", "version", "npus", "topology", "latency_ns", "symmetric", "collectives", "shards", "table_format",
        "representative", "run"}


@dataclass(frozen=True)
class StageMeta:
    kind: str        # reduce_scatter, all_gather, all_to_all, broadcast or reduce
    dim: int         # topology dimension, -1 for a phase over the whole network
    algorithm: str   # the phase's algorithm (algorithms/)
    bytes: int       # the phase's full buffer per NPU, summed over chunks
    # a step ends once its own messages are sent, not once they have arrived (ASTRA-sim's doubleBinaryTree: a
    # member moves on as soon as it has sent); on the analytical backend they keep nothing from its later steps
    ends_on_send: bool = False

    def to_json(self) -> dict:
        out = {"kind": self.kind, "dim": self.dim, "algorithm": self.algorithm, "bytes": self.bytes}
        if self.ends_on_send:   # written only where it is set: every other meta.json reads as before
            out["ends_on_send"] = True
        return out


@dataclass(frozen=True)
class CollectiveMeta:
    name: str
    kind: str                    # reduce_scatter, all_gather, all_to_all, broadcast or reduce
    buffer: str                  # collectives sharing a buffer run one after the other on it (an all-reduce's halves)
    buffer_kind: str             # what the buffer's collectives implement together (e.g. all_reduce)
    bytes: int
    chunks: int
    group_dims: tuple[int, ...]
    deps: tuple[int, ...]        # collectives (earlier in the list) this one waits for
    stages: tuple[StageMeta, ...]
    chunk_dims: tuple[tuple[int, ...], ...]  # per chunk, the dimension of each phase in the order it runs them
    root: int | None = None      # a broadcast's or reduce's root NPU (its coordinates on group_dims root every group)

    def to_json(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "buffer": self.buffer, "buffer_kind": self.buffer_kind,
               "bytes": self.bytes, "chunks": self.chunks, "group_dims": list(self.group_dims),
               "deps": list(self.deps),
               "stages": [s.to_json() for s in self.stages],
               "chunk_dims": [list(row) for row in self.chunk_dims]}
        if self.root is not None:
            out["root"] = self.root
        return out

    @staticmethod
    def from_json(c: dict) -> "CollectiveMeta":
        return CollectiveMeta(c["name"], c["kind"], c["buffer"], c["buffer_kind"], c["bytes"], c["chunks"],
                              tuple(c["group_dims"]), tuple(c["deps"]),
                              tuple(StageMeta(s["kind"], s["dim"], s["algorithm"], s["bytes"],
                                              s.get("ends_on_send", False)) for s in c["stages"]),
                              tuple(tuple(row) for row in c["chunk_dims"]), c.get("root"))


@dataclass(frozen=True)
class Meta:
    npus: int
    topology: dict                       # network.topology.Topology.to_dict()
    latency_ns: tuple[float, ...]        # per dimension
    symmetric: bool                      # every NPU runs a relabelled copy of NPU 0's table
    collectives: tuple[CollectiveMeta, ...]
    shards: dict | None = field(default=None, compare=False)  # collective index -> (npus, chunks, 2) offset, length
    table_format: str | None = None      # csv or json, once written
    # only NPU 0's table is stored, standing for every NPU (a symmetric schedule in a step directory: 4096 NPUs in
    # one file instead of 4096); such a directory runs in symmetric execution only
    representative: bool = False
    # how the tables executed when they were written, where not the defaults (runtime/run_record.py, TABLES): a
    # re-run takes them unless its command line names others
    run: dict = field(default_factory=dict, compare=False)
    # symmetric, and the relabelling maps the network's links onto links, so NPU 0's links stand for every link of
    # their class (the congestion runtime's symmetric execution). The lowering sets it from the algorithms' answers
    # (compiler/lowering/lower.py: Schedule.symmetry); meta.json does not hold it (the bytes of every written
    # directory stay as they were), so read back it is derived (from_json)
    symmetric_links: bool = False

    @property
    def ndims(self) -> int:
        return len(self.latency_ns)

    @property
    def shape(self) -> list[int]:
        return [d["size"] for d in self.topology["dims"]]

    @property
    def endpoint_delay_ns(self) -> float:
        """What every message spends at its endpoints (Topology.endpoint_delay_ns; absent from the dict: 0)."""
        return float(self.topology.get("endpoint_delay_ns", 0.0))

    def buffer_dims(self, buffer: str) -> list[int]:
        """The dimensions a buffer's collectives cover together: a collective's own, or for an all_reduce run per
        dimension (a reduce_scatter + all_gather pair on each) every pair's."""
        return sorted({d for c in self.collectives if c.buffer == buffer for d in c.group_dims})

    def with_(self, **changes) -> "Meta":
        return replace(self, **changes)

    def to_json(self) -> dict:
        """The meta.json object (key order as written since version 1)."""
        out = {"format": FORMAT, "version": VERSION, "npus": self.npus, "topology": self.topology,
               "latency_ns": list(self.latency_ns), "symmetric": self.symmetric,
               "collectives": [c.to_json() for c in self.collectives]}
        if self.shards is not None:
            out["shards"] = {str(ci): np.asarray(a).tolist() for ci, a in self.shards.items()}
        if self.table_format is not None:
            out["table_format"] = self.table_format
        if self.representative:
            out["representative"] = True
        if self.run:   # written only where a run option was not the default: every other meta.json reads as before
            out["run"] = dict(self.run)
        return out

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)

    @staticmethod
    def from_json(data, where: str = "meta.json") -> "Meta":
        """A Meta from meta.json's object, every key checked first (TableError naming `where`, the key and the
        value)."""
        d = check(data, where)
        shards = None
        if d.get("shards") is not None:
            shards = {int(k): np.asarray(v, np.int64) for k, v in d["shards"].items()}
        collectives = tuple(CollectiveMeta.from_json(c) for c in d["collectives"])
        symmetric = d.get("symmetric", False)
        return Meta(d["npus"], d["topology"], tuple(float(x) for x in d["latency_ns"]), symmetric, collectives, shards,
                    d.get("table_format", "csv"), d.get("representative", False),
                    run_record.check(d["run"], f"{where}: run", run_record.TABLES, len(d["latency_ns"]))
                    if "run" in d else {}, symmetric_links=symmetric and _links_symmetric_read_back(d, collectives))

    def without_symmetry(self) -> "Meta":
        """This meta with NPU 0 standing for no other (a claim the tables refute)."""
        return replace(self, symmetric=False, symmetric_links=False)

    @staticmethod
    def read(folder: str) -> "Meta":
        path = os.path.join(folder, "meta.json")
        return Meta.from_json(read_json(folder), path)


def _links_symmetric_read_back(d: dict, collectives) -> bool:
    """Symmetric links of a schedule read back whose `symmetric` holds: the tables that claim it are checked against
    every NPU's (runtime/tables.py, lanes included, which refutes halving-doubling's XOR partners on a ring), and
    the lowering claims no more than NPU 0's steps for a phase over the whole network (translated trees) and
    nothing on a graph (whose links form no classes)."""
    return d["topology"].get("graph") is None and not any(st.dim == -1 for c in collectives for st in c.stages)


def read_json(folder: str):
    """The JSON value in folder/meta.json (a table or step directory), or TableError naming why it cannot be read."""
    return read_table_json(os.path.join(folder, "meta.json"), "a table directory's meta.json")


def _int(value, where: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TableError(f"{where} must be an integer, got {show(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise TableError(f"{where} must be {bounds}, got {value}")
    return value


def _real(value, where: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TableError(f"{where} must be a finite number, got {show(value)}")
    if value < 0 or (positive and value == 0):
        raise TableError(f"{where} must be {'positive' if positive else '>= 0'}, got {show(value)}")
    return float(value)


def _str(value, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TableError(f"{where} must be a non-empty string, got {show(value)}")
    return value


def _list(value, where: str, length: int | None = None) -> list:
    if not isinstance(value, list):
        raise TableError(f"{where} must be a list, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise TableError(f"{where} must have {length} entries, got {len(value)}")
    return value


def _dict(value, where: str, keys: tuple = ()) -> dict:
    if not isinstance(value, dict):
        raise TableError(f"{where} must be an object, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise TableError(f"{where} lacks key '{missing[0]}'")
    return value


def check(meta, where: str) -> dict:
    """The JSON form of meta.json (`where` names the file in messages), checked key by key; returns it."""
    meta = _dict(meta, where)
    if meta.get("format") != FORMAT:
        raise TableError(f"{where} is not an {FORMAT} file (format {show(meta.get('format'))})")
    if meta.get("version") != VERSION:
        raise TableError(f"{where}: tables of version {show(meta.get('version'))}; this astra-compile reads version "
                         f"{VERSION} (compile them again)")
    _dict(meta, where, ("npus", "topology", "latency_ns", "collectives"))
    unknown = sorted(set(meta) - KEYS)
    if unknown:
        raise TableError(f"{where}: unknown key '{unknown[0]}'")
    npus = _int(meta["npus"], f"{where}: npus", 1, MAX_NPUS)
    if meta.get("table_format", "csv") not in ("csv", "json"):
        raise TableError(f"{where}: table_format must be csv or json, got {show(meta['table_format'])}")
    if not isinstance(meta.get("symmetric", False), bool):
        raise TableError(f"{where}: symmetric must be true or false, got {show(meta['symmetric'])}")
    rep = meta.get("representative", False)
    if not isinstance(rep, bool) or (rep and meta.get("symmetric") is not True):
        raise TableError(f"{where}: representative must be false, or true with symmetric true (NPU 0's table stands "
                         f"for the others only in a symmetric schedule), got {show(meta['representative'])}")
    topo = _dict(meta["topology"], f"{where}: topology", ("dims",))
    dims = _list(topo["dims"], f"{where}: topology.dims")
    if not dims:
        raise TableError(f"{where}: topology.dims is empty")
    sizes = []
    for k, d in enumerate(dims):
        w = f"{where}: topology.dims[{k}]"
        _dict(d, w, ("block", "size", "bandwidth_gbps", "latency_ns"))
        if not isinstance(d["block"], str) or d["block"] not in blocks.BLOCKS:
            raise TableError(f"{w}.block must be one of {', '.join(blocks.BLOCKS)}, got {show(d['block'])}")
        sizes.append(_int(d["size"], f"{w}.size", 2, MAX_NPUS))
        problem = link_range_error(_real(d["bandwidth_gbps"], f"{w}.bandwidth_gbps", True),
                                   _real(d["latency_ns"], f"{w}.latency_ns", False))
        if problem:
            raise TableError(f"{w}: {problem}")
        _int(d.get("links", 1), f"{w}.links", 1, MAX_LINKS)
    if math.prod(sizes) != npus:
        raise TableError(f"{where}: npus is {npus} but the topology's dimensions hold {math.prod(sizes)}")
    if topo.get("graph") is not None:
        _check_graph(topo["graph"], f"{where}: topology.graph", npus)
    if _real(topo.get("endpoint_delay_ns", 0.0), f"{where}: topology.endpoint_delay_ns", False) > MAX_LATENCY_NS:
        raise TableError(f"{where}: topology.endpoint_delay_ns must be at most {MAX_LATENCY_NS:g} ns, got "
                         f"{show(topo['endpoint_delay_ns'])}")
    for k, lat in enumerate(_list(meta["latency_ns"], f"{where}: latency_ns", len(dims))):
        if _real(lat, f"{where}: latency_ns[{k}]", False) > MAX_LATENCY_NS:
            raise TableError(f"{where}: latency_ns[{k}] must be at most {MAX_LATENCY_NS:g} ns, got {show(lat)}")
    colls = _list(meta["collectives"], f"{where}: collectives")
    if not colls:
        raise TableError(f"{where}: collectives is empty")
    for ci, c in enumerate(colls):
        _check_collective(c, ci, f"{where}: collectives[{ci}]", len(dims), npus)
    shards = meta.get("shards")
    if shards is not None:
        _dict(shards, f"{where}: shards")
        for key in shards:
            if key not in {str(ci) for ci, c in enumerate(colls) if c["kind"] in SHARDED}:
                raise TableError(f"{where}: shards has key {show(key)}, which names no reduce-scatter or all-gather")
        for ci, c in enumerate(colls):
            if c["kind"] in SHARDED and str(ci) in shards:
                a = np.asarray(shards[str(ci)], dtype=object)
                if a.shape != (npus, c["chunks"], 2) or not all(
                        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= c["bytes"] for v in a.ravel()):
                    raise TableError(f"{where}: shards[{ci}] must be {npus} x {c['chunks']} pairs of byte offsets "
                                     f"and lengths")
    return meta


def _check_graph(g, where: str, npus: int) -> None:
    _dict(g, where, ("names", "npus", "src", "dst", "gbps", "latency_ns"))
    names = _list(g["names"], f"{where}.names")
    if _int(g["npus"], f"{where}.npus", 2) != npus or len(names) < npus:
        raise TableError(f"{where}: npus {g['npus']} disagrees with meta npus {npus}")
    n = len(_list(g["src"], f"{where}.src"))
    for key in ("dst", "gbps", "latency_ns"):
        _list(g[key], f"{where}.{key}", n)
    for i in range(n):
        _int(g["src"][i], f"{where}.src[{i}]", 0, len(names) - 1)
        _int(g["dst"][i], f"{where}.dst[{i}]", 0, len(names) - 1)
        _real(g["gbps"][i], f"{where}.gbps[{i}]", True)
        _real(g["latency_ns"][i], f"{where}.latency_ns[{i}]", False)


def _check_collective(c, ci: int, where: str, ndims: int, npus: int) -> None:
    _dict(c, where, ("name", "kind", "buffer", "buffer_kind", "bytes", "chunks", "group_dims", "deps", "stages",
                     "chunk_dims"))
    if c["kind"] not in PHASE_KINDS:
        raise TableError(f"{where}.kind must be one of {', '.join(PHASE_KINDS)}, got {show(c['kind'])}")
    if c["kind"] in ROOTED:
        _dict(c, where, ("root",))
        _int(c["root"], f"{where}.root", 0, npus - 1)
    elif "root" in c:
        raise TableError(f"{where}: a {c['kind']} has no root")
    for key in ("name", "buffer", "buffer_kind"):
        _str(c[key], f"{where}.{key}")
    _int(c["bytes"], f"{where}.bytes", 1, 2 ** 62)
    chunks = _int(c["chunks"], f"{where}.chunks", 1, 2 ** 31 - 1)
    for k, d in enumerate(_list(c["group_dims"], f"{where}.group_dims")):
        _int(d, f"{where}.group_dims[{k}]", 0, ndims - 1)
    for k, d in enumerate(_list(c["deps"], f"{where}.deps")):
        _int(d, f"{where}.deps[{k}] (a collective before this one)", 0, ci - 1)
    stages = _list(c["stages"], f"{where}.stages")
    if not stages:
        raise TableError(f"{where}.stages is empty")
    stage_dims = []
    for k, s in enumerate(stages):
        _dict(s, f"{where}.stages[{k}]", ("kind", "dim", "algorithm", "bytes"))
        _str(s["kind"], f"{where}.stages[{k}].kind")
        _str(s["algorithm"], f"{where}.stages[{k}].algorithm")
        _int(s["bytes"], f"{where}.stages[{k}].bytes", 1, 2 ** 62)
        unknown = sorted(set(s) - {"kind", "dim", "algorithm", "bytes", "ends_on_send"})
        if unknown:
            raise TableError(f"{where}.stages[{k}]: unknown key '{unknown[0]}'")
        if not isinstance(s.get("ends_on_send", False), bool):
            raise TableError(f"{where}.stages[{k}].ends_on_send must be true or false, got {s['ends_on_send']!r}")
        stage_dims.append(_int(s["dim"], f"{where}.stages[{k}].dim", -1, ndims - 1))
    rows = _list(c["chunk_dims"], f"{where}.chunk_dims", chunks)
    for f, row in enumerate(rows):
        dims_visited = [_int(d, f"{where}.chunk_dims[{f}][{k}]", -1, ndims - 1)
                        for k, d in enumerate(_list(row, f"{where}.chunk_dims[{f}]", len(stages)))]
        if sorted(dims_visited) != sorted(stage_dims):
            raise TableError(f"{where}.chunk_dims[{f}] must visit the stages' dimensions {stage_dims}, got {show(row)}")


