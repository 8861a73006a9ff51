"""A pipeline stage's micro-batches (or gradient accumulation's) dispatched once: later chunks recorded as copies of
an earlier one.

torch's schedule runs as it is (the order of forwards, backwards, sends and receives is torch's own), but
PipelineStage's chunk execution is hooked (`forward_maybe_with_nosync`, `backward_maybe_with_nosync`: every
schedule, GPipe to zero-bubble, goes through them, for each backward type: full, input, weight). Per stage and
kind of call, micro-batches 0, 1 and 2 and the last run for real; micro-batch 1 is the template, and the ops of
micro-batch 2 are predicted from it and compared with what it recorded: where they are equal, micro-batches 3 to
M - 2 are not dispatched at all but appended as copies of the template, each op's dependencies found as the
recorder finds them (recorder.py: the last writer of each storage it touches), with the template's storages
mapped onto the copy's: its arguments onto the call's own, the storages it created onto fresh ones, the
activations an earlier call of the same micro-batch created onto that call's (a backward onto its forward),
everything else (parameters, gradients being accumulated) kept. A prediction that differs raises ReplayMismatch,
and the stage is captured again with every micro-batch dispatched (capture.py). The warm-up step, which records
nothing, dispatches micro-batch M - 1 only (the last stage micro-batch 0's forward too, for the shapes its
stand-ins take: the others' come from the chain of stage shapes; and M - 2 where the rank trains DTensor
parameters outside FSDP2: `dtensor_gradients`), and none of the schedule's sends and receives.
Gradient accumulation's micro-batches (capture.py's loop, not a schedule's) go through the same calls, each
micro-batch's forward and backward as one (`micro_batch`).

A middle stage may take an earlier middle stage's templates instead of its own (chunk_lending.py): where its
micro-batch 0 records what that stage's did, its micro-batches 1 to M - 2 are all copies, and neither 1 nor 2 runs;
once one has, the stages after it copy their micro-batch 0 from that stage's too (`_copies_first`), and where its
last micro-batch matched as well, their last one (`_copies_last`: nothing of their schedule is dispatched but the
warm-up's last forward).

A stage sharded by FSDP2 gathers its parameters in a call or not by the call before it: each variant of a call (its
kind, the kind before it) has its own template, checked on its second call (`_sharded_chunk`).

Capture cost then stays flat in the number of micro-batches; the workload is the same op for op (tested against
the capture that dispatches every micro-batch). So is the memory per rank: a copy allocates and frees what its
template did (step_memory.StepMemory.replay), on storages of its own, its stand-in results adopting the storages
the template's results had, and holding the arguments the template's results' autograd graph held.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

from ...network.errors import AstraError
from ..core import heap
from .chunk_lending import LENT_KINDS, Donor, Lender, NoImage, kept_map, log_shape, persistent
from .storage_keys import storage_key   # the recorder's key of a storage
from .step_memory import local
from .workload import COMPUTE, LOAD, STORE, Op

TEMPLATE, CHECKED = 1, 2   # the micro-batch copied, the one its prediction is checked on
LAST = -1                  # the last micro-batch's calls, as a donor keeps them (chunk_lending.Donor.held)


# micro-batches from which a capture copies chunks: the fewest with one copy (0, 1, 2 and the last run)
REPLAY_FROM = 5


# a schedule whose ranks hold several stages and copy chunks all the same: each stage's calls have their own
# template (calls are keyed by stage), a backward is one call per micro-batch as in 1F1B, and each stage runs its
# micro-batches in torch's interleaved order. Not LoopedBFS (its backwards come in another order than its
# forwards, which the replay notices and then dispatches every micro-batch: twice the work), the zero-bubble
# schedules or DualPipeV (their weight-gradient calls run apart from the input-gradient ones): those dispatch
# every micro-batch (tests/test_chunk_replay.py compares each kind with the capture that does)
LOOPED = ("ScheduleInterleaved1F1B",)


def replays_microbatches(count: int) -> bool:
    """Does a step of `count` micro-batches (gradient accumulation's, or a pipeline rank's) copy some? From
    REPLAY_FROM."""
    return count >= REPLAY_FROM


def dtensor_gradients(model, trained: list) -> bool:
    """Does the rank train DTensor parameters outside FSDP2 (tensor parallelism without DDP, which makes them
    local tensors)? Their gradients accumulate through DTensor's dispatch, whose first in-place add decides and
    caches its sharding with ops of its own (a new gradient and a copy): a warm-up whose only real backward finds
    the gradients unset adds none, and the recorded step's micro-batch 1 would pay for it, unlike micro-batch 2
    (and unlike a training loop's later steps), so the stage was captured again dispatching every micro-batch. The
    warm-up then also runs micro-batch M - 2 of a pipeline stage, so that M - 1's backward adds into the gradients
    M - 2 left, as the recorded step's micro-batches do (gradient accumulation's warm-up runs micro-batch 0's whole,
    so M - 1 adds to its gradients already). FSDP2 accumulates its gradient shards outside autograd's
    accumulation."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
    return any(isinstance(p, DTensor) for p in trained) and not any(isinstance(m, FSDPModule)
                                                                     for m in model.modules())


def replays(rp) -> bool:
    """Does a recorded rank's pipeline copy chunks? A rank holding one stage, or several under a LOOPED schedule,
    over REPLAY_FROM micro-batches or more."""
    return replays_microbatches(rp.microbatches) and (len(rp.stages) == 1 or type(rp.schedule).__name__ in LOOPED)


class ReplayMismatch(AstraError):
    """A micro-batch's ops are not the template's: capture the stage again dispatching every micro-batch (the
    capture catches it; under the one error base like every error class of the package)."""


