"""flat_halving_doubling: halving-doubling over all NPUs at once by rank, every message routed across the
dimensions (a topology-unaware baseline; needs a power-of-two NPU count)."""
from __future__ import annotations

from . import halving_doubling
from .base import RANKS, Algorithm


class FlatHalvingDoubling(Algorithm):
    order = 22
    name = "flat_halving_doubling"
    phase_name = "halving_doubling"
    scope = RANKS
    label = "halving_doubling over the whole network (routed)"

    def check(self, kind, k, where):
        super().check(kind, k, where)
        halving_doubling.check_power_of_two(self.phase_name, k, where)

    def template(self, kind, k, bidirectional=False):
        return halving_doubling.template(kind, k)
