"""Pipeline parallelism in a model file: a `pp` mesh axis, stages run by torch.distributed.pipelining.

A model file with a `pp` axis in its mesh writes the pipeline one of two ways (docs/workloads.md):

  - the file's stage function and, optionally, the schedule; the capture builds the stages and the schedule:

        def pipeline_stage(model, stage, num_stages) -> nn.Module    stage `stage`'s part of build_model()'s model
        PIPELINE = {"schedule": "Interleaved1F1B", "microbatches": 8, "virtual_stages": 2}

  - torch's own way (its tutorials, torchtitan): the file's parallelize(module, mesh) splits the model, builds this
    rank's PipelineStage(s) over mesh["pp"] and returns the schedule object (pipeline_schedule.py follows it).

Stages run different programs, so the capture records one rank per pp coordinate (capture.py): the rank at pp
coordinate c and 0 on every other axis, standing for every rank with that coordinate (they run the same program
on their own tp/dp/fsdp groups). That rank runs every stage it holds (several with virtual stages), each
parallelized over the other axes as without pipelining, driven by torch's schedule over the pp axis's group: the
sends and receives of activations and gradients are the schedule's own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...network.errors import UserError
from .mesh import mesh_coords

# PIPELINE's schedule names (torch's get_schedule_class names, any case) -> torch's class, how the stages sit on
# the pp ranks (torch's generate_stage_to_rank_mapping style), stages per rank (None: PIPELINE's virtual_stages)
SCHEDULES = {
    "gpipe": ("ScheduleGPipe", "loop", 1),
    "1f1b": ("Schedule1F1B", "loop", 1),
    "interleaved1f1b": ("ScheduleInterleaved1F1B", "loop", None),
    "loopedbfs": ("ScheduleLoopedBFS", "loop", None),
    "interleavedzerobubble": ("ScheduleInterleavedZeroBubble", "loop", None),
    "zbvzerobubble": ("ScheduleZBVZeroBubble", "v", 2),
    "dualpipev": ("ScheduleDualPipeV", "v", 2),
}
NAMES = "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble or DualPipeV"
KEYS = ("schedule", "microbatches", "virtual_stages")
LOOPED_DEFAULT = 2   # virtual stages per rank of a looped schedule without virtual_stages (torchtitan's default)


@dataclass(frozen=True)
class Plan:
    pp: int
    reps: tuple                    # pp coordinate -> the rank recorded for it
    stands_for: dict               # that rank -> every rank with its pp coordinate
    schedule: str = ""             # PIPELINE's (a SCHEDULES key); "": the file's parallelize() builds the schedule
    microbatches: int = 0
    virtual: int = 1               # stages per rank


def plan(spec, axes: dict[str, int]) -> Plan:
    """The pipeline a model file asks for on mesh `axes` (which has a pp axis of 2 or more ranks)."""
    pp = axes["pp"]
    coord = mesh_coords(np.arange(math.prod(axes.values())), axes)[:, list(axes).index("pp")]
    members = {c: np.flatnonzero(coord == c).tolist() for c in range(pp)}
    reps, stands_for = tuple(members[c][0] for c in range(pp)), {members[c][0]: members[c] for c in range(pp)}
    if not callable(spec.pipeline_stage):
        if not callable(spec.parallelize):
            raise no_stage_function(spec.path)
        if spec.pipeline is not None:
            raise UserError(f"{spec.path}: PIPELINE is for pipeline_stage(model, stage, num_stages), which the file "
                            "does not define; a schedule built in parallelize(module, mesh) sets its own "
                            "micro-batches")
        return Plan(pp, reps, stands_for)
    asked = spec.pipeline if spec.pipeline is not None else {}
    if not isinstance(asked, dict) or set(asked) - set(KEYS):
        raise UserError(f"{spec.path}: PIPELINE must be a dict with the keys {', '.join(KEYS)}, got {asked!r}")
    schedule = asked.get("schedule", "1F1B")
    if not isinstance(schedule, str) or schedule.lower() not in SCHEDULES:
        raise UserError(f"{spec.path}: PIPELINE['schedule'] = {schedule!r}: expected {NAMES}")
    micro = _count(asked.get("microbatches", pp), "microbatches", 4096, spec.path)
    fixed = SCHEDULES[schedule.lower()][2]
    virtual = _count(asked.get("virtual_stages", fixed or LOOPED_DEFAULT), "virtual_stages", 64, spec.path)
    if fixed is not None and virtual != fixed:
        raise UserError(f"{spec.path}: PIPELINE['virtual_stages'] = {virtual}: {schedule} runs {fixed} stage"
                        f"{'s' if fixed > 1 else ''} per rank")
    return Plan(pp, reps, stands_for, schedule.lower(), micro, virtual)


def _count(value, key: str, most: int, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise UserError(f"{path}: PIPELINE[{key!r}] = {value!r}: expected a count from 1 to {most}")
    return value


def no_stage_function(path: str) -> UserError:
    return UserError(f"{path}: the mesh has a pp axis but the model file defines neither pipeline_stage(model, "
                     "stage, num_stages) nor a parallelize(module, mesh) that builds a torch.distributed.pipelining "
                     "schedule (see docs/workloads.md)")


def stage_module(spec, model, stage: int, stages: int):
    made = spec.pipeline_stage(model, stage, stages)
    import torch
    if not isinstance(made, torch.nn.Module):
        raise UserError(f"{spec.path}: pipeline_stage(model, {stage}, {stages}) returned {type(made).__name__}, "
                        "not an nn.Module")
    return made


def build_schedule(spec, model, p: Plan, coord: int, group, parallelize_part, loss, shapes: dict, micro_in: tuple,
                   shared=None):
    """PIPELINE's schedule for pp coordinate `coord`, as a file written the torch way would build it: its stages
    (pipeline_stage() for each stage id torch's layout gives the rank, each through `parallelize_part`) wrapped in
    PipelineStage over the pp group; `loss(output)` is the last stage's loss per micro-batch. Each stage module
    advances the chain of stage shapes (pipeline_schedule.advance) before it is parallelized, the dtype its
    parallelized form computes in then set (pipeline_schedule.computed_dtype); where the warm-up found a stage
    handing on other shapes once parallelized (pipeline_schedule.HandOffChanged), the chain is marked PARALLELIZED
    and found from the parallelized stages instead, as for a file that builds its own (capture.py). `shared`: the
    model is the one built for every stage (shared_build.SharedBuild), which checks each part taken from it."""
    import torch
    from torch.distributed import pipelining
    from torch.distributed.pipelining._utils import generate_rank_to_stage_mapping
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    from .pipeline_schedule import PARALLELIZED, advance, computed_dtype
    name, style, _ = SCHEDULES[p.schedule]
    n = p.pp * p.virtual
    stages = []
    for k in generate_rank_to_stage_mapping(p.pp, n, style)[coord]:
        if shared is not None:
            shared.check()
        part = stage_module(spec, model, k, n)
        if shared is not None:
            shared.claim(part)
        if shapes.get(PARALLELIZED):   # the stages' hand-off changes once parallelized: infer_shapes finds it
            made = parallelize_part(part)
        else:
            advance(shapes, k, part, micro_in, k == n - 1, spec.path)
            made = parallelize_part(part)
            if k < n - 1 and k + 1 in shapes:   # (a looped rank may not know its later stages' inputs yet)
                shapes[k + 1] = computed_dtype(made, shapes[k + 1])
        stages.append(pipelining.PipelineStage(made, k, n, torch.device("cpu"), group=group))
    kind = getattr(pipelining, name)
    return kind(stages[0] if issubclass(kind, PipelineScheduleSingle) else stages, p.microbatches,
                loss_fn=lambda out, target: loss(out))


