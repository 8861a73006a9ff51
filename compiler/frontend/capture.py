"""Capture one training step of a model file as a Workload, in one process, without a GPU or a network.

A fake process group (torch's `fake` backend) gives the process rank 0 of a world as large as the topology;
collectives on it return at once. Parameters, activations and optimizer states are FakeTensors (shapes and
dtypes, no data), so models far larger than this machine's memory capture in seconds. The step runs twice:
the first warms up what PyTorch builds lazily (optimizer states, FSDP2's lazy init, DDP's bucket rebuild in
gradient-ready order), the second is recorded (recorder.py). Every rank of an SPMD job runs the same program,
so rank 0's stands for all; with pipeline parallelism (a pp mesh axis, pipeline.py) one rank per stage is
recorded, each standing for its stage.
"""
from __future__ import annotations

import contextlib
import logging
import warnings

from ...network.errors import InputWarning, UserError
from ..core import heap
from .model_file import ModelFile, one_line, step_context
from . import pipeline, pipeline_schedule
from .accumulation import Accumulation, gradient_sync, split
from .chunk_lending import Lender
from .chunk_replay import ChunkReplay, ReplayMismatch, dtensor_gradients, replays, replays_microbatches
from .mesh import check_axes, check_mesh, silent_axes
from .parallelize import (apply_builtin, axis, build_mesh, mesh_reads, meshes_outside_fake, prepare_ddp,
                          rebuild_ddp_buckets, skip_cross_rank_checks)
from .fake_params import fake_build
from .gpu_attention import cuda_attention_on_host
from .gpu_autocast import cuda_autocast_on_host
from .gpu_dropout import cuda_dropout_on_host
from .gpu_foreach import cuda_foreach_on_host
from .own_world import script_world_set_aside
from .recompute import recompute_marked
from .recorder import AUTOGRAD, StepRecorder
from .shared_build import SharedBuild, Taken
from .routing import AssumedRouting, check_routing
from .step_memory import settled, trained_tensors, watching
from .weight_grad_order import weight_groups_ordered
from .workload import COLLECTIVE, RECV, SEND, Workload


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0):
    """A fake process group of `world_size` ranks, this process `rank` (0, or the rank recorded for a pipeline
    stage); a script's own process groups (the API called inside a training script) are set aside meanwhile and
    restored after."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    with script_world_set_aside() if dist.is_initialized() else contextlib.nullcontext():
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        _forget_earlier_meshes()
        try:
            yield
        finally:
            dist.destroy_process_group()


def _forget_earlier_meshes():
    """DTensor caches sharding decisions under keys whose DeviceMesh compares equal to any mesh of the same shape,
    whatever this process's rank and the groups it holds: a capture of another rank (a pipeline's next stage)
    would reuse an earlier capture's mesh and its destroyed process groups. Each capture starts with them empty."""
    from torch.distributed.tensor import _redistribute
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    _clear_sharding_prop_cache()
    _redistribute._gen_transform_infos.cache_clear()


def _first_tensor(value):
    import torch
    from torch.utils._pytree import tree_leaves
    for leaf in tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            return leaf
    raise UserError("the model's forward returned no tensor to take a loss of")


def _as_tuple(inputs):
    return inputs if isinstance(inputs, tuple) else (inputs,)


def mesh_axes_for(spec: ModelFile, world_size: int, mesh: dict[str, int] | None) -> dict[str, int]:
    """The mesh: --mesh, else the file's mesh_axes(world_size), else pure data parallelism over every NPU."""
    if mesh is None and spec.mesh_axes is not None:
        try:
            mesh = dict(spec.mesh_axes(world_size))
        except (Exception, SystemExit) as e:
            raise UserError(f"{spec.path}: mesh_axes({world_size}) failed: {one_line(e)}") from None
        mesh = check_axes(mesh, f"{spec.path}: mesh_axes({world_size})")
    axes = mesh if mesh is not None else {"dp": world_size}
    check_mesh(axes, world_size)
    return axes


