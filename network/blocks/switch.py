"""Switch(k) (also SW(k)): the k members hang off one switch; every message takes two links, the sender's uplink
and the receiver's downlink (the switch itself is non-blocking: only its ports queue).

Each NPU's link to the switch carries its whole bandwidth in the dimension. Slot 0 is an NPU's uplink, slot 1
its downlink. Switch nodes are numbered per group (the rank with this dimension's coordinate removed).
"""
from __future__ import annotations

import numpy as np

from ..coords import group_index
from .base import Block


class Switch(Block):
    order = 2
    name = "Switch"
    spellings = ("Switch", "SW")
    direct = False
    has_switch = True

    def link_share(self, k: int) -> int:
        return 1

    def subgroup(self, k, size, stride, gbps, latency_ns):
        # members keep their own uplink and downlink and the switch is non-blocking: a group of the switch's
        # members is a smaller switch of the same links, whichever members it takes
        return gbps, latency_ns

    def default_algorithm(self, k: int) -> str:
        # halving-doubling has no schedule for a group that is not a power of two; a ring uses the link fully
        return "ring" if k & (k - 1) else "halving_doubling"

    def default_for(self, k: int, kind: str) -> str:
        # an all-to-all sends every member its own part once: direct does that in one step at the uplink's full
        # bandwidth, where halving-doubling forwards half the buffer log2(k) times (ASTRA-sim's default, direct)
        return "direct" if kind == "all_to_all" else self.default_algorithm(k)

    def path(self, k, src, dst, lane):
        return np.full(len(src), 2, np.int64), np.zeros(len(src), np.int64)

    def cost_hops(self, k: int, distance: int) -> int:
        return 2

    def slots(self, k: int) -> int:
        return 2

    def route(self, k, stride, src, dst, lane, hops, representative):
        """The sender's uplink, then the receiver's downlink (NPU 0's own downlink stands for all in symmetric
        execution)."""
        owner = np.stack([src, src if representative else dst], axis=1).ravel()
        slot = np.tile(np.array([0, 1], np.int64), len(src))
        return owner, slot

    def lengths(self, hops):
        return np.full(len(hops), 2, np.int64)

    def describe(self, d, npu, slot, k, stride):
        return f"dim{d} npu{npu}->switch" if slot == 0 else f"dim{d} switch->npu{npu}"

    def physical_links(self, ranks, c, base, k, stride, first_switch):
        n = len(ranks)
        switch = first_switch + group_index(ranks, k, stride)
        src = np.concatenate([ranks, switch])
        dst = np.concatenate([switch, ranks])
        owner = np.concatenate([ranks, ranks])
        slot = np.repeat(np.array([0, 1], np.int64), n)
        return src, dst, np.zeros(src.shape, np.int64), owner, slot, n // k
