"""Checks of a table directory read back from disk, before the runtime trusts a byte of it.

A table directory may have been edited, truncated or written by something else. Everything the runtime reads is
checked here first: meta.json's keys, types and ranges (finite, positive, within the integer width of its column),
every NPU's table present, every row in range (known op, peer an NPU, positive bytes inside the buffer, finite
positive bandwidth), and the symmetry meta.json claims (only then may NPU 0 stand for the others). Each failure is
one TableError line naming the file, the field and the value.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..network import blocks
from .tables import COLUMN_NAMES, DTYPES, FORMAT, OP_NAMES, VERSION, Table, TableError

PHASE_KINDS = ("reduce_scatter", "all_gather", "all_to_all")
# columns every NPU of a symmetric schedule shares, as a multiset of rows (peers, offsets and the row order, hence
# `dep`, are relabelled per NPU)
SYMMETRIC_COLUMNS = ("coll", "flow", "stage", "step", "op", "dim", "lane", "hops", "gbps", "bytes")


def _int(value, where: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TableError(f"{where} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise TableError(f"{where} must be {bounds}, got {value}")
    return value


def _real(value, where: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TableError(f"{where} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise TableError(f"{where} must be {'positive' if positive else '>= 0'}, got {value!r}")
    return float(value)


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


def check_meta(meta, path: str) -> dict:
    """meta.json of the table directory `path`, checked; returns it."""
    where = os.path.join(path, "meta.json")
    meta = _dict(meta, where)
    if meta.get("format") != FORMAT:
        raise TableError(f"{where} is not an {FORMAT} file (format {meta.get('format')!r})")
    if meta.get("version") != VERSION:
        raise TableError(f"{where}: tables of version {meta.get('version')!r}; this astra-compile reads version "
                         f"{VERSION} (compile them again)")
    _dict(meta, where, ("npus", "topology", "latency_ns", "collectives"))
    npus = _int(meta["npus"], f"{where}: npus", 1)
    if meta.get("table_format", "csv") not in ("csv", "json"):
        raise TableError(f"{where}: table_format must be csv or json, got {meta['table_format']!r}")
    if not isinstance(meta.get("symmetric", False), bool):
        raise TableError(f"{where}: symmetric must be true or false, got {meta['symmetric']!r}")
    topo = _dict(meta["topology"], f"{where}: topology", ("dims",))
    dims = _list(topo["dims"], f"{where}: topology.dims")
    if not dims:
        raise TableError(f"{where}: topology.dims is empty")
    sizes = []
    for k, d in enumerate(dims):
        w = f"{where}: topology.dims[{k}]"
        _dict(d, w, ("block", "size", "bandwidth_gbps", "latency_ns"))
        if not isinstance(d["block"], str) or d["block"] not in blocks.BLOCKS:
            raise TableError(f"{w}.block must be one of {', '.join(blocks.BLOCKS)}, got {d['block']!r}")
        sizes.append(_int(d["size"], f"{w}.size", 2))
        _real(d["bandwidth_gbps"], f"{w}.bandwidth_gbps", True)
        _real(d["latency_ns"], f"{w}.latency_ns", False)
        _int(d.get("links", 1), f"{w}.links", 1)
    if math.prod(sizes) != npus:
        raise TableError(f"{where}: npus is {npus} but the topology's dimensions hold {math.prod(sizes)}")
    if topo.get("graph") is not None:
        _check_graph(topo["graph"], f"{where}: topology.graph", npus)
    for k, lat in enumerate(_list(meta["latency_ns"], f"{where}: latency_ns", len(dims))):
        _real(lat, f"{where}: latency_ns[{k}]", False)
    colls = _list(meta["collectives"], f"{where}: collectives")
    if not colls:
        raise TableError(f"{where}: collectives is empty")
    for ci, c in enumerate(colls):
        _check_collective(c, ci, f"{where}: collectives[{ci}]", len(dims))
    shards = meta.get("shards")
    if shards is not None:
        _dict(shards, f"{where}: shards")
        for ci, c in enumerate(colls):
            if c["kind"] != "all_to_all" and str(ci) in shards:
                a = np.asarray(shards[str(ci)], dtype=object)
                if a.shape != (npus, c["chunks"], 2) or not all(isinstance(v, int) and v >= 0 for v in a.ravel()):
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


def _check_collective(c, ci: int, where: str, ndims: int) -> None:
    _dict(c, where, ("name", "kind", "bytes", "chunks", "group_dims", "deps", "stages", "chunk_dims"))
    if c["kind"] not in PHASE_KINDS:
        raise TableError(f"{where}.kind must be one of {', '.join(PHASE_KINDS)}, got {c['kind']!r}")
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
        _dict(s, f"{where}.stages[{k}]", ("kind", "dim", "algorithm"))
        stage_dims.append(_int(s["dim"], f"{where}.stages[{k}].dim", -1, ndims - 1))
    rows = _list(c["chunk_dims"], f"{where}.chunk_dims", chunks)
    for f, row in enumerate(rows):
        if sorted(_list(row, f"{where}.chunk_dims[{f}]", len(stages))) != sorted(stage_dims):
            raise TableError(f"{where}.chunk_dims[{f}] must visit the stages' dimensions {stage_dims}, got {row!r}")


def check_files(path: str, meta: dict) -> None:
    """Every NPU's table file is present (a symmetric run reads NPU 0's only, so a gap would pass unseen)."""
    fmt = meta.get("table_format", "csv")
    present = set(os.listdir(path))
    for npu in range(meta["npus"]):
        if f"npu_{npu}.{fmt}" not in present:
            raise TableError(f"{path}: npu_{npu}.{fmt} is missing ({meta['npus']} NPUs in meta.json)")


def table_from_columns(cols, source: str) -> Table:
    """A Table from raw columns (floats from a CSV, lists from JSON): each must hold whole numbers within its
    column's integer width (a cast would wrap them silently) and finite bandwidths."""
    if not isinstance(cols, dict):
        raise TableError(f"{source}: a table is an object of columns, got {type(cols).__name__}")
    out = {}
    for name in COLUMN_NAMES:
        if name not in cols:
            raise TableError(f"{source}: lacks column '{name}'")
        try:
            v = np.asarray(cols[name], dtype=np.float64)
        except (TypeError, ValueError):
            raise TableError(f"{source}: column '{name}' holds a value that is not a number") from None
        if v.ndim != 1:
            raise TableError(f"{source}: column '{name}' must be a flat list")
        if not np.isfinite(v).all():
            raise TableError(f"{source}: column '{name}' holds {v[~np.isfinite(v)][0]!r}")
        dtype = DTYPES[name]
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            bad = (v != np.floor(v)) | (v < info.min) | (v > info.max)
            if bad.any():
                raise TableError(f"{source}: column '{name}' row {int(np.flatnonzero(bad)[0])} holds "
                                 f"{v[bad][0]!r}, not an integer of its width")
        out[name] = v
    if len({len(v) for v in out.values()}) > 1:
        raise TableError(f"{source}: columns differ in length")
    return Table(out)


