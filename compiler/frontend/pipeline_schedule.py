"""A torch.distributed.pipelining schedule object as the capture follows it, for one recorded rank.

Whoever built the schedule (the file's parallelize(module, mesh) written the torch way, or pipeline.py from
PIPELINE), the capture does the same with it: it checks the schedule against the mesh's pp axis (`follow`),
gives each of the rank's PipelineStages the shapes it receives and sends (`infer_shapes`, `set_shapes`), then runs
`schedule.step(...)` as a training loop does (`run_step`) while the step is recorded. torch's own shape inference
exchanges the shapes between ranks at the first step, which one process standing for every rank cannot do (torch
refuses it under the fake process group), so the capture walks the chain of stages itself: stage k's input is
stage k - 1's output, found by running stage k - 1's module on a micro-batch in its own rank's capture.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...network.errors import AstraError, UserError

# the schedules the capture follows (torch's own; a subclass may run another order of actions, so it is refused)
KNOWN = ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
         "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV")


@dataclass
class RankPipeline:
    schedule: object
    stages: list                   # this rank's PipelineStages, by stage index
    num_stages: int                # of the whole pipeline
    owner: dict                    # stage index -> the pp coordinate that holds it
    microbatches: int

    @property
    def modules(self) -> list:
        return [s.submod for s in self.stages]

    def outline(self) -> tuple:
        """What every pp coordinate's schedule must agree on."""
        return type(self.schedule).__name__, self.num_stages, self.microbatches, tuple(sorted(self.owner.items()))


def find(made, path: str):
    """The schedule object a file's parallelize(module, mesh) returned: itself, or the one inside a tuple or list
    (torchtitan's pipelining returns the schedule with the model parts)."""
    from torch.distributed.pipelining.schedules import _PipelineSchedule
    for value in (made, *(made if isinstance(made, (tuple, list)) else ())):
        if isinstance(value, _PipelineSchedule):
            return value
    raise UserError(f"{path}: with a pp axis, parallelize(module, mesh) returned {type(made).__name__}, not a "
                    "torch.distributed.pipelining schedule; build this rank's PipelineStage(s) and return their "
                    "schedule (or define pipeline_stage(model, stage, num_stages); docs/workloads.md)")


def follow(schedule, path: str, pp: int, coord: int, pp_ranks: list[int]) -> RankPipeline:
    """The rank's stages of `schedule`, checked against the pp axis: a schedule class the capture knows, stages
    that are PipelineStages on the pp axis's group, as many stages per rank as the schedule runs."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    kind = type(schedule).__name__
    if kind not in KNOWN or type(schedule).__module__ != "torch.distributed.pipelining.schedules":
        raise UserError(f"{path}: the schedule is a {kind}, which the capture cannot follow; use one of torch's: "
                        f"{', '.join(KNOWN)}")
    if schedule._loss_fn is None:
        raise UserError(f"{path}: the {kind} has no loss_fn, so its step runs no backward; a training step needs "
                        f"{kind}(..., loss_fn=...)")
    stages = [schedule._stage] if isinstance(schedule, PipelineScheduleSingle) else list(schedule._stages)
    for s in stages:
        if type(s) is not PipelineStage:
            raise UserError(f"{path}: the schedule's stage {getattr(s, 'stage_index', '?')} is a {type(s).__name__}, "
                            "not a PipelineStage built from a module (torch's tracing frontend, pipeline() / "
                            "build_stage, is not followed)")
    stages.sort(key=lambda s: s.stage_index)
    ranks = sorted(dist.get_process_group_ranks(stages[0].group)) if stages[0].group is not None else \
        list(range(dist.get_world_size()))
    if ranks != sorted(pp_ranks):
        raise UserError(f"{path}: the schedule's stages run on the process group of ranks {_short(ranks)}, not on "
                        f"the pp axis's ({_short(pp_ranks)}): build PipelineStage(..., group=mesh['pp'].get_group())")
    n = stages[0].num_stages
    if n % pp or len(stages) != n // pp:
        raise UserError(f"{path}: the schedule has {n} stages and pp coordinate {coord} holds {len(stages)} of them; "
                        f"with pp={pp} each pp rank holds the same number (num_stages a multiple of {pp})")
    owner = dict(stages[0].stage_index_to_group_rank)
    mine = sorted(k for k, c in owner.items() if c == coord)
    if [s.stage_index for s in stages] != mine:
        raise UserError(f"{path}: pp coordinate {coord} holds stages {[s.stage_index for s in stages]} but its "
                        f"{kind} runs stages {mine} there")
    for s in stages:   # the capture runs on the host: the buffers a stage receives into go there too (a file
        s.device = torch.device("cpu")   # written for a GPU gives PipelineStage its cuda device)
    return RankPipeline(schedule, stages, n, owner, schedule._n_microbatches)


def _short(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


# A key of the chain of stage shapes: set, the chain is found from the parallelized stages' forwards (infer_shapes),
# not from pipeline_stage()'s modules before parallelize (advance in pipeline.build_schedule)
PARALLELIZED = "parallelized"


class HandOffChanged(AstraError):
    """A stage built by the capture (pipeline_stage()) handed on other shapes, once parallelized, than its module
    did before parallelize: sequence parallelism sends each tensor-parallel rank its 1/tp slice of the sequence.
    The capture then finds the chain from the parallelized stages (capture.py; under the one error base like every
    error class of the package)."""

    def __init__(self, stage: int):
        super().__init__(f"stage {stage} hands on other shapes once parallelized")
        self.stage = stage


def handoff_check(rp: RankPipeline, shapes: dict, path: str):
    """Forward hooks that raise HandOffChanged where a stage's output (but the last's) is not the shapes its next
    stage was given: the warm-up step runs under them, so a chain found before parallelize is never recorded
    wrong. Returns the hooks' handles (remove them after the warm-up)."""
    handles = []
    for s in rp.stages:
        if s.is_last or shapes.get(PARALLELIZED):
            continue

        def check(module, args, output, k=s.stage_index):
            if boundary(output, path, k, last=False) != shapes.get(k + 1):
                raise HandOffChanged(k)
        handles.append(_unwrapped(s.submod).register_forward_hook(check))
    return handles


