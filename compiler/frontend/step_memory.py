"""Memory per rank of the recorded step: the live bytes of every tensor storage, op by op, and their peak.

The capture runs the real step on FakeTensors, so the storages a GPU would allocate exist here too, with their
sizes. The recorder (recorder.py) reports each op's tensors: a storage first seen as an op's output is allocated by
that op; one first seen as an input was live before the step began (parameters, optimizer states, DDP's buckets,
the batch). A storage is freed when torch frees it: its Python object lives exactly as long as the storage
(PyTorch keeps a storage's Python object alive with it), so a weak reference to it reports the free. FSDP2
allocates and frees its unsharded parameters by resizing a storage in place (`UntypedStorage.resize_`), which
`watching` reports. Each allocation is made on the stream current then (FSDP2 allocates its all-gather buffers and
gradient shards on streams of its own; the caching allocator keeps each stream's blocks apart). What is live at the peak, the figure `torch.cuda.max_memory_allocated` gives, is
classified by what each storage held: parameters (and buffers), gradients (what the optimizer finds in `.grad`),
optimizer states, communication buffers (a collective's input or output, FSDP2's resized unsharded parameters),
activations (made in the forward pass and kept for backward) and other (the rest: backward's intermediates, the
optimizer's temporaries, the batch). The categories sum to the peak. The bytes PyTorch's caching allocator
reserves for them: caching_allocator.py. docs/memory.md, "Memory per rank", says what is not counted.
"""
from __future__ import annotations

import contextlib
import weakref

import torch

from ...network.memory_record import CATEGORIES, PHASES
from ..core.forked import Forked
from .caching_allocator import reserved_bytes
from .storage_keys import storage_serial

# The CUDA caching allocator rounds every allocation up to a multiple of 512 bytes (kMinBlockSize); the
# allocated-bytes statistics, max_memory_allocated among them, count the rounded sizes.
ALLOCATOR_BLOCK = 512
BEFORE_STEP = -1   # the clock of storages live when the step began
HELD = -1          # StepMemory.log's stream of a storage first seen in a logged call but live since the step began
# a step's allocations from which result(later=True) replays the caching allocator in a forked child: below it the
# replay (about a microsecond an allocation) takes no longer than forking a capture's process
FORKED_FROM = 50_000


