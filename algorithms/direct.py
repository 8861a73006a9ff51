"""Direct reduce-scatter / all-gather / all-to-all: one step in which every member exchanges with every other
member."""
from __future__ import annotations

from functools import lru_cache

from .base import ALL_GATHER, ALL_TO_ALL, DIMENSION, REDUCE_SCATTER, Algorithm, Transfers, same_units


@lru_cache(maxsize=None)
def template(kind: str, k: int) -> Transfers:
    rows = []
    for m in range(k):
        for j in range(k):
            if j != m:
                b = j if kind == "reduce_scatter" else m  # RS: send j its block; AG: send everyone my block
                rows.append(same_units(0, m, j, b, b + 1))
    return Transfers.build(k, rows, reduce=(kind == "reduce_scatter"))


class Direct(Algorithm):
    order = 1
    name = "direct"
    scope = DIMENSION
    kinds = (REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)
    symmetric = True

    def template(self, kind, k, bidirectional=False):
        return template(kind, k)

    def exchanges(self, k, bidirectional):
        return tuple((0, m, p, p, 0) for m in range(k) for p in range(k) if p != m)

    def footprint(self, kind, k, bidirectional=False):
        return k * (k - 1)  # every member to every other, once

    def cost_steps(self, kind, block, k, link, hop, region):
        return [(max(hop(k // 2), hop(k - 1)), region / k / link)]  # every kind: one piece to every member