# torch loggers that report an error of the user's model before raising it: fake-tensor mode logs the traceback
# of a model op that fails (a shape mismatch), a pipeline schedule its whole action table (some 30 lines per pp
# rank); the capture turns the exception into its one-line error, so what they log is only noise
_ERROR_LOGS = ("torch._subclasses.fake_tensor", "torch.distributed.pipelining.schedules")


@contextlib.contextmanager
def _quiet_error_logs():
    logs = [logging.getLogger(name) for name in _ERROR_LOGS]
    was = [log.disabled for log in logs]
    for log in logs:
        log.disabled = True
    try:
        yield
    finally:
        for log, disabled in zip(logs, was):
            log.disabled = disabled


@contextlib.contextmanager
def _pinning_is_free():
    """FSDP2's CPUOffloadPolicy pins its host copies of the shards; a fake tensor cannot be pinned (aten._pin_memory
    has no fake kernel), and pinning moves nothing the capture records: the copies themselves are modelled as
    loads and stores (offload.py)."""
    import torch
    saved = torch.Tensor.pin_memory
    torch.Tensor.pin_memory = lambda self, device=None: self
    try:
        yield
    finally:
        torch.Tensor.pin_memory = saved


@contextlib.contextmanager
def _activations_to_host(recording):
    """torch.autograd.graph.save_on_cpu (a step_context() that offloads the activations autograd saves) as the
    capture sees it: each saved activation a store to the host memory and, in the backward pass, a load back
    (StepRecorder.offload_saved / reload_saved; recording() gives the recorder, or None in the warm-up step). The
    class's own hooks would copy host to host here, which records nothing."""
    import torch
    from torch.autograd.graph import save_on_cpu

    def pack(t):
        r = recording()
        return t if r is None else r.offload_saved(t)

    def unpack(t):
        r = recording()
        return t if r is None else r.reload_saved(t)

    def enter(self):
        torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)
    saved = save_on_cpu.__enter__
    save_on_cpu.__enter__ = enter
    try:
        yield
    finally:
        save_on_cpu.__enter__ = saved


def host_offloaded(model) -> bool:
    """Does FSDP2 keep some of the model's shards on the host (fully_shard(..., offload_policy=CPUOffloadPolicy()))?
    Read from FSDP2's per-module state (not a public API: a torch that moves it reads as no offload)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule
    for m in model.modules():
        if isinstance(m, FSDPModule):
            group = getattr(m._get_fsdp_state(), "_fsdp_param_group", None)
            if isinstance(getattr(group, "offload_policy", None), CPUOffloadPolicy):
                return True
    return False


def _compiled_runs_eager():
    """torch.compile'd modules and functions (on the model, per block, around DDP or FSDP2) run eagerly during
    the capture: Dynamo cannot trace fake tensors that stand for a device, and the collectives a compiled step
    issues are the eager step's (FSDP2's and DDP's hooks stay outside the compiled graphs). Compute is then
    costed per eager op, without the compiler's fusions (docs/workloads.md)."""
    import torch._dynamo
    return torch._dynamo.config.patch(disable=True)


