"""Tree reduce-broadcast: ASTRA-sim's doubleBinaryTree all-reduce on one dimension.

Each chunk goes whole up a binary tree, every member adding its children's sums to its own before it sends to its
parent, and the total comes back down the same tree (ASTRA-sim's DoubleBinaryTreeAllReduce: a member waits for
both children, sends the whole chunk up, receives it from its parent and sends it to both children). The tree is
ASTRA-sim's: member 0 at the root with one child, the balanced in-order binary tree over members 1..k-1 below it
(its height log2 k for k a power of two). It serves an all-reduce on one dimension, run as one pass (select-
algorithm marks its halves fused); a reduce-scatter or all-gather phase alone runs as NCCL's double binary tree.

Not modelled: ASTRA-sim alternates chunks between this tree and its mirror (root k-1), and a member takes up the
next chunk once it has sent the last one down; here every chunk takes the first tree and holds the dimension
until its messages arrive. One chunk takes as long either way; several overlap in ASTRA-sim (4 chunks on
Switch(32): 37 whole-chunk messages to the slowest member there, 40 here; docs/astra-sim.md, Limits).
"""
from __future__ import annotations

from .base import Transfers, same_units
from .double_binary_tree import DoubleBinaryTree, in_order_tree


def tree(k: int) -> tuple[list[int], list[int], list[int]]:
    """parent, height (steps up to the member) and depth of every member of the tree over 0..k-1."""
    parent, height, depth = [-1] * k, [0] * k, [0] * k
    if k > 1:
        below, _, _, h, d = in_order_tree(k - 1)   # members 1..k-1 as 0..k-2
        for m in range(1, k):
            parent[m] = below[m - 1] + 1 if below[m - 1] >= 0 else 0
            height[m], depth[m] = h[m - 1], d[m - 1] + 1
        height[0] = 1 + max(height[m] for m in range(1, k) if parent[m] == 0)
    return parent, height, depth


class TreeReduceBroadcast(DoubleBinaryTree):
    order = 4
    name = "tree_reduce_broadcast"
    aliases = ("treeallreduce", "astradoublebinarytree")
    fuses_all_reduce = True

    def fused_template(self, kind, k, bidirectional=False):
        if kind != "reduce_scatter":   # the all-gather half: the reduce-scatter phase brought the whole sum back
            return Transfers.empty(1)
        parent, height, depth = tree(k)
        up = Transfers.build(1, [same_units(height[m], m, parent[m], 0, 1) for m in range(1, k)], reduce=True)
        down = Transfers.build(1, [same_units(depth[parent[m]], parent[m], m, 0, 1) for m in range(1, k)],
                               reduce=False)
        return up.then(down)
