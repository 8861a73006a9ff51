"""flat_direct: direct over all NPUs at once by rank, every message routed across the dimensions (a topology-unaware
baseline)."""
from .over_ranks import OverRanks


class FlatDirect(OverRanks):
    order = 21
    name = "flat_direct"
    phase_name = over = "direct"
    label = "direct over the whole network (routed)"