def handoff_changed(error: BaseException) -> HandOffChanged | None:
    """The HandOffChanged behind an exception torch's schedule raised around it, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, HandOffChanged):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def infer_shapes(rp: RankPipeline, shapes: dict, first_input: tuple, path: str) -> bool:
    """Advance the chain of stage shapes through the rank's stages (`advance`). True when every stage of the rank
    knew its input and output before: only then is the rank's step recorded in this capture. A parallelized stage
    module run outside the step leaves it wrong (the DTensor parameters of a tensor-parallel module in DDP get no
    gradient in the step), so a rank whose shapes took a forward here is captured again, afresh."""
    known = all(s.stage_index + 1 in shapes for s in rp.stages)
    for s in rp.stages:
        advance(shapes, s.stage_index, _unwrapped(s.submod), first_input, s.is_last, path)
    return known


def advance(shapes: dict, k: int, module, first_input: tuple, last: bool, path: str) -> None:
    """Stage k's output shapes, where its input is known and its output not yet (`shapes`: stage index -> the
    (shape, dtype) of each tensor it takes; index num_stages: what the last stage gives its loss), from its module
    run on one micro-batch. Where the capture builds the stages (PIPELINE) it runs the module before parallelizing
    it, and records the rank in the same capture (infer_shapes)."""
    import torch
    if k == 0 and 0 not in shapes:
        shapes[0] = boundary(first_input, path, 0, last=False)
    if k + 1 in shapes or k not in shapes:
        return
    with torch.enable_grad():
        out = module(*(first_input if k == 0 else rebuild(shapes[k])))
    shapes[k + 1] = boundary(out, path, k, last=last)


def computed_dtype(module, carried: list) -> list:
    """What a stage hands on once parallelized, where advance() ran it before: an FSDP2 root with a
    MixedPrecisionPolicy casts its inputs to param_dtype and computes in it (its outputs in output_dtype where
    set), so its floating outputs are of that dtype, not of the fp32 module advance() ran. Otherwise unchanged."""
    from torch.distributed.fsdp import FSDPModule
    module = _unwrapped(module)
    if not isinstance(module, FSDPModule):
        return carried
    policy = module._get_fsdp_state()._mp_policy
    dtype = policy.output_dtype or policy.param_dtype
    if dtype is None:
        return carried
    return [(shape, dtype if kind.is_floating_point else kind) for shape, kind in carried]


def _unwrapped(module):
    """The module DistributedDataParallel wraps: DDP's forward outside a training step leaves its reducer expecting
    the gradients of that forward, which the step's first backward then lacks."""
    from torch.nn.parallel import DistributedDataParallel
    return module.module if isinstance(module, DistributedDataParallel) else module


