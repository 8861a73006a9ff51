"""Hypercube(k) (also HC(k)): k = 2^n members, each linked to the n members whose coordinate differs from its own in
one bit, the interconnect recursive halving-doubling was designed for (Intel iPSC, nCUBE, the Connection Machine;
a member's n links are the cube's n dimensions).

The NPU's bandwidth in the dimension is split over its n links (B/n each). A message is routed e-cube style
(dimension order over the bits): from the sender, cross the lowest differing bit first, each hop over the link of
the node it leaves; it crosses popcount(src XOR dst) links. Slot b of an NPU is its link across bit b. XOR with a
fixed coordinate maps links onto links, so every member sees the same network; halving-doubling and direct then
run relabelled copies on every member, a ring (whose neighbour c+1 is one link away from even c, more from odd c)
does not.
"""
from __future__ import annotations

import numpy as np

from ..coords import coordinate
from ..errors import UserError
from .base import ROTATION, Block, Symmetry


def _popcount(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.int64)
    count = np.zeros(x.shape, np.int64)
    while np.any(x):
        count += x & 1
        x = x >> 1
    return count


class Hypercube(Block):
    order = 4
    name = "Hypercube"
    spellings = ("Hypercube", "HC")

    def check_size(self, k: int) -> None:
        if k & (k - 1):
            raise UserError(f"a Hypercube has 2^n members, got {k}")

    def symmetry(self, relabelling, k):
        """XOR with a fixed coordinate maps links onto links; a rotation does not (c -> c+1 is one link away from
        even c, up to n from odd c)."""
        return Symmetry.NONE if relabelling == ROTATION else Symmetry.LINKS

    def link_share(self, k: int) -> int:
        return k.bit_length() - 1

    def default_algorithm(self, k: int) -> str:
        return "halving_doubling"  # every step's partner is one link away

    def path(self, k, src, dst, lane):
        return _popcount(np.asarray(src) ^ np.asarray(dst)), np.zeros(len(src), np.int64)

    def cost_hops(self, k: int, distance: int) -> int:
        return bin(distance % k).count("1")  # exact for XOR partners (halving-doubling), an estimate otherwise

    def slots(self, k: int) -> int:
        return k.bit_length() - 1

    def route(self, k, stride, src, dst, lane, hops, representative):
        """E-cube routing: the differing bits lowest first, each over the link of the node the message leaves (NPU
        0's own link of that bit in symmetric execution)."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        c, target = coordinate(src, k, stride), coordinate(dst, k, stride)
        node = src.copy()
        msg, owner, slot = [], [], []
        for b in range(k.bit_length() - 1):
            i = np.flatnonzero(((c ^ target) >> b) & 1)
            msg.append(i)
            owner.append(src[i] if representative else node[i])
            slot.append(np.full(len(i), b, np.int64))
            flipped = c[i] ^ (1 << b)
            node[i] += (flipped - c[i]) * stride
            c[i] = flipped
        msg, owner, slot = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (msg, owner, slot))
        order = np.lexsort((slot, msg))  # each message's links together, lowest bit first
        return owner[order], slot[order]

    def describe(self, d, npu, slot, k, stride):
        c = coordinate(npu, k, stride)
        return f"dim{d} npu{npu}->npu{npu + ((c ^ (1 << slot)) - c) * stride}"

    def physical_links(self, ranks, c, base, k, stride, first_switch):
        bits = np.arange(k.bit_length() - 1, dtype=np.int64)
        n = len(ranks)
        src = np.tile(ranks, len(bits))
        slot = np.repeat(bits, n)
        dst = np.tile(base, len(bits)) + (np.tile(c, len(bits)) ^ (1 << slot)) * stride
        return src, dst, np.zeros(src.shape, np.int64), src, slot, 0
