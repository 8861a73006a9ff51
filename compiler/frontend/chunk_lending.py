"""A pipeline stage's chunk templates lent to the stages captured after it (chunk_replay.py copies them).

A 175B GPT on 16 stages has 14 middle stages whose chunks run the same ops on the same shapes: only their
parameters, their gradients and the ranks of their process groups differ. A stage whose micro-batch 0 records
exactly the ops and allocations a middle stage captured before it recorded at its micro-batch 0 (put on its own
ranks and storages) takes that stage's templates: its micro-batches 1 to M - 2 are all copies, and micro-batches 1
and 2 are not dispatched. Once one stage has (`Donor.proven`), the stages after it copy their micro-batch 0 from the
donor's as well, unchecked, as micro-batches 3 on copy micro-batch 1 once micro-batch 2 matched
(chunk_replay.ChunkReplay._copies_first: ranks of one stage); where that stage's last micro-batch (DDP's
synchronisation) was the donor's too (`Donor.proven_last`), they copy their last one as well and dispatch none of
their calls, the warm-up's last backward neither (_copies_last). A rank holding several stages (Interleaved1F1B's)
lends and borrows each of them by its place among the rank's stages. What a copy needs of the earlier rank is kept
here (`Donor`): its program (the template ops), which call made each storage, its calls of micro-batch 0 (checked,
or copied), 1 (copied) and the last (checked, or copied), the gradients its micro-batch 0 made, and the storages
that outlive a chunk (parameters, buffers, gradients) as each of those calls began, which map onto the borrowing
rank's own by their place in the optimizer's list (`kept_map`). A mapping that fails midway raises ReplayMismatch:
the stage is then captured again dispatching every micro-batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...network.errors import AstraError
from .storage_keys import storage_key
from .step_memory import local

# the chunk kinds a stage lends: a middle stage's forward and full backward (the last stage's loss, and the split
# backward of the zero-bubble schedules, which dispatch every micro-batch anyway, are not lent)
LENT_KINDS = ("forward", "full")


@dataclass
class Donor:
    coord: int                     # its pp coordinate
    ops: list                      # its program: the templates' ops
    origin: dict                   # storage -> (key, chunk, event, slot) of the call that made it
    firsts: dict                   # (place, kind) -> its Call of micro-batch 0 (place: the stage's on its rank)
    templates: dict                # (place, kind) -> its Call of micro-batch 1
    held: dict                     # ((place, kind), chunk) -> persistent() as that call began
    places: dict                   # id of each of its PipelineStages -> its place
    # (place, "full") -> per trained tensor, (the storage key, step_memory's storage) of the gradient its micro-batch
    # 0's backward left (None: none): the gradients a stage that copies that call as well takes as its own
    grads: dict = field(default_factory=dict)
    lasts: dict = field(default_factory=dict)   # (place, kind) -> its Call of the last micro-batch
    # a stage has taken its templates, its own micro-batch 0 checked against this donor's: the stages after it copy
    # their micro-batch 0 from the donor's too (chunk_replay.ChunkReplay._copies_first)
    proven: bool = False
    # that stage's last micro-batch was this donor's too: the stages after it copy theirs as well, and dispatch nothing
    # of their schedule (chunk_replay.ChunkReplay._copies_last)
    proven_last: bool = False


@dataclass
class Lender:
    """The donor the next stage's capture may borrow from (capture.py makes one per pipeline capture)."""
    axes: dict                     # the mesh axes, in the mesh's order
    donor: Donor | None = None
    _shifts: dict = field(default_factory=dict)

    def shift(self, to_coord: int) -> "RankShift":
        """The donor's ranks as pp coordinate `to_coord`'s."""
        key = (self.donor.coord, to_coord)
        if key not in self._shifts:
            self._shifts[key] = RankShift(self.axes, *key)
        return self._shifts[key]


def persistent(trained: list, buffers: list) -> list:
    """The storages of a stage that outlive its chunk calls, in order: each trained tensor's (its local shard) and
    its gradient's (None: none yet), then each buffer's."""
    out = []
    for p in trained:
        out.append(storage_key(local(p)))
        out.append(None if p.grad is None else storage_key(local(p.grad)))
    out += [storage_key(local(b)) for b in buffers]
    return out


def kept_map(theirs: list, mine: list) -> dict | None:
    """The donor's persistent storages -> this stage's, place by place (None: the modules differ, or one storage
    would stand for two). A place without a gradient on either side maps nothing."""
    if len(theirs) != len(mine):
        return None
    out: dict = {}
    for a, b in zip(theirs, mine):
        if a is None or b is None:
            continue
        if out.setdefault(a, b) != b:
            return None
    return out if len(set(out.values())) == len(out) else None


def log_shape(log: list) -> tuple:
    """A chunk call's allocations and frees (step_memory.StepMemory.log) without its storages: each allocation's
    bytes, stream, phase and tag, and each free by the allocation of the call it frees (-1: a storage made before
    the call). Two stages' calls of the same shape allocate and free alike."""
    made: dict = {}
    out = []
    for s, nbytes, stream, phase in log:
        if nbytes is None:
            out.append(made.get(id(s), -1))
        else:
            made[id(s)] = len(made)
            out.append((nbytes, stream, phase, s.tag))
    return tuple(out)


class NoImage(AstraError):
    """A rank of the donor's with no counterpart on the borrowing stage (its argument; chunk_replay turns it into
    ReplayMismatch)."""


class RankShift:
    """The donor's ranks as this stage's: the same place on the mesh but the pp coordinate. A group or peer of
    another pp coordinate than the donor's (which a chunk's own collectives never hold) has no image: NoImage."""

    def __init__(self, axes: dict, src: int, dst: int):
        sizes = list(axes.values())
        at = list(axes).index("pp")
        self.stride, self.pp, self.src = math.prod(sizes[at + 1:]), sizes[at], src
        self.delta = (dst - src) * self.stride
        self._groups: dict = {}

    def rank(self, r: int) -> int:
        if (r // self.stride) % self.pp != self.src:
            raise NoImage(r)
        return r + self.delta

    def apply(self, op) -> None:
        """Puts `op` (a fresh copy) on this stage's ranks."""
        if op.group:
            g = self._groups.get(op.group)
            if g is None:
                g = self._groups[op.group] = tuple(self.rank(r) for r in op.group)
            op.group = g
        if op.root >= 0:
            op.root = self.rank(op.root)
        if op.peer >= 0:
            op.peer = self.rank(op.peer)
