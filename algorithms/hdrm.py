"""HDRM (EFLOPS, HPCA'20): halving-doubling with rank mapping on a BiGraph, the MultiTree seed's BiGraph baseline.

Plain halving-doubling over ranks 0..N-1 on an `MxN_bigraph` sends all M NPUs of a switch to NPUs of one other
switch in the same step, so M messages share one switch-to-switch link. HDRM runs the same schedule over virtual
ranks and places virtual rank r on NPU pi(r), chosen so that in every step each NPU's partner sits in the other
group and the M NPUs of a switch reach M different switches: every link carries at most one message per step.

The mapping, for M = 2^K NPUs per switch and N/2 = 2^S switches per group, K <= S (n = 1 + K + S rank bits):
- the group is the parity of r's bits, so flipping any one bit (every halving-doubling step) changes group;
- x = r's low n-1 bits. Group 0: switch = x's bits K..K+S-1, slot = x's bits 0..K-1. Group 1: switch bit j =
  x_{K+j} xor x_j (x_j only for j < K), slot = x's bits 0..K-1.
The NPUs of a group-0 switch form a coset of ker f = span(e_0..e_{K-1}); a step maps it to another coset of ker f
(or keeps x), on which group 1's switch map h is one-to-one because ker f and ker h meet only in 0. The same holds
from group 1's side. So the M partners of a switch's NPUs sit on M distinct switches, and each ordered pair of
switches carries one message per step.
"""
from __future__ import annotations

import numpy as np

from ..network.errors import UserError
from ..network.graphs import bigraph_shape
from .over_ranks import OverRanks


def applies(per_switch: int, switches: int) -> bool:
    """Does the contention-free mapping exist for an MxN_bigraph (powers of two, M <= N/2)?"""
    half = switches // 2
    pow2 = lambda v: v >= 1 and not v & (v - 1)  # noqa: E731
    return switches % 2 == 0 and pow2(per_switch) and pow2(half) and per_switch <= half


def rank_map(per_switch: int, switches: int) -> np.ndarray:
    """pi: virtual rank -> NPU (NPU = switch x M + slot, switches 0..N/2-1 the first group)."""
    if not applies(per_switch, switches):
        raise ValueError(f"no HDRM mapping for {per_switch}x{switches}_bigraph")
    k, s = per_switch.bit_length() - 1, (switches // 2).bit_length() - 1
    n = 1 + k + s
    r = np.arange(1 << n, dtype=np.int64)
    bits = (r[:, None] >> np.arange(n)) & 1
    group = bits.sum(axis=1) & 1
    x = bits[:, :n - 1]
    slot = (x[:, :k] << np.arange(k)).sum(axis=1)
    high = x[:, k:k + s].copy()
    high[:, :k] ^= np.where(group[:, None] == 1, x[:, :k], 0)  # group 1: switch bit j = x_{K+j} xor x_j, j < K
    switch = group * (switches // 2) + (high << np.arange(s)).sum(axis=1)
    return switch * per_switch + slot


class Hdrm(OverRanks):
    """Halving-doubling over virtual ranks placed on the NPUs of a BiGraph by `rank_map` (the place-ranks pass
    records the placement)."""
    order = 24
    name = "hdrm"
    over = "halving_doubling"
    power_of_two = True
    planned_by = "place-ranks"
    label = "hdrm over the whole network (routed)"

    def rank_map(self, plan):
        return np.asarray(plan["ranks"], np.int64)   # the placement place-ranks recorded (comm.placement)

    def plan(self, topology, buffer_kind: str) -> np.ndarray:
        """pi: virtual rank -> NPU. Only an all-reduce may run over virtual ranks: its result is the same on every
        NPU, while a reduce-scatter's or all-gather's blocks would land on the wrong NPUs."""
        if buffer_kind != "all_reduce":
            raise UserError(f"hdrm places ranks on NPUs and schedules all-reduce only, not {buffer_kind}; use "
                            f"flat_halving_doubling")
        shape = bigraph_shape(topology.graph) if topology.graph is not None else None
        if shape is None or not applies(*shape):
            raise UserError(f"hdrm needs an MxN_bigraph with M and N/2 powers of two and M <= N/2 (every NPU of a "
                            f"switch then reaches a different switch), not {topology.name}")
        return rank_map(*shape)