@dataclass
class Call:
    """One recorded (or replayed) chunk call: where its ops lie and which storages it touched."""
    key: tuple                     # (id of the PipelineStage, kind: forward | full | input | weight)
    chunk: int
    start: int = 0                 # its ops: recorder.ops[start:end]
    end: int = 0
    args: list = field(default_factory=list)      # storages of its tensor arguments, in order
    results: list = field(default_factory=list)   # storages of the tensors it returned (None: not a tensor)
    events: list = field(default_factory=list)    # (first op, end op, storages read, storages written)
    created: dict = field(default_factory=dict)   # storage first written here -> (event, slot)
    slots: dict = field(default_factory=dict)     # (event, slot) -> storage
    views_before: int = 0
    views_after: int = 0
    replayable: bool = True
    copied: bool = False               # appended as a copy of the template, not dispatched
    writer_before: dict | None = None   # micro-batch CHECKED: the recorder's writers as the call began
    memory: list | None = None   # the template: its allocations and frees (step_memory.StepMemory.log)
    result_storages: list = field(default_factory=list)   # the template: step_memory's storage of each result
    held_args: set = field(default_factory=set)   # the template: its arguments its results' autograd graph holds
    created_at: dict | None = None   # the template: `created` by event (_created_at)
    memory_shape: tuple | None = None   # a stage that may lend or borrow: chunk_lending.log_shape(memory)
    fsdp_before: tuple | None = None   # a stage FSDP2 shards: its units gathered or not as the call began
    fsdp_after: tuple | None = None    # and as it ended (ChunkReplay._fsdp_state)


@dataclass
class _Source:
    """Where a copy's template lies: this stage's own calls, or a donor's (chunk_lending.py)."""
    ops: list                      # the program holding the template's ops
    origin: dict                   # its storages -> (key, chunk, event, slot) of the call that made them
    kept: dict | None = None       # lent: the donor's persistent storages -> this stage's (None: own template)
    shift: object = None           # lent: chunk_lending.RankShift, the donor's ranks as this stage's
    key_of: object = None          # lent: a donor's call key -> this rank's (its stage at the same place)


def _leaves(value):
    import torch
    from torch.utils._pytree import tree_flatten
    leaves, spec = tree_flatten(value)
    return leaves, spec, [x for x in leaves if isinstance(x, torch.Tensor)]


