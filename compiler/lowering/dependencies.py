"""What each send waits on: the `dep` column of the tables (the latest earlier receive that wrote its bytes)."""
from __future__ import annotations

import numpy as np

from ...runtime.tables import SEND, Table


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated index ranges [starts[i], starts[i] + lens[i]) as one array."""
    before = np.repeat(np.cumsum(lens) - lens, lens)
    return np.arange(int(lens.sum()), dtype=np.int64) - before + np.repeat(starts, lens)


def dependencies(table: Table, buffers: list[str]) -> np.ndarray:
    """For every send, the latest earlier receive (same buffer and chunk) that wrote any byte it reads.

    Sweep over the NPU's steps in time order (collective, stage, step) keeping, for every piece of every chunk's
    buffer, the latest receive that wrote it; byte ranges are compressed to the pieces between row boundaries."""
    n = len(table)
    dep = np.full(n, -1, dtype=np.int64)
    if not n:
        return dep
    buf_id = {b: i for i, b in enumerate(dict.fromkeys(buffers))}
    buf = np.array([buf_id[b] for b in buffers], dtype=np.int64)[table["coll"]]
    _, group = np.unique(buf * (1 << 32) + table["flow"], return_inverse=True)
    span = int((table["offset"] + table["bytes"]).max()) + 1
    lo = group.ravel().astype(np.int64) * span + table["offset"]
    hi = lo + table["bytes"]
    bounds = np.unique(np.concatenate([lo, hi]))
    seg_lo, seg_hi = np.searchsorted(bounds, lo), np.searchsorted(bounds, hi)
    when = (table["coll"].astype(np.int64) << 40) + (table["stage"].astype(np.int64) << 20) + table["step"]
    order = np.argsort(when, kind="stable")
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    last = np.full(len(bounds), -1, dtype=np.int64)  # rank of the latest receive that wrote each piece
    cuts = np.flatnonzero(np.diff(when[order])) + 1
    for rows in np.split(order, cuts):
        is_send = table["op"][rows] == SEND
        sends, recvs = rows[is_send], rows[~is_send]
        if len(sends):
            lens = seg_hi[sends] - seg_lo[sends]
            latest = np.maximum.reduceat(last[_ranges(seg_lo[sends], lens)], np.cumsum(lens) - lens)
            has = latest >= 0
            dep[sends[has]] = order[latest[has]]
        if len(recvs):
            lens = seg_hi[recvs] - seg_lo[recvs]
            last[_ranges(seg_lo[recvs], lens)] = np.repeat(rank[recvs], lens)
    return dep
