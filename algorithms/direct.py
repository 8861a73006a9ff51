"""Direct reduce-scatter / all-gather / all-to-all: one step in which every member exchanges with every other
member. Broadcast: a scatter then an all-gather (van de Geijn): the root sends slice j to member j, then every
member sends its slice to the others, two steps that move 2(k-1)/k x the region instead of the root sending the
whole region k-1 times. Reduce: the same run backwards (a reduce-scatter, then a gather to the root)."""
from __future__ import annotations

from functools import lru_cache

from ..network.blocks import ANY
from .base import BROADCAST, DIMENSION, PHASE_KINDS, REDUCE, ROOTED, Algorithm, Transfers, same_units


@lru_cache(maxsize=None)
def template(kind: str, k: int) -> Transfers:
    rows = []
    if kind == REDUCE:
        return template(BROADCAST, k).mirrored()
    if kind == BROADCAST:  # from member 0: scatter, then every slice to the members that lack it
        rows = [same_units(0, 0, j, j, j + 1) for j in range(1, k)]
        rows += [same_units(1, j, m, j, j + 1) for j in range(k) for m in range(1, k) if m != j]
        return Transfers.build(k, rows, reduce=False)
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
    kinds = PHASE_KINDS
    relabelling = ANY

    def template(self, kind, k, bidirectional=False):
        return template(kind, k)

    def exchanges(self, k, bidirectional):
        return tuple((0, m, p, p, 0) for m in range(k) for p in range(k) if p != m)

    def footprint(self, kind, k, bidirectional=False):
        # every member to every other, once; a broadcast's scatter (k-1) and all-gather ((k-1) + (k-1)(k-2)) too
        return k * (k - 1)

    def cost_steps(self, kind, block, k, link, hop, region):
        step = (max(hop(k // 2), hop(k - 1)), region / k / link)  # every kind: one piece to every member
        return [step, step] if kind in ROOTED else [step]
