"""The `wl` (workload) dialect: one training step per rank as compute ops and collectives joined by tokens.

Defined in IRDL (workload.irdl.mlir). Collectives are comm dialect ops carrying one discardable attribute,
`wl.group` (the process group's name, a key of the program's `wl.groups`), so the comm checks see ordinary comm
ops (the comm passes do not run here: each distinct collective is compiled in a comm module of its own,
compiler/driver/workload_driver.py). Any op may carry `wl.phase` ("forward", "backward", "recompute": a forward
that activation checkpointing reruns in the backward, or "optimizer"): the part of the step it belongs to, and
`wl.iteration` (an execution trace of several training iterations): which one. The report breaks the run into
both. A compute op may carry `wl.measured_ns`, its time as a profiler measured it, `wl.dtype`, the dtype it
computed in (one of network/dtypes.DTYPES: "bf16", "tf32", ...; absent: "fp32"), whose peak the roofline takes,
and `wl.shapes`, its tensor arguments' sizes in schema order ("4096,64x4096,4096x4096" for an addmm:
network/op_classes.format_shapes; absent: not known), from which its op class's GEMM dimensions come, and
`wl.causal = true` on an attention op that masked causally (compiler/frontend/op_causal.py; absent: not), whose
kernels run the blocks on and below the diagonal (network/compute_model.attention_factor; the FLOPs are unchanged),
and `wl.views`, the kernel-less ops (views, aliases) the host dispatched since the previous compute op (absent: 0),
whose host time the --gpu model adds to its issue (network/compute_model.py `view_us`).
`wl.load` / `wl.store` move `bytes` between the accelerator and its local memory or the remote pool (`location`;
docs/memory.md), a remote one gathered (reduce-scattered) by the pool's switches for a group of `wl.in_switch`
GPUs when it carries that attribute. Point-to-point messages are
the comm dialect's `comm.send` / `comm.recv` (bytes, src, dst: global ranks, the program's own rank one of them);
the k-th send from one rank to another meets the k-th receive posted for it there. A module holds one rank
program per rank, or (wl.spmd) one that stands for every rank, or (wl.spmd, pipeline stages) one per stage, each
listing the ranks that run it in `wl.stands_for`; a captured program's `wl.memory` holds its memory per rank
(network/memory_record.py). Layout of a module:

    module attributes {comm.topology = ..., wl.world_size = 64, wl.spmd = true, wl.source = "model.py",
                       wl.mesh = "dp=8,tp=8"} {
      module attributes {wl.rank = 0 : i64, wl.groups = {dp = array<i64: 0, 8, ...>, tp = ...}} {
        %0 = "wl.compute"() {name = "aten.mm.default", flops = ..., bytes = ..., wl.phase = "forward"} : ...
        %1 = "comm.all_reduce"(%0) {bytes = ..., dims = array<i64: 0>, name = "all_reduce_1", wl.group = "tp"} ...
        %2 = "wl.wait"(%1) {name = "_c10d_functional.wait_tensor.default"} ...
      }
    }

After the step is timed, --emit mlir clones each distinct collective's module after the comm passes into the
step's module as `module @c<k> attributes {..., wl.algorithm = ..., wl.time_ns = ...}`, and every use names it
in `wl.schedule = "c<k>"`: the decisions the passes made for the step. Reading a module drops these records (it
is compiled again).

This file only builds, checks and reads modules; the frontends decide what goes in. A module written with
`--emit mlir` is also input (`astra-compile step.mlir`): `check_module` refuses, in one line naming the op and the
attribute, anything `programs` could not read.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from torch_mlir import ir

from . import comm
from ..network.dtypes import DEFAULT as DEFAULT_DTYPE, DTYPES
from ..network.errors import show
from ..network import memory_record
from ..network.memory import LOCATIONS
from ..network.op_classes import MAX_SHAPES_TEXT, MAX_VIEWS, is_shapes, is_views

# MLIR's bindings look for the Python module of an op's dialect as <search prefix>.<namespace> and retry, with a
# failed import, on every op they wrap until one is found: the `wl` ops are defined here, in workload.py, so
# this module answers to that name too (without it, reading a step's module spent most of its time in imports).
sys.modules.setdefault(f"{__package__}.wl", sys.modules[__name__])

_IRDL_FILE = os.path.join(os.path.dirname(__file__), "workload.irdl.mlir")
COMPUTE, WAIT, LOAD, STORE = "wl.compute", "wl.wait", "wl.load", "wl.store"
OWN_KINDS = {COMPUTE: "compute", WAIT: "wait", LOAD: "load", STORE: "store"}   # ProgramOp.kind of the wl ops
_OWN_NAMES = {kind: name for name, kind in OWN_KINDS.items()}
MEMORY = ("load", "store")   # ProgramOp kinds that move data between the accelerator and a memory
P2P = comm.POINT_TO_POINT   # comm.send / comm.recv: a message between the program's rank and one peer


def is_collective(kind: str) -> bool:
    """Is a ProgramOp of this kind a comm collective (not compute, a wait or a point-to-point message)?"""
    return kind in comm.COLLECTIVES


def peer(op) -> int:
    """The other end of a send (its dst) or recv (its src) of a rank program (ProgramOp)."""
    return int(op.attrs["dst"] if op.kind == "send" else op.attrs["src"])


def new_context() -> ir.Context:
    """A context with the comm and wl dialects loaded."""
    return comm.load_irdl(comm.new_context(), _IRDL_FILE)


def new_workload_module(ctx: ir.Context, topology: dict, world_size: int, spmd: bool, source: str,
                        mesh: str = "") -> ir.Module:
    module = comm.new_module(ctx)
    with ctx, ir.Location.unknown():
        comm.set_topology(module, topology)
        for name, value in (("wl.world_size", world_size), ("wl.spmd", spmd), ("wl.source", source),
                            ("wl.mesh", mesh)):
            comm.set_attr(module, name, value)
    return module


def is_workload_text(head: str) -> bool:
    """Does the start of a .mlir file look like a workload module (wl attributes or ops), not a comm module?"""
    return re.search(r'\bwl\.(world_size|rank|groups)\b|"wl\.(compute|wait|load|store)"', head) is not None


def check_module(module: ir.Module, where: str, shape: list[int]) -> None:
    """Refuse (comm.IRError, one line naming `where`, the op and the attribute) a workload module that the engine
    could not read: MLIR's verifier and the comm checks (dims and roots within `shape`, the topology's sizes)
    first, then the wl layout and every attribute it reads."""
    try:
        comm.verify_module(module, list(shape))
    except comm.IRError as e:
        raise comm.IRError(f"{where}: {e}") from None
    a = comm.attrs(module.operation)
    world = a.get("wl.world_size")
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world < 2 ** 31:
        raise comm.IRError(f"{where}: wl.world_size must be a positive integer, got {show(world)}")
    for key, kind in (("wl.spmd", bool), ("wl.source", str), ("wl.mesh", str)):
        if key in a and not isinstance(a[key], kind):
            raise comm.IRError(f"{where}: {key} must be a {kind.__name__}, got {show(a[key])}")
    ranks, covered = set(), []
    for outer in module.body.operations:
        op = outer.operation
        if is_schedule_record(op):
            continue
        if op.name != "builtin.module":
            raise comm.IRError(f"{where}: {op.name} outside a rank program (the workload module holds one nested "
                               f"module per rank)")
        rank = comm.from_attr(op.attributes["wl.rank"]) if "wl.rank" in op.attributes else None
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world or rank in ranks:
            raise comm.IRError(f"{where}: a rank program's wl.rank must be a distinct rank in 0..{world - 1}, "
                               f"got {show(rank)}")
        ranks.add(rank)
        prog = f"{where}: rank {rank}"
        if "wl.groups" not in op.attributes or not isinstance(op.attributes["wl.groups"], ir.DictAttr):
            raise comm.IRError(f"{prog}: wl.groups must be a dictionary of process groups")
        groups = {n.name: comm.from_attr(n.attr) for n in op.attributes["wl.groups"]}
        if "wl.stands_for" in op.attributes:
            covered.append(_stands_for(comm.from_attr(op.attributes["wl.stands_for"]), rank, world, prog))
        if "wl.memory" in op.attributes:
            wrong = memory_record.problem(comm.from_attr(op.attributes["wl.memory"]))
            if wrong:
                raise comm.IRError(f"{prog}: wl.memory: {wrong}")
        for name, members in groups.items():
            if not isinstance(members, list) or not members or \
                    any(isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < world for m in members):
                raise comm.IRError(f"{prog}: group {show(name)} must list ranks in 0..{world - 1}, got {show(members)}")
        # a rank program is a graph region, where MLIR allows a use before its definition: the engine reads the ops
        # in issue order, each depending on earlier ones through the one token each defines
        earlier = set()
        for i, inner in enumerate(op.regions[0].blocks[0].operations):
            o = inner.operation
            _check_op(o, groups, prog, rank, world)
            if len(o.results) != 1:
                raise comm.IRError(f"{prog}: op #{i} ({o.name}) must define one token, defines {len(o.results)} values")
            if any(v not in earlier for v in o.operands):
                raise comm.IRError(f"{prog}: op #{i} ({o.name}) uses a value no earlier op of the program defines "
                                   "(ops come in issue order, after the ops they depend on)")
            earlier.add(o.results[0])
    if not ranks:
        raise comm.IRError(f"{where}: no rank program")
    several = a.get("wl.spmd") is True and len(ranks) > 1
    if covered and not several:
        raise comm.IRError(f"{where}: wl.stands_for is for SPMD modules (wl.spmd = true) of several rank programs")
    if several and (len(covered) != len(ranks) or sorted(r for c in covered for r in c) != list(range(world))):
        raise comm.IRError(f"{where}: the rank programs of an SPMD module of several programs must each list in "
                           f"wl.stands_for the ranks that run it, every rank in 0..{world - 1} once")


def _stands_for(ranks, rank: int, world: int, prog: str) -> list[int]:
    if not isinstance(ranks, list) or rank not in ranks or \
            any(isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world for r in ranks):
        raise comm.IRError(f"{prog}: wl.stands_for must list ranks in 0..{world - 1}, its own among them, got "
                           f"{show(ranks)}")
    return ranks


_DECLARED = {COMPUTE: ("bytes", "flops", "name"), WAIT: ("name",),    # as workload.irdl.mlir declares them
             LOAD: ("bytes", "location", "name"), STORE: ("bytes", "location", "name")}


def _check_op(o, groups: dict, prog: str, rank: int, world: int) -> None:
    a = comm.attrs(o)
    what = f"{prog}: {o.name}" + (f" '{a['name']}'" if isinstance(a.get("name"), str) else "")
    for attr in a:  # the IRDL definition requires its attributes but lets others through
        if o.name in _DECLARED and attr not in _DECLARED[o.name] and not attr.startswith("wl."):
            raise comm.IRError(f"{what}: undeclared attribute '{attr}' ({o.name} takes "
                               f"{', '.join(_DECLARED[o.name])} and wl.* attributes)")
    if o.name == COMPUTE:
        for key in ("flops", "bytes"):
            if isinstance(a[key], bool) or not isinstance(a[key], int) or a[key] < 0:
                raise comm.IRError(f"{what}: {key} must be a non-negative integer, got {show(a[key])}")
        m = a.get("wl.measured_ns", 0.0)
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m < 1e18:
            raise comm.IRError(f"{what}: wl.measured_ns must be a non-negative time in ns, got {show(m)}")
        if a.get("wl.dtype", DEFAULT_DTYPE) not in DTYPES:
            raise comm.IRError(f"{what}: wl.dtype must be one of {', '.join(DTYPES)}, got {show(a['wl.dtype'])}")
        if not is_shapes(a.get("wl.shapes", "")):
            raise comm.IRError(f"{what}: wl.shapes must be tensor sizes as \"64x4096,4096x4096\" (at most "
                               f"{MAX_SHAPES_TEXT} characters), got {show(a['wl.shapes'])}")
        if not isinstance(a.get("wl.causal", False), bool):
            raise comm.IRError(f"{what}: wl.causal must be true or false, got {show(a['wl.causal'])}")
        if not is_views(a.get("wl.views", 0)):
            raise comm.IRError(f"{what}: wl.views must be a whole number 0..{MAX_VIEWS}, got {show(a['wl.views'])}")
    elif o.name in (LOAD, STORE):
        if isinstance(a["bytes"], bool) or not isinstance(a["bytes"], int) or a["bytes"] < 0:
            raise comm.IRError(f"{what}: bytes must be a non-negative integer, got {show(a['bytes'])}")
        if a["location"] not in LOCATIONS:
            raise comm.IRError(f"{what}: location must be one of {', '.join(LOCATIONS)}, got {show(a['location'])}")
        g = a.get("wl.in_switch", 1)
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g < 2 ** 31 or \
                (g > 1 and a["location"] != "remote"):
            raise comm.IRError(f"{what}: wl.in_switch is the group of GPUs the pool's switches gather for (an "
                               f"integer >= 2, on a remote load or store only), got {show(g)} at location "
                               f"{show(a['location'])}")
    elif o.name.startswith("comm.") and comm.short_name(o) in P2P:   # comm's checks gave src != dst in range
        own = "src" if comm.short_name(o) == "send" else "dst"
        if a[own] != rank:
            raise comm.IRError(f"{what}: {own} must be the program's own rank {rank}, got {show(a[own])}")
        if not 0 <= max(a["src"], a["dst"]) < world:
            raise comm.IRError(f"{what}: src and dst must be ranks in 0..{world - 1}")
    elif o.name != WAIT:
        if not o.name.startswith("comm.") or comm.short_name(o) not in comm.COLLECTIVES:
            raise comm.IRError(f"{what}: a rank program holds wl.compute, wl.wait, wl.load, wl.store, comm "
                               "collectives and comm.send and comm.recv only")
        if a.get("wl.group") not in groups:
            raise comm.IRError(f"{what}: wl.group {show(a.get('wl.group'))} is not one of the program's wl.groups")
    for key, kinds in (("wl.phase", str), ("wl.iteration", int)):
        if key in a and (isinstance(a[key], bool) or not isinstance(a[key], kinds)):
            raise comm.IRError(f"{what}: {key} must be a {kinds.__name__}, got {show(a[key])}")


def is_schedule_record(op) -> bool:
    """A nested `module @c<k>`: a collective's compiled module, as --emit mlir records it (not a rank program)."""
    return op.name == "builtin.module" and "sym_name" in op.attributes


