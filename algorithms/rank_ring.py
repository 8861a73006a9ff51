"""rank_ring: a ring over all NPUs in rank order, as NCCL lays one over a torus without looking at its links; each
message is routed across the dimensions (the shorter way round each Ring), so neighbours in rank order that are
not neighbours on the network share links (`--backend congestion` shows it)."""
from .over_ranks import OverRanks


class RankRing(OverRanks):
    order = 20
    name = "rank_ring"
    over = "ring"
    label = "rank_ring over the whole network (routed)"
