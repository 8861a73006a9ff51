"""Ring(k): each NPU links to its next and previous member (k = 2: two parallel links to its one neighbour).

The NPU's bandwidth in the dimension is split over its two links (B/2 each), so rings run bidirectionally. Slot 0 is
the link to the next member (lane 0, forward), slot 1 to the previous one (lane 1, backward).
"""
from __future__ import annotations

import numpy as np

from ..coords import coordinate
from .base import BACKWARD, FORWARD, SHORTEST, XOR, Block, Symmetry


class Ring(Block):
    order = 0
    name = "Ring"
    spellings = ("Ring",)
    translatable = True
    neighbour_links = True

    def link_share(self, k: int) -> int:
        return 2

    def subgroup(self, k, size, stride, gbps, latency_ns):
        """A ring over part of the ring, every group at once, both directions as on the whole ring.
        - Every stride-th member (stride * size = k): each message walks `stride` links and every link carries
          `stride` groups' messages, so each group sees links of B/stride with `stride` hops of latency.
        - `size` consecutive members: each direction's ring closes back through its own segment (the wrap takes
          size-1 links the other way round, never another group's links), so every link of the segment carries two
          messages at a time, one per direction's ring: links of B/2, and a step lasts as long as the wrap's
          size-1 hops. Exact for ring schedules; other algorithms (direct, all-to-all exchange) see the same links
          as if they were neighbours (docs/workloads.md, Limits)."""
        if stride > 1:
            return gbps / stride, latency_ns * stride
        return gbps / 2, latency_ns * (size - 1)

    def symmetry(self, relabelling, k):
        """A rotation maps the ring onto itself. Partners one bit apart (halving-doubling's XOR) are as many links
        away from every member, but the shorter way round is forward from some members and backward from others:
        no relabelling maps one member's links onto another's (on two members, one neighbour either way)."""
        return Symmetry.STEPS if relabelling == XOR and k > 2 else Symmetry.LINKS

    def default_algorithm(self, k: int) -> str:
        return "ring"

    def path(self, k, src, dst, lane):
        fwd = (dst - src) % k
        taken = np.where(lane == SHORTEST, np.where(fwd <= k - fwd, FORWARD, BACKWARD), lane)
        return np.where(taken == FORWARD, fwd, (k - fwd) % k), taken

    def cost_hops(self, k: int, distance: int) -> int:
        return min(distance % k, (-distance) % k)

    def slots(self, k: int) -> int:
        return 2

    def route(self, k, stride, src, dst, lane, hops, representative):
        """One link per hop, walking from the sender the way its lane says."""
        return walk(k, stride, src, np.where(lane == FORWARD, 1, -1), hops, representative)

    def describe(self, d, npu, slot, k, stride):
        return f"dim{d} npu{npu}->{'next' if slot == 0 else 'prev'}"

    def physical_links(self, ranks, c, base, k, stride, first_switch):
        n = len(ranks)
        src = np.concatenate([ranks, ranks])
        dst = np.concatenate([base + (c + 1) % k * stride, base + (c - 1) % k * stride])
        lane = np.repeat(np.array([FORWARD, BACKWARD], dtype=np.int64), n)
        return src, dst, lane, src, lane, 0


def walk(k: int, stride: int, src: np.ndarray, step: np.ndarray, hops: np.ndarray, representative: bool):
    """(owner, slot) of the links of messages that walk `hops` members from src, +1 or -1 (`step`) at a time,
    each hop over the link of the NPU it leaves (slot 0 forward, 1 backward); `representative`: every hop over
    the sender's own link of that direction."""
    slot = np.where(step == 1, 0, 1)
    if len(hops) and np.all(hops == 1):  # neighbour transfers (the common case): the sender's own link
        return src.copy(), slot
    per = np.repeat(np.arange(len(src)), hops)
    h = np.arange(len(per)) - np.repeat(np.concatenate([[0], np.cumsum(hops)[:-1]]).astype(np.int64), hops)
    if representative:
        node = src[per]
    else:
        c0 = coordinate(src[per], k, stride)
        node = src[per] + (((c0 + step[per] * h) % k) - c0) * stride
    return node, slot[per]
