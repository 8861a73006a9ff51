"""What the planning passes (allocate-trees, find-cycle, place-ranks) share: finding the whole-network phases a
pass decides for, and recording its decision as a structure op whose token those phases take."""
from __future__ import annotations

from .. import algorithms
from ..dialects import comm


def phases_planned_by(module, pass_name: str) -> list[tuple[object, comm.OpView, object]]:
    """(op, its view, algorithm) of every phase over the whole network whose algorithm this pass plans and that
    has no structure yet (one written in the input, or by an earlier run, is kept)."""
    out = []
    for op in comm.ops(module):
        if comm.short_name(op) != "phase" or comm.structure_of(op) is not None:
            continue
        v = comm.view(op)
        if v.dim != -1 or v.algorithm is None:
            continue
        alg = algorithms.for_phase(v.algorithm, flat=True)
        if alg.planned_by == pass_name:
            out.append((op, v, alg))
    return out


def record(module, phases: list, kind: str, attributes: dict) -> None:
    """Insert `comm.<kind>` with `attributes` at the top of the module and give its token to every phase."""
    op = comm.create(kind, attributes, ip=comm.ir.InsertionPoint.at_block_begin(module.body))
    for phase, _, _ in phases:
        comm.add_dependency(phase, op.result)
