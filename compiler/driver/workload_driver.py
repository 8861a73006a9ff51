"""Compile a captured or imported workload: workload MLIR -> comm schedules per collective -> workload engine.

    Workload (frontend) --to_module--> wl + comm MLIR (`--emit mlir`; a captured step's programs, what the
        engine reads of it, are made without building it: to_programs)
        --each distinct collective (kind, bytes, topology dims)--> the comm pipeline of driver.py, lowered to
          schedule tables and executed by the chosen network runtime -> its time
        --program tables (numpy) + those times--> runtime.workload_engine -> step time, compute, exposed comm

A process group maps onto the topology dimensions its ranks span (group_span); each distinct collective is built
as a comm module of its own over exactly those dimensions and compiled once by the comm passes (the passes never
run on the step's module), for every group of the same shape at once. A group that covers part of a dimension (a
mesh axis splitting it) is scheduled on the network it sees there (Topology.within). The compiled modules stay in
memory, in the step module's context; --emit mlir clones each into a copy of the step's module and prints it once
(emitted, with_schedules). Each one's time and per-dimension busy time go to the engine, which lets concurrent
collectives share links (runtime/link_sharing.py). Point-to-point messages (comm.send / comm.recv) are routed on
the topology instead (network/message.py) and must each meet their partner (check_messages).
"""
from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from . import driver
from ..core import heap, reuse
from .recorded_run import in_module
from ..core.step_keys import group_span, key_parts, key_root, p2p_stream, part_key, span_key
from ...dialects import workload as wl
from ...network.dtypes import CODE as DTYPE_CODE, DEFAULT as DEFAULT_DTYPE
from ...network.errors import UserError, show
from ...network.user_files import read_text
from ...passes import PassError
from ..frontend.workload import COLLECTIVE, COMPUTE, LOAD, RECV, SEND, STORE, Workload
from ...runtime import workload_engine as engine
from ...runtime.workload_engine import ProgramTable, Roofline, run_workload, WorkloadError
from ...network.links import LinkMap
from ...network.memory import LocalMemory, MemorySystem
from ...network.op_classes import CODE as CLASS_CODE, gemm_dims, op_class as class_of, parse_shapes
from ...network import astra_network
from ...network.message import message
from ...network.parse import with_endpoint_delay
from ...network.topology import Topology

KIND_CODE = {"compute": engine.COMPUTE, "wait": engine.WAIT}


def to_module(ctx, workload: Workload, topology: Topology):
    """The workload as MLIR: one nested module per rank program, collectives as comm ops bound to dimensions."""
    _check_world(workload, topology)
    mesh = ",".join(f"{k}={v}" for k, v in workload.mesh.items())
    module = wl.new_workload_module(ctx, topology.to_dict(), workload.world_size, workload.spmd, workload.source,
                                    mesh)
    schedules: dict[tuple, str] = {}   # collective key -> the symbol of its compiled schedule (with_schedules)
    for rank, ops in sorted(workload.programs.items()):
        with ctx, wl.ir.Location.unknown():
            ip = wl.add_program(module, rank, _groups(ops), workload.stands_for.get(rank), workload.memory.get(rank))
            values = []
            for op, (kind, attributes) in zip(ops, _op_records(ops, topology, rank, schedules)):
                values.append(wl.create(kind, attributes, [values[d] for d in op.deps], ip).results[0])
    return module


def to_programs(ctx, workload: Workload, topology: Topology) -> list:
    """The rank programs `wl.programs` reads from `to_module`'s module, made without building it: a 175B GPT's
    step holds over a million ops, whose MLIR ops took most of the lowering to make and read back."""
    _check_world(workload, topology)
    schedules: dict[tuple, str] = {}
    out = []
    for rank, ops in sorted(workload.programs.items()):
        groups = {name: [int(r) for r in ranks] for name, ranks in sorted(_groups(ops).items())}
        stands_for, memory = workload.stands_for.get(rank), workload.memory.get(rank)
        if memory:   # as the module holds it (nested dicts sorted by key, tuples as lists)
            with ctx:
                memory = driver.comm.from_attr(driver.comm.to_attr(memory))
        same, read = {}, {}   # _op_records' shared attributes; id of one -> its read_back, made once
        made = []
        for op, (kind, attributes) in zip(ops, _op_records(ops, topology, rank, schedules, same)):
            back = read.get(id(attributes))   # (ids of dicts `same` keeps alive: never another dict's)
            if back is None:
                back = wl.read_back(attributes)
                if kind == COMPUTE:
                    read[id(attributes)] = back
            made.append(wl.ProgramOp(kind, attributes.get("name", ""), back, list(op.deps), int(rank)))
        out.append(wl.Program(int(rank), groups, made, None if stands_for is None else [int(r) for r in stands_for],
                              memory or None))
    return out