def drop_schedule_records(module: ir.Module) -> None:
    """Remove the compiled-collective records: a module given as input is compiled again with the run's options."""
    for outer in list(module.body.operations):
        if is_schedule_record(outer.operation):
            outer.operation.erase()


def add_program(module: ir.Module, rank: int, groups: dict[str, list[int]],
                stands_for: list[int] | None = None, memory: dict | None = None) -> ir.InsertionPoint:
    """A nested module for one rank's program (for SPMD with several programs, `stands_for`: the ranks that run
    it; `memory`: its memory as the capture measured it, network/memory_record.py); returns the insertion point
    for its ops."""
    with module.context, ir.Location.unknown():
        prog = ir.Operation.create("builtin.module", regions=1, ip=ir.InsertionPoint(module.body))
        prog.regions[0].blocks.append()
        prog.attributes["wl.rank"] = comm.to_attr(int(rank))
        prog.attributes["wl.groups"] = ir.DictAttr.get({n: comm.to_attr([int(r) for r in ranks])
                                                        for n, ranks in sorted(groups.items())})
        if stands_for is not None:
            prog.attributes["wl.stands_for"] = comm.to_attr([int(r) for r in stands_for])
        if memory:
            prog.attributes["wl.memory"] = comm.to_attr(memory)
        return ir.InsertionPoint(prog.regions[0].blocks[0])


