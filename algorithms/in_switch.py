"""in_switch: in-network reduction on a Switch dimension (NVLink SHARP, InfiniBand SHARP): the switch adds what its
members send and multicasts what they ask for, so each NPU's data crosses its own link once each way.

- reduce-scatter: every member sends its whole region up to the switch, which sums the k contributions; member m
  receives block m of the sum.
- all-gather: member m sends block m up; the switch multicasts every block; member m receives the k-1 others.
- an all-reduce over this one dimension runs as one reduce-and-multicast pass (the reduce-scatter phase receives
  the whole sum, the all-gather phase has nothing left to do: select-algorithm marks both `fused`): each NPU
  sends its buffer once and receives the result once, the two streams overlapping in the switch, so it takes
  about size / bandwidth + 2 x latency instead of a ring's 2(k-1)/k x size / bandwidth.
- broadcast: the root sends its region up once and the switch multicasts it to the k-1 others; reduce: every
  member sends its region up and the root receives the sum.

In the tables a transfer with the switch has peer -1 (runtime.tables.SWITCH): a send contributes to the switch's
sum for its (collective, chunk, phase, step) and group, a receive copies the finished sum.
"""
from __future__ import annotations

from ..network.blocks import ANY
from .base import ALL_GATHER, BROADCAST, DIMENSION, REDUCE, REDUCE_SCATTER, Algorithm, Transfers


class InSwitch(Algorithm):
    order = 4
    name = "in_switch"
    aliases = ("nvls", "sharp", "inswitch")
    scope = DIMENSION
    kinds = (REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE)
    blocks = ("Switch",)
    relabelling = ANY
    fuses_all_reduce = True
    in_network = True

    def template(self, kind, k, bidirectional=False, fused=False):
        """Member k stands for the switch. Units: one block per member."""
        rows = []
        if kind == BROADCAST:  # the root's region up once (the only contribution to the switch's sum), then down
            rows = [(0, 0, k, 0, k, 0, k, 0)] + [(0, k, m, 0, k, 0, k, 0) for m in range(1, k)]
        elif kind == REDUCE:  # every region up into the switch's sum, the sum down to the root (member 0)
            rows = [(0, m, k, 0, k, 0, k, 0) for m in range(k)] + [(0, k, 0, 0, k, 0, k, 0)]
        elif kind == REDUCE_SCATTER:
            for m in range(k):
                rows.append((0, m, k, 0, k, 0, k, 0))  # the whole region up, to be summed
                lo, hi = (0, k) if fused else (m, m + 1)  # fused: the whole sum comes back
                rows.append((0, k, m, lo, hi, lo, hi, 0))
        elif not fused:  # all-gather (fused: the reduce-scatter phase delivered everything already)
            for m in range(k):
                rows.append((0, m, k, m, m + 1, m, m + 1, 0))
                rows += [(0, k, m, lo, hi, lo, hi, 0) for lo, hi in ((0, m), (m + 1, k)) if hi > lo]
        return Transfers.build(k, rows, reduce=False)  # the switch sums; members copy what comes back

    def fused_template(self, kind, k, bidirectional=False):
        return self.template(kind, k, bidirectional, fused=True)

    def footprint(self, kind, k, bidirectional=False):
        # reduce-scatter: each member up and its block down; all-gather: its block up, the k-1 others down in
        # (at most) two runs of units
        return {REDUCE_SCATTER: 2 * k, BROADCAST: k, REDUCE: k + 1}.get(kind, 3 * k - 2)

    def cost_steps(self, kind, block, k, link, hop, region, fused=False):
        """One step, up and down at once: two link latencies (hop(1) is the dimension's NPU-switch-NPU latency)
        and the larger of the bytes sent and received."""
        if kind in (REDUCE_SCATTER, BROADCAST, REDUCE):
            return [(hop(1), region / link)]
        return [] if fused else [(hop(1), region / link * (k - 1) / k)]
