"""The interface every collective algorithm implements (one file per algorithm in this folder), and the transfer
templates the lowering expands.

An algorithm serves phases of some kinds (reduce_scatter, all_gather, all_to_all, broadcast, reduce) at one scope:
- `dimension`: on the k members of one topology dimension (ring, direct, halving-doubling, trees, in-switch);
- `ranks`: over every NPU at once by rank, each message routed across the dimensions (rank_ring, flat_direct, ...);
- `network`: over every NPU at once along chosen physical links (multitree, flat_ring), whose structure (trees, a
  cycle) a pass decides.

A phase's template (`Transfers`): at `step`, member `src` sends units [src_lo, src_hi) of its region to member `dst`,
which reduces (adds) or copies them into units [dst_lo, dst_hi) of its own. The region (the bytes the phase works
on) is split into `units` equal units (floor boundaries, so any byte count works). Reduce-scatter leaves member m
owning block m (units [m*P, (m+1)*P) with P = units // k); all-gather starts from that ownership; a broadcast's
template has its root at member 0, which starts with every unit (the lowering rotates members so the phase's root
is member 0); a reduce's is its broadcast's run backwards (`Transfers.mirrored`): every transfer reversed in
direction and in time, the receiver adding what comes in, so member 0 ends with the sum. `direction`
(+1 / -1 / 0) says which way round a Ring dimension a transfer goes (0: the shorter way).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..network.blocks import Symmetry
from ..network.errors import UserError
# the kinds, for the algorithm files (a plug-in among them) to import from here with the rest of the interface
from ..network.kinds import (ALL_GATHER, ALL_REDUCE_HALVES, ALL_TO_ALL, BROADCAST, PHASE_KINDS, REDUCE,  # noqa: F401
                             REDUCE_SCATTER, ROOTED)

DIMENSION, RANKS, NETWORK = "dimension", "ranks", "network"


@dataclass(frozen=True)
class Transfers:
    units: int
    steps: int
    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    src_lo: np.ndarray
    src_hi: np.ndarray
    dst_lo: np.ndarray
    dst_hi: np.ndarray
    reduce: np.ndarray      # bool per transfer
    direction: np.ndarray   # +1, -1, or 0 = shortest way
    # network-scope algorithms (members = NPUs of the whole network): the physical link (index into Topology.links())
    link: np.ndarray | None = None

    def of_member(self, member: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices (ascending) of the transfers `member` sends and of those it receives. Found through an index
        built once per template: a whole-network template has n^2 transfers, and scanning it for each of n NPUs
        would cost n^3."""
        send_order, send_starts, recv_order, recv_starts = self._by_member
        if not 0 <= member < len(send_starts) - 1:
            empty = np.zeros(0, np.int64)
            return empty, empty
        return (send_order[send_starts[member]:send_starts[member + 1]],
                recv_order[recv_starts[member]:recv_starts[member + 1]])

    @cached_property
    def _by_member(self):
        members = int(max(self.src.max(), self.dst.max())) + 1 if len(self.src) else 0
        out = []
        for col in (self.src, self.dst):
            order = np.argsort(col, kind="stable")  # stable: each member's transfers stay in template order
            out += [order, np.searchsorted(col[order], np.arange(members + 1))]
        return tuple(out)

    def mirrored(self) -> "Transfers":
        """The transfers run backwards: each one from its receiver to its sender, the last step first, received
        by adding. A broadcast from member 0 mirrored is a reduce to member 0: a member forwards a unit only after
        every transfer that brought it a contribution (those the broadcast sent on from it, later)."""
        return Transfers.from_columns(self.units, (self.steps - 1 - self.step, self.dst, self.src, self.dst_lo,
                                                   self.dst_hi, self.src_lo, self.src_hi, -self.direction)
                                      + ((self.link,) if self.link is not None else ()), reduce=True)

    def reflected(self, k: int) -> "Transfers":
        """The same transfers with member m played by k-1-m (the mirror image of a group of k members; member k,
        a dimension's switch, stays itself), each going round a ring the other way."""
        flip = lambda m: np.where(m < k, k - 1 - m, m)  # noqa: E731
        cols = [self.step, flip(self.src), flip(self.dst), self.src_lo, self.src_hi, self.dst_lo, self.dst_hi,
                self.reduce, -self.direction] + ([self.link] if self.link is not None else [])
        order = np.lexsort((cols[3], cols[2], cols[1], cols[0]))  # in from_columns's order
        cols = [c[order] for c in cols]
        return Transfers(self.units, self.steps, *cols[:9], cols[9] if len(cols) > 9 else None)

    def then(self, other: "Transfers") -> "Transfers":
        """These transfers, then `other`'s on the same units, its steps after these."""
        if other.units != self.units or (self.link is None) != (other.link is None):
            raise ValueError("templates on different units cannot run one after the other")
        cols = [np.concatenate([a, b]) for a, b in
                zip((self.step, self.src, self.dst, self.src_lo, self.src_hi, self.dst_lo, self.dst_hi, self.reduce,
                     self.direction), (other.step + self.steps, other.src, other.dst, other.src_lo, other.src_hi,
                                       other.dst_lo, other.dst_hi, other.reduce, other.direction))]
        link = None if self.link is None else np.concatenate([self.link, other.link])
        return Transfers(self.units, self.steps + other.steps, *cols, link)

    @staticmethod
    def empty(units: int) -> "Transfers":
        return Transfers.build(units, [], reduce=False)

    @staticmethod
    def build(units: int, rows: list[tuple], reduce: bool) -> "Transfers":
        """rows: (step, src, dst, src_lo, src_hi, dst_lo, dst_hi, direction[, link])."""
        width = len(rows[0]) if rows else 8
        return Transfers.from_columns(units, np.array(rows, dtype=np.int64).reshape(-1, width).T, reduce)

    @staticmethod
    def from_columns(units: int, cols, reduce: bool) -> "Transfers":
        """`build` from columns (step, src, dst, src_lo, src_hi, dst_lo, dst_hi, direction[, link]) of equal
        length: templates of k^2 transfers are built with array operations, not a Python tuple each."""
        cols = [np.asarray(c, np.int64) for c in cols]
        order = np.lexsort((cols[3], cols[2], cols[1], cols[0]))  # by step, then sender, receiver, first unit
        cols = [c[order] for c in cols]
        steps = int(cols[0].max()) + 1 if len(order) else 0
        return Transfers(units, steps, *cols[:7], np.full(len(order), reduce), cols[7],
                         cols[8] if len(cols) > 8 else None)


