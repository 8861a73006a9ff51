"""Double binary tree reduce-scatter / all-gather.

Tree 1 is the balanced in-order binary tree over members 0..k-1 (every subtree is a contiguous range of members),
tree 2 its mirror image (member m plays the role of k-1-m), so most members that are leaves in one tree are
interior in the other. Each tree carries one half of every block (unit 2*b + tree).

Reduce-scatter on a tree: going up, a member sends its parent the partial sums (over its subtree) of the blocks
owned outside its subtree; going down, the parent sends each child the sums (over everything outside the child's
subtree) of the blocks owned inside it. All-gather is the dual: up with the blocks owned inside the subtree, down
with those outside. Up steps are numbered by height, down steps by the parent's depth after the up pass.
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..network.errors import UserError
from .base import ALL_TO_ALL, DIMENSION, Algorithm, Transfers, same_units


def in_order_tree(k: int):
    """parent, subtree range [lo, hi), height and depth of every member of the in-order tree over 0..k-1."""
    parent, lo, hi, height, depth = [-1] * k, [0] * k, [0] * k, [0] * k, [0] * k

    def build(a: int, b: int, par: int, dep: int) -> int:
        if a >= b:
            return -1
        mid = (a + b) // 2
        parent[mid], lo[mid], hi[mid], depth[mid] = par, a, b, dep
        left, right = build(a, mid, mid, dep + 1), build(mid + 1, b, mid, dep + 1)
        height[mid] = 1 + max(height[left] if left >= 0 else -1, height[right] if right >= 0 else -1)
        return mid

    build(0, k, -1, 0)
    return parent, lo, hi, height, depth


def mirrored(tree, k: int):
    parent, lo, hi, height, depth = tree
    flip = lambda m: k - 1 - m  # noqa: E731
    return ([flip(parent[flip(m)]) if parent[flip(m)] >= 0 else -1 for m in range(k)],
            [k - hi[flip(m)] for m in range(k)], [k - lo[flip(m)] for m in range(k)],
            [height[flip(m)] for m in range(k)], [depth[flip(m)] for m in range(k)])


@lru_cache(maxsize=None)
def template(kind: str, k: int) -> Transfers:
    t1 = in_order_tree(k)
    trees = (t1, mirrored(t1, k))
    rows = []
    for q, (parent, lo, hi, height, depth) in enumerate(trees):
        top = max(height)
        for v in range(k):
            p = parent[v]
            if p < 0:
                continue
            inside = range(lo[v], hi[v])
            outside = [b for b in range(k) if not lo[v] <= b < hi[v]]
            up_blocks, down_blocks = (outside, inside) if kind == "reduce_scatter" else (inside, outside)
            for b in up_blocks:
                rows.append(same_units(height[v], v, p, 2 * b + q, 2 * b + q + 1))
            for b in down_blocks:
                rows.append(same_units(top + depth[p], p, v, 2 * b + q, 2 * b + q + 1))
    return Transfers.build(2 * k, rows, reduce=(kind == "reduce_scatter"))


class DoubleBinaryTree(Algorithm):
    order = 3
    name = "double_binary_tree"
    aliases = ("dbt", "doublebinarytree", "tree")
    scope = DIMENSION

    def check(self, kind, k, where):
        if kind == ALL_TO_ALL:
            raise UserError("double_binary_tree has no all_to_all schedule (trees cannot forward per-destination "
                            "data in place); use ring, direct or halving_doubling for all_to_all")
        super().check(kind, k, where)

    def template(self, kind, k, bidirectional=False):
        return template(kind, k)

    def footprint(self, kind, k, bidirectional=False):
        return 2 * k * (k - 1)  # two trees, each edge carrying the k-1 blocks below or above it

    def cost_steps(self, kind, block, k, link, hop, region):
        height = max(1, math.ceil(math.log2(k + 1)) - 1)
        return [(2 * height * hop(1), (k - 1) / k * region / 2 / link)]