def capture(spec: ModelFile, world_size: int, mesh: dict[str, int] | None = None) -> Workload:
    axes = mesh_axes_for(spec, world_size, mesh)
    if axes.get("pp", 1) == 1:
        try:
            ops, offloaded, _, memory = _capture_rank(spec, world_size, axes, 0)
        except ReplayMismatch:   # an accumulated micro-batch unlike the template: every one dispatched
            ops, offloaded, _, memory = _capture_rank(spec, world_size, axes, 0, replay=False)
        return Workload(world_size, {0: ops}, source=spec.path, spmd=True, mesh=axes, host_offload=offloaded,
                        offload=spec.offload, memory={0: memory})
    if spec.accumulation is not None and spec.accumulation.microbatches > 1:
        raise UserError(f"{spec.path}: GRADIENT_ACCUMULATION with a pp axis: the pipeline's schedule runs the "
                        "micro-batches; set PIPELINE['microbatches'] (or the schedule's n_microbatches) instead")
    p = pipeline.plan(spec, axes)
    programs, offloaded, memory = {}, False, {}
    shapes: dict[int, list] = {}   # stage index -> its input's shapes, found along the chain of stages
    coord, outline = 0, None       # stage 0 is on pp coordinate 0
    lender = Lender(axes)          # a stage's chunk templates for the stages after it (chunk_lending.py)
    # the model built once for every stage's part (shared_build.py); a file that builds its own schedule from the
    # whole model in parallelize() builds it in each capture
    shared = SharedBuild(spec) if p.schedule else None

    def stage_capture(coord: int, **kwargs):
        try:
            return _capture_rank(spec, world_size, axes, p.reps[coord], (p, coord, shapes),
                                 shared=shared if shared is not None and not shared.spent else None, **kwargs)
        except Taken:   # this stage's part is not the model's as built: its capture builds its own
            return _capture_rank(spec, world_size, axes, p.reps[coord], (p, coord, shapes), **kwargs)
    while len(programs) < p.pp:
        known = len(shapes)
        try:
            try:
                ops, host, rp, used = stage_capture(coord, lender=lender)
            except ReplayMismatch:   # a micro-batch unlike the template: every one dispatched (chunk_replay.py)
                ops, host, rp, used = stage_capture(coord, replay=False)
        except pipeline_schedule.HandOffChanged as e:
            # the chain found before parallelize is wrong from this stage on (sequence parallelism): it is found
            # again from the parallelized stages, and this coordinate captured again
            for k in [k for k in shapes if isinstance(k, int) and k > e.stage]:
                del shapes[k]
            shapes[pipeline_schedule.PARALLELIZED] = True
            programs.clear()   # every rank captured again on the new chain (only such a file pays for it)
            lender.donor = None
            shared = SharedBuild(spec) if shared is not None else None   # its parts were parallelized
            continue
        if outline is not None and rp.outline() != outline:
            raise UserError(f"{spec.path}: pp coordinate {coord}'s schedule ({_outline_text(rp.outline())}) is not "
                            f"pp coordinate 0's ({_outline_text(outline)}): every rank builds the same schedule")
        outline = rp.outline()
        if ops is not None:
            programs[p.reps[coord]], memory[p.reps[coord]], offloaded = ops, used, offloaded or host
            heap.settled()   # the stage's ops live until the step is timed
        elif len(shapes) == known:   # no stage advanced: cannot happen with torch's layouts; never loop on
            raise UserError(f"{spec.path}: the pipeline's stages {sorted(rp.owner)} cannot be followed in order")
        # the next capture: the rank of the first stage whose output is not known yet, else one not recorded yet
        # (a rank whose shapes took a forward of its parallelized stages is captured again: infer_shapes)
        pending = [rp.owner[k] for k in range(rp.num_stages) if k + 1 not in shapes]
        coord = pending[0] if pending else min(set(range(p.pp)) - {p.reps.index(r) for r in programs}, default=0)
    return Workload(world_size, {r: programs[r] for r in p.reps}, source=spec.path, spmd=True, mesh=axes,
                    stands_for=p.stands_for, host_offload=offloaded, offload=spec.offload,
                    memory={r: settled(memory[r]) for r in p.reps})


def _mixed_parameters(e: BaseException) -> str:
    """Why a foreach optimizer fails on a mix of DTensor and plain parameters (tensor parallelism over some modules
    with neither dp nor fsdp: PyTorch's AdamW does the same on GPUs), and what a training script does about it."""
    text = str(e)
    if "_foreach_" not in text or "mixed torch.Tensor and DTensor" not in text:
        return ""
    return (" (the optimizer steps the DTensor parameters tensor parallelism made together with plain ones: give "
            "every module a TP_PLAN style, or build the optimizer with the two kinds in separate param groups)")