# ---- building: each op's attributes as Python values (to_attr makes them attributes; `read_back` gives them as
# `programs` reads them, so a step can be timed without building its module) ---------------------------------------

def create(kind: str, attributes: dict, deps, ip) -> ir.Operation:
    """An op of a rank program: `kind` as ProgramOp.kind names it ("compute", "all_reduce", "send", ...), its
    attributes from the builders below, token operands `deps` and one token result."""
    return ir.Operation.create(full_name(kind), results=[comm.token_type()], operands=list(deps), ip=ip,
                               attributes={k: comm.to_attr(v) for k, v in attributes.items()})


def full_name(kind: str) -> str:
    """The op name of a ProgramOp kind: "wl.compute" for the wl ops, "comm.<kind>" for the comm ones."""
    return _OWN_NAMES.get(kind) or f"comm.{kind}"


def read_back(attributes: dict) -> dict:
    """The attributes `programs` reads from an op `create` made with `attributes` (the builders' value kinds:
    bool, int, float, str, list of int): sorted by name as MLIR keeps them, an int that does not fit the IR's i64
    refused as to_attr refuses it."""
    return {k: _read_back(attributes[k]) for k in sorted(attributes)}


def _read_back(value):
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, int):
        return comm.check_int64(value)
    if isinstance(value, float):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [comm.check_int64(v) for v in value]
    raise TypeError(f"read_back: {show(value)} is not a kind the op builders make")


