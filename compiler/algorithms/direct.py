"""Direct reduce-scatter / all-gather: one step in which every member exchanges with every other member."""
from __future__ import annotations

from functools import lru_cache

from . import Transfers, same_units


@lru_cache(maxsize=None)
def template(kind: str, k: int) -> Transfers:
    rows = []
    for m in range(k):
        for j in range(k):
            if j != m:
                b = j if kind == "reduce_scatter" else m  # RS: send j its block; AG: send everyone my block
                rows.append(same_units(0, m, j, b, b + 1))
    return Transfers.build(k, rows, reduce=(kind == "reduce_scatter"))
