"""flat_direct: direct over all NPUs at once by rank, every message routed across the dimensions (a topology-unaware
baseline)."""
from __future__ import annotations

from . import direct
from .base import RANKS, Algorithm


class FlatDirect(Algorithm):
    order = 21
    name = "flat_direct"
    phase_name = "direct"
    scope = RANKS
    label = "direct over the whole network (routed)"

    def template(self, kind, k, bidirectional=False):
        return direct.template(kind, k)
