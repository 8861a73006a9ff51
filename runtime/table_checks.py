"""Checks of a table directory's tables read back from disk, before the runtime trusts a byte of them.

A table directory may have been edited, truncated or written by something else. meta.json is checked where it is
read (runtime/meta.py); here: every NPU's table present, every row in range (known op, peer an NPU, positive bytes
inside the buffer, finite positive bandwidth, whole numbers within each column's width), and the symmetry meta.json
claims (only then may NPU 0 stand for the others). Each failure is one TableError line naming the file, the row and
the value.
"""
from __future__ import annotations

import os

import numpy as np

from ..network import blocks
from ..network.errors import show
from ..network.topology import MAX_LINKS, MAX_NPUS
from ..network.units import MAX_GBPS, MIN_GBPS
from .errors import TableError
from .table_rows import COLUMN_NAMES, DTYPES, OP_NAMES, SWITCH

# columns every NPU of a symmetric schedule shares, as a multiset of rows (peers, offsets and the row order, hence
# `dep`, are relabelled per NPU)
# A row's bandwidth is one link's: a dimension's (within network.units' range) times its links, shared by at most
# every other NPU. Outside this range a transfer's time leaves float range (a 1e-310 GB/s row takes forever).
MIN_ROW_GBPS = MIN_GBPS / MAX_NPUS
MAX_ROW_GBPS = MAX_GBPS * MAX_LINKS
SYMMETRIC_COLUMNS = ("coll", "flow", "stage", "step", "op", "dim", "lane", "hops", "gbps", "bytes")


def check_files(path: str, meta) -> None:
    """Every NPU's table file is present (a symmetric run reads NPU 0's only, so a gap would pass unseen); NPU 0's
    alone when it stands for all (meta.representative)."""
    fmt = meta.table_format or "csv"
    present = set(os.listdir(path))
    for npu in range(1 if meta.representative else meta.npus):
        if f"npu_{npu}.{fmt}" not in present:
            raise TableError(f"{path}: npu_{npu}.{fmt} is missing ({meta.npus} NPUs in meta.json)")


def checked_columns(cols, source: str) -> dict:
    """A Table's columns from raw ones (floats from a CSV, lists from JSON): each must hold whole numbers within
    its column's integer width (a cast would wrap them silently) and finite bandwidths."""
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
                                 f"{show(v[bad][0])}, not an integer of its width")
        out[name] = v
    if len({len(v) for v in out.values()}) > 1:
        raise TableError(f"{source}: columns differ in length")
    return out


def check_rows(t, meta, npu: int, source: str) -> None:
    """Every row of NPU `npu`'s table in range; the first bad row is named."""
    colls = meta.collectives
    ndims = meta.ndims
    ncoll = len(colls)
    coll = t["coll"].astype(np.int64)
    safe = np.clip(coll, 0, ncoll - 1)
    chunks = np.array([c.chunks for c in colls], np.int64)[safe]
    stages = np.array([len(c.stages) for c in colls], np.int64)[safe]
    size = np.array([c.bytes for c in colls], np.int64)[safe]
    switch_dims = np.array([blocks.block(d["block"]).has_switch for d in meta.topology["dims"]] + [False])
    to_switch = (t["peer"] == SWITCH) & switch_dims[np.clip(t["dim"], -1, ndims - 1)]
    checks = (
        ("npu", t["npu"] != npu, f"is not {npu}"),
        ("coll", (coll < 0) | (coll >= ncoll), f"is not a collective of meta.json (0..{ncoll - 1})"),
        ("flow", (t["flow"] < 0) | (t["flow"] >= chunks), "is not a chunk of its collective"),
        ("stage", (t["stage"] < 0) | (t["stage"] >= stages), "is not a stage of its collective"),
        ("step", t["step"] < 0, "is negative"),
        ("op", ~np.isin(t["op"], list(OP_NAMES)), f"is not an op code ({OP_NAMES})"),
        ("peer", ((t["peer"] < 0) | (t["peer"] >= meta.npus) | (t["peer"] == npu)) & ~to_switch,
         "is not another NPU (nor -1, the switch of a Switch dimension)"),
        ("dim", (t["dim"] < -1) | (t["dim"] >= ndims), f"is not a dimension (-1..{ndims - 1})"),
        ("lane", t["lane"] < 0, "is negative"),
        ("hops", t["hops"] < 1, "is below 1"),
        ("gbps", ~((t["gbps"] >= MIN_ROW_GBPS) & (t["gbps"] <= MAX_ROW_GBPS)),
         f"is not a link bandwidth ({MIN_ROW_GBPS:g}..{MAX_ROW_GBPS:g} GB/s)"),
        ("bytes", t["bytes"] <= 0, "is not positive"),
        ("offset", (t["offset"] < 0) | (t["offset"] + t["bytes"] > size), "lies outside its collective's buffer"),
        ("dep", (t["dep"] < -1) | (t["dep"] >= len(t)), "is not a row of this table"),
    )
    for name, bad, what in checks:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TableError(f"{source}: row {row}: {name} {show(t[name][row])} {what}")


def symmetric_claim_holds(npu0, other) -> bool:
    """Does `other` run NPU 0's rows (same steps, sizes, dimensions), up to peers and offsets?"""
    if len(npu0) != len(other):
        return False
    a, b = (np.stack([t[c].astype(np.float64) for c in SYMMETRIC_COLUMNS]) for t in (npu0, other))
    return np.array_equal(a[:, np.lexsort(a)], b[:, np.lexsort(b)])
