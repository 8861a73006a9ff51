"""`--op-times PROFILE.json`: a run's compute ops take their measured time from a GPU profile of the same ops.

Each compute op of the workload whose (bare ATen name, shapes, dtype, causal) a torch.profiler trace of a GPU run has
(profile_ops.py: the calls that launched kernels, and the ATen calls around them, so that an execution trace's
aten::linear finds its time as well as a capture's aten.addmm) takes the median of those calls' device times as
its measured time (`Op.measured_ns`, which the engine uses instead of the compute model); the rest keep the
model's. An op measured already (a trace given with its own profiler trace) keeps its own time. An op whose
shapes find no call (a profile records no sizes for the optimizer's tensor lists), or that has none, is matched
by its name, dtype, FLOPs and bytes instead: the same rules (flop_counter, op_bytes) computed them on both sides.
The report says how much of the step's compute was measured ("measured" in its compute line,
`measured_compute_us` and `measured_ops` in --json).
"""
from __future__ import annotations

import dataclasses

from ...network.op_classes import op_name
from .profile_ops import group, read_profile
from .workload import COMPUTE, Workload


def lookup(path: str) -> dict:
    """key -> measured ns (median) of every op call and enclosing ATen call the profile has; keys: (name, shapes,
    dtype, causal) and (name, dtype, flops, bytes, causal). A key two different groups share (a tie) keeps the first."""
    profile = read_profile(path)
    out: dict = {}
    for g in group(profile.calls) + group(profile.outer):
        out.setdefault(("shapes",) + g.key, g.kernel_ns)
        out.setdefault(("work", op_name(g.name), g.dtype, int(g.flops), int(g.nbytes), g.causal), g.kernel_ns)
    return out


def with_op_times(workload: Workload, path: str) -> Workload:
    """The workload with measured times from the profile at `path` (module notes); the workload itself unchanged
    (a sweep or --cache shares it)."""
    table = lookup(path)
    programs = {}
    for rank, ops in workload.programs.items():
        timed = []
        for op in ops:
            if op.kind == COMPUTE and op.measured_ns < 0:
                ns = next((table[k] for k in _keys(op) if k in table), None)
                if ns is not None:
                    op = dataclasses.replace(op, measured_ns=float(ns))
            timed.append(op)
        programs[rank] = timed
    return dataclasses.replace(workload, programs=programs)


def _keys(op) -> list[tuple]:
    """What an op is looked up by, in order: its shapes where it has them, then its work (a profile's tensor list
    recorded without sizes, the optimizer's, matches by its work only)."""
    work = ("work", op_name(op.name), op.dtype, int(op.flops), int(op.bytes), op.causal)
    return ([("shapes", op_name(op.name), op.shapes, op.dtype, op.causal)] if op.shapes else []) + [work]