def _outline_text(outline: tuple) -> str:
    kind, stages, micro, _ = outline
    return f"{kind}, {stages} stages, {micro} micro-batches"


def _capture_rank(spec: ModelFile, world_size: int, axes: dict[str, int], rank: int, stage=None,
                  replay: bool = True, lender: Lender | None = None, shared: SharedBuild | None = None):
    """Record one rank's training step: (its ops, with groups named after the mesh axes; whether FSDP2 offloads
    shards to the host; for a pipeline, the rank's pipeline_schedule.RankPipeline; its memory,
    step_memory.StepMemory.result). `stage`: (pipeline.Plan, the rank's pp coordinate, the chain of stage shapes so
    far) or None. A pipeline rank whose stages' inputs are not all known yet only advances the chain: its ops (and
    memory) are None. `replay`: a pipeline stage's later micro-batches copied from an earlier one's ops
    (chunk_replay.py; each copy allocates and frees what its template did), else each dispatched; `lender`: the
    templates of an earlier stage, which this one may take, and where it leaves its own (chunk_lending.py);
    `shared`: the model built once for a pipeline's stages, and the fake mode it was built in (shared_build.py:
    Taken where this stage cannot take its part from it)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    # a training step needs autograd whatever mode the caller (or an earlier capture stopped midway by its CPU
    # limit, whose exception can land anywhere in torch) left the process in; enable_grad restores it afterwards
    recording = [None]   # the recorder while the recorded step runs (save_on_cpu's hooks report to it)
    where = f" (pipeline stage {stage[1]})" if stage is not None else ""
    acc = spec.accumulation or Accumulation()
    chunks = ChunkReplay(lambda: recording[0],
                         enabled=replay and (stage is not None or replays_microbatches(acc.microbatches)),
                         lender=lender, coord=stage[1] if stage is not None else 0)
    with torch.enable_grad(), fake_world(world_size, rank), _quiet_error_logs(), meshes_outside_fake(), \
            _compiled_runs_eager(), _pinning_is_free(), _activations_to_host(lambda: recording[0]), \
            recompute_marked(lambda: recording[0]), cuda_autocast_on_host(), cuda_foreach_on_host(), \
            cuda_dropout_on_host(), cuda_attention_on_host(), weight_groups_ordered():
        device_mesh = build_mesh(axes)  # outside fake mode: the mesh holds real rank tensors
        fake = shared.fake_mode() if shared is not None else FakeTensorMode(allow_non_fake_inputs=True)
        what, rp, target = "build_model()", None, None
        try:
            with fake, skip_cross_rank_checks(), fake_build():
                model = shared.build() if shared is not None else spec.build_model()
                if not isinstance(model, torch.nn.Module):   # None would pass on to a parallelize() that ignores it
                    raise UserError(f"{spec.path}: build_model() returned {type(model).__name__}, not a "
                                    "torch.nn.Module")
                what = "example_inputs()"
                inputs = _as_tuple(spec.example_inputs())
                loss_of = spec.loss if spec.loss else lambda out: _first_tensor(out).sum()
                what = "parallelize(module, mesh)"
                read = None   # the axes the file's parallelize() looks up (None: the built-in parallelism)
                with mesh_reads() as reads:
                    if stage is not None:
                        what = "the pipeline's stages and schedule" if stage[0].schedule else what
                        rp = _rank_pipeline(spec, model, device_mesh, axes, stage, inputs, loss_of, shared)
                        model = torch.nn.ModuleList(rp.modules)
                        chunks.enabled &= replays(rp)
                        # a rank of middle stages lends and borrows (chunk_lending.py): the first stage computes
                        # no input gradient, the last a loss
                        chunks.lending = chunks.enabled and lender is not None and \
                            not any(s.is_first or s.is_last for s in rp.stages)
                        chunks.places = {id(s): n for n, s in enumerate(rp.stages)}
                    elif spec.parallelize is not None:
                        made = spec.parallelize(model, device_mesh)   # None: parallelized in place
                        model = model if made is None else made     # (not `or`: a module may define __len__)
                    else:
                        model = apply_builtin(model, device_mesh, axes, spec.tp_plan, spec.fsdp_units)
                read = reads.names if spec.parallelize is not None else None
                if stage is not None:
                    what = "example_target()"
                    target = spec.example_target() if spec.example_target is not None else None
                    what = "the stages' forward on one micro-batch"
                    micro_in = _microbatch(spec, inputs, stage[0], rp.microbatches)
                    if not pipeline_schedule.infer_shapes(rp, stage[2], micro_in, spec.path):
                        return None, False, rp, None
                    pipeline_schedule.set_shapes(rp, stage[2])
                    chunks.outputs = {(id(s), "forward"): pipeline_schedule.rebuild(stage[2][s.stage_index + 1])
                                      for s in rp.stages if not s.is_last}
                prepare_ddp(model)
                offloaded = host_offloaded(model)
                what = "optimizer(parameters)"
                opt = spec.optimizer(model.parameters()) if spec.optimizer else torch.optim.AdamW(model.parameters())
                chunks.trained = lambda: (trained_tensors(model, opt), list(model.buffers()))
                chunks.dtensor_gradients = dtensor_gradients(model, chunks.trained()[0])

            def step(recorder=None):
                def phase(name):
                    if recorder is not None:
                        recorder.phase = name
                with step_context(spec, model=model, inputs=inputs, mesh=device_mesh):
                    if stage is not None:   # micro-batches' forwards and backwards interleave: autograd tells
                        phase(AUTOGRAD)
                        pipeline_schedule.run_step(rp, inputs, target, phase)
                    else:
                        micro_in = split(inputs, acc.microbatches, spec.path)

                        def micro_batch(k):
                            with gradient_sync(model, acc.sync == "every" or k == acc.microbatches - 1):
                                phase("forward")
                                loss = loss_of(model(*micro_in))
                                phase("backward")
                                loss.backward()
                            return loss
                        for k in range(acc.microbatches):
                            if k:
                                rebuild_ddp_buckets(model)   # after a synchronised micro-batch, once per run
                            # the loss lives on to the next micro-batch's, the last one's through the optimizer
                            # step, as a training loop's `loss` variable does
                            loss = chunks.micro_batch(model, k, acc.microbatches, micro_in,
                                                      lambda k=k: micro_batch(k))
                phase("optimizer")
                opt.step()
                opt.zero_grad(set_to_none=True)

            what = "the warm-up training step"
            routing = AssumedRouting(check_routing(spec.routing, spec.path), spec.path)
            checks = pipeline_schedule.handoff_check(rp, stage[2], spec.path) if stage is not None else []
            try:
                with fake, routing, chunks.installed():
                    step()
            finally:
                for handle in checks:
                    handle.remove()
            rebuild_ddp_buckets(model)
            what = "the recorded training step"
            recorder = recording[0] = StepRecorder()
            with fake, routing, watching(recorder.memory, model, opt), recorder, chunks.installed():
                step(recorder)
            chunks.check()
            chunks.lend(recorder.ops)
            recording[0] = None
            # a pipeline stage's caching allocator is replayed on another core while the next stage is captured
            memory = recorder.memory.result(spec.expandable_segments, later=stage is not None)
        except (UserError, ReplayMismatch, Taken):
            raise
        except SystemExit as e:  # the user's code called sys.exit(): never exit with its status as if done
            raise UserError(f"{spec.path}: {what} called sys.exit({e.code!r})") from None
        except Exception as e:  # the user's model failed to build or trace: bad input, one line
            changed = pipeline_schedule.handoff_changed(e)   # torch's schedule wraps what the hook raised
            if changed is not None:
                raise changed from None
            raise UserError(f"{spec.path}: {what}{where} failed: {one_line(e)}{_mixed_parameters(e)}") from None
        names = axis_names(device_mesh, axes)
    check_axes_used(spec, axes, recorder.ops, rank, read, None if stage is None else stage[1])
    for op in recorder.ops:
        op.group_name = names.get(op.group, op.group_name)
    if stage is not None:
        pipeline_schedule.message_phases(recorder.ops)
    return recorder.ops, offloaded, rp, memory


def _rank_pipeline(spec: ModelFile, model, device_mesh, axes: dict[str, int], stage, inputs: tuple, loss_of,
                   shared: SharedBuild | None = None):
    """The recorded rank's stages and schedule (pipeline_schedule.RankPipeline), from the file's PIPELINE and
    pipeline_stage() or from the schedule its parallelize(module, mesh) returns."""
    import torch.distributed as dist
    p, coord, shapes = stage
    group = axis(device_mesh, "pp").get_group()
    if p.schedule:
        def parallelize_part(part):
            if spec.parallelize is not None:
                made = spec.parallelize(part, device_mesh)
                return part if made is None else made
            return apply_builtin(part, device_mesh, axes, spec.tp_plan, spec.fsdp_units)
        schedule = pipeline.build_schedule(spec, model, p, coord, group, parallelize_part, loss_of, shapes,
                                           _microbatch(spec, inputs, p, p.microbatches), shared)
    else:
        schedule = pipeline_schedule.find(spec.parallelize(model, device_mesh), spec.path)
    return pipeline_schedule.follow(schedule, spec.path, p.pp, coord, dist.get_process_group_ranks(group))


def _microbatch(spec: ModelFile, inputs: tuple, p, micro: int) -> tuple:
    source = "PIPELINE['microbatches']" if p.schedule else "the schedule's n_microbatches"
    return split(inputs, micro, spec.path, source)   # the first stage's module takes the first micro-batch


def check_axes_used(spec: ModelFile, axes: dict[str, int], ops: list, rank: int, read: set | None,
                    stage: int | None) -> None:
    """A mesh axis that no collective or message of the recorded step runs over leaves its ranks training as
    unsynchronised copies, which no step time shows. Where the file's parallelize() never looked that axis up
    (mesh["dp"], mesh.get_group("dp"), ...) it is a mistake in the file or the mesh: refused in one line. Where it
    did, or the built-in parallelism applied it, the step runs and a warning names the axis."""
    groups = [op.group for op in ops if op.kind == COLLECTIVE] + \
        [(rank, op.peer) for op in ops if op.kind in (SEND, RECV)]
    where = f" (pipeline stage {stage})" if stage is not None else ""
    for a in silent_axes(axes, groups):
        if read is not None and a not in read:
            looked = ", ".join(f"mesh[{n!r}]" for n in sorted(read)) or "no axis"
            raise UserError(f"{spec.path}: mesh axis {a}={axes[a]}: parallelize(module, mesh) never reads it (it "
                            f"reads {looked}) and no collective of the step{where} runs over it, so its ranks would "
                            f"train as unsynchronised copies; shard over mesh[{a!r}] or leave {a} out of the mesh")
        how = "parallelize(module, mesh) reads it but" if read is not None else "the built-in parallelism applied it but"
        warnings.warn(f"{spec.path}: mesh axis {a}={axes[a]}: {how} no collective of the step{where} runs over it, so "
                      "its ranks train as unsynchronised copies", InputWarning, stacklevel=2)


def axis_names(device_mesh, axes: dict[str, int]) -> dict[tuple, str]:
    """Rank tuples of this rank's mesh groups -> the mesh axis name, so reports say "tp" rather than "9"."""
    import torch.distributed as dist
    names = {tuple(range(dist.get_world_size())): "world"}
    if len(axes) > 1:
        for name in axes:
            names[tuple(sorted(dist.get_process_group_ranks(device_mesh[name].get_group())))] = name
    else:
        names[tuple(range(dist.get_world_size()))] = next(iter(axes))
    return names