def compute_attrs(name: str, flops: int, nbytes: int, measured_ns: float = -1.0, dtype: str = DEFAULT_DTYPE,
                  shapes: str = "", causal: bool = False, views: int = 0) -> dict:
    """A compute op: `wl.measured_ns` (a profiler's time: the engine uses it instead of the roofline) where
    measured, `wl.dtype` where not fp32 (so fp32 steps read as before), `wl.shapes` where known, `wl.causal` where
    it masked causally, `wl.views` where the host dispatched kernel-less ops before it."""
    a = {"name": name, "flops": int(flops), "bytes": int(nbytes)}
    if measured_ns >= 0:
        a["wl.measured_ns"] = float(measured_ns)
    if dtype != DEFAULT_DTYPE:
        a["wl.dtype"] = dtype
    if shapes:
        a["wl.shapes"] = shapes
    if causal:
        a["wl.causal"] = True
    if views:
        a["wl.views"] = int(views)
    return a


def wait_attrs(name: str) -> dict:
    return {"name": name}


def memory_attrs(name: str, nbytes: int, location: str, in_switch: int) -> dict:
    """A load or store of `nbytes` at `location` (local or remote); in_switch > 1: the pool's switches gather
    (reduce-scatter) it on the way for a group of that many GPUs."""
    a = {"name": name, "bytes": int(nbytes), "location": location}
    if in_switch > 1:
        a["wl.in_switch"] = int(in_switch)
    return a


