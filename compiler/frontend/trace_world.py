"""A recorded job on a topology with more NPUs than it had ranks (the usual trace: one GPU, NCCL world size 1).

A trace of N ranks runs on a topology of N NPUs or more:
- as recorded (no --mesh): its ranks are NPUs 0..N-1 and its groups keep their ranks; a collective over one rank
  moves nothing, so a one-GPU trace is its compute step. The report says where the job ran.
- re-targeted (--mesh dp=M, M the topology's NPUs): the recorded default group, the one DDP all-reduces its
  buckets over, becomes all M ranks, and the one file stands for every rank (SPMD): the step as data-parallel
  training on the topology. Only collectives whose bytes do not depend on the group's size follow (all-reduce,
  broadcast, reduce: the buffer; docs/workloads.md); an all-gather, reduce-scatter or all-to-all on it, a collective on
  another group or a point-to-point message would need the job's other ranks and is refused in one line.
"""
from __future__ import annotations

import dataclasses

from ...network.errors import UserError
from ...network.kinds import IN_PLACE
from .mesh import mesh_text
from .workload import COLLECTIVE, RECV, SEND, Workload

RETARGETS = IN_PLACE   # full-buffer bytes whatever the group's size


def on_topology(w: Workload, npus: int | None, mesh: dict[str, int] | None) -> Workload:
    """The recorded workload `w` (world = the job's ranks) on a topology of `npus` NPUs (None: the job's own)."""
    recorded = w.world_size
    npus = recorded if npus is None else npus
    if mesh:
        return _retargeted(w, npus, mesh)
    if npus == recorded:
        return w
    return placed(w, npus, f"recorded on {_ranks(recorded)}: runs on {first_npus(recorded)} of {npus} as recorded "
                           f"(--mesh dp={npus} makes its default group data-parallel over every NPU)")


def placed(w: Workload, npus: int, placement: str) -> Workload:
    """`w` on the first of `npus` NPUs, its ranks as they are (the report says `placement`)."""
    return dataclasses.replace(w, world_size=npus, placement=placement)


def first_npus(n: int) -> str:
    return "NPU 0" if n == 1 else f"NPUs 0-{n - 1}"


def _retargeted(w: Workload, npus: int, mesh: dict[str, int]) -> Workload:
    if list(mesh) != ["dp"] or mesh["dp"] != npus:
        raise UserError(f"--mesh {mesh_text(mesh)} for a trace: it takes one axis, dp={npus} (the topology's NPUs), "
                        "over which the recorded default group is re-targeted")
    if len(w.programs) != 1:
        raise UserError(f"--mesh dp={npus} re-targets one trace standing for every rank; {w.source} holds "
                        f"{len(w.programs)} ranks' traces, each with its own groups")
    (rank, ops), = w.programs.items()
    world = tuple(range(w.world_size))
    for i, op in enumerate(ops):
        problem = ""
        if op.kind in (SEND, RECV):
            problem = "a point-to-point message, whose peer is a rank of the recorded job"
        elif op.kind == COLLECTIVE and op.group != world:
            problem = f"a collective on group {op.group_name} (ranks {list(op.group)}), not the default group"
        elif op.kind == COLLECTIVE and op.collective not in RETARGETS:
            problem = f"a {op.collective}, whose bytes depend on its group's size"
        if problem:
            raise UserError(f"{w.source}: op {i} ({op.name}) is {problem}: --mesh dp={npus} re-targets only the "
                            f"default group's {', '.join(RETARGETS)}")
    every = tuple(range(npus))
    ops = [dataclasses.replace(op, group=every, group_name="dp") if op.kind == COLLECTIVE else op for op in ops]
    return dataclasses.replace(w, world_size=npus, programs={rank: ops}, spmd=True, mesh={"dp": npus},
                               placement=f"recorded on {_ranks(w.world_size)}: its default group re-targeted to "
                                         f"dp={npus}, every NPU running the recorded step")


def _ranks(n: int) -> str:
    return "1 rank" if n == 1 else f"{n} ranks"
