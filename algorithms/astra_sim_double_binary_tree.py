"""ASTRA-sim's doubleBinaryTree all-reduce on one dimension, chunk by chunk as ASTRA-sim runs it.

What a system file's doubleBinaryTree runs (compiler/interop/astra_system.py). Each chunk goes whole up a binary
tree and back down as in tree_reduce_broadcast (DoubleBinaryTreeAllReduce), with ASTRA-sim's two conventions for
several chunks, read in its source:
- the chunks take its two trees in turn (DoubleBinaryTreeTopology::get_topology): chunk 0 the tree rooted at member
  k-1 (BinaryTree RootMax: the in-order tree over 0..k-2 below it), chunk 1 its mirror image rooted at member 0
  (RootMin, tree_reduce_broadcast's tree), chunk 2 the first again, and so on (mirrored_chunks);
- a member moves on to its next chunk as soon as it has sent this one down to its children (the algorithm exits
  right after front_end_sim_send), so a member that waits as a leaf of one tree works as an inner member of the
  next; its congestion-unaware network moreover sends each message at the full bandwidth whatever else the member
  has in flight (ends_on_send: the runtimes then end a step when its receives are in).
One chunk takes the same time as tree_reduce_broadcast; 256 MB in 4 chunks on Switch(32) 46287.4 us as ASTRA-sim
(tree_reduce_broadcast 50040.4 us), 121287.4 us congestion-aware (tests/test_astra_reference.py).
Not followed: ASTRA-sim's counter of trees runs on across collectives (a collective of an odd number of chunks
hands the next one the other tree first); here every collective's chunk 0 takes the first tree.
"""
from __future__ import annotations

from .tree_reduce_broadcast import TreeReduceBroadcast


class AstraSimDoubleBinaryTree(TreeReduceBroadcast):
    order = 5
    name = "astra_sim_double_binary_tree"
    aliases = ("astrasimdbt",)
    mirrored_chunks = True
    ends_on_send = True

    def fused_template(self, kind, k, bidirectional=False):
        # chunk 0 takes ASTRA-sim's RootMax tree: tree_reduce_broadcast's (RootMin) in the mirror
        return super().fused_template(kind, k, bidirectional).reflected(k)
