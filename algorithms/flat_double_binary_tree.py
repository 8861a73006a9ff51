"""flat_double_binary_tree: NCCL's double binary tree over all NPUs at once by rank, every message routed across
the dimensions (a topology-unaware baseline)."""
from .over_ranks import OverRanks


class FlatDoubleBinaryTree(OverRanks):
    order = 23
    name = "flat_double_binary_tree"
    phase_name = over = "double_binary_tree"
    label = "double_binary_tree over the whole network (routed)"
