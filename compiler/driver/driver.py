"""The compiler driver: build or read a comm module, run the pass pipeline, lower it to tables, execute them.

The CLI (cli.py) is a thin layer over these functions.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ... import algorithms

from . import resources
from ...dialects import comm
from ...network.errors import UserError
from ...network.kinds import COLLECTIVES
from ...network.user_files import read_text
from ..lowering.lower import Schedule
from ..lowering.plans import plans_from_module
from ...passes import DEFAULT_PIPELINE, PassContext, PassError, PassManager, parse_pipeline
from ...passes.dimension_order import buffer_groups
from ...network.topology import Topology
from ...network.units import MAX_BYTES, format_size
from ..core.job import FASTEST_CHUNKS, RunOptions   # how the tables execute: the Job's run options, taken as they are
from ..report.report import Report, make_report




@dataclass
class Compiled:
    module: object
    schedule: Schedule
    result: object        # the runtime's Result
    report: Report


def check_size(nbytes: int) -> int:
    """A collective's size in bytes, from 1 B to MAX_BYTES (the lowering's int64 arithmetic), or one UserError."""
    if nbytes <= 0:
        raise UserError(f"collective size must be positive, got {nbytes} bytes")
    if nbytes > MAX_BYTES:
        raise UserError(f"collective size {format_size(nbytes)} exceeds the largest collective astra-compile takes, "
                        f"{format_size(MAX_BYTES)}")
    return nbytes


def build_module(ctx, topology: Topology, collective: str, nbytes: int, dims: list[int] | None = None,
                 root: int = 0):
    """A module holding one collective over `dims` (default: every dimension) of `topology`; a broadcast sends
    from NPU `root`, a reduce sums into it (each group at its member with the root's coordinates on `dims`)."""
    if collective not in COLLECTIVES:
        raise UserError(f"unknown collective '{collective}'; expected one of {', '.join(COLLECTIVES)}")
    check_size(nbytes)
    dims = list(range(topology.ndims)) if dims is None else dims
    module = comm.new_module(ctx)
    with ctx, comm.ir.Location.unknown():
        comm.set_topology(module, topology.to_dict())
        rooted = {"root": int(root)} if collective in comm.ROOTED else {}
        comm.create(collective, {"bytes": int(nbytes), "dims": dims, "name": collective, **rooted},
                    ip=comm.ir.InsertionPoint(module.body))
    comm.verify_module(module, list(topology.shape))
    return module


def read_module(ctx, path: str):
    return comm.parse_module(read_text(path, "a .mlir comm module"), ctx, source=path)


def module_topology(module, override: Topology | None) -> Topology:
    """The topology to compile for: the command line's, else the one recorded in the module."""
    if override is not None:
        with module.context:
            comm.set_topology(module, override.to_dict())
        return override
    recorded = comm.get_topology(module)
    if recorded is None:
        raise UserError("no topology: give --topology or a module with a comm.topology attribute")
    return Topology.from_dict(recorded)


# inter-dimension schedulers: the pass pipeline each one runs
SCHEDULERS = {
    # every chunk: RS dims ascending, AG descending (ASTRA-sim baseline), written as orders like the others'
    "baseline": DEFAULT_PIPELINE + ",baseline-order",
    "themis": DEFAULT_PIPELINE + ",themis",      # per-chunk order, least-loaded dimension first
    # CP-SAT split of chunks over orders, then timed against Themis's and the baseline's on the cost model; the
    # fastest is kept
    "optimal": DEFAULT_PIPELINE + ",optimal-balance,choose-schedule",
}
DEFAULT_SCHEDULER, DEFAULT_INTRA = "optimal", "scf"
# --chunks fastest (a --cluster's default): the chunk counts tried per collective; 16 is what NCCL's overlap of a
# 2 x 8 H100 all-reduce's node and NIC phases fits (docs/calibrate.md, the A3 Mega row)
CHUNK_CHOICES = (1, 2, 4, 8, 16)
# whole-network algorithms (network and ranks scope, algorithms/) schedule one phase over every dimension: no
# per-dimension phases, no dimension orders
FLAT_PIPELINE = "decompose-all-reduce,chunk,flat-decompose,select-algorithm{{algorithm={}}}"


def execute(schedule: Schedule, run: RunOptions):
    """Run the tables on the chosen backend; both return a runtime.phases.Result."""
    from ...runtime.phases import OptionError
    if run.backend == "analytical":
        from ...runtime import analytical
        try:
            return analytical.run(schedule, run.execution, run.intra, run.active_chunks, run.local_mem_gbps)
        except OptionError as e:
            raise UserError(str(e)) from None
    if run.backend == "congestion":
        from ...runtime import congestion
        mode = "full" if run.timeline else run.execution
        try:
            return congestion.run(schedule, run.intra, run.active_chunks, run.timeline, run.switching, mode,
                                  local_mem_gbps=run.local_mem_gbps)
        except OptionError as e:
            raise UserError(str(e)) from None
    raise UserError(f"unknown backend '{run.backend}' (analytical or congestion)")


def symmetric_valid(schedule: Schedule, run: RunOptions) -> bool:
    """Can the backend run NPU 0 alone for every NPU of this schedule, with full execution's figures?"""
    if run.backend == "congestion":
        from ...runtime import congestion
        return congestion.symmetric_ok(schedule.meta)
    return schedule.meta.symmetric


def compile_schedule(source, ctx, topology: Topology, scheduler: str | None, defaults: dict,
                     run: RunOptions | None = None, print_ir: bool = False, pipeline: str | None = None,
                     timing: bool = False) -> Compiled:
    """Compile a module with a scheduler's pipeline (or an explicit one), lower and time it.

    `source`: the module's text, parsed afresh for each compilation (so one text serves several, --compare), or
    a module of `ctx` already built (a step's collective, workload_driver), which the passes then rewrite in
    place: it becomes the compiled module, with no print or parse on the way.

    `scheduler` None: a module that records its scheduler (comm.scheduler: it was printed scheduled) runs its
    recorded orders as they are, under that scheduler's name; any other module gets DEFAULT_SCHEDULER. A scheduler
    named schedules the module again, replacing the orders it holds. `optimal` never loses to Themis or the
    baseline: its choose-schedule pass times them on this run's cost model and keeps the fastest, recording the
    choice in the module; the report repeats it (`optimal_choice`)."""
    run = run or RunOptions()
    if defaults.get("chunks") == FASTEST_CHUNKS:
        return _fastest_chunks(source, ctx, topology, scheduler, defaults, run, print_ir, pipeline, timing)
    # the ordering passes weigh a step's latency by how many chunks share the dimension in the runtime
    defaults = {"active": run.active_chunks, **defaults}
    timed: dict = {}  # module body text -> (schedule, result, stand-in): a schedule timed is not run again
    last: list = [None]  # the key evaluate saw last (a body with a tree per NPU is megabytes of text: made once)

    def evaluate(module, final: bool = False) -> float:
        key = last[0] = _body(module)
        if key not in timed or (final and timed[key][2]):
            schedule = timed[key][0] if key in timed else lower(module, topology, run.max_memory)
            symmetric = run.execution == "symmetric" or (run.execution == "auto" and schedule.meta.symmetric
                                                         and not run.timeline)
            resources.tables(topology, schedule.plans, symmetric, run.backend, run.timeline).check(run.max_memory)
            # a candidate choose-schedule times needs only its figure: where NPU 0 provably stands for every NPU
            # (the tests hold symmetric and full execution equal), it runs symmetric; the kept one runs as asked
            stand_in = not final and run.execution == "full" and not run.timeline and symmetric_valid(schedule, run)
            result = execute(schedule, replace(run, execution="symmetric") if stand_in else run)
            timed[key] = (schedule, result, stand_in)
        return timed[key][1].total_ns

    def one(pipe, label, print_ir=False, recorded=False):
        module = comm.parse_module(source, ctx) if isinstance(source, str) else source
        spec = run_passes(module, topology, pipe, defaults, print_ir, evaluate, timing)
        if recorded:
            check_recorded_orders(module, label)
        evaluate(module, final=True)
        schedule, result, _ = timed[last[0]]
        report = make_report(schedule, result, label, run, comm.schedule_choice(module), spec)
        return Compiled(module, schedule, result, report)

    chunks = defaults.get("chunks")
    given = comm.parse_module(source, ctx) if isinstance(source, str) else source   # read only, before `one`
    resources.request(topology, given, defaults.get("algorithm"),
                      chunks if isinstance(chunks, int) else None, run.execution, run.backend,
                      run.timeline).check(run.max_memory)
    if pipeline is not None:
        return one(pipeline, "custom pipeline", print_ir)
    alg = whole_network_run(given, defaults)
    if alg is not None:   # no dimensions: the scheduler has no orders to write (the CLI refuses --scheduler here)
        if defaults.get("all_reduce") == "per-dimension":
            raise UserError(f"--all-reduce per-dimension runs an all-reduce on each dimension in turn; {alg.name} "
                            "runs one phase over the whole network")
        pipeline = FLAT_PIPELINE.format(alg.phase_name) + (f",{alg.planned_by}" if alg.planned_by else "")
        return one(pipeline, alg.label, print_ir)
    recorded = comm.recorded_scheduler(given)
    if recorded is not None and scheduler is not None and all(
            comm.short_name(op) == "phase" or comm.short_name(op) in comm.STRUCTURES for op in comm.ops(given)):
        # checked as written before it is scheduled again: the ordering passes rewrite every phase's orders and
        # bytes, which would hide a phase that contradicts its collective (a hand edit) behind a run that exits 0
        plans_from_module(given, list(topology.shape))
    if scheduler is None and recorded is not None:  # its orders are decided: the pipeline only completes the rest
        return one(DEFAULT_PIPELINE, recorded, print_ir, recorded=True)
    scheduler = scheduler or DEFAULT_SCHEDULER
    return one(SCHEDULERS[scheduler], scheduler, print_ir)


def _fastest_chunks(source, ctx, topology: Topology, scheduler, defaults: dict, run: RunOptions, print_ir: bool,
                    pipeline, timing: bool) -> Compiled:
    """--chunks fastest: compile the module with each of CHUNK_CHOICES chunks per collective, keep the fastest on
    this run's cost model (ties: the fewest chunks) and record every candidate's time in the module
    (`comm.chunks_<n>_time_ns`) beside the choice (`comm.chunks_chosen`). This is what NCCL does to a collective
    over a node's fabric and its NICs: it moves the data in pieces, so the node's phase of one piece runs while the
    NICs carry another, where one chunk runs the phases one after another; and it is no slower than one chunk where
    the pieces' extra steps cost more than the overlap gains. A module whose collectives each span one dimension
    (of more than one NPU) has no phases to overlap: with one active chunk per dimension, more chunks only add
    steps, so it runs in one chunk without trying the others."""
    module = comm.parse_module(source, ctx) if isinstance(source, str) else source
    one = {**defaults, "chunks": 1}
    if not _spans_dimensions(module, topology):
        return compile_schedule(module, ctx, topology, scheduler, one, run, print_ir, pipeline, timing)
    times, best, first_error = {}, None, None
    for chunks in CHUNK_CHOICES:
        try:
            compiled = compile_schedule(comm.copy_module(module), ctx, topology, scheduler,
                                        {**defaults, "chunks": chunks}, run, False, pipeline)
        except (UserError, comm.IRError, PassError) as e:   # too small to split into so many chunks
            first_error = first_error or e
            continue
        times[chunks] = compiled.result.total_ns
        if best is None or times[chunks] < times[best[0]]:
            best = (chunks, compiled)
    if best is None:
        raise first_error
    chunks, compiled = best
    if print_ir or timing:   # the winner's passes printed as a run with --chunks N prints them
        compiled = compile_schedule(module, ctx, topology, scheduler, {**defaults, "chunks": chunks}, run,
                                    print_ir, pipeline, timing)
    with ctx:
        comm.set_attr(compiled.module.operation, "comm.chunks_chosen", chunks)
        for n, ns in times.items():
            comm.set_attr(compiled.module.operation, f"comm.chunks_{n}_time_ns", float(ns))
    return compiled


def _spans_dimensions(module, topology: Topology) -> bool:
    """Does a collective of the module span two or more dimensions of more than one NPU?"""
    for op in comm.ops(module):
        v = comm.view(op)
        if v.opname in comm.COLLECTIVES:
            dims = range(len(topology.shape)) if v.dims is None else v.dims
            if sum(topology.shape[d] > 1 for d in dims) > 1:
                return True
    return False


def whole_network_run(module, defaults: dict) -> algorithms.Algorithm | None:
    """The whole-network algorithm a run compiles `module` with: --algorithm's (None for a per-dimension one or a
    list), else the one its phases already run (a module printed after flat-decompose runs under it again); None:
    the run is per dimension."""
    if "algorithm" in defaults:
        return algorithms.whole_network(str(defaults["algorithm"]))
    name = whole_network(module)
    return None if name is None else algorithms.REGISTRY[name]


def whole_network(module) -> str | None:
    """The whole-network algorithm a module's phases already run (a module printed after flat-decompose), or None."""
    for op in comm.ops(module):
        if comm.short_name(op) == "phase":
            p = comm.view(op)
            if p.dim == -1 and p.algorithm is not None:
                try:
                    return algorithms.for_phase(p.algorithm, flat=True).name
                except UserError:
                    return None   # select-algorithm names what is wrong with it
    return None


def check_recorded_orders(module, scheduler: str) -> None:
    """A module that records its scheduler must hold that scheduler's orders for every buffer it schedules: a
    collective added to it afterwards would otherwise run ascending under another scheduler's name."""
    for group in buffer_groups(module):
        if not group.has_orders():
            raise UserError(f"the module records comm.scheduler = \"{scheduler}\" but '{group.name}' has no "
                            f"dimension orders of it: give --scheduler to schedule the whole module again")


def _body(module) -> str:
    """The module's ops as text (its attributes aside: the decisions recorded there do not change the tables)."""
    return "\n".join(str(op) for op in module.body.operations)


def run_passes(module, topology: Topology, pipeline: str | None = None, flags: dict | None = None,
               print_ir: bool = False, evaluate=None, timing: bool = False) -> str:
    """Run a pipeline on the module; return what ran, every option resolved (passes.pipeline_spec). `flags`
    (command-line values: chunks, algorithm, ports, active) fill the options the pipeline's passes have and leave
    unset, so --pass-pipeline 'chunk' --chunks 8 chunks in 8."""
    comm.verify_module(module, list(topology.shape))
    passes = [p.with_unset(flags or {}) for p in parse_pipeline(pipeline if pipeline is not None else
                                                                DEFAULT_PIPELINE)]
    manager = PassManager(passes)
    manager.run(module, PassContext(topology, evaluate), print_ir, timing)
    return manager.spec()


def lower(module, topology: Topology, max_memory: int | None = None) -> Schedule:
    plans = plans_from_module(module, list(topology.shape))
    resources.templates(topology, plans).check(max_memory)
    return Schedule(topology, plans)


