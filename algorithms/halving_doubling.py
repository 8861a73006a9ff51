"""Halving-doubling: recursive halving reduce-scatter and recursive doubling all-gather (k a power of two).

Reduce-scatter step s pairs member m with m XOR k/2^(s+1) and sends the half of its current range that does not
contain block m; after log2(k) steps m owns block m. All-gather runs the same pairs in reverse order, doubling.
All-to-all: the hypercube exchange; step s swaps, with partner m XOR 2^s, the slot groups whose bit s differs from
m's (the exchanges' convention: algorithms/base.py, Algorithm.exchanges).
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..network.blocks import XOR
from .base import ALL_GATHER, ALL_TO_ALL, DIMENSION, REDUCE_SCATTER, Algorithm, Transfers, same_units


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


@lru_cache(maxsize=None)
def exchanges(k: int) -> tuple[tuple[int, int, int, int, int], ...]:
    if k & (k - 1):
        raise ValueError(f"halving_doubling needs a power-of-two group, got {k}")
    rows = []
    for s in range(k.bit_length() - 1):
        bit = 1 << s
        for m in range(k):
            for x in range(k):
                if (x & bit) != (m & bit):
                    rows.append((s, m, m ^ bit, x, 0))
    return tuple(rows)


class HalvingDoubling(Algorithm):
    order = 2
    name = "halving_doubling"
    aliases = ("hd", "halvingdoubling", "rhd")
    scope = DIMENSION
    kinds = (REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)
    relabelling = XOR
    power_of_two = True

    def template(self, kind, k, bidirectional=False):
        return template(kind, k)

    def exchanges(self, k, bidirectional):
        return exchanges(k)

    def footprint(self, kind, k, bidirectional=False):
        steps = k.bit_length() - 1  # log2(k) steps, one partner each; an all-to-all swaps k/2 slots a step
        return k * steps * (k // 2 if kind == ALL_TO_ALL else 1)

    def cost_steps(self, kind, block, k, link, hop, region):
        if kind == ALL_TO_ALL:
            return [(hop(1 << s), region / 2 / link) for s in range(int(math.log2(k)))]
        steps = int(math.log2(k))
        dists = [k >> (s + 1) for s in range(steps)] if kind == REDUCE_SCATTER else [1 << s for s in range(steps)]
        return [(hop(d), region * d / k / link) for d in dists]