def _check_world(workload: Workload, topology: Topology) -> None:
    if workload.world_size != topology.npus:
        raise UserError(f"the workload has {workload.world_size} ranks but {topology.name} has {topology.npus} NPUs")


def _groups(ops: list) -> dict:
    """A program's process groups: name -> ranks (its `wl.groups`)."""
    return {op.group_name: list(op.group) for op in ops if op.kind == COLLECTIVE}


def _op_records(ops: list, topology: Topology, rank: int, schedules: dict, same: dict | None = None):
    """Each op of a program as (ProgramOp kind, its attributes as Python values, wl.create's input); `schedules`
    (collective key -> the symbol of its compiled schedule, with_schedules) is shared by the step's programs.
    `same` (a dict the caller keeps): a compute op equal to an earlier one in every attribute (a pipeline's copied
    micro-batches repeat their template's ops) gets that op's attributes dict itself, which no caller changes."""
    spans = {}   # group -> group_span's (dims, parts): a step's thousands of collectives run on a few groups
    for i, op in enumerate(ops):
        if op.kind == COMPUTE:
            kind = COMPUTE
            key = (op.name, op.flops, op.bytes, op.measured_ns, op.dtype, op.shapes, op.causal, op.views, op.phase,
                   op.iteration)
            if same is not None and key in same:
                yield kind, same[key]
                continue
            attributes = wl.compute_attrs(op.name, op.flops, op.bytes, op.measured_ns, op.dtype, op.shapes,
                                          op.causal, op.views) | wl.part_of(op.phase, op.iteration)
            if same is not None:
                same[key] = attributes
            yield kind, attributes
            continue
        if op.kind == COLLECTIVE and len(op.group) > 1:
            if op.group not in spans:
                spans[op.group] = group_span(topology, op.group)
            dims, parts = spans[op.group]
            key = span_key(op.collective, op.bytes, dims, op.root, topology, part_key(dims, parts))
            kind = op.collective
            attributes = wl.collective_attrs(op.collective, op.bytes, dims, f"{op.collective}_{i}", op.group_name,
                                             op.root) | wl.part_attrs(dims, parts) | \
                {"wl.schedule": schedules.setdefault(key, f"c{len(schedules)}")}
        elif op.kind in (SEND, RECV):
            kind, attributes = op.kind, wl.message_attrs(op.kind, op.name, op.bytes, rank, op.peer)
        elif op.kind in (LOAD, STORE):
            kind, attributes = op.kind, wl.memory_attrs(op.name, op.bytes, op.location, op.in_switch)
        else:  # a wait, or a collective on a group of one rank (nothing to move): a point of order only
            kind, attributes = "wait", wl.wait_attrs(op.name)
        yield kind, attributes | wl.part_of(op.phase, op.iteration)


def collective_key(op, topology: Topology) -> tuple:
    """What a collective's schedule depends on: (kind, bytes, topology dims), for a broadcast or reduce the
    root's place in its group (its coordinates on those dims; every group runs the same), and where the group
    covers part of a dimension its part_key. Equal keys share one compilation. A message's: ("p2p", bytes,
    sender, receiver)."""
    if op.kind in wl.P2P:
        return ("p2p", int(op.attrs["bytes"]), int(op.attrs["src"]), int(op.attrs["dst"]))
    dims = op.attrs["dims"]
    return span_key(op.kind, op.attrs["bytes"], dims, op.attrs.get("root", -1), topology,
                part_key(dims, wl.parts(op.attrs)))


@dataclass
class CollectiveTime:
    time_ns: float
    algorithm: str
    fallback: str = ""   # how a collective too small to split as asked ran instead ("" when it ran as asked)
    dim_busy_ns: tuple = ()   # per topology dimension: how long its phases kept that dimension's links busy
    # the collective's module after the comm passes, every decision they made: the module itself where it was
    # compiled in this process (in the step module's context, to be cloned into it), its text where it came from a
    # cache file (ir_text); "": none (a step table directory's collectives)
    ir: object = ""
    # congestion backend (physical link sharing, runtime/link_sharing.py): per link class of the topology, how long
    # its busiest link of that class was busy (empty: share per dimension); a message: (owner, class, busy ns) of
    # each link on its route
    class_busy_ns: tuple = ()
    route_busy: tuple = ()


class CollectiveTimes(dict):
    """collective_key -> CollectiveTime on one topology; `of(op)` looks up a program's collective."""

    def __init__(self, topology: Topology):
        super().__init__()
        self.topology = topology
        self.schedules: dict = {}   # key -> its compiled schedule, when kept (WorkloadOptions.keep_schedules)

    def key(self, op) -> tuple:
        return collective_key(op, self.topology)

    def of(self, op) -> CollectiveTime:
        return self[self.key(op)]


