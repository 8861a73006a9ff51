"""Mesh(k) (also Line(k)): a Ring without its wrap-around link, so `8x8_mesh` is Mesh(8)_Mesh(8). Not an
ASTRA-sim block.

The end NPUs have one neighbour, the others two; a ring's wrap-around transfer walks the whole line back. Members
differ (the ends), so no schedule on a mesh is symmetric. Slots as a Ring's: 0 to the next member, 1 to the
previous one.
"""
from __future__ import annotations

import numpy as np

from ..coords import coordinate
from .base import BACKWARD, FORWARD, Block
from .ring import walk


class Mesh(Block):
    order = 3
    name = "Mesh"
    spellings = ("Mesh", "Line")
    neighbour_links = True
    transitive = False

    def link_share(self, k: int) -> int:
        return 2

    def default_algorithm(self, k: int) -> str:
        return "ring"

    def path(self, k, src, dst, lane):
        """No wrap-around: a message walks the line towards its receiver, whatever its lane asked."""
        return np.abs(dst - src), np.where(dst > src, FORWARD, BACKWARD)

    def cost_hops(self, k: int, distance: int) -> int:
        return distance  # partners `distance` apart along the line (k - 1 for a ring's wrap-around transfer)

    def slots(self, k: int) -> int:
        return 2

    def route(self, k, stride, src, dst, lane, hops, representative):
        towards = np.where(coordinate(dst, k, stride) > coordinate(src, k, stride), 1, -1)
        return walk(k, stride, src, towards, hops, representative)

    def describe(self, d, npu, slot, k, stride):
        return f"dim{d} npu{npu}->{'next' if slot == 0 else 'prev'}"

    def physical_links(self, ranks, c, base, k, stride, first_switch):
        # next neighbour (lane 0) from all but the last NPU, previous (lane 1) from all but the first
        fwd, back = ranks[c < k - 1], ranks[c > 0]
        src = np.concatenate([fwd, back])
        lane = np.concatenate([np.full(fwd.shape, FORWARD, np.int64), np.full(back.shape, BACKWARD, np.int64)])
        return src, np.concatenate([fwd + stride, back - stride]), lane, src, lane, 0