class ChunkReplay:
    """Installed around a stage's capture (capture.py); `recording()` gives the StepRecorder while the recorded
    step runs (None in the warm-up)."""

    def __init__(self, recording, enabled: bool = True, lender: Lender | None = None, coord: int = 0):
        self.recording, self.enabled = recording, enabled
        # a pipeline's stages in turn (chunk_lending.py): the earlier stage whose templates this one may take, and
        # this rank's pp coordinate; `lending` and `places` (id of each of the rank's PipelineStages -> its place
        # among them, by stage index) are set once the rank's stages are known (capture.py)
        self.lender, self.coord, self.lending, self.places = lender, coord, False, {}
        self.borrowed: dict = {}     # key -> True where its copies take the donor's template (checked on chunk 0)
        self.held: dict = {}         # (place, chunk) -> chunk_lending.persistent() as micro-batch 0's and 1's began
        self._lent_sources: dict = {}   # key -> (the donor's template, _Source) for its copies (_lent_source)
        # capture.py, once the rank's optimizer is made: (the tensors it trains, the module's buffers)
        self.trained = lambda: ([], [])
        self.calls: dict = {}        # (key, chunk) -> Call of the recorded step
        self.origin: dict = {}       # storage created in a call -> (key, chunk, event, slot)
        self.checked: dict = {}      # key -> True once micro-batch CHECKED matched its prediction
        self.results: dict = {}      # key -> (tree spec, leaves) a real call returned: a skipped call's shape
        # a forward's key -> what its stage hands on (a tuple of tensors), where the chain of stage shapes knows it
        # and the schedule only sends it on (not the last stage's, which goes to the loss as the module returns
        # it): the warm-up's micro-batch 0 is then a stand-in too (capture.py)
        self.outputs: dict = {}
        self._fresh = itertools.count(-1, -1)   # the storages a copy makes (never a real storage's key)
        # why a prediction failed ("": none did); told after the step (raised inside it, torch's chunk code would
        # wrap it in its own RuntimeError), which then runs every call for real
        self.mismatch = ""
        self._fsdp: dict = {}        # id of a PipelineStage -> whether FSDP2 shards its module (_sharded)
        self.replayed = 0            # calls of the recorded step appended as copies
        # capture.py, once the rank's optimizer is made: whether it trains DTensor parameters outside FSDP2
        # (dtensor_gradients): the warm-up then runs micro-batch M - 2 too
        self.dtensor_gradients = False
        # micro-batch -> step_memory's storages its template allocated -> the copy's (StepMemory.replay)
        self._copied_storages: dict = {}
        # (place, "full") -> the gradients micro-batch 0's backward left (Donor.grads), where this stage may lend
        self.first_grads: dict = {}
        self._first: bool | None = None   # does this stage copy its micro-batch 0 too (_copies_first; None: not known)
        self.finals: dict = {}           # key -> Call of the last micro-batch, where this stage may lend
        # a stage sharded by FSDP2 (_sharded_chunk): id of the stage -> its calls in the warm-up's order, (kind,
        # micro-batch), and the role and variant of each in the recorded step (_sharded_plan); how many of its calls
        # the recorded step made so far; variant -> its template Call, and whether its check matched
        self.order: dict = {}
        self.roles: dict = {}
        self.position: dict = {}
        self.variants: dict = {}
        self.variant_checked: dict = {}
        # id of the stage -> FSDP2's units as the copies since its last real call left them (synced before the next)
        self.fsdp_left: dict = {}
        self.borrowed_last: dict = {}    # key -> whether its last micro-batch is the donor's (_check_lent, copied)

    def check(self) -> None:
        """After the recorded step: ReplayMismatch where a micro-batch was not its template's copy."""
        if self.mismatch:
            raise ReplayMismatch(self.mismatch)

    @contextlib.contextmanager
    def installed(self):
        from torch.distributed.pipelining import schedules
        from torch.distributed.pipelining.schedules import _PipelineSchedule as Schedule
        from torch.distributed.pipelining.stage import _PipelineStageBase as Stage
        saved = {name: getattr(Stage, name) for name in ("forward_one_chunk", "backward_one_chunk",
                                                         "backward_weight_one_chunk", "forward_maybe_with_nosync",
                                                         "backward_maybe_with_nosync")}
        replay = self

        def chunk_of(name):
            def run(stage, chunk_id, *args, **kwargs):
                stage._astra_chunk = chunk_id
                try:
                    return saved[name](stage, chunk_id, *args, **kwargs)
                finally:
                    stage._astra_chunk = None
            return run

        def forward(stage, *args, **kwargs):
            return replay.call(stage, "forward", (args, kwargs), False,
                               lambda: saved["forward_maybe_with_nosync"](stage, *args, **kwargs))

        def backward(stage, backward_type, bwd_kwargs, last_backward=False):
            return replay.call(stage, backward_type, bwd_kwargs, last_backward,
                               lambda: saved["backward_maybe_with_nosync"](stage, backward_type, bwd_kwargs,
                                                                           last_backward))
        loss_of = Schedule._maybe_compute_loss
        batch_p2p = schedules._batch_p2p

        def p2p(ops, desc=None):
            """The schedule's sends and receives (every schedule issues them through this function): not dispatched
            in the warm-up, which records nothing, and whose messages would carry fake tensors the schedule has
            allocated already (received activations and gradients have no values to fill in)."""
            return [] if replay.recording() is None else batch_p2p(ops, desc)

        def loss(schedule, stage, output, target_mbs, mb_index, *args, **kwargs):
            """The last stage's loss of a micro-batch: always computed, logged (its backward, in the template,
            reads what it saved)."""
            losses = getattr(schedule, "_internal_losses", None)   # where torch keeps them
            made = len(losses) if isinstance(losses, list) else None
            out = replay.logged(stage, mb_index, (output,),
                                lambda: loss_of(schedule, stage, output, target_mbs, mb_index, *args, **kwargs))
            if made is not None:
                replay.hold(output, losses[made:])
            return out
        for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
            setattr(Stage, name, chunk_of(name))
        Stage.forward_maybe_with_nosync, Stage.backward_maybe_with_nosync = forward, backward
        Schedule._maybe_compute_loss = loss
        schedules._batch_p2p = p2p
        try:
            yield self
        finally:
            for name, fn in saved.items():
                setattr(Stage, name, fn)
            Schedule._maybe_compute_loss = loss_of
            schedules._batch_p2p = batch_p2p

    def call(self, stage, kind: str, args, last: bool, run):
        """A PipelineStage's chunk call of `kind` (forward, full, input, weight)."""
        chunk, count = getattr(stage, "_astra_chunk", None), getattr(stage, "chunks", None)
        if not self.enabled or chunk is None or not isinstance(count, int):
            return run()
        if self._sharded(stage):
            return self._sharded_chunk(stage, (id(stage), kind), chunk, count, args, last, run)
        return self._chunk((id(stage), kind), chunk, count, args, last, run)

    def micro_batch(self, model, k: int, count: int, args, run):
        """Gradient accumulation's micro-batch `k` of `count`, its forward and backward one call (capture.py);
        the last, which synchronises the gradients, always runs. Under FSDP2 too: unlike a pipeline's chunks,
        every micro-batch but the first and the last gathers and frees the same parameters."""
        if not self.enabled:
            return run()
        return self._chunk((id(model), "micro-batch"), k, count, args, k == count - 1, run)

    def _chunk(self, key, chunk: int, count: int, args, last: bool, run):
        if self.mismatch:
            return run()
        rec = self.recording()
        final = chunk == count - 1 and key[1] != "micro-batch"   # a pipeline stage's last micro-batch
        if rec is None and final and key[1] == "full" and self._copies_last(key):
            # the warm-up of a stage that copies every call of its recorded step: its last backward not dispatched,
            # its gradients stand-ins (_stand_in_gradients) that torch's scale_grads and the optimizer then use as
            # after a real one. Its last forward still runs: what a module changes at its first forward stays (DDP
            # over tensor parallelism leaves the local shards out of the module's parameters, so scale_grads skips
            # their gradients)
            self._stand_in_gradients()
            return _input_gradients(args)
        if last and not (final and rec is not None and self.lending and key[1] in LENT_KINDS):
            return run()
        if rec is None:   # the warm-up: only what the recorded step needs built (grads, optimizer states)
            if chunk == count - 2 and self.dtensor_gradients and key[1] != "micro-batch":
                # (gradient accumulation's warm-up runs micro-batch 0's backward, which sets them: dtensor_gradients)
                return self._real(key, chunk, args, run, None)
            if chunk == 0 and key in self.outputs:   # its shapes known: micro-batch 0's forward need not run either
                self._keep_shape(key, self.outputs[key])
                return self._stand_in(key, rec)
            if 1 <= chunk <= count - 2 and key in self.results:
                return self._stand_in(key, rec)
            if chunk == 0 and key[1] == "full":   # the last backward (always run) builds them: none before it runs
                out = _input_gradients(args)
                self._keep_shape(key, out)
                return out
            return self._real(key, chunk, args, run, None)
        first = chunk == 0 and self._copies_first(key)
        if first:
            self.borrowed[key] = True
        if final and self._copies_last(key):   # DDP's synchronisation with it: the donor's, on this stage's ranks
            self.borrowed_last[key] = True
            try:
                out = self._replayed(key, chunk, args, rec, True, LAST)
                self.replayed += 1
                return out
            except ReplayMismatch as e:
                self.mismatch = str(e)
                return run()
        borrowed = first or TEMPLATE <= chunk <= count - 2 and self.borrowed.get(key)
        copies = borrowed or (CHECKED < chunk <= count - 2 and self.checked.get(key))
        if not copies and key[1] != "forward" and \
                getattr(self.calls.get(((key[0], "forward"), chunk)), "copied", False):
            # a backward dispatched on a copied forward's stand-in output would record no backward at all (the
            # stand-in has no autograd graph): a schedule that runs micro-batches' backwards in another order than
            # their forwards (LoopedBFS's) is captured again with every micro-batch dispatched
            self.mismatch = f"micro-batch {chunk}'s {key[1]} would run for real after its forward was copied"
            return run()
        if copies:
            try:
                out = self._replayed(key, chunk, args, rec, borrowed)
                if first and key[1] == "full":
                    self._adopt_first_grads(key, rec)
                self.replayed += 1
                return out
            except ReplayMismatch as e:   # the step goes on dispatching; the stage is captured again after it
                self.mismatch = str(e)
                return run()
        out = self._real(key, chunk, args, run, rec, final)
        if chunk == CHECKED and (key, TEMPLATE) in self.calls:
            self._check(key, rec)
        elif (chunk == 0 or final) and self._lent(key) is not None:
            self._check_lent(key, rec, LAST if final else 0)
        return out

    # -- a stage sharded by FSDP2 ------------------------------------------------------------------------------------
    def _sharded_replays(self, stage) -> bool:
        """Are a sharded stage's calls copied? A rank of one stage (its order of calls is that stage's), each
        backward one call (full: not the zero-bubble schedules' input and weight)."""
        return len(self.places) == 1 and all(kind in LENT_KINDS for kind, _ in self.order.get(id(stage), ()))

    def _sharded_chunk(self, stage, key, chunk: int, count: int, args, last: bool, run):
        """A chunk call of a stage FSDP2 shards. What a call records depends on whether its parameters are still
        gathered from the call before (a forward reshards them after it; torch's schedule keeps them gathered after
        a backward): a forward after a backward gathers none, one after a forward gathers them, and so does a
        backward after a forward, but not one after a backward. So each call's template is the first call of its
        variant, its kind and the kind of the call before it on the stage (the warm-up gives their order; a
        backward's also by its forward's variant, whose activations it reads), checked on the second and copied
        from the third on. Before a real call, FSDP2's parameters are left gathered or not as the template of the
        copy before it left them (_fsdp_sync); the gathered parameters' storages are the stage's own, allocated and
        freed by the copies as by their template (StepMemory.replay). A forward is copied only where its
        micro-batch's backward is (a copied forward's output has no autograd graph to run a backward on):
        _sharded_plan."""
        rec = self.recording()
        self.lending = False   # its calls depend on FSDP2's state, which other stages' need not share
        if rec is None:   # the warm-up: its order noted, its calls those of any stage (_chunk)
            self.order.setdefault(key[0], []).append((key[1], chunk))
            if len(self.places) != 1:   # a rank of several stages: every call dispatched, none copied
                return run()
            if chunk == count - 2 and self._gathers_dtensors(stage):
                # parameters sharded over more than FSDP2's mesh (tensor parallelism) gather into DTensors, whose
                # first accumulated gradient decides its sharding with ops of its own (dtensor_gradients): the
                # warm-up's last backward adds into this one's, as the recorded step's micro-batches do
                return self._real(key, chunk, args, run, None)
            return self._chunk(key, chunk, count, args, last, run)
        if self.mismatch or not self._sharded_replays(stage):
            return run()
        roles = self.roles.get(key[0])
        if roles is None:
            roles = self.roles[key[0]] = self._sharded_plan(self.order.get(key[0], []), count)
        at = self.position[key[0]] = self.position.get(key[0], -1) + 1
        if at >= len(roles) or roles[at][0] != (key[1], chunk):
            self.mismatch = f"micro-batch {chunk}'s {key[1]} is not where the warm-up ran it"
            return run()
        _, role, variant = roles[at]
        template = self.variants.get(variant)
        if role == "copy" and self.variant_checked.get(variant):
            before = self.fsdp_left.get(key[0]) or self._fsdp_state(stage)
            if before != template.fsdp_before:
                self.mismatch = f"micro-batch {chunk}'s {key[1]} starts with other parameters gathered"
                return run()
            try:
                out = self._replayed(key, chunk, args, rec, False, template=template)
                self.fsdp_left[key[0]] = template.fsdp_after
                self.replayed += 1
                return out
            except ReplayMismatch as e:
                self.mismatch = str(e)
                return run()
        if role == "copy" or (role == "check" and template is None):
            self.mismatch = f"micro-batch {chunk}'s {key[1]} has no checked template"
            return run()
        if key[0] in self.fsdp_left:   # FSDP2's units as the copies before this call left them
            try:
                self._fsdp_sync(stage, self.fsdp_left.pop(key[0]), rec)
            except ReplayMismatch as e:
                self.mismatch = str(e)
                return run()
        before = self._fsdp_state(stage)
        out = self._real(key, chunk, args, run, rec, role=role)
        call = self.calls[(key, chunk)]
        call.fsdp_before, call.fsdp_after = before, self._fsdp_state(stage)
        if role == "template":
            self.variants[variant] = call
        elif role == "check":
            self.variant_checked[variant] = self._check_call(template, call, rec)
        return out

    def _gathers_dtensors(self, stage) -> bool:
        from torch.distributed.tensor import DTensor
        return any(isinstance(p, DTensor) and p.device_mesh.ndim > 1 for p in stage.submod.parameters())

    @staticmethod
    def _sharded_plan(order: list, count: int) -> list:
        """[((kind, micro-batch), role, variant)] of a sharded stage's calls in order: micro-batch 0's and the last
        "real", the others by variant "template", "check", then "copy"; a forward "real" where its micro-batch's
        backward is not copied."""
        # a forward's also by the kind before its backward: the cool-down's backwards (after backwards) then have
        # forwards of their own to take as their template's
        ahead, before = {}, None
        for kind, chunk in order:
            if kind != "forward":
                ahead[chunk] = before
            before = kind
        roles, seen, before, forwards = [], {}, None, {}
        for kind, chunk in order:
            # a backward's also by its forward's: the activations it reads lie where that forward's variant made them
            variant = (kind, before, ahead.get(chunk)) if kind == "forward" else (kind, before, forwards.get(chunk))
            if kind == "forward":
                forwards[chunk] = variant
            before = kind
            if chunk == 0 or chunk >= count - 1:
                roles.append([(kind, chunk), "real", variant])
                continue
            n = seen[variant] = seen.get(variant, 0) + 1
            roles.append([(kind, chunk), "template" if n == 1 else "check" if n == 2 else "copy", variant])
        # a backward is copied where its forward is, from a template whose forward was its variant's template too:
        # the copy frees the activations its forward's copy made, which are that template's
        role_of = {call: role for call, role, _ in roles}
        template_of = {variant: call[1] for call, role, variant in roles if role == "template"}
        for r in roles:
            (kind, chunk), role, variant = r
            if kind != "forward" and role == "copy" and (role_of[("forward", chunk)] != "copy" or
                                                         template_of.get(variant[2]) != template_of[variant]):
                r[1] = "real"
        copied = {chunk for (kind, chunk), role, _ in roles if kind != "forward" and role == "copy"}
        for r in roles:
            if r[0][0] == "forward" and r[1] == "copy" and r[0][1] not in copied:
                r[1] = "real"
        return [tuple(r) for r in roles]

    def _fsdp_modules(self, stage) -> list:
        from torch.distributed.fsdp import FSDPModule
        return [m for m in stage.submod.modules() if isinstance(m, FSDPModule)]

    def _fsdp_state(self, stage) -> tuple:
        """Per FSDP2 unit of the stage: U (gathered), S (sharded), P (resharded after forward to a smaller mesh), or
        "-" (no parameters)."""
        out = []
        for m in self._fsdp_modules(stage):
            group = m._get_fsdp_state()._fsdp_param_group
            out.append("-" if group is None else "U" if group.is_unsharded else "S" if group.is_sharded else "P")
        return tuple(out)

    def _fsdp_sync(self, stage, want: tuple, rec) -> None:
        """FSDP2's units left gathered or sharded as `want` says (a copy's template left them), neither recorded nor
        counted: the copy's ops and allocations are the template's (ReplayMismatch where a unit cannot be)."""
        now = self._fsdp_state(stage)
        if now == want:
            return
        memory = rec.memory
        rec.paused += 1
        tracking, memory.recording = memory.recording, False
        try:
            for m, have, need in zip(self._fsdp_modules(stage), now, want):
                if have == need:
                    continue
                if (have, need) == ("S", "U"):
                    m.unshard()
                elif (have, need) == ("U", "S"):
                    m.reshard()
                else:
                    raise ReplayMismatch(f"an FSDP2 unit cannot go from {have} to {need}")
        finally:
            rec.paused -= 1
            memory.recording = tracking
        if self._fsdp_state(stage) != want:
            raise ReplayMismatch("FSDP2's units are not as the template left them")

    def _sharded(self, stage) -> bool:
        """Does FSDP2 shard the stage's module? Its chunks then depend on where they fall in the schedule (whether
        the parameters are still gathered from the call before), which micro-batch 2 cannot vouch for: each
        variant has its own template (_sharded_chunk)."""
        if id(stage) not in self._fsdp:
            self._fsdp[id(stage)] = bool(self._fsdp_modules(stage))
        return self._fsdp[id(stage)]

    def logged(self, stage, chunk: int, args, run):
        """A call that always runs for real, logged while recording (a loss)."""
        rec = self.recording()
        if not self.enabled or rec is None or not isinstance(chunk, int) or \
                (self._sharded(stage) and not self._sharded_replays(stage)):
            return run()
        return self._real((id(stage), "loss"), chunk, args, run, rec)

    @staticmethod
    def hold(output, losses: list) -> None:
        """The last stage detaches its output after the backward (torch's backward_one_chunk): the arguments a
        copy's output holds as its graph would are then held by the graph of its loss, which the schedule keeps to
        the step's end."""
        held = [x for t in _leaves(output)[2] for x in t.__dict__.pop("_astra_holds", ())]
        for t in losses:
            if _is_tensor(t):
                t._astra_loss = True   # a copied backward frees what its graph saved (_free_loss_graph)
                if held:
                    t._astra_holds = held

    # -- a real call, logged --------------------------------------------------------------------------------------
    def _real(self, key, chunk, args, run, rec, final: bool = False, role: str = ""):
        if rec is None:
            out = run()
            self._keep_shape(key, out)
            return out
        call = Call(key, chunk, start=len(rec.ops), args=[storage_key(t) for t in _leaves(args)[2]],
                    views_before=rec._views)
        lent = (chunk == 0 or final) and self._lent(key) is not None
        call.writer_before = dict(rec._writer) if chunk == CHECKED or lent or role == "check" else None
        # a stage that may lend or borrow logs micro-batches 0, 1 and the last (its calls, as chunk_lending.Donor)
        lends = self.lending and (chunk in (0, TEMPLATE) or final) and key[1] in LENT_KINDS
        if lends:
            self.held[(self._place(key), LAST if final else chunk)] = persistent(*self.trained())
            if final:
                self.finals[key] = call
        # a loss: every one (_replayed); micro-batch 0 of a stage that may lend or borrow: for _check_lent
        memory = rec.memory if chunk == TEMPLATE or key[1] == "loss" or lends or role == "template" else None
        rec.events = []
        if memory is not None:
            outer, memory.log = memory.log, []
        try:
            out = run()
        finally:
            events, rec.events = rec.events, None
            if memory is not None:
                call.memory, memory.log = memory.log, outer
        if memory is not None:
            call.result_storages = [memory.holding(t) if _is_tensor(t) else None for t in _leaves(out)[0]]
            call.held_args = _held(_leaves(args)[2], _leaves(out)[2])
            call.memory_shape = log_shape(call.memory) if lends else None
        if lends and chunk == 0 and key[1] == "full":   # the gradients it made, for stages that copy it (lend)
            self.first_grads[self._place(key)] = [
                None if p.grad is None else (storage_key(local(p.grad)), rec.memory.holding(local(p.grad)))
                for p in self.trained()[0]]
        call.end, call.views_after = len(rec.ops), rec._views
        call.results = [storage_key(t) if _is_tensor(t) else None for t in _leaves(out)[0]]
        covered = call.start
        for e, (first, end, reads, writes, fresh) in enumerate(events):
            call.replayable &= first == covered and all(rec.ops[i].deps == rec.ops[first].deps
                                                        for i in range(first, end))
            covered = end
            for slot, s in enumerate(writes):
                if s in fresh and s not in call.created:
                    call.created[s] = (e, slot)
                    call.slots[(e, slot)] = s
                    self.origin.setdefault(s, (key, chunk, e, slot))
        call.events = [x[:4] for x in events]
        call.replayable &= covered == call.end and not any(rec.ops[i].kind in (LOAD, STORE)
                                                            for i in range(call.start, call.end))
        self.calls[(key, chunk)] = call
        self._keep_shape(key, out)
        return out

    def _keep_shape(self, key, out):
        leaves, spec, _ = _leaves(out)
        self.results[key] = (spec, [(tuple(x.shape), x.dtype, x.requires_grad) if _is_tensor(x) else x
                                    for x in leaves])

    def _check(self, key, rec):
        self.checked[key] = self._check_call(self.calls[(key, TEMPLATE)], self.calls[(key, CHECKED)], rec)

    def _check_call(self, template: Call, actual: Call, rec) -> bool:
        """Is the real call `actual` what a copy of `template` would have recorded? (ReplayMismatch noted where
        not; False without one where either cannot be copied.)"""
        if not template.replayable or not actual.replayable:
            return False   # e.g. activations offloaded to the host: every micro-batch dispatched
        try:
            ops = self._predicted(template, actual, _Source(rec.ops, self.origin))
        except ReplayMismatch as e:
            self.mismatch = str(e)
            return False
        if ops != rec.ops[actual.start:actual.end]:
            self.mismatch = f"micro-batch {actual.chunk}'s {actual.key[1]} differs from micro-batch {template.chunk}'s"
            return False
        return True

    def _predicted(self, template: Call, actual: Call, source: _Source) -> list:
        """The ops a real call just recorded (`actual`, its writers as it began kept) would have as a copy of
        `template` (in `source`), made without keeping anything; ReplayMismatch where it cannot be one."""
        writer, actual.writer_before = actual.writer_before, None
        return self._copy(template, actual.key, actual.chunk, actual.args, actual.results, writer,
                          actual.views_before, actual.start, source, dry=True)[0]

    # -- templates lent by an earlier stage (chunk_lending.py) -------------------------------------------------------
    def _place(self, key) -> tuple:
        """A call's key as ranks of other pp coordinates know it: its stage's place on the rank, and its kind."""
        return self.places.get(key[0], 0), key[1]

    def _lent(self, key):
        """The donor's micro-batch 0 call of this kind, where this stage may take the donor's templates."""
        donor = self.lender.donor if self.lending else None
        if donor is None or donor.coord == self.coord:
            return None
        return donor.firsts.get(self._place(key))

    def _donor_source(self, kept: dict) -> _Source:
        donor, stage_at = self.lender.donor, {n: stage for stage, n in self.places.items()}
        # a donor's call key -> this rank's at the same place (None: no such stage, which _copy reports as a call
        # not recorded: ReplayMismatch)
        return _Source(donor.ops, donor.origin, kept, self.lender.shift(self.coord),
                       lambda k: (stage_at.get(donor.places.get(k[0])), k[1]))

    def _check_lent(self, key, rec, which: int) -> None:
        """This stage's micro-batch 0 (`which` 0) or last one (LAST) of `key`, just recorded, against the donor's put
        on this stage's storages and ranks: where micro-batch 0 is the same op for op, micro-batches 1 to M - 2 copy
        the donor's template; where the last one is as well, the stages after this one copy theirs (lend)."""
        donor, place = self.lender.donor, self._place(key)
        first = (donor.firsts if which == 0 else donor.lasts).get(place)
        actual = self.calls[(key, 0)] if which == 0 else self.finals.get(key)
        matched = self.borrowed if which == 0 else self.borrowed_last
        matched[key] = False
        if first is None or actual is None:
            return
        kept = kept_map(donor.held.get((place, which), []), self.held.get((place, which), [None]))
        if kept is None or not first.replayable or not actual.replayable or first.memory_shape is None or \
                first.memory_shape != actual.memory_shape:
            actual.writer_before = None
            return
        try:
            ops = self._predicted(first, actual, self._donor_source(kept))
        except ReplayMismatch:
            return
        mine = rec.ops[actual.start:actual.end]
        # the donor's ops carry its groups' final names (capture.py names them by their ranks after its step)
        matched[key] = len(ops) == len(mine) and all(
            {**a.__dict__, "group_name": ""} == {**b.__dict__, "group_name": ""} for a, b in zip(ops, mine))

    def _lent_source(self, key, which: int = TEMPLATE) -> tuple[Call, _Source]:
        """The donor's call of `key` that a copy takes (`which`: TEMPLATE, micro-batch 0's for _copies_first, or
        LAST for _copies_last) and where it lies, its persistent storages mapped onto this stage's as they are at
        its first copy."""
        lent = self._lent_sources.get((key, which))
        if lent is None:
            donor, place = self.lender.donor, self._place(key)
            kept = kept_map(donor.held.get((place, which), []), persistent(*self.trained()))
            if kept is None:
                raise ReplayMismatch(f"pp coordinate {self.coord}'s {key[1]} holds other parameters than "
                                     f"coordinate {donor.coord}'s, whose template it took")
            calls = {0: donor.firsts, TEMPLATE: donor.templates, LAST: donor.lasts}[which]
            lent = self._lent_sources[(key, which)] = (calls[place], self._donor_source(kept))
        return lent

    def _copies_first(self, key) -> bool:
        """Does this stage copy its micro-batch 0 from the donor's too, dispatching none of its calls? Where a stage
        before it took the donor's templates after its own micro-batch 0 was checked against the donor's
        (Donor.proven: stages alike up to their ranks and storages, as micro-batch 2 vouches for the copies of
        micro-batch 1), the rank holds one stage (all its gradients are that stage's), training plain tensors, and
        the donor's micro-batch 0 backward made every gradient it left (none a view of a bucket made before it):
        `_adopt_first_grads`. (DTensor gradients, tensor parallelism alone, are left out: copied this way, a copy's
        dependencies differed from dispatching all after some other captures in the same process.)"""
        if self._first is None:
            self._first = self._first_copyable()
        return self._first and key[1] in LENT_KINDS

    def _copies_last(self, key) -> bool:
        """Does this stage copy its last micro-batch from the donor's too, so that nothing of its schedule is
        dispatched (the warm-up neither)? Where it copies micro-batch 0 (_copies_first) and a stage before it had
        its last micro-batch checked against the donor's (Donor.proven_last): DDP's synchronisation in the last
        backward is then the donor's on this stage's ranks, its buckets the donor's (StepMemory.replay's `held`)."""
        if not self._copies_first(key):
            return False
        donor = self.lender.donor
        return donor.proven_last and self._place(key) in donor.lasts

    def _stand_in_gradients(self) -> None:
        """In the warm-up of a stage that dispatches none of its calls (_copies_last), in place of its last backward:
        the gradients the donor's micro-batch 0 made, as stand-ins, so that torch's scale_grads divides them and the
        optimizer makes its states as after a real backward (the recorded step's copy of micro-batch 0 makes them
        again: _adopt_first_grads)."""
        import torch
        for p, made in zip(self.trained()[0], self.lender.donor.grads[(0, "full")]):
            if made is not None and p.grad is None:
                p.grad = torch.empty_like(p)

    def _first_copyable(self) -> bool:
        # (a stage sharded by FSDP2 gets here only from its warm-up, never lending: _sharded_chunk)
        donor = self.lender.donor if self.lending else None
        if donor is None or not donor.proven or donor.coord == self.coord or len(self.places) != 1 or \
                self.dtensor_gradients or set(donor.firsts) != {(0, kind) for kind in LENT_KINDS}:
            return False
        grads = donor.grads.get((0, "full"))
        return grads is not None and len(grads) == len(self.trained()[0]) and \
            all(g is None or g[0] in donor.firsts[(0, "full")].created for g in grads)

    def _adopt_first_grads(self, key, rec) -> None:
        """After micro-batch 0's backward was copied from the donor's: each gradient the copy made (on a fresh
        storage) made for real, a stand-in not recorded, and put in the copy's place (a DTensor's local shard): its
        writer the copy's last write, its bytes the copy's allocation (freed when torch frees the gradient). The
        next micro-batches then accumulate into it, and the last backward and the optimizer use it, as after a real
        call."""
        import torch
        place = self._place(key)
        first, grads = self.lender.donor.firsts[place], self.lender.donor.grads[place]
        call, copies = self.calls[(key, 0)], self._copied_storages.get(0, {})
        rec.paused += 1
        try:
            for p, made in zip(self.trained()[0], grads):
                if made is None:
                    continue
                theirs, held = made
                p.grad = torch.empty_like(p)
                grad = local(p.grad)
                writer = rec._writer.pop(call.slots[first.created[theirs]], None)
                if writer is not None:
                    rec._writer[storage_key(grad)] = writer
                if held in copies:
                    rec.memory.adopt(grad.untyped_storage(), copies.pop(held))
        finally:
            rec.paused -= 1

    def lend(self, ops: list) -> None:
        """After the recorded step: this stage's templates for the stages after it, where each was checked on its
        micro-batch 2 (a stage that borrowed leaves the donor it took them from)."""
        if not self.lending or self.mismatch:
            return
        if any(self.borrowed.values()):
            if all(self.borrowed.values()):   # every call took the donor's: later stages copy micro-batch 0 too
                self.lender.donor.proven = True
                # and their last micro-batch, where this stage's was the donor's too
                self.lender.donor.proven_last |= set(self.borrowed_last) == set(self.borrowed) and \
                    all(self.borrowed_last.values())
            return
        # torch asks every stage for its loss, which only the last computes: a stage whose loss calls ran ops lends
        # nothing (the last stage's copies pair its losses with its backwards, _replayed)
        if any(key[1] == "loss" and call.end > call.start for (key, _), call in self.calls.items()):
            return
        keys = [key for key, chunk in self.calls if chunk == TEMPLATE and key[1] != "loss"]
        if not keys or any(key[1] not in LENT_KINDS or not self.checked.get(key) or (key, 0) not in self.calls
                           or {(self._place(key), 0), (self._place(key), TEMPLATE)} - set(self.held)
                           for key in keys):
            return
        self.lender.donor = Donor(self.coord, ops, self.origin, {self._place(k): self.calls[(k, 0)] for k in keys},
                                  {self._place(k): self.calls[(k, TEMPLATE)] for k in keys}, dict(self.held),
                                  dict(self.places), dict(self.first_grads),
                                  {self._place(k): self.finals[k] for k in keys if k in self.finals})

    # -- a replayed call ------------------------------------------------------------------------------------------
    def _replayed(self, key, chunk, args, rec, borrowed: bool, which: int | None = None, template: Call | None = None):
        if borrowed:
            template, source = self._lent_source(key, which if which is not None else 0 if chunk == 0 else TEMPLATE)
        else:
            template, source = template or self.calls[(key, TEMPLATE)], _Source(rec.ops, self.origin)
        out = self._stand_in(key, rec)
        results = [storage_key(t) if _is_tensor(t) else None for t in _leaves(out)[0]]
        call_args = [storage_key(t) for t in _leaves(args)[2]]
        with heap.paused(keep=True):   # copies hold no cycles; kept for the whole compile
            ops, call = self._copy(template, key, chunk, call_args, results, rec._writer, rec._views, len(rec.ops),
                                   source, dry=False)
            rec.ops.extend(ops)
        copies = self._copied_storages.setdefault(chunk, {})
        if rec.memory is not None:   # what the template allocated and freed, as this micro-batch's
            # the loss runs for real: what the template's loss allocated is this micro-batch's loss's (its backward
            # frees them)
            loss = self.calls.get(((key[0], "loss"), chunk)), self.calls.get(((key[0], "loss"), template.chunk))
            if None not in loss:
                mine, theirs = ([e[0] for e in c.memory if e[1] is not None] for c in loss)
                copies.update(zip(theirs, mine))
            rec.memory.replay(template.memory, copies, held=which == LAST)
        held = [a for i, a in enumerate(_leaves(args)[2]) if i in template.held_args]
        for t in _leaves(out)[2] if held else ():
            t._astra_holds = held   # as the template's result's autograd graph holds these arguments
        for s, t in zip(template.result_storages or itertools.repeat(None), _leaves(out)[0]):
            if not _is_tensor(t):
                continue
            if s in copies:   # freed when torch drops it, as the result
                rec.memory.adopt(t.untyped_storage(), copies[s])
        if any(op.kind == COMPUTE for op in ops):
            rec._views = template.views_after
        else:
            rec._views += template.views_after - template.views_before
        # a result that is one of the template's arguments passed on: its writer is that argument's
        for t_res, res in zip(template.results, results):
            if t_res is not None and t_res in template.args:
                w = rec._writer.get(call_args[template.args.index(t_res)])
                if w is not None:
                    rec._writer[res] = w
        call.copied = True
        self.calls[(key, chunk)] = call
        if key[1] != "forward":
            _free_loss_graph(args)
        return out

    def _stand_in(self, key, rec):
        """Tensors shaped as a real call of this kind returned, made without recording."""
        import torch
        from torch.utils._pytree import tree_unflatten
        spec, leaves = self.results[key]
        if rec is not None:
            rec.paused += 1
        try:
            made = [torch.empty(x[0], dtype=x[1], requires_grad=x[2]) if isinstance(x, tuple) and len(x) == 3
                    and isinstance(x[1], torch.dtype) else x for x in leaves]
        finally:
            if rec is not None:
                rec.paused -= 1
        return tree_unflatten(made, spec)

    def _copy(self, template: Call, key, chunk: int, args: list, results: list, writer: dict, views: int,
              base: int, source: _Source, dry: bool):
        """The template's ops (in `source`) as this stage's call `key` of micro-batch `chunk` would record them,
        appended at index `base` with the recorder's storage -> writer map `writer` (updated in place): (the ops,
        the Call they make)."""
        sub = {}
        for s_t, s in zip(template.args, args):
            sub.setdefault(s_t, s)
        for s_t, s in zip(template.results, results):
            if s_t is not None and s is not None and s_t not in template.args:
                sub.setdefault(s_t, s)
        call = Call(key, chunk, start=base, args=args, results=results)
        kept, shift, ops = source.kept, source.shift, source.ops

        def mapped(s):
            if s in sub:
                return sub[s]
            if s in template.created:
                sub[s] = next(self._fresh)
                return sub[s]
            o = source.origin.get(s)
            if o is not None and o[1] == template.chunk and o[0] != template.key:   # an earlier call's activation
                other = self.calls.get((o[0] if kept is None else source.key_of(o[0]), chunk))
                if other is None or (o[2], o[3]) not in other.slots:
                    raise ReplayMismatch(f"micro-batch {chunk}'s {template.key[1]} uses storages of a "
                                         f"{o[0][1]} call not recorded for it")
                sub[s] = other.slots[(o[2], o[3])]
                return sub[s]
            if kept is not None:   # a parameter, buffer or gradient of the donor: this stage's at its place
                if s not in kept:
                    raise ReplayMismatch(f"micro-batch {chunk}'s {template.key[1]} uses a storage of the stage it "
                                         "took its template from that this stage has no counterpart of")
                s = sub[s] = kept[s]
                return s
            sub[s] = s
            return s

        # the loop runs once per op of every copy (a million for a 175B GPT): a storage already mapped is looked up
        # in `sub` inline, and the first op of an event takes the event's fresh list of dependencies as its own
        made, first_compute, known, last_writer = [], True, sub.get, writer.get
        created_at = _created_at(template)
        for e, (first, end, reads, writes) in enumerate(template.events):
            found = set()
            for s in reads:
                x = known(s)
                w = last_writer(mapped(s) if x is None else x)
                if w is not None:
                    found.add(w[0])
            deps = sorted(found)
            for i in range(first, end):
                op = _clone(ops[i], deps if i == first else list(deps))
                if shift is not None:
                    try:
                        shift.apply(op)
                    except NoImage as e:
                        raise ReplayMismatch(f"micro-batch {chunk}'s {template.key[1]} reaches rank {e} of another "
                                             "pipeline stage than the one it took its template from") from None
                if first_compute and op.kind == COMPUTE:
                    op.views = op.views - template.views_before + views
                    first_compute = False
                made.append(op)
            last = (base + len(made) - 1, None)
            for s in writes:
                x = known(s)
                writer[mapped(s) if x is None else x] = last
            for slot, s in created_at.get(e, ()):
                x = sub[s]
                call.slots[(e, slot)] = x
                if not dry:
                    self.origin.setdefault(x, (key, chunk, e, slot))
        call.end = base + len(made)
        return made, call


