"""The `wl` (workload) dialect: one training step per rank as compute ops and collectives joined by tokens.

Defined in IRDL (workload.irdl.mlir). Collectives are comm dialect ops carrying one discardable attribute,
`wl.group` (the process group's name, a key of the program's `wl.groups`), so the comm passes see ordinary comm
ops. Any op may carry `wl.phase` ("forward", "backward" or "optimizer"): the part of the step it belongs to, and
`wl.iteration` (an execution trace of several training iterations): which one. The report breaks the run into
both. A compute op may carry `wl.measured_ns`, its time as a profiler measured it. Layout of a module:

    module attributes {comm.topology = ..., wl.world_size = 64, wl.spmd = true, wl.source = "model.py"} {
      module attributes {wl.rank = 0 : i64, wl.groups = {dp = array<i64: 0, 8, ...>, tp = ...}} {
        %0 = "wl.compute"() {name = "aten.mm.default", flops = ..., bytes = ..., wl.phase = "forward"} : ...
        %1 = "comm.all_reduce"(%0) {bytes = ..., dims = array<i64: 0>, name = "all_reduce_1", wl.group = "tp"} ...
        %2 = "wl.wait"(%1) {name = "_c10d_functional.wait_tensor.default"} ...
      }
    }

This file only builds and reads modules; the frontends decide what goes in.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from torch_mlir import ir

from . import comm

# MLIR's bindings look for the Python module of an op's dialect as <search prefix>.<namespace> and retry, with a
# failed import, on every op they wrap until one is found: the `wl` ops are defined here, in workload.py, so
# this module answers to that name too (without it, reading a step's module spent most of its time in imports).
sys.modules.setdefault(f"{__package__}.wl", sys.modules[__name__])

_IRDL_FILE = os.path.join(os.path.dirname(__file__), "workload.irdl.mlir")
COMPUTE, WAIT = "wl.compute", "wl.wait"


def new_context() -> ir.Context:
    """A context with the comm and wl dialects loaded."""
    return comm.load_irdl(comm.new_context(), _IRDL_FILE)


def new_workload_module(ctx: ir.Context, topology: dict, world_size: int, spmd: bool, source: str) -> ir.Module:
    module = comm.new_module(ctx)
    with ctx, ir.Location.unknown():
        comm.set_topology(module, topology)
        for name, value in (("wl.world_size", world_size), ("wl.spmd", spmd), ("wl.source", source)):
            comm.set_attr(module, name, value)
    return module


def add_program(module: ir.Module, rank: int, groups: dict[str, list[int]]) -> ir.InsertionPoint:
    """A nested module for one rank's program; returns the insertion point for its ops."""
    with module.context, ir.Location.unknown():
        prog = ir.Operation.create("builtin.module", regions=1, ip=ir.InsertionPoint(module.body))
        prog.regions[0].blocks.append()
        prog.attributes["wl.rank"] = comm.to_attr(int(rank))
        prog.attributes["wl.groups"] = ir.DictAttr.get({n: comm.to_attr([int(r) for r in ranks])
                                                        for n, ranks in sorted(groups.items())})
        return ir.InsertionPoint(prog.regions[0].blocks[0])


def create_compute(name: str, flops: int, nbytes: int, deps, ip) -> ir.Operation:
    return ir.Operation.create(COMPUTE, results=[comm.token_type()], operands=list(deps), ip=ip,
                               attributes={"name": comm.to_attr(name), "flops": comm.to_attr(int(flops)),
                                           "bytes": comm.to_attr(int(nbytes))})


def create_wait(name: str, deps, ip) -> ir.Operation:
    return ir.Operation.create(WAIT, results=[comm.token_type()], operands=list(deps), ip=ip,
                               attributes={"name": comm.to_attr(name)})


def create_collective(kind: str, nbytes: int, dims: list[int], name: str, group: str, deps, ip,
                      root: int = -1) -> ir.Operation:
    """A comm collective of a rank's program; a broadcast names its source NPU (`root`)."""
    rooted = {"root": int(root)} if kind == "broadcast" else {}
    op = comm.create(kind, {"bytes": int(nbytes), "dims": list(dims), "name": name, **rooted}, deps, ip)
    op.attributes["wl.group"] = comm.to_attr(group)
    return op


def set_measured(op: ir.Operation, measured_ns: float) -> None:
    """A compute op's time as a profiler measured it (`wl.measured_ns`): the engine uses it instead of the
    roofline."""
    if measured_ns >= 0:
        op.attributes["wl.measured_ns"] = comm.to_attr(float(measured_ns))


def set_part(op: ir.Operation, phase: str, iteration: int) -> None:
    """Where in the training run an op belongs: `wl.phase` and, for traces of several iterations, `wl.iteration`."""
    if phase:
        op.attributes["wl.phase"] = comm.to_attr(phase)
    if iteration >= 0:
        op.attributes["wl.iteration"] = comm.to_attr(int(iteration))


# ---- reading ----------------------------------------------------------------------------------------------------

@dataclass
class ProgramOp:
    kind: str           # "compute" | "wait" | a comm collective name ("all_reduce", ...)
    name: str
    attrs: dict
    deps: list[int]     # indices of earlier ops in the same program


@dataclass
class Program:
    rank: int
    groups: dict[str, list[int]]
    ops: list[ProgramOp]


def programs(module: ir.Module) -> list[Program]:
    """Every rank program of a workload module, ops in issue order with their dependencies as indices."""
    out = []
    for outer in module.body.operations:
        op = outer.operation
        if op.name != "builtin.module":
            continue
        a = comm.attrs(op)
        # DictAttr iteration yields NamedAttributes
        groups = {named.name: comm.from_attr(named.attr) for named in op.attributes["wl.groups"]}
        index, ops = {}, []  # SSA values hash and compare by identity in these bindings
        for inner in op.regions[0].blocks[0].operations:
            o = inner.operation
            kind = {COMPUTE: "compute", WAIT: "wait"}.get(o.name) or comm.short_name(o)
            deps = [index[v] for v in o.operands]
            index[o.results[0]] = len(ops)
            ops.append(ProgramOp(kind, comm.attrs(o).get("name", ""), comm.attrs(o), deps))
        out.append(Program(int(a["wl.rank"]), groups, ops))
    return out


def parse_module(text: str, ctx: ir.Context, source: str = "<input>") -> ir.Module:
    return comm.parse_module(text, ctx, source)