def same_units(step, src, dst, lo, hi, direction=0):
    """A row that sends units [lo, hi) to the same units of the receiver (every algorithm but all-to-all)."""
    return (step, src, dst, lo, hi, lo, hi, direction)


class Algorithm:
    """One collective algorithm. Subclasses in this folder register themselves (algorithms/__init__.py)."""
    order: int = 100                        # place in listings
    name: str = ""                          # the --algorithm name
    phase_name: str = ""                    # what a phase's `algorithm` attribute holds (default: the name)
    aliases: tuple[str, ...] = ()           # further spellings (lower case, no separators)
    scope: str = DIMENSION
    kinds: tuple[str, ...] = ALL_REDUCE_HALVES
    blocks: tuple[str, ...] | None = None   # dimension scope: the blocks it runs on (None: any)
    # how member m runs member 0's part of a phase on one dimension (network/blocks/base.py: ROTATION, XOR, ANY);
    # None: members run different parts (trees), NPU 0 stands for no other
    relabelling: str | None = None
    label: str = ""                         # reports: how a whole-network pipeline with this algorithm is named
    takes_ports: bool = False               # honours --ports (new tree edges an NPU may start per step)
    power_of_two: bool = False              # needs a group of 2^n members
    planned_by: str = ""                    # the pass that decides its structure (trees, a cycle, a placement)
    fuses_all_reduce: bool = False          # an all-reduce over one dimension runs as one pass (in_switch)
    in_network: bool = False                # switches reduce and multicast (the ideal all-reduce is then lower)
    # ASTRA-sim conventions an algorithm may follow (astra_sim_*.py): chunk by chunk its fused all-reduce passes
    # take the template and its mirror image (member m as k-1-m) in turn, even chunks the template; a member's step
    # ends once its own messages are sent, not once they have arrived (the runtimes read it in meta.json:
    # ends_on_send)
    mirrored_chunks: bool = False
    ends_on_send: bool = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.name and not cls.__dict__.get("phase_name"):
            cls.phase_name = cls.name

    def check(self, kind: str, k: int, where: str) -> None:
        """Refuse (UserError, one line) a phase this algorithm has no schedule for: `kind` on a group of k
        members (`where` names the group: 'dimension 1', 'the network')."""
        if kind not in self.kinds:
            raise UserError(f"{self.name} has no {kind} schedule")
        if self.power_of_two and k & (k - 1):
            raise UserError(f"{self.phase_name} needs a power-of-two group, {where} has {k} NPUs")

    def symmetry(self, kind: str, block, k: int) -> Symmetry:
        """How far member 0 stands for every member of a `kind` phase on k members of `block` (a dimension's
        building block): the block says what this algorithm's relabelling keeps of its links. A broadcast's root
        sends what the others receive, a reduce's receives what they send: no member stands for another."""
        if self.relabelling is None or kind in ROOTED:
            return Symmetry.NONE
        return block.symmetry(self.relabelling, k)

    # ---- dimension and ranks scope ----------------------------------------------------------------------

    def template(self, kind: str, k: int, bidirectional: bool = False) -> Transfers:
        """The transfers of a reduce-scatter, all-gather, broadcast or reduce phase on k members (`bidirectional`:
        each member links to both ring neighbours, as on a Ring dimension)."""
        raise NotImplementedError(f"{self.name} has no template")

    def fused_template(self, kind: str, k: int, bidirectional: bool = False) -> Transfers:
        """An all-reduce on one dimension run as one pass per chunk (select-algorithm marks its halves `fused`):
        the reduce-scatter phase carries the reduce-scatter's transfers and then the all-gather's, the all-gather
        phase none. ASTRA-sim runs an all-reduce phase on a dimension so: a chunk's all-gather follows its own
        reduce-scatter before the dimension takes up the next chunk."""
        reduce_scatter = self.template(REDUCE_SCATTER, k, bidirectional)
        if kind == REDUCE_SCATTER:
            return reduce_scatter.then(self.template(ALL_GATHER, k, bidirectional))
        return Transfers.empty(reduce_scatter.units)

    def exchanges(self, k: int, bidirectional: bool) -> tuple[tuple[int, int, int, int, int], ...]:
        """All-to-all along one dimension, in place, as pairwise exchanges of slot groups: (step, src, dst, x,
        direction) for every slot group sent (a slot is the buffer piece for one destination NPU of the group; the
        group sent holds the slots whose coordinate in this dimension is x). The receiver stores it at coordinate
        x XOR src XOR dst: for direct and ring x = dst, so the slot lands at the sender's coordinate, and after
        every dimension slot j of NPU n holds what NPU j had for n. Each exchange is a swap: what a member
        receives in a step overwrites only what it sent in that step."""
        raise UserError(f"no all_to_all schedule for {self.name}")

    def footprint(self, kind: str, k: int, bidirectional: bool = False) -> int:
        """Transfers of a `kind` phase on k members (its template's rows, or an all-to-all's exchanges), counted
        without building them: the resource estimate (compiler/driver/resources.py) asks before any work is done.
        An algorithm whose transfers grow with k gives its closed form (tests/test_resources.py holds each to its
        template). This default counts a template small enough to build (a network-scope template needs its
        plan: none is built), and beyond that assumes every member sends to every other in each of k-1 steps, more
        than any algorithm here sends."""
        if k <= 64 and self.scope != NETWORK:
            if kind == ALL_TO_ALL:
                return len(self.exchanges(k, bidirectional))
            return len(self.template(kind, k, bidirectional).step)
        return k * (k - 1) ** 2

    def plan_size(self, npus: int) -> int:
        """Entries the pass that plans this algorithm (`planned_by`) holds while searching a network of `npus`
        NPUs, for the resource estimate (0: nothing that grows faster than the network)."""
        return 0

    def cost_steps(self, kind: str, block, k: int, link: float, hop, region: float) -> list[tuple[float, float]]:
        """(latency, transfer) in ns of every step of a phase on a chunk's region of `region` bytes, for the
        ordering passes: `link` is one link's bandwidth in bytes per ns, `hop(distance)` the latency to a partner
        that many members away (the block's hops times the latency). Trees may return one entry for all steps."""
        raise ValueError(f"no cost model for {self.name}")

    # ---- over the whole network: what the planning pass recorded (planned_by) ---------------------------
    # The lowering reads a phase's structure op (comm.trees, comm.cycle, comm.placement: its attributes) through
    # these, once per schedule, and never asks which algorithm it holds.

    def read_plan(self, topology, attributes: dict, links):
        """The decision `planned_by` recorded (the attributes of its structure op), checked against the network:
        trees, a cycle, a placement. `links`: Topology.links(), the order the searches used."""
        return attributes

    def network_template(self, kind: str, topology, plan, links) -> Transfers:
        """Network scope: the transfers of a reduce-scatter or all-gather over every NPU (members are ranks) along
        the `plan` read_plan gave; each transfer's `link` indexes `links`, or is -1 where routes() routes it."""
        raise NotImplementedError(f"{self.name} has no template over the network")

    def network_symmetry(self, topology, plan, links) -> Symmetry:
        """Network scope: how far NPU 0 stands for every NPU of a phase run along `plan` (translated trees: NPU 0's
        steps, moved, are every NPU's)."""
        return Symmetry.NONE

    def routes(self, topology, n: int):
        """Network scope: (dim, lane) of the n transfers of a template the runtime routes NPU to NPU (tree edges
        through switches), or None where each transfer names its physical link."""
        return None

    # network scope: a reduce-scatter crosses each template link against its direction (trees reduce up the edges
    # the all-gather runs down: the same dimension, the other lane of a ring)
    reduce_scatter_reverses_links: bool = False

    def rank_map(self, plan) -> np.ndarray | None:
        """Ranks scope: the NPU of each virtual rank the template runs over (HDRM's placement), or None: ranks
        are NPUs."""
        return None