@dataclass(frozen=True)
class StepSemantics:
    """How the step runs (runtime/workload_engine.py): "streams", this tool's own, or "astra-sim", ASTRA-sim's
    workload layer, whose messages and sub-world groups also take ASTRA-sim's network view (network/astra_network.py);
    `link_gbps`: there, each dimension's per-link bandwidth as an ASTRA-sim network file gave it (None: derived)."""
    name: str = engine.STREAMS
    link_gbps: tuple | None = None

    @property
    def astra(self) -> bool:
        return self.name == engine.ASTRA_SIM


@dataclass
class WorkloadOptions:
    scheduler: str = driver.DEFAULT_SCHEDULER
    defaults: dict = field(default_factory=dict)          # chunks, algorithm (as the collective CLI takes them)
    run: driver.RunOptions = field(default_factory=driver.RunOptions)
    roofline: Roofline = field(default_factory=Roofline)
    keep_schedules: bool = False   # keep each collective's compiled schedule (step tables); never from a cache
    mem_latency_ns: float = 0.0    # local memory access latency (--mem-latency); its bandwidth is the roofline's
    pool: object | None = None     # the remote memory pool (--pool; network/memory_pool.py), None: none
    step: StepSemantics = field(default_factory=StepSemantics)   # --step-semantics
    gpu: dict | None = None        # --gpu: the device's name and where its numbers came from (the report's header)
    device: object | None = None   # --gpu's Device (network/devices.py): recorded with the step (recorded_run)

    def memory(self) -> MemorySystem:
        return MemorySystem(LocalMemory(self.mem_latency_ns, self.roofline.mem_gbps), self.pool)


def time_collectives(progs: list, topology: Topology, opts: WorkloadOptions, ctx=None) -> CollectiveTimes:
    """Compile and run each distinct (kind, bytes, dims) collective of the programs (wl.programs) once, each in a
    module of `ctx` (the step module's context, so that --emit mlir nests the compiled modules by cloning them;
    None: a context of their own)."""
    ctx = ctx if ctx is not None else driver.comm.new_context()
    shared = reuse.current()
    times = CollectiveTimes(topology)
    for prog in progs:
        for op in prog.ops:
            if op.kind in ("compute", "wait") or op.kind in wl.MEMORY:
                continue
            key = times.key(op)
            if key in times:
                continue
            if key[0] == "p2p":
                times[key] = message_time(topology, key, opts.run.backend == "congestion",
                                          opts.run.switching == "store-and-forward", opts.step)
            elif shared is None or opts.keep_schedules:
                times[key], schedule = _time_one(ctx, topology, key, opts)
                if opts.keep_schedules:
                    times.schedules[key] = schedule
            else:  # a sweep or --cache: the same collective, network and options are compiled once
                times[key] = shared.get("collective", [key, topology.to_dict(), opts.scheduler, opts.defaults,
                                                       reuse.options_key(opts.run)] +
                                        ([dataclasses.asdict(opts.step)] if opts.step.astra else []),
                                        lambda: _time_one(ctx, topology, key, opts)[0], _time_json,
                                        lambda d: _cached_time(d, topology))
    return times


def _time_json(took: CollectiveTime) -> dict:
    """A collective's time as the cache keeps it (reuse.py): its fields, the IR as text (the one print of a
    compiled module that a run which does not emit its step's IR makes)."""
    return dataclasses.asdict(dataclasses.replace(took, ir=ir_text(took)))


def ir_text(took: CollectiveTime) -> str:
    """The collective's compiled module as text ("" where it has none)."""
    return took.ir if isinstance(took.ir, str) else str(took.ir)


def _cached_time(d: dict, topology: Topology) -> CollectiveTime:
    """A collective's time as the cache keeps it (reuse.py), checked: a forged or damaged file is a miss
    (ValueError), never a negative or non-finite figure."""
    dims = tuple(reuse.non_negative(b, "dim_busy_ns") for b in d["dim_busy_ns"])
    if len(dims) != len(topology.dims):
        raise ValueError(f"dim_busy_ns has {len(dims)} dimensions, the topology {len(topology.dims)}")
    return CollectiveTime(reuse.non_negative(d["time_ns"], "time_ns"), str(d["algorithm"]), str(d["fallback"]),
                          dims, str(d["ir"]), tuple(reuse.non_negative(b, "class_busy_ns") for b in d["class_busy_ns"]))