def _free_loss_graph(bwd_kwargs) -> None:
    """The last stage's loss, computed for real on a copied forward's output, saved that output in its graph; a
    real backward frees what the graph saved, a copied one does not run it, so the loss is detached instead (the
    schedule keeps the loss to the step's end, its output goes when the schedule drops it, as after a real
    backward: torch keeps no output once step() is told not to return them)."""
    for t in _leaves(bwd_kwargs)[2]:
        if getattr(t, "_astra_loss", False) and t.grad_fn is not None and not t._is_view():
            t.detach_()


def _clone(op: Op, deps: list) -> Op:
    """A copy of `op` with the dependencies `deps` (its own list; dataclasses.replace, which runs __init__ again,
    takes 3 times as long: a 175B GPT's capture copies over a million ops)."""
    made = object.__new__(Op)
    made.__dict__.update(op.__dict__)
    made.deps = deps
    return made


def _created_at(template: Call) -> dict:
    """event -> [(slot, storage)] the template created there (its `created` turned round, made once per template
    and kept on it: every copy walks it)."""
    if template.created_at is None:
        template.created_at = {}
        for s, (e, slot) in template.created.items():
            template.created_at.setdefault(e, []).append((slot, s))
    return template.created_at


def _input_gradients(bwd_kwargs: dict):
    """What a full backward returns (torch's stage_backward, no parameter groups), made without running it: a
    gradient for each tensor input that requires one (shaped as the input), None for the others. The warm-up's
    first backward: the warm-up records nothing, and the optimizer states and DDP's bucket order it exists for come
    from the last backward, which always runs (one of the six backwards a stage dispatches, saved)."""
    import torch
    grads = tuple(torch.empty_like(v) if isinstance(v, torch.Tensor) and v.requires_grad else None
                  for v in bwd_kwargs["input_values"])
    return grads, None


def _held(args: list, results: list) -> set:
    """The positions of the `args` the autograd graph of `results` holds (a leaf's AccumulateGrad node holds the
    leaf: a received activation lives as long as the graph of the output made from it)."""
    ids = {id(a): i for i, a in enumerate(args)}
    held, seen = set(), set()
    todo = [t.grad_fn for t in results if t.grad_fn is not None]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        variable = getattr(fn, "variable", None)
        if variable is not None and id(variable) in ids:
            held.add(ids[id(variable)])
        todo.extend(f for f, _ in fn.next_functions)
    return held


def _is_tensor(x) -> bool:
    import torch
    return isinstance(x, torch.Tensor)

