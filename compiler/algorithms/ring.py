"""Ring reduce-scatter / all-gather: k-1 steps, each member passes one block to its ring neighbour.

On a Ring dimension the NPU's bandwidth is split over its two neighbour links, so the schedule is bidirectional:
every block is halved and the halves travel round the ring in opposite directions (two counter-rotating rings),
which moves the same bytes per link-second as one ring at the full dimension bandwidth.
"""
from __future__ import annotations

from functools import lru_cache

from . import Transfers, same_units


@lru_cache(maxsize=None)
def template(kind: str, k: int, bidirectional: bool = False) -> Transfers:
    parts = 2 if bidirectional else 1
    rows = []
    for m in range(k):
        for s in range(k - 1):
            for q in range(parts):
                d = 1 if q == 0 else -1
                if kind == "reduce_scatter":
                    # send the block that ends at the member d*(k-1) ahead of it, so member m finishes owning block m
                    b = (m - d * (s + 1)) % k
                else:
                    b = (m - d * s) % k  # all-gather: forward the block received in the previous step
                u = b * parts + q
                rows.append(same_units(s, m, (m + d) % k, u, u + 1, d))
    return Transfers.build(k * parts, rows, reduce=(kind == "reduce_scatter"))
