"""The interface every building block of a network dimension implements (one file per block in this folder).

A dimension of k NPUs joined by one block: NPU coordinate c in 0..k-1 along the dimension, rank stride `stride`
(rank = base + c * stride: network/coords.py's `coordinate` and `group_base`). Every method is vectorised over NPUs
or messages (numpy arrays in, arrays out), so the lowering, the runtimes and the passes ask the block instead of
branching on its name.

Link numbering (the one numbering of the project, network/links.py): each NPU owns `slots(k)` link ids in each
dimension, id = offset[dim] + npu * slots + slot; the block says what each slot is (`describe`).
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np

# a message's lane: 0 forward (to the next member), 1 backward, 2 the shorter way round (ties forward)
FORWARD, BACKWARD, SHORTEST = 0, 1, 2

# How member m of a group runs member 0's part of a phase (an algorithm's `relabelling`, algorithms/base.py): with
# every member c moved to c + m (mod k), to c XOR m, or (ANY) member 0 treats every other member alike, so any
# relabelling will do (every member sends to every other, or to the switch). The block says what it keeps.
ROTATION, XOR, ANY = "rotation", "xor", "any"


class Symmetry(IntEnum):
    """How far NPU 0 stands for every NPU of a phase (the weakest phase decides for a schedule): NONE, not at
    all; STEPS, every NPU runs a relabelling of NPU 0's steps with the same sizes and link counts (the analytical
    runtime may run NPU 0 alone); LINKS, the relabelling also maps the network's links onto links, so NPU 0's
    links stand for every link of their class (the congestion runtime may too)."""
    NONE = 0
    STEPS = 1
    LINKS = 2


class Block:
    name: str = ""                      # canonical name, as ASTRA-sim writes it (Ring, FullyConnected, Switch)
    spellings: tuple[str, ...] = ()     # how the notation writes it, canonical first: Ring(k), FC(k), ...
    aliases: tuple[str, ...] = ()       # further lower-case spellings the notation and files accept
    order: int = 100                    # place in listings (error messages, docs)
    listed: bool = True                 # written in the notation as Name(k)
    stackable: bool = True              # can be one dimension among several (a Graph stands alone)
    neighbour_links: bool = False       # each NPU links to its next and previous member: rings run both ways
    direct: bool = True                 # members are joined by links between NPUs (no switch in between)
    transitive: bool = True             # every member sees the same links: relabelling maps one onto another
    translatable: bool = False          # moving every member c to c + r (mod k) maps links onto links (a ring, FC)
    has_switch: bool = False            # the members hang off one switch a table row may address (peer -1)

    def subgroup(self, k: int, size: int, stride: int, gbps: float, latency_ns: float) -> tuple[float, float] | None:
        """(bandwidth GB/s, latency ns) of a dimension standing for a process group of `size` of the k members
        (consecutive ones when stride is 1, else every stride-th), while every such group of the dimension works at
        once, as a mesh axis's groups do; None when this block cannot say (the group is refused)."""
        return None

    def check_size(self, k: int) -> None:
        """Refuse (UserError) a size this block cannot have."""

    def symmetry(self, relabelling: str, k: int) -> Symmetry:
        """What a phase whose members run member 0's part under `relabelling` (ROTATION, XOR or ANY) keeps on k
        members of this block: the links crossed from every member (STEPS), and the links themselves (LINKS). A
        transitive block's members all see the same links, whichever relabelling (FullyConnected, Switch)."""
        return Symmetry.LINKS if self.transitive else Symmetry.NONE

    # ---- bandwidth and distance -----------------------------------------------------------------------------

    def link_share(self, k: int) -> int:
        """How many links share an NPU's bandwidth in this dimension (each link gets bandwidth / share)."""
        raise NotImplementedError

    def default_algorithm(self, k: int) -> str:
        """The algorithm a phase on this block runs unless told otherwise (select-algorithm)."""
        raise NotImplementedError

    def default_for(self, k: int, kind: str) -> str:
        """The default for a phase of this kind (reduce_scatter, all_to_all, ...): default_algorithm unless the
        block knows better for that kind."""
        return self.default_algorithm(k)

    def path(self, k: int, src: np.ndarray, dst: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hops, lane) of messages from coordinate src to dst: the links crossed and the lane actually taken (a
        ring resolves SHORTEST to FORWARD or BACKWARD). src != dst."""
        raise NotImplementedError

    def cost_hops(self, k: int, distance: int) -> int:
        """Hops the phase-cost estimates charge for partners `distance` members apart (passes/phase_cost.py)."""
        raise NotImplementedError

    # ---- the link numbering -------------------------------------------------------------------------------

    def slots(self, k: int) -> int:
        """Link ids each NPU owns in this dimension."""
        raise NotImplementedError

    def route(self, k: int, stride: int, src: np.ndarray, dst: np.ndarray, lane: np.ndarray, hops: np.ndarray,
              representative: bool) -> tuple[np.ndarray, np.ndarray]:
        """Links of messages inside this dimension, as (owner NPU, slot) per link, messages' links in order and
        messages one after another (message i has `lengths(...)[i]` links). `representative`: NPU 0's links stand
        for every NPU's of the same class (symmetric execution)."""
        raise NotImplementedError

    def lengths(self, hops: np.ndarray) -> np.ndarray:
        """Links per message of `route` (hops for NPU-to-NPU blocks, 2 through a switch)."""
        return hops

    def describe(self, d: int, npu: int, slot: int, k: int, stride: int) -> str:
        """A readable name of NPU `npu`'s link `slot` in dimension d."""
        raise NotImplementedError

    # ---- the physical links (the search order of tree and cycle builders) -----------------------------------

    def physical_links(self, ranks: np.ndarray, c: np.ndarray, base: np.ndarray, k: int, stride: int,
                       first_switch: int) -> tuple[np.ndarray, ...]:
        """Every directed link of this dimension over all NPUs (ranks, their coordinates c, base = rank with
        c = 0), in the order tree and cycle searches visit them: (src node, dst node, lane, owner NPU, slot,
        switches added); (owner, slot) is the link's place in the numbering. Switch nodes count from
        `first_switch`."""
        raise NotImplementedError