def message_attrs(kind: str, name: str, nbytes: int, rank: int, peer: int) -> dict:
    """A point-to-point op of rank `rank`'s program: kind "send" (to global rank `peer`) or "recv" (from it)."""
    src, dst = (rank, peer) if kind == "send" else (peer, rank)
    return {"bytes": int(nbytes), "name": name, "src": int(src), "dst": int(dst)}


def collective_attrs(kind: str, nbytes: int, dims: list[int], name: str, group: str, root: int = -1) -> dict:
    """A comm collective of a rank's program; a broadcast names its source NPU (`root`), a reduce its target."""
    rooted = {"root": int(root)} if kind in comm.ROOTED else {}
    return {"bytes": int(nbytes), "dims": [int(d) for d in dims], "name": name, **rooted, "wl.group": group}


def part_of(phase: str, iteration: int) -> dict:
    """Where in the training run an op belongs: `wl.phase` and, for traces of several iterations, `wl.iteration`."""
    return ({"wl.phase": phase} if phase else {}) | ({"wl.iteration": int(iteration)} if iteration >= 0 else {})


def part_attrs(dims: list[int], parts: dict[int, tuple[int, int]]) -> dict:
    """Where a collective's group covers part of a dimension of `dims` ({dim: (members, stride)}): `wl.part` (its
    members along each dim, 0: the whole dimension) and `wl.stride` (1: consecutive coordinates, else every
    stride-th); no attributes for whole dimensions."""
    if not parts:
        return {}
    return {"wl.part": [parts[d][0] if d in parts else 0 for d in dims],
            "wl.stride": [parts[d][1] if d in parts else 1 for d in dims]}


