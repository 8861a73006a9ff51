"""Halving-doubling: recursive halving reduce-scatter and recursive doubling all-gather (k a power of two).

Reduce-scatter step s pairs member m with m XOR k/2^(s+1) and sends the half of its current range that does not
contain block m; after log2(k) steps m owns block m. All-gather runs the same pairs in reverse order, doubling.
"""
from __future__ import annotations

from functools import lru_cache

from . import Transfers, same_units


@lru_cache(maxsize=None)
def template(kind: str, k: int) -> Transfers:
    if k & (k - 1):
        raise ValueError(f"halving_doubling needs a power-of-two group, got {k}")
    levels = k.bit_length() - 1
    rows = []
    for s in range(levels):
        for m in range(k):
            if kind == "reduce_scatter":
                d = k >> (s + 1)
                lo = (m // (2 * d)) * 2 * d
                send_lo = lo if m & d else lo + d  # keep the half that holds block m
                rows.append(same_units(s, m, m ^ d, send_lo, send_lo + d))
            else:
                d = 1 << s
                lo = (m // d) * d
                rows.append(same_units(s, m, m ^ d, lo, lo + d))
    return Transfers.build(k, rows, reduce=(kind == "reduce_scatter"))
