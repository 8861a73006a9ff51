"""flat_halving_doubling: halving-doubling over all NPUs at once by rank, every message routed across the
dimensions (a topology-unaware baseline; needs a power-of-two NPU count)."""
from .over_ranks import OverRanks


class FlatHalvingDoubling(OverRanks):
    order = 22
    name = "flat_halving_doubling"
    phase_name = over = "halving_doubling"
    power_of_two = True
    label = "halving_doubling over the whole network (routed)"