def check_rows(t: Table, meta: dict, npu: int, source: str) -> None:
    """Every row of NPU `npu`'s table in range; the first bad row is named."""
    colls = meta["collectives"]
    ndims = len(meta["topology"]["dims"])
    ncoll = len(colls)
    coll = t["coll"].astype(np.int64)
    safe = np.clip(coll, 0, ncoll - 1)
    chunks = np.array([c["chunks"] for c in colls], np.int64)[safe]
    stages = np.array([len(c["stages"]) for c in colls], np.int64)[safe]
    size = np.array([c["bytes"] for c in colls], np.int64)[safe]
    checks = (
        ("npu", t["npu"] != npu, f"is not {npu}"),
        ("coll", (coll < 0) | (coll >= ncoll), f"is not a collective of meta.json (0..{ncoll - 1})"),
        ("flow", (t["flow"] < 0) | (t["flow"] >= chunks), "is not a chunk of its collective"),
        ("stage", (t["stage"] < 0) | (t["stage"] >= stages), "is not a stage of its collective"),
        ("step", t["step"] < 0, "is negative"),
        ("op", ~np.isin(t["op"], list(OP_NAMES)), f"is not an op code ({OP_NAMES})"),
        ("peer", (t["peer"] < 0) | (t["peer"] >= meta["npus"]) | (t["peer"] == npu),
         "is not another NPU"),
        ("dim", (t["dim"] < -1) | (t["dim"] >= ndims), f"is not a dimension (-1..{ndims - 1})"),
        ("lane", t["lane"] < 0, "is negative"),
        ("hops", t["hops"] < 1, "is below 1"),
        ("gbps", ~(t["gbps"] > 0), "is not a positive bandwidth"),
        ("bytes", t["bytes"] <= 0, "is not positive"),
        ("offset", (t["offset"] < 0) | (t["offset"] + t["bytes"] > size), "lies outside its collective's buffer"),
        ("dep", (t["dep"] < -1) | (t["dep"] >= len(t)), "is not a row of this table"),
    )
    for name, bad, what in checks:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TableError(f"{source}: row {row}: {name} {t[name][row]!r} {what}")


def symmetric_claim_holds(npu0: Table, other: Table) -> bool:
    """Does `other` run NPU 0's rows (same steps, sizes, dimensions), up to peers and offsets?"""
    if len(npu0) != len(other):
        return False
    a, b = (np.stack([t[c].astype(np.float64) for c in SYMMETRIC_COLUMNS]) for t in (npu0, other))
    return np.array_equal(a[:, np.lexsort(a)], b[:, np.lexsort(b)])