def parts(a: dict) -> dict[int, tuple[int, int]]:
    """{dim: (members, stride)} of a collective's attributes (part_attrs); empty for whole dimensions."""
    if "wl.part" not in a:
        return {}
    return {d: (m, s) for d, m, s in zip(a["dims"], a["wl.part"], a["wl.stride"]) if m}


def dtype_of(attrs: dict) -> str:
    """A compute op's dtype as its attributes give it (ProgramOp.attrs; checked by check_module)."""
    return attrs.get("wl.dtype", DEFAULT_DTYPE)


def shapes_of(attrs: dict) -> str:
    """A compute op's shapes as its attributes give them ("": not known; checked by check_module)."""
    return attrs.get("wl.shapes", "")


def causal_of(attrs: dict) -> bool:
    """Whether a compute op masked causally as its attributes say (checked by check_module)."""
    return attrs.get("wl.causal", False) is True


def views_of(attrs: dict) -> int:
    """A compute op's views as its attributes give them (0: none; checked by check_module)."""
    return attrs.get("wl.views", 0)


# ---- reading ----------------------------------------------------------------------------------------------------

@dataclass
class ProgramOp:
    kind: str           # "compute" | "wait" | "send" | "recv" | a comm collective name ("all_reduce", ...)
    name: str
    attrs: dict
    deps: list[int]     # indices of earlier ops in the same program
    rank: int = -1      # the program's rank (a message's other end is its `peer`)


@dataclass
class Program:
    rank: int
    groups: dict[str, list[int]]
    ops: list[ProgramOp]
    stands_for: list[int] | None = None   # SPMD with several programs: every rank that runs this one
    memory: dict | None = None            # its memory as captured (network/memory_record.py); None: not known


def programs(module: ir.Module) -> list[Program]:
    """Every rank program of a workload module, ops in issue order with their dependencies as indices."""
    out = []
    for outer in module.body.operations:
        op = outer.operation
        if op.name != "builtin.module" or is_schedule_record(op):
            continue
        a = comm.attrs(op)
        # DictAttr iteration yields NamedAttributes
        groups = {named.name: comm.from_attr(named.attr) for named in op.attributes["wl.groups"]}
        index, ops = {}, []  # SSA values hash and compare by identity in these bindings
        for inner in op.regions[0].blocks[0].operations:
            o = inner.operation
            kind = OWN_KINDS.get(o.name) or comm.short_name(o)
            deps = [index[v] for v in o.operands]
            index[o.results[0]] = len(ops)
            ops.append(ProgramOp(kind, comm.attrs(o).get("name", ""), comm.attrs(o), deps, int(a["wl.rank"])))
        out.append(Program(int(a["wl.rank"]), groups, ops, a.get("wl.stands_for"), a.get("wl.memory")))
    return out


def parse_module(text: str, ctx: ir.Context, source: str = "<input>") -> ir.Module:
    return comm.parse_module(text, ctx, source)
