"""Ring reduce-scatter / all-gather: k-1 steps, each member passes one block to its ring neighbour.

On a Ring dimension the NPU's bandwidth is split over its two neighbour links, so the schedule is bidirectional:
every block is halved and the halves travel round the ring in opposite directions (two counter-rotating rings),
which moves the same bytes per link-second as one ring at the full dimension bandwidth.

Broadcast: a pipelined chain round the ring from the root (NCCL's ring broadcast). The region is cut into k slices
(per direction); the member p links down the chain forwards slice j in step j + p, so 2k-2 steps move
2(k-1)/k x the region per link, the bandwidth of a scatter plus an all-gather, with no member sending more than
its share. Reduce: that chain run backwards, each member adding what comes in before passing it on.

All-to-all: on neighbour links (a Ring) the ring-distance-ordered pairwise exchange with both neighbours at
distance t in step t-1 (floor(k/2) steps); elsewhere one partner per step, (t - m) mod k in round t (an
involution, so every exchange is a swap; each member sits out at most one round).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..network.blocks import ROTATION, Symmetry
from .base import ALL_TO_ALL, BROADCAST, DIMENSION, PHASE_KINDS, REDUCE, ROOTED, Algorithm, Transfers


@lru_cache(maxsize=None)
def template(kind: str, k: int, bidirectional: bool = False) -> Transfers:
    parts = 2 if bidirectional else 1
    if kind == BROADCAST:
        return _chain(k, parts)
    if kind == REDUCE:
        return _chain(k, parts).mirrored()
    # member m, step s, part q (q = 1 travels the other way round): one transfer each, built as arrays (k^2 of them)
    m, s, q = (a.ravel() for a in np.meshgrid(np.arange(k), np.arange(k - 1), np.arange(parts), indexing="ij"))
    d = np.where(q == 0, 1, -1)
    if kind == "reduce_scatter":
        b = (m - d * (s + 1)) % k  # send the block that ends at the member d*(k-1) ahead, so m finishes owning m
    else:
        b = (m - d * s) % k  # all-gather: forward the block received in the previous step
    u = b * parts + q
    return Transfers.from_columns(k * parts, (s, m, (m + d) % k, u, u + 1, u, u + 1, d),
                                  reduce=(kind == "reduce_scatter"))


def _chain(k: int, parts: int) -> Transfers:
    """Broadcast from member 0: slice j of part q goes from chain position p to p + 1 in step j + p, part q = 1
    round the other way. Unit of (slice j, part q): j * parts + q."""
    j, p, q = (a.ravel() for a in np.meshgrid(np.arange(k), np.arange(k - 1), np.arange(parts), indexing="ij"))
    d = np.where(q == 0, 1, -1)
    u = j * parts + q
    return Transfers.from_columns(k * parts, (j + p, (d * p) % k, (d * (p + 1)) % k, u, u + 1, u, u + 1, d),
                                  reduce=False)


@lru_cache(maxsize=None)
def exchanges(k: int, bidirectional: bool) -> tuple[tuple[int, int, int, int, int], ...]:
    rows = []
    if not bidirectional:
        # one partner per step (a switch port or one FC link at a time)
        for t in range(k):
            for m in range(k):
                p = (t - m) % k
                if p != m:
                    rows.append((t, m, p, p, 0))
        used = sorted({r[0] for r in rows})
        return tuple((used.index(r[0]),) + r[1:] for r in rows)
    for t in range(1, k // 2 + 1):  # step t-1 swaps with the members t ahead and t behind
        for m in range(k):
            ahead, behind = (m + t) % k, (m - t) % k
            rows.append((t - 1, m, ahead, ahead, 1))
            if behind != ahead:
                rows.append((t - 1, m, behind, behind, -1))
    return tuple(rows)


class Ring(Algorithm):
    order = 0
    name = "ring"
    scope = DIMENSION
    kinds = PHASE_KINDS
    relabelling = ROTATION

    def symmetry(self, kind, block, k):
        """Off neighbour links an all-to-all pairs one partner per round, and each member sits out a different
        round: no member stands for another."""
        if kind == ALL_TO_ALL and not block.neighbour_links:
            return Symmetry.NONE
        return super().symmetry(kind, block, k)

    def template(self, kind, k, bidirectional=False):
        return template(kind, k, bidirectional)

    def exchanges(self, k, bidirectional):
        return exchanges(k, bidirectional)

    def footprint(self, kind, k, bidirectional=False):
        # every member sends k-1 blocks (halves, both ways round, on a Ring); an all-to-all swaps with each partner
        # once; a broadcast's k-1 links of the chain each carry k slices
        return k * (k - 1) * (2 if bidirectional and kind != ALL_TO_ALL else 1)

    def cost_steps(self, kind, block, k, link, hop, region):
        if kind == ALL_TO_ALL:
            piece = region / k
            if block.neighbour_links:  # both neighbours at distance t in step t
                return [(max(hop(t), hop(k - t)), piece / link) for t in range(1, k // 2 + 1)]
            return [(hop(1), piece / link)] * k  # one partner per round
        per_link = region / k / (2 if block.neighbour_links else 1)
        steps = 2 * k - 2 if kind in ROOTED else k - 1
        return [(max(hop(1), hop(k - 1)), per_link / link)] * steps
