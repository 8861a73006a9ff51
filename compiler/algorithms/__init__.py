"""Per-dimension collective algorithms as transfer templates.

An algorithm for one phase on a group of k members (the NPUs along one topology dimension) is a list of transfers,
each: at `step`, member `src` sends units [src_lo, src_hi) of its region to member `dst`, which reduces (adds) or
copies them into units [dst_lo, dst_hi) of its own region. The region (the bytes the phase works on) is split into
`units` equal units (floor boundaries, so any byte count works). Reduce-scatter leaves member m owning block m
(units [m*P, (m+1)*P) with P = units // k); all-gather starts from that ownership.

Templates depend only on (kind, algorithm, k, options) and are cached; the lowering maps them to bytes and ranks.
`direction` (+1 / -1 / 0) says which way round a Ring dimension a transfer goes (0: shortest way).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Transfers:
    units: int
    steps: int
    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    src_lo: np.ndarray
    src_hi: np.ndarray
    dst_lo: np.ndarray
    dst_hi: np.ndarray
    reduce: np.ndarray      # bool per transfer
    direction: np.ndarray   # +1, -1, or 0 = shortest way
    # graph algorithms (members = NPUs of the whole network): the physical link (index into Topology.links())
    link: np.ndarray | None = None

    @staticmethod
    def build(units: int, rows: list[tuple], reduce: bool) -> "Transfers":
        """rows: (step, src, dst, src_lo, src_hi, dst_lo, dst_hi, direction[, link])."""
        width = len(rows[0]) if rows else 8
        a = np.array(rows, dtype=np.int64).reshape(-1, width)
        order = np.lexsort((a[:, 3], a[:, 2], a[:, 1], a[:, 0]))
        a = a[order]
        steps = int(a[:, 0].max()) + 1 if len(a) else 0
        return Transfers(units, steps, a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5], a[:, 6],
                         np.full(len(a), reduce), a[:, 7], a[:, 8] if width > 8 else None)


def same_units(step, src, dst, lo, hi, direction=0):
    """A row that sends units [lo, hi) to the same units of the receiver (every algorithm but all-to-all)."""
    return (step, src, dst, lo, hi, lo, hi, direction)


def template(kind: str, algorithm: str, k: int, bidirectional: bool = False) -> Transfers:
    """The transfers of a reduce_scatter or all_gather phase of `algorithm` on k members."""
    from . import direct, double_binary_tree, halving_doubling, ring
    module = {"ring": ring, "direct": direct, "halving_doubling": halving_doubling,
              "double_binary_tree": double_binary_tree}[algorithm]
    if algorithm == "ring":
        return ring.template(kind, k, bidirectional)
    return module.template(kind, k)