def boundary(value, path: str, stage: int, last: bool) -> list:
    """(shape, dtype) of the tensors a stage hands on (the next stage's input, rebuilt in its own capture). A DTensor
    between stages would need its placements sent too: refused; the last stage's output goes only to its loss."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.utils._pytree import tree_leaves
    out = []
    for t in tree_leaves(value):
        if isinstance(t, DTensor):
            if not last:
                raise UserError(f"{path}: stage {stage}'s output is a DTensor; the capture passes plain tensors "
                                "between stages (use_local_output=True in the tensor-parallel plan)")
            t = t.to_local()
        if isinstance(t, torch.Tensor):
            out.append((tuple(t.shape), t.dtype))
    return out


def rebuild(carried: list) -> tuple:
    """A stage's input from its shapes: an activation that needs its gradient sent back."""
    import torch
    return tuple(torch.empty(shape, dtype=dtype, requires_grad=dtype.is_floating_point) for shape, dtype in carried)


def set_shapes(rp: RankPipeline, shapes: dict) -> None:
    """Each stage's input and output metadata, as a PipelineStage built with input_args and output_args holds it
    (torch's static mode: no shape exchange at the first step); metadata the file gave its stage is kept."""
    from torch.distributed.pipelining._utils import extract_tensor_metas
    for s in rp.stages:
        k = s.stage_index
        if s._user_meta.inputs is None:
            s._user_meta.inputs = extract_tensor_metas(rebuild(shapes[k]))
        if s._user_meta.outputs is None:
            s._user_meta.outputs = extract_tensor_metas(rebuild(shapes[k + 1]))


def run_step(rp: RankPipeline, inputs: tuple, target, phase) -> None:
    """One training step of the schedule as a training loop calls it: a rank holding the first stage feeds the
    batch, one holding the last gives the target (the file's example_target(), else one zero per micro-batch,
    which a loss that ignores it takes) and takes the losses, without the merged outputs. `phase(name)` sets the recorder's phase:
    a zero-bubble schedule's weight-gradient step (backward_weight_one_chunk) runs autograd for the weights and
    then adds the gradients into .grad (and reduces them over dp) outside autograd's pass, which would read as
    forward; the whole step is the backward's."""
    from .recorder import AUTOGRAD

    def weight_step(inner):
        def run(*args, **kwargs):
            phase("backward")
            try:
                return inner(*args, **kwargs)
            finally:
                phase(AUTOGRAD)
        return run
    for s in rp.stages:   # an attribute of the stage object only while the step runs
        s.backward_weight_one_chunk = weight_step(s.backward_weight_one_chunk)
    try:
        if any(s.is_last for s in rp.stages):
            kwargs = {"target": target if target is not None else zeros_target(rp), "losses": []}
        else:
            kwargs = {}
        # the last stage's outputs merged and returned are no use to training, and by default torch keeps each
        # micro-batch's (the logits: GiBs each) until the step ends; torchtitan's trainer asks it not to
        kwargs.update(_no_outputs(rp.schedule))
        if any(s.is_first for s in rp.stages):
            rp.schedule.step(*inputs, **kwargs)
        else:
            rp.schedule.step(**kwargs)
    finally:
        for s in rp.stages:
            del s.backward_weight_one_chunk


def _no_outputs(schedule) -> dict:
    """step()'s return_outputs=False where this torch's schedule takes it (older ones have no such argument)."""
    import inspect
    try:
        takes = "return_outputs" in inspect.signature(schedule.step).parameters
    except (TypeError, ValueError):
        takes = False
    return {"return_outputs": False} if takes else {}


def zeros_target(rp: RankPipeline):
    """The last stage's `target` where the file gives none: one zero per micro-batch."""
    import torch
    return torch.zeros(rp.microbatches)


def message_phases(ops: list) -> None:
    """A stage's sends and receives run outside autograd's backward pass even when they carry gradients, so the
    phase autograd gives them says forward: a send takes the phase of what it sends (its latest dependency), a
    receive that of the first op using what it received."""
    from .workload import RECV, SEND
    users: dict[int, int] = {}
    for i, op in enumerate(ops):
        for d in op.deps:
            users.setdefault(d, i)
    for i, op in enumerate(ops):
        if op.kind == SEND and op.deps:
            op.phase = ops[max(op.deps)].phase
        elif op.kind == RECV and i in users:
            op.phase = ops[users[i]].phase
