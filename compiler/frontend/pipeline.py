"""Pipeline parallelism in a model file: a `pp` mesh axis, stages run by torch.distributed.pipelining.

A model file with a `pp` axis in its mesh defines which part of the model each stage holds and, optionally, the
schedule (docs/workloads.md):

    def pipeline_stage(model, stage, num_stages) -> nn.Module     this stage's part of build_model()'s model
    PIPELINE = {"schedule": "1F1B", "microbatches": 8}            GPipe | 1F1B (default 1F1B, pp micro-batches)

Stages run different programs, so the capture records one rank per stage (capture.py): the rank at pp
coordinate s and 0 on every other axis, standing for every rank of its stage (they run the same program on their
own tp/dp/fsdp groups). Each stage's module is parallelized over the other axes as without pipelining, wrapped
in torch's PipelineStage and driven by torch's ScheduleGPipe / Schedule1F1B over the pp axis's group: the sends
and receives of activations and gradients are the schedule's own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...network.errors import UserError
from .mesh import mesh_coords

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Plan:
    stages: int
    schedule: str                  # one of SCHEDULES
    microbatches: int
    reps: tuple                    # stage -> the rank recorded for it
    stands_for: dict               # that rank -> every rank of its stage


def plan(spec, axes: dict[str, int]) -> Plan:
    """The pipeline a model file asks for on mesh `axes` (which has a pp axis of 2 or more stages)."""
    if not callable(spec.pipeline_stage):
        raise no_stage_function(spec.path)
    stages = axes["pp"]
    asked = spec.pipeline if spec.pipeline is not None else {}
    if not isinstance(asked, dict) or set(asked) - {"schedule", "microbatches"}:
        raise UserError(f"{spec.path}: PIPELINE must be a dict with the keys schedule and microbatches, got "
                        f"{asked!r}")
    schedule = asked.get("schedule", "1F1B")
    if not isinstance(schedule, str) or schedule.lower() not in SCHEDULES:
        raise UserError(f"{spec.path}: PIPELINE['schedule'] = {schedule!r}: expected GPipe or 1F1B")
    micro = asked.get("microbatches", stages)
    if isinstance(micro, bool) or not isinstance(micro, int) or not 1 <= micro <= 4096:
        raise UserError(f"{spec.path}: PIPELINE['microbatches'] = {micro!r}: expected a count from 1 to 4096")
    stage_of = mesh_coords(np.arange(math.prod(axes.values())), axes)[:, list(axes).index("pp")]
    members = {s: np.flatnonzero(stage_of == s).tolist() for s in range(stages)}
    return Plan(stages, schedule.lower(), micro, tuple(members[s][0] for s in range(stages)),
                {members[s][0]: members[s] for s in range(stages)})


def no_stage_function(path: str) -> UserError:
    return UserError(f"{path}: the mesh has a pp axis but the model file defines no "
                     "pipeline_stage(model, stage, num_stages) (see docs/workloads.md)")


def stage_module(spec, model, stage: int, stages: int):
    made = spec.pipeline_stage(model, stage, stages)
    import torch
    if not isinstance(made, torch.nn.Module):
        raise UserError(f"{spec.path}: pipeline_stage(model, {stage}, {stages}) returned {type(made).__name__}, "
                        "not an nn.Module")
    return made


def microbatch(inputs: tuple, micro: int, path: str) -> tuple:
    """The first micro-batch of one rank's batch (what the first stage's module takes)."""
    import torch
    first = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            if t.shape[0] % micro:
                raise UserError(f"{path}: example_inputs() has a batch of {t.shape[0]}, which does not split into "
                                f"PIPELINE['microbatches'] = {micro} equal micro-batches")
            first.append(t[: t.shape[0] // micro])
        else:
            first.append(t)
    return tuple(first)


def shapes(value) -> list:
    """(shape, dtype) of the tensors a stage hands on: the next stage's input, rebuilt in its own capture."""
    import torch
    from torch.utils._pytree import tree_leaves
    return [(tuple(t.shape), t.dtype) for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def rebuild(carried: list) -> tuple:
    """The previous stage's output as this stage's input: an activation that needs its gradient sent back."""
    import torch
    return tuple(torch.empty(shape, dtype=dtype, requires_grad=dtype.is_floating_point) for shape, dtype in carried)


def make_schedule(stage_mod, stage: int, p: Plan, group, inputs: tuple, outputs: tuple, loss):
    """torch's PipelineStage and schedule for this stage; `loss(output)` is the last stage's loss per
    micro-batch."""
    import torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    pipe_stage = PipelineStage(stage_mod, stage, p.stages, torch.device("cpu"), input_args=inputs,
                               output_args=outputs, group=group)
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[p.schedule]
    return kind(pipe_stage, p.microbatches, loss_fn=lambda out, target: loss(out))


def run_step(schedule, stage: int, p: Plan, inputs: tuple) -> None:
    """One training step of the schedule: the first stage feeds the batch, the last takes the losses."""
    if stage == 0:
        schedule.step(*inputs)
    elif stage == p.stages - 1:
        schedule.step(target=_target(p), losses=[])
    else:
        schedule.step()


def moved(ops: list, shift: int) -> list:
    """A middle stage's program as the stage `shift` ranks further on runs it: the same ops, with every rank they
    name (group members, root, message peer) `shift` further (a stage's ranks differ from the previous stage's by
    the pp axis's stride). The capture records stages 1 and 2, and where 2's is 1's moved so, gives the stages
    after it up to the last this program instead of recording each: they hold the same layers and, under GPipe, run
    them in the same order (1F1B's warm-up depends on the stage's place, so there each stage is recorded)."""
    import dataclasses

    def rank(r):
        return r + shift if r >= 0 else r
    return [dataclasses.replace(op, deps=list(op.deps), group=tuple(r + shift for r in op.group), root=rank(op.root),
                                peer=rank(op.peer)) for op in ops]


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


def _target(p: Plan):
    """The last stage's `target` (split into micro-batches like the batch; the model file's loss ignores it)."""
    import torch
    return torch.zeros(p.microbatches)