def message_time(topology: Topology, key: tuple, physical: bool = False, store_and_forward: bool = False,
                 step: StepSemantics = StepSemantics()) -> CollectiveTime:
    """A point-to-point message's time: routed over the topology (network/message.py), in both backends; with
    `physical` (the congestion backend) it shares the links of its route, else the dimensions at its two ends;
    `store_and_forward` (that backend's --switching) stores it whole at every hop. Under the astra-sim semantics
    the analytical backend times it as ASTRA-sim's (network/astra_network.py)."""
    _, nbytes, src, dst = key
    if step.astra and not physical and topology.graph is None:
        m = astra_network.message(topology, src, dst, nbytes, astra_network.link_gbps(topology, step.link_gbps))
        return CollectiveTime(m.time_ns, f"as ASTRA-sim: {m.route}", dim_busy_ns=m.dim_busy_ns)
    m = message(topology, src, dst, nbytes, store_and_forward)
    stream_ns = max(m.dim_busy_ns, default=0.0)
    route = tuple((o, c, stream_ns) for o, c in m.links) if physical else ()
    return CollectiveTime(m.time_ns, f"routed {m.hops} hop{'s' if m.hops != 1 else ''}", dim_busy_ns=m.dim_busy_ns,
                          route_busy=route)


def class_busy(result, topology: Topology) -> tuple:
    """Per link class of `topology` (network/links.py), the busy time of its busiest link in a congestion run; ()
    from the analytical backend, which knows dimensions only, and on a Graph, whose links have no classes."""
    if result.backend != "congestion" or not result.links or topology.graph is not None:
        return ()
    links = LinkMap(topology.to_dict())
    busy = np.zeros(links.classes)
    np.maximum.at(busy, links.owner_class(result.links["id"])[1], np.asarray(result.links["busy_ns"], float))
    return tuple(busy.tolist())


# A collective this many bytes per member of its group or fewer may be too small for what was asked (a chunk's
# region must split into every stage's parts): it falls back instead of stopping the step.
SMALL_PER_MEMBER = 1024


def _time_one(ctx, topology: Topology, key: tuple, opts: WorkloadOptions) -> tuple[CollectiveTime, object]:
    """_time_alone; a group over part of a dimension runs on another network, whose link classes are not the
    topology's: it shares per dimension."""
    took, schedule = _time_alone(ctx, topology, key, opts)
    if key_parts(key):
        took = dataclasses.replace(took, class_busy_ns=())
    return took, schedule


