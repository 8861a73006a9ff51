"""flat_double_binary_tree: NCCL's double binary tree over all NPUs at once by rank, every message routed across
the dimensions (a topology-unaware baseline)."""
from __future__ import annotations

from . import double_binary_tree
from .base import RANKS, Algorithm


class FlatDoubleBinaryTree(Algorithm):
    order = 23
    name = "flat_double_binary_tree"
    phase_name = "double_binary_tree"
    scope = RANKS
    label = "double_binary_tree over the whole network (routed)"

    def template(self, kind, k, bidirectional=False):
        return double_binary_tree.template(kind, k)
