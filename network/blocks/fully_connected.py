"""FullyConnected(k) (also FC(k)): every NPU has a direct link to each of the k-1 other members.

The NPU's bandwidth in the dimension is split over its k-1 links (B/(k-1) each). Slot j is the link to the member
with coordinate j (the NPU's own slot is unused).
"""
from __future__ import annotations

import numpy as np

from ..coords import coordinate
from .base import Block


class FullyConnected(Block):
    order = 1
    name = "FullyConnected"
    spellings = ("FullyConnected", "FC")
    translatable = True

    def link_share(self, k: int) -> int:
        return k - 1

    def subgroup(self, k, size, stride, gbps, latency_ns):
        # the group uses its size-1 links of the member's k-1 (B/(k-1) each); other groups use other links
        return gbps * (size - 1) / (k - 1), latency_ns

    def default_algorithm(self, k: int) -> str:
        return "direct"

    def path(self, k, src, dst, lane):
        return np.ones(len(src), np.int64), np.zeros(len(src), np.int64)

    def cost_hops(self, k: int, distance: int) -> int:
        return 1

    def slots(self, k: int) -> int:
        return k

    def route(self, k, stride, src, dst, lane, hops, representative):
        return src.copy(), coordinate(dst, k, stride)

    def lengths(self, hops):
        return np.ones(len(hops), np.int64)

    def describe(self, d, npu, slot, k, stride):
        return f"dim{d} npu{npu}->npu{npu + (slot - coordinate(npu, k, stride)) * stride}"

    def physical_links(self, ranks, c, base, k, stride, first_switch):
        # block j (j = 1..k-1) links every NPU to the member j places further on
        n = len(ranks)
        offsets = np.repeat(np.arange(1, k, dtype=np.int64), n)
        src = np.tile(ranks, k - 1)
        peer_c = (np.tile(c, k - 1) + offsets) % k
        dst = np.tile(base, k - 1) + peer_c * stride
        return src, dst, np.zeros(src.shape, np.int64), src, peer_c, 0