def _time_alone(ctx, topology: Topology, key: tuple, opts: WorkloadOptions) -> tuple[CollectiveTime, object]:
    """Compile and time one collective. A small one that cannot split as asked (a 4-byte loss all-reduce over 64
    NPUs) runs in one chunk, else padded to the smallest size that splits, and says so: a real library sends it
    all the same, paying the steps' latency, which the padding keeps."""
    kind, nbytes, dims = key[:3]
    root, parts = max(key_root(key), 0), key_parts(key)
    if opts.step.astra and topology.graph is None and kind not in wl.comm.ROOTED and \
            math.prod(parts.get(d, (topology.shape[d], 1))[0] for d in dims) < topology.npus:
        return _astra_group_time(ctx, topology, key, opts)
    if parts:   # the group covers part of some dimensions: its collective runs on the network it sees
        topology = topology.within(parts)
    try:
        return _compiled_time(ctx, topology, kind, nbytes, dims, opts.defaults, opts, root=root)
    except (UserError, driver.comm.IRError, PassError) as e:
        group = math.prod(topology.shape[d] for d in dims)
        chunks = opts.defaults.get("chunks", 1)
        if nbytes > SMALL_PER_MEMBER * group * (chunks if isinstance(chunks, int) else 1):
            raise
        first = e
    one_chunk = {**opts.defaults, "chunks": 1}
    if chunks != 1:
        try:
            return _compiled_time(ctx, topology, kind, nbytes, dims, one_chunk, opts, f"1 chunk instead of {chunks}",
                                  root)
        except (UserError, driver.comm.IRError, PassError):
            pass
    for multiple in (group << i for i in range(12)):   # up to 2048 bytes per member
        padded = -(-nbytes // multiple) * multiple
        if padded == nbytes:
            continue
        try:
            return _compiled_time(ctx, topology, kind, padded, dims, one_chunk, opts,
                                  f"{'in 1 chunk, ' if chunks != 1 else ''}padded from {nbytes} B to {padded} B "
                                  f"(too small to split over {group} NPUs)", root)
        except (UserError, driver.comm.IRError, PassError):
            continue
    raise first


def _astra_group_time(ctx, topology: Topology, key: tuple, opts: WorkloadOptions) -> tuple[CollectiveTime, object]:
    """Under the astra-sim semantics, a collective on a group smaller than the world: one ring over its members
    (network/astra_network.group_ring), the ring algorithm whatever --algorithm says; its busy time goes to the
    dimension the ring runs in. (A broadcast or reduce, which ASTRA-sim replays from the trace or refuses, keeps
    this compiler's schedule.)"""
    kind, nbytes, dims = key[:3]
    ring, d = astra_network.group_ring(topology, list(dims), key_parts(key),
                                       astra_network.link_gbps(topology, opts.step.link_gbps))
    one = dataclasses.replace(opts, defaults={**opts.defaults, "algorithm": "ring"})
    took, schedule = _time_alone(ctx, ring, (kind, nbytes, (0,)), dataclasses.replace(one, step=StepSemantics()))
    busy = [0.0] * topology.ndims
    busy[d] = max(took.dim_busy_ns, default=0.0)
    return dataclasses.replace(took, algorithm="ring over the group (as ASTRA-sim)", dim_busy_ns=tuple(busy),
                               class_busy_ns=()), schedule


def _compiled_time(ctx, topology: Topology, kind: str, nbytes: int, dims, defaults: dict, opts: WorkloadOptions,
                   fallback: str = "", root: int = 0) -> tuple[CollectiveTime, object]:
    one = driver.build_module(ctx, topology, kind, nbytes, list(dims), root)
    compiled = driver.compile_schedule(one, ctx, topology, opts.scheduler, defaults, opts.run)   # rewritten in place
    stages = []   # every collective of its buffer (an all_reduce run per dimension is a pair per dimension)
    for s in (s for c in compiled.report.collectives for s in c.stages):
        label = f"{s.algorithm}@{'all' if s.dim == -1 else s.dim}"
        if label not in stages:
            stages.append(label)
    return CollectiveTime(compiled.result.total_ns, ",".join(stages), fallback, tuple(compiled.result.dim_busy_ns),
                          compiled.module, class_busy(compiled.result, topology)), compiled.schedule


def link_classes(topology: Topology) -> list[list]:
    """Per dimension, the link classes its links belong to (a Graph: one pseudo-class per dimension, -1 - d)."""
    if topology.graph is not None:
        return [[-1 - d] for d in range(topology.ndims)]
    dims = LinkMap(topology.to_dict()).class_dims().tolist()
    return [[c for c, cd in enumerate(dims) if cd == d] for d in range(topology.ndims)]


def link_use(took: CollectiveTime, classes: list[list]) -> dict:
    """A collective's or message's use of the links (engine.ProgramTable.use): measured per link (congestion),
    or its per-dimension use spread over every class of the dimension (runtime/link_sharing.py)."""
    if took.time_ns <= 0:
        return {}
    if took.route_busy:
        return {(o, c): min(b / took.time_ns, 1.0) for o, c, b in took.route_busy if b > 0}
    if took.class_busy_ns:
        return {(-1, c): min(b / took.time_ns, 1.0) for c, b in enumerate(took.class_busy_ns) if b > 0}
    return {(-1, c): min(b / took.time_ns, 1.0) for d, b in enumerate(took.dim_busy_ns) if b > 0
            for c in classes[d]}


def program_tables(progs: list, times: CollectiveTimes, spmd: bool = False,
                   memory: MemorySystem | None = None) -> list[ProgramTable]:
    """Numpy program tables for the workload engine, one per rank program (wl.programs). Messages are checked
    first (check_messages): each send must meet its receive. Loads and stores take `memory`'s times."""
    memory = memory or MemorySystem()
    runs = runner(progs, spmd)
    check_messages(progs, runs)
    sync_ids: dict[tuple, int] = {}
    tables = []
    classes = link_classes(times.topology)
    kernels = {}   # (name, shapes, flops) -> (op class code, GEMM dims): the same layer's ops repeat them
    for prog in progs:
        # id of a compute op's attributes -> its row's values: to_programs gives a program's ops that are equal in
        # every attribute one dict (a pipeline's copied micro-batches), which the program keeps alive (so an id is
        # never another dict's meanwhile)
        rows = {}
        n = len(prog.ops)
        kind, flops, nbytes, measured = np.zeros(n, np.int8), np.zeros(n), np.zeros(n), np.full(n, np.nan)
        dtype = np.full(n, DTYPE_CODE[DEFAULT_DTYPE], np.int8)
        op_class, gemm, causal = np.zeros(n, np.int8), np.zeros((n, 4), np.int64), np.zeros(n, bool)
        views = np.zeros(n, np.int32)
        duration, stream = np.zeros(n), np.zeros(n, np.int32)
        sync, size = np.full(n, -1, np.int64), np.ones(n, np.int64)
        sends = np.zeros(n, bool)
        use: list = [None] * n
        streams, seq = {}, {}
        at, values = [], []   # compute and wait rows and their values, written into the columns after the loop
        for i, op in enumerate(prog.ops):
            if op.kind in KIND_CODE:
                row = rows.get(id(op.attrs)) if op.kind == "compute" else None
                if row is None:
                    row = _compute_row(op, kernels)
                    if op.kind == "compute":
                        rows[id(op.attrs)] = row
                at.append(i)
                values.append(row)
                continue
            if op.kind in wl.MEMORY:
                kind[i] = engine.MEMORY
                where = op.attrs["location"]
                duration[i] = memory.time_ns(where, op.attrs["bytes"], op.attrs.get("wl.in_switch", 1))
                stream[i] = engine.LOCAL_STREAM if where == "local" else engine.REMOTE_STREAM
                continue
            took = times.of(op)
            duration[i] = took.time_ns
            use[i] = link_use(took, classes)
            if op.kind in wl.P2P:   # one stream per direction between two programs (p2p_stream)
                ends = message_ends(op, runs)
                kind[i] = engine.P2P
                sends[i] = op.kind == "send"
                stream[i] = streams.setdefault(p2p_stream(op), len(streams) + 1)
                k = seq[ends + (op.kind,)] = seq.get(ends + (op.kind,), -1) + 1   # the k-th of this pair
                sync[i] = sync_ids.setdefault(("p2p",) + ends + (k,), len(sync_ids))
                size[i] = 2 if ends[0] != ends[1] else 1   # (a program messaging a rank it stands for: alone)
                continue
            group = op.attrs["wl.group"]
            ranks = tuple(prog.groups[group])
            kind[i] = engine.COLLECTIVE
            stream[i] = streams.setdefault(group, len(streams) + 1)
            k = seq[ranks] = seq.get(ranks, -1) + 1  # the k-th collective of this group matches across ranks
            sync[i] = sync_ids.setdefault((ranks, k), len(sync_ids))
            size[i] = len(ranks)
        _fill_rows((kind, flops, nbytes, measured, dtype, op_class, gemm, causal, views), at, values)
        ptr = np.zeros(n + 1, np.int64)
        ptr[1:] = np.cumsum([len(op.deps) for op in prog.ops])
        idx = np.asarray([d for op in prog.ops for d in op.deps], np.int64)
        tables.append(ProgramTable(prog.rank, kind, flops, nbytes, duration, stream, sync, size, ptr, idx,
                                   measured, use, sends, dtype, op_class, gemm, causal if causal.any() else None,
                                   views if views.any() else None))
    return tables


def _fill_rows(columns: tuple, at: list, values: list) -> None:
    """Rows `at` of the columns set to `values` (_compute_row's tuples), a column at a time: element by element,
    the million compute rows of a 175B GPT's pipeline took most of program_tables' time. Each column's values
    are converted as assigning them one by one would (np.fromiter to the column's dtype)."""
    if not at:
        return
    rows = np.asarray(at, np.int64)
    for c, (column, got) in enumerate(zip(columns, zip(*values))):
        if column.ndim == 2:   # GEMM dims: a tuple per row
            column[rows] = np.array(got, column.dtype).reshape(len(at), column.shape[1])
        else:
            column[rows] = np.fromiter(got, column.dtype, len(at))


def _compute_row(op, kernels: dict) -> tuple:
    """A compute or wait op's values in program_tables' columns: (kind, flops, bytes, measured ns, dtype code, op
    class code, GEMM dims, causal, views)."""
    flops, nbytes = op.attrs.get("flops", 0), op.attrs.get("bytes", 0)
    op_class, gemm, causal, views = 0, (0, 0, 0, 0), False, 0
    if op.kind == "compute":
        key = (op.name, wl.shapes_of(op.attrs), float(flops))
        if key not in kernels:
            args = parse_shapes(key[1])
            kernels[key] = (CLASS_CODE[class_of(op.name, args)], gemm_dims(op.name, args, key[2]))
        op_class, gemm = kernels[key]
        causal, views = wl.causal_of(op.attrs), wl.views_of(op.attrs)
    return (KIND_CODE[op.kind], flops, nbytes, op.attrs.get("wl.measured_ns", np.nan), DTYPE_CODE[wl.dtype_of(op.attrs)],
            op_class, gemm, causal, views)


def runner(progs: list, spmd: bool) -> dict[int, int] | None:
    """Rank -> the rank of the program that runs it: each program's own, or in an SPMD module every rank its
    program stands for (None: one program stands for all of them)."""
    if not spmd:
        return {p.rank: p.rank for p in progs}
    if len(progs) == 1:
        return None
    return {r: p.rank for p in progs for r in (p.stands_for or [p.rank])}


def message_ends(op, runs: dict | None) -> tuple[int, int]:
    """(sending program, receiving program) of a send or recv (runner's `runs`)."""
    peer = op.rank if runs is None else runs.get(wl.peer(op), -1)
    return (op.rank, peer) if op.kind == "send" else (peer, op.rank)


def check_messages(progs: list, runs: dict | None) -> None:
    """Every send meets a receive: the k-th send from program a to program b and the k-th receive posted on b
    for a exist both, with the same bytes. Refused (UserError, naming the ranks and the op) otherwise: a p2p
    with no matching peer would leave the step waiting forever."""
    posted = {"send": collections.defaultdict(list), "recv": collections.defaultdict(list)}
    for prog in progs:
        for i, op in enumerate(prog.ops):
            if op.kind not in wl.P2P:
                continue
            ends = message_ends(op, runs)
            if -1 in ends:
                raise UserError(f"rank {prog.rank}: op {i} ({op.name}) {_with(op)} rank {wl.peer(op)}, which no "
                                "program runs: a p2p with no matching peer")
            if ends[0] != ends[1]:
                posted[op.kind][ends].append((prog.rank, i, op))
    for ends in sorted(set(posted["send"]) | set(posted["recv"])):
        sends, recvs = posted["send"].get(ends, []), posted["recv"].get(ends, [])
        for k, ((rank, i, send), (_, j, recv)) in enumerate(zip(sends, recvs)):
            if send.attrs["bytes"] != recv.attrs["bytes"]:
                raise UserError(f"rank {rank}: op {i} ({send.name}) sends {send.attrs['bytes']} B to rank {ends[1]}, "
                                f"but the receive it meets there (op {j}, {recv.name}, the {_nth(k)} from rank "
                                f"{ends[0]}) takes {recv.attrs['bytes']} B")
        if len(sends) != len(recvs):
            met = min(len(sends), len(recvs))
            rank, i, op = (sends if len(sends) > met else recvs)[met]
            raise UserError(f"rank {rank}: op {i} ({op.name}) is the {_nth(met)} {_with(op)} rank {wl.peer(op)}, "
                            f"which {'receives' if op.kind == 'send' else 'sends'} only {met}: a p2p with no "
                            "matching peer")


def _with(op) -> str:
    return "send to" if op.kind == "send" else "receive from"


def _nth(k: int) -> str:
    n = k + 1
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class Lowered:
    """A workload lowered for one topology: what the engine reads (`programs`: wl.programs of its module; `spmd`)
    and its MLIR module, made when first asked for (printed only by --emit mlir, `emitted`; a captured step's
    programs are made without it, to_programs). It depends on the workload and the topology only, so the points of
    a sweep that share both share it (api.compile): nothing changes the module after it is made. `context`: the
    module's MLIR context, where each collective is compiled (time_collectives); None: none (a step table
    directory)."""

    def __init__(self, module, programs: list, spmd: bool, make=None, context=None):
        self._module, self._make = module, make
        self.programs, self.spmd = programs, spmd
        self.context = context if context is not None or module is None else module.context

    @property
    def module(self):
        """The workload module (None: none, a step table directory)."""
        if self._module is None and self._make is not None:
            self._module, self._make = self._make(), None
        return self._module


def lower(workload: Workload, topology: Topology) -> Lowered:
    ctx = wl.new_context()
    with heap.paused():
        programs = to_programs(ctx, workload, topology)
    return Lowered(None, programs, bool(workload.spmd),
                   make=lambda: to_module(ctx, workload, topology), context=ctx)


def read_lowered(path: str, override: Topology | None, endpoint_delay=None) -> tuple[Lowered, Topology, dict]:
    """A workload module written with --emit mlir, as input: (what the engine reads, the topology to time it on,
    the module's source, mesh and the run options it records, `run`). The topology is the module's own, or
    `override` when its dimensions have the same sizes (the collectives' dims and groups are bound to them), with
    `endpoint_delay` where given; the module's text names it (what --emit mlir of this run writes)."""
    text = read_text(path, "a workload .mlir module")
    module = wl.parse_module(text, wl.new_context(), source=path)
    recorded = driver.comm.get_topology(module)
    if recorded is None:
        raise UserError(f"{path}: the workload module has no comm.topology")
    try:
        topology = Topology.from_dict(recorded)
    except UserError as e:
        raise UserError(f"{path}: comm.topology: {e}") from None
    if override is not None:
        if override.shape != topology.shape:
            raise UserError(f"{path} was lowered for {topology.name} ({'x'.join(map(str, topology.shape))} NPUs); "
                            f"--topology {override.name} has dimensions {'x'.join(map(str, override.shape))}")
        topology = override
    topology = with_endpoint_delay(topology, endpoint_delay)   # on the module's own network too
    if topology.to_dict() != recorded:
        with module.context:
            driver.comm.set_topology(module, topology.to_dict())
    wl.check_module(module, path, topology.shape)
    a = driver.comm.attrs(module)
    if a["wl.world_size"] != topology.npus:
        raise UserError(f"{path}: wl.world_size {a['wl.world_size']} but {topology.name} has {topology.npus} NPUs")
    wl.drop_schedule_records(module)
    programs = wl.programs(module)
    for prog in programs:  # a collective's dims are its group's on this topology, its root a member
        for op in prog.ops:
            if not wl.is_collective(op.kind):
                continue
            members = prog.groups[op.attrs["wl.group"]]
            try:
                dims, parts = group_span(topology, members)
            except UserError as e:
                raise UserError(f"{path}: rank {prog.rank}: {op.name}: {e}") from None
            if sorted(op.attrs["dims"]) != dims:
                raise UserError(f"{path}: rank {prog.rank}: {op.name}: dims {op.attrs['dims']} are not those of "
                                f"group {show(op.attrs['wl.group'])} on {topology.name} ({dims})")
            want = wl.part_attrs(op.attrs["dims"], parts)
            for attr in ("wl.part", "wl.stride"):
                if op.attrs.get(attr) != want.get(attr):
                    raise UserError(f"{path}: rank {prog.rank}: {op.name}: {attr} {op.attrs.get(attr)} but group "
                                    f"{show(op.attrs['wl.group'])} gives {want.get(attr, 'none (whole dimensions)')}")
            if op.kind in wl.comm.ROOTED and op.attrs["root"] not in members:
                raise UserError(f"{path}: rank {prog.rank}: {op.name}: root {op.attrs['root']} is not in group "
                                f"{show(op.attrs['wl.group'])}")
    return Lowered(module, programs, bool(a.get("wl.spmd", False))), topology, \
        {"source": a.get("wl.source", path), "mesh": a.get("wl.mesh", ""), "run": in_module(module, path)}


def emitted(lowered: Lowered, times: CollectiveTimes, record: dict) -> str:
    """The step's module as --emit mlir writes it, printed once: a copy of the lowered module (a sweep's points
    share that one) with each distinct collective's compiled module nested in it (with_schedules) and the run
    options recorded (with_run_record). "" for a step that has no module (a step table directory)."""
    if lowered.module is None:
        return ""
    module = driver.comm.copy_module(lowered.module)
    with_schedules(module, lowered.programs, times)
    with_run_record(module, record)
    return str(module)


def with_schedules(module, programs: list, times: CollectiveTimes) -> None:
    """Nest in the workload module each distinct collective's compiled module, cloned, as `module @c<k>`, the
    symbol its uses name in `wl.schedule`: the decisions of the comm passes (algorithm, dimension order, chunks,
    schedule) for every collective of the step, next to the step, noted with `wl.algorithm`, `wl.time_ns` and
    (where it fell back) `wl.fallback`. Records without IR (a step table directory's collectives) are left out."""
    ctx, done = module.context, set()
    for prog in programs:
        for op in prog.ops:
            name = op.attrs.get("wl.schedule")
            if name is None or name in done:
                continue
            done.add(name)
            t = times.of(op)
            if isinstance(t.ir, str) and not t.ir:
                continue
            with ctx:
                record = _compiled_module(t, ctx).operation.clone(ip=wl.ir.InsertionPoint(module.body))
                record.attributes["sym_name"] = wl.ir.StringAttr.get(name)
                notes = {"wl.algorithm": t.algorithm, "wl.time_ns": float(t.time_ns)}
                for key, value in (notes | ({"wl.fallback": t.fallback} if t.fallback else {})).items():
                    driver.comm.set_attr(record, key, value)


def _compiled_module(took: CollectiveTime, ctx):
    """A collective's compiled module in `ctx`: the module itself where it was compiled there, else one parsed
    from its text (a cache file's, or one compiled for another step of a sweep, in that step's context)."""
    if not isinstance(took.ir, str) and took.ir.context is ctx:
        return took.ir
    return wl.parse_module(ir_text(took), ctx)


def with_run_record(module, record: dict) -> None:
    """Set `wl.run = {...}` among the workload module's attributes: the run options its step was compiled and
    timed with, where not the defaults (recorded_run.of_module), so that `astra-compile step.mlir` runs it as the
    run that wrote it did. Without any, no attribute (a module read from a file drops the one it held: this run's
    options are what its step was timed with)."""
    attributes = module.operation.attributes
    if record:
        with module.context:
            driver.comm.set_attr(module, "wl.run", record)
    elif "wl.run" in attributes:
        del attributes["wl.run"]


def run(lowered: Lowered, topology: Topology, opts: WorkloadOptions, times: CollectiveTimes | None = None):
    """Time the step; `times` given (a step table directory's collectives) are used as they are."""
    if times is None:
        times = time_collectives(lowered.programs, topology, opts, lowered.context)
    with heap.paused():
        tables = program_tables(lowered.programs, times, lowered.spmd, opts.memory())
        try:
            result = run_workload(tables, opts.roofline, lowered.spmd, opts.step.name)
        except WorkloadError as e:
            raise UserError(str(e)) from None
    return result, times