def rounded(nbytes: int) -> int:
    return -(-int(nbytes) // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK


class _Storage:
    """One storage's tag and its current block: (bytes, clock it was allocated at, clock it was freed at)."""
    __slots__ = ("tag", "block", "ref", "resized", "key")

    def __init__(self, tag: str):
        self.tag, self.block, self.ref = tag, None, None
        self.key = None        # the recorder's key of the storage it is (storage_keys.py), told when it is freed
        self.resized = False   # resized in place (FSDP2's gathered parameters): StepMemory.replay


class StepMemory:
    """The storages of one recorded step; `result()` the peak and what was live at it. `forget(key)` is called with
    a storage's key (storage_keys.py) when it is freed (the recorder drops what it knew of it)."""

    def __init__(self, forget=None):
        self._forget = forget
        self._live: dict[int, _Storage] = {}   # storage address -> what it holds
        self._blocks: list[list] = []          # [bytes, allocated at, freed at (None: live), _Storage, stream]
        self._streams = {id(torch.cpu.current_stream()): 0}   # the stream current now is the compute stream, 0
        self._clock = 0                        # one tick per allocation or free
        self._now = 0                          # bytes live now
        self.peak, self._peak_at, self.peak_phase = 0, BEFORE_STEP, ""
        # each phase's own peak (forward, backward, optimizer): plan's reduced depth extrapolates them apart, as the
        # step's peak may move from one phase to another with depth (compiler/plan/rank.py)
        self.phase_peaks: dict[str, int] = {}
        self._phase = ""
        self.recording = True
        # while a pipeline chunk copied later runs (chunk_replay.py): its allocations (storage, bytes, stream, phase)
        # and frees (storage, None, None, None) in order, replayed for each copy (`replay`), which allocates nothing
        self.log: list | None = None

    # what was live when the step began, tagged by what holds it
    def held_before(self, tensors, tag: str) -> None:
        for t in tensors:
            _upgrade(self._storage(t, tag, True), tag)

    def tag(self, tensors, tag: str) -> None:
        """Storages live now that hold `tag` (the gradients the optimizer steps with, a collective's buffers)."""
        for t in tensors:
            s = self._live.get(_key(t))
            if s is not None:
                _upgrade(s, tag)

    def saw(self, inputs, outputs, phase: str, collective: bool, mutates: bool, view: bool) -> bool:
        """An op ran: storages new among its inputs were live before the step, new among its outputs it allocated
        (a view or an op that writes in place allocates nothing); a collective's buffers are communication buffers.
        A real tensor (built outside fake mode: DDP's buckets) is counted as itself; what fake mode makes of it
        for the op (a fake twin on the same bytes) allocates nothing. Returns whether the op made such twins."""
        self._phase = phase
        twins = any(type(t) is torch.Tensor for t in inputs)
        if view and not twins:
            return False
        for t in inputs:
            if _key(t) not in self._live:
                self._storage(t, "other", True)
        made = "twin" if twins or mutates or view else "activations" if phase == "forward" else "other"
        for t in outputs:
            if _key(t) not in self._live:
                self._storage(t, made, False)
        if collective:
            self.tag(inputs + outputs, "communication")
        return twins

    def to_host(self, t) -> None:
        """An activation moved to the host (save_on_cpu): its device bytes are freed here."""
        s = self._live.get(_key(t))
        if s is not None:
            self._close(s)
            s.block = None

    def resized(self, storage, nbytes: int, before: int) -> None:
        """A storage resized in place (FSDP2's unsharded parameters) from `before` bytes to `nbytes`: its old bytes
        freed, the new ones allocated. One first seen here held its `before` bytes since the step began (none
        where FSDP2 freed it at the end of the step before, the usual case)."""
        key = storage._cdata
        s = self._live.get(key)
        if s is None:
            s = self._register(storage, "communication", True, before)
        s.resized = True
        _upgrade(s, "communication")
        self._close(s)
        s.block = None
        if nbytes > 0:
            self._open(s, nbytes, False)

    def _storage(self, t, tag: str, before: bool) -> _Storage:
        storage = t.untyped_storage()
        s = self._live.get(storage._cdata)
        return s if s is not None else self._register(storage, tag, before)

    def _register(self, storage, tag: str, before: bool, nbytes: int | None = None) -> _Storage:
        """A storage first seen, of `nbytes` (None: its size now): `tag` "twin" stands for bytes counted as another
        storage (never counted here)."""
        key = storage._cdata
        s = self._live[key] = _Storage("other" if tag == "twin" else tag)
        s.key = storage_serial(storage)
        s.ref = weakref.ref(storage, lambda _, key=key, s=s: self._freed(key, s))
        nbytes = storage.nbytes() if nbytes is None else nbytes
        if nbytes > 0 and tag != "twin":
            self._open(s, nbytes, before)
        return s

    def _open(self, s: _Storage, nbytes: int, before: bool) -> None:
        nbytes = rounded(nbytes)
        if before:   # live since the step began (on the compute stream): at the peaks found so far too
            s.block = [nbytes, BEFORE_STEP, None, s, 0]
            self._before(nbytes)
            if self.log is not None:   # first seen in a logged call (DDP's buckets in the last backward)
                self.log.append((s, nbytes, HELD, None))
        else:
            self._clock += 1
            s.block = [nbytes, self._clock, None, s, self._stream()]
            if self.log is not None:
                self.log.append((s, nbytes, s.block[4], self._phase))
        self._add(s.block)

    def _before(self, nbytes: int) -> None:
        """`nbytes` found live since the step began: they were at every peak found so far too."""
        self.peak += nbytes
        for phase in self.phase_peaks:
            self.phase_peaks[phase] += nbytes

    def _add(self, block: list) -> None:
        self._blocks.append(block)
        self._now += block[0]
        if self._phase and self._now > self.phase_peaks.get(self._phase, -1):
            self.phase_peaks[self._phase] = self._now
        if self._now > self.peak:
            self.peak, self._peak_at, self.peak_phase = self._now, self._clock, self._phase

    def _stream(self) -> int:
        """The stream allocations are made on now, numbered in the order first seen (0: the compute stream). The
        capture's device is the host, whose torch.cpu streams FSDP2 enters as it would CUDA's."""
        return self._streams.setdefault(id(torch.cpu.current_stream()), len(self._streams))

    def _close(self, s: _Storage) -> None:
        if s.block is not None and s.block[2] is None:
            self._clock += 1
            s.block[2] = self._clock
            self._now -= s.block[0]
            if self.log is not None:
                self.log.append((s, None, None, None))

    def replay(self, log: list, copies: dict, held: bool = False) -> None:
        """A copied chunk's allocations and frees: its template's `log`, each storage it allocated a fresh one of the
        same bytes, stream and tag (entered in `copies`, template storage -> the copy's, which the copy's later
        calls free: a backward the activations of its forward); a free of a storage the copies do not hold (live
        before the template's micro-batch) is the template's alone. A storage resized in place (FSDP2's gathered
        parameters, the stage's own whose template is its own) is allocated and freed itself, as the template did.
        A storage the template found live since the step began (HELD) is the template's too, unless `held`: a copy
        of another stage's last backward, whose storages live since the step began that nothing else touches (DDP's
        buckets) are then the copy's."""
        close, peaks = self._close, self.phase_peaks
        for s, nbytes, stream, phase in log:   # once per allocation of every copy: _add inline
            if stream == HELD:
                if held:
                    c = copies[s] = _Storage(s.tag)
                    self._open(c, nbytes, True)   # (no call is logged while a copy is made)
                continue
            if s.resized:   # a storage resized in place is the stage's own: resized by the copy as by the template
                close(s)
                if nbytes is None:
                    s.block = None
                else:
                    self._clock += 1
                    self._phase = phase
                    s.block = [nbytes, self._clock, None, s, stream]
                    self._add(s.block)
                continue
            if nbytes is None:
                c = copies.pop(s, None)   # freed once: the map keeps only what a later call may free
                if c is not None:
                    close(c)
                continue
            c = copies[s] = _Storage(s.tag)
            self._clock += 1
            self._phase = phase
            c.block = block = [nbytes, self._clock, None, c, stream]
            self._blocks.append(block)
            self._now += nbytes
            if phase and self._now > peaks.get(phase, -1):
                peaks[phase] = self._now
            if self._now > self.peak:
                self.peak, self._peak_at, self.peak_phase = self._now, self._clock, phase

    def holding(self, t):
        """The storage a tensor's bytes are counted as (None: not seen by any op yet)."""
        return self._live.get(_key(t))

    def adopt(self, storage, s: _Storage) -> None:
        """A real storage standing in for a copied chunk's result (chunk_replay.py) is the copy's storage `s`:
        freed when torch frees it, as the result would be."""
        key = storage._cdata
        self._live[key] = s
        s.key = storage_serial(storage)
        s.ref = weakref.ref(storage, lambda _, key=key, s=s: self._freed(key, s))

    def _freed(self, key: int, s: _Storage) -> None:
        if not self.recording or self._live.get(key) is not s:
            return
        del self._live[key]
        self._close(s)
        if self._forget is not None:
            self._forget(s.key)

    def result(self, expandable_segments: bool = False, later: bool = False) -> dict:
        """The peak of live bytes over the step (as max_memory_allocated), when (its phase) and what it held, bytes
        per category (CATEGORIES, summing to the peak), the bytes the caching allocator reserves for the step
        (as max_memory_reserved; `expandable_segments`: the allocator's option of that name on), and each phase's
        own peak of live bytes (the phases that allocated). `later`: the reserved bytes are a core.forked.Forked,
        replayed on another core while the caller goes on (a pipeline's next stage captured), which `settled`
        turns into the number (a step of fewer than FORKED_FROM allocations: replayed here at once)."""
        self.recording = False
        held = dict.fromkeys(CATEGORIES, 0)
        for nbytes, born, died, s, _ in self._blocks:
            if born <= self._peak_at and (died is None or died > self._peak_at):
                held[s.tag] += nbytes
        return {"peak_bytes": self.peak, "peak_phase": self.peak_phase, **{f"{c}_bytes": b for c, b in held.items()},
                "reserved_bytes": Forked(self._reserved, expandable_segments)
                if later and len(self._blocks) >= FORKED_FROM else self._reserved(expandable_segments),
                "phase_peak_bytes": {p: self.phase_peaks[p] for p in PHASES if p in self.phase_peaks}}

    def _reserved(self, expandable_segments: bool) -> int:
        """What PyTorch's caching allocator reserves for this step's tensors (caching_allocator.py): the blocks
        live before the step, then the step's allocations (each on its stream) and frees in order, twice (the
        steady state: a third run reserves nothing more on the calibration runs)."""
        before, events = [], []
        for i, (nbytes, born, died, _, stream) in enumerate(self._blocks):
            ident = ("b", len(before)) if born == BEFORE_STEP else ("s", i)
            if born == BEFORE_STEP:
                before.append(nbytes)
            else:
                events.append((born, ident, nbytes, stream))
            if died is not None:
                events.append((died, ident, None, None))
        events.sort(key=lambda e: e[0])
        return reserved_bytes(before, [e[1:] for e in events], expandable=expandable_segments)


def settled(result: dict) -> dict:
    """A StepMemory.result(later=True) with its reserved bytes worked out (waiting for them where they are not yet)."""
    reserved = result["reserved_bytes"]
    return {**result, "reserved_bytes": reserved.result()} if isinstance(reserved, Forked) else result


def _upgrade(s: _Storage, tag: str) -> None:
    """A storage tagged by what it held that ranks first (a parameter is a parameter even as a collective's input)."""
    if CATEGORIES.index(tag) < CATEGORIES.index(s.tag):
        s.tag = tag


def _key(t) -> int:
    return t.untyped_storage()._cdata


def local(t):
    """A parameter's or state's storage on this rank: a DTensor's local shard, a plain tensor itself."""
    return getattr(t, "_local_tensor", t)


def state_tensors(optimizer) -> list:
    """The optimizer's states and those of the torch optimizers it holds (ZeroRedundancyOptimizer's `optim` on
    this rank's shard, a mixed-precision wrapper's AdamW on its fp32 masters), whose wrapper's own `state` is empty.
    The masters themselves, tensors in a list of the wrapper's, are not told from other tensors: `other`."""
    from torch.utils._pytree import tree_leaves
    out, seen, todo = [], set(), [optimizer]
    while todo:
        opt = todo.pop()
        if id(opt) in seen:
            continue
        seen.add(id(opt))
        out += [local(v) for v in tree_leaves(list(getattr(opt, "state", {}).values())) if isinstance(v, torch.Tensor)]
        todo += [v for v in getattr(opt, "__dict__", {}).values() if isinstance(v, torch.optim.Optimizer)]
    return out


def trained_tensors(model, optimizer) -> list:
    """The module's parameters, then those the optimizer trains that the module does not list (built-in TP under
    DDP), each once."""
    out = list(model.parameters())
    seen = {id(p) for p in out}
    for g in getattr(optimizer, "param_groups", ()):
        for p in g["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


@contextlib.contextmanager
def watching(memory: StepMemory, model, optimizer):
    """While the recorded step runs: the model's parameters, buffers and the optimizer's states as live before it,
    the gradients the optimizer steps with tagged as they are, and storages resized in place reported."""
    import torch
    memory.held_before([local(t) for t in [*trained_tensors(model, optimizer), *model.buffers()]], "parameters")
    memory.held_before(state_tensors(optimizer), "optimizer_states")

    def grads(opt, args, kwargs):
        memory.tag([local(p.grad) for g in opt.param_groups for p in g["params"] if p.grad is not None], "gradients")
    hook = optimizer.register_step_pre_hook(grads) if hasattr(optimizer, "register_step_pre_hook") else None
    resize = torch.UntypedStorage.resize_

    def resize_(storage, size):
        before = storage.nbytes()   # a storage first seen here is counted at its size before the resize
        out = resize(storage, size)
        if memory.recording:
            memory.resized(storage, int(size), before)
        return out
    torch.UntypedStorage.resize_ = resize_
    try:
        yield memory
    finally:
        torch.UntypedStorage.resize_ = resize
        if hook is not None:
            hook.remove()
