"""astra-compile's run command: a collective, a comm module, a table directory or a training step, compiled, timed
and reported. Bad input ends with one `astra-compile: error: ...` line and exit status 2."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import warnings

from ...runtime import atomic
from ...network.errors import AstraError, InputWarning, UserError, one_line
from ..frontend import readers
from .parser import capture_limit, fail, int_list, parse, positive_int

VERIFIED = "verified: every NPU's buffer matches the collective's definition"


def run_command(argv: list[str]) -> int:
    """Run the command line `argv` of a run (no subcommand): its exit status; a refusal is one line."""
    args, given = parse(argv)
    # imported here so --help stays instant and argument errors need no MLIR
    from ...runtime.verifier import VerificationError
    # warnings (a model file's, torch's) are shown after a run that ends; a refused run says its one line only
    with warnings.catch_warnings(record=True) as caught:
        try:
            code = run_parsed(args, given)
        except VerificationError as e:  # a wrong schedule is the compiler's fault, not the input's
            sys.stderr.write(f"astra-compile: verification failed: {e}\n")
            return 1
        except AstraError as e:
            return fail(str(e))
        except BrokenPipeError:
            return 0
    for w in caught:
        if issubclass(w.category, InputWarning):
            sys.stderr.write(f"astra-compile: warning: {one_line(str(w.message))}\n")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return code


def _run_workload(args, max_memory: int | None, given: set[str], step_dir: bool = False) -> int:
    """model.py, execution traces, a workload module or a step table directory -> the step report (or the workload
    MLIR, or the step's tables)."""
    from ..driver import driver
    from ..core import reuse
    from ..api.api import compile as compile_workload
    if args.emit == "tables" and args.output is None and args.npu is None:
        raise UserError("--emit tables needs --npu K (print one accelerator's step table) or -o DIR (write them all)")
    if args.emit == "msccl-xml":
        raise UserError("--emit msccl-xml writes one collective's schedule (--collective, or a comm .mlir module), "
                        "not a training step")
    if step_dir:
        if args.emit == "mlir":
            raise UserError(f"--emit mlir: {args.input[0]} holds the step's tables, not its workload module")
        # the options the directory records are in args already (run_parsed): each as given or as recorded
        report = compile_workload(args.input[0], None, backend=args.backend, intra=args.intra,
                                  peak_tflops=args.peak_tflops, mem_bw_gbps=args.mem_bw, max_memory=max_memory,
                                  local_mem_gbps=_local_mem(args), mem_latency_ns=args.mem_latency, pool=args.pool,
                                  switching=args.switching, step_semantics=_step_semantics(args), use_recorded=False)
    else:
        if not args.topology and readers.kind_of(args.input) != readers.WORKLOAD_MODULE:
            raise UserError("--topology is required")
        chunks = positive_int(args.chunks, "--chunks") if args.chunks is not None else None
        with reuse.using(reuse.open_dir(args.cache) if args.cache else reuse.current()):
            report = compile_workload(args.input if len(args.input) > 1 else args.input[0], args.topology,
                                      bandwidth=args.bandwidth, latency=args.latency, links=args.links,
                                      endpoint_delay=args.endpoint_delay, mesh=args.mesh,
                                      scheduler=args.scheduler or driver.DEFAULT_SCHEDULER,
                                      chunks=chunks, algorithm=args.algorithm, all_reduce=args.all_reduce,
                                      backend=args.backend, switching=args.switching, intra=args.intra,
                                      peak_tflops=args.peak_tflops, mem_bw_gbps=args.mem_bw, max_memory=max_memory,
                                      capture_limit=capture_limit(args.capture_limit), iteration=args.iteration,
                                      keep_tables=args.emit == "tables", local_mem_gbps=_local_mem(args),
                                      mem_latency_ns=args.mem_latency, pool=args.pool, offload=args.offload,
                                      in_switch=args.in_switch, step_semantics=_step_semantics(args),
                                      use_recorded=False)
    _check_step_options(report, given)
    if args.emit == "tables":
        return _emit_step_tables(args, report)
    if args.emit == "chakra":
        if report.chakra is None:
            raise UserError(f"--emit chakra: {args.input[0]} holds a lowered step, not its workload: give the model "
                            "file or traces it came from")
        n = report.chakra(_chakra_dir(args), args.force)
        print(f"wrote {n} Chakra traces and comm_group.json to {args.output}; step time "
              f"{report.total_time_us:.3f} us")
        return 0
    if args.emit == "mlir":
        if args.output:
            atomic.write_text(args.output, report.mlir)
        else:
            sys.stdout.write(report.mlir)
        return 0
    if args.timeline:
        from ...runtime.trace import write_chrome
        write_chrome(args.timeline, report.timeline())
    if args.plot:
        from ..report import breakdown_plot
        breakdown_plot.write(args.plot, [(report["topology"], report["breakdown_us"])],
                             f"{report['source']}: step time breakdown")
    _report(args, report.to_dict(), report.format)
    return 0


def _check_step_options(report, given: set[str]) -> None:
    """Refuse what the step turned out not to use, before anything is written: known once its collectives are
    (every rank's). Options that describe the machine (--pool, --mem-latency, the network's) are not refused where
    the step leaves part of it unused: an ASTRA-sim run gives its remote memory file with every step."""
    from . import cli_rules
    spans = [k[2] for k in report.collective_keys if k[0] == "all_reduce"]
    cli_rules.check_all_reduce_split(spans, given, "each of the step's all-reduces runs over one dimension"
                                     if spans else "the step has no all-reduce")


def _emit_step_tables(args, report) -> int:
    from ..interop import step_dir
    from ...runtime import step_tables
    step = report.step_tables(args.table_format)
    if args.output:
        step_tables.write(args.output, step, force=args.force)
        ranks = step.meta["npus"]
        print(f"wrote the step of {ranks} accelerators to {args.output}: {len(step.programs)} program table(s), "
              f"{len(step.collectives)} collective schedule(s), meta.json; step time "
              f"{report.total_time_us:.3f} us")
        return 0
    npu = _npu(args)
    print(step_dir.format_npu(step, npu, args.json))
    return 0


def _npu(args) -> int:
    """--npu K (an empty value is -1, which the range checks refuse)."""
    return int_list(args.npu, "--npu")[0] if args.npu.strip() else -1


def _report(args, obj: dict, text) -> None:
    """Print a run's report: its --json object or its text (`text()`). A sweep point (sweep/point.py) sets
    `args.report_sink` to a list and gets the JSON object instead, computed by exactly the command's code path."""
    _check_finite(obj)
    sink = getattr(args, "report_sink", None)
    if sink is not None:
        sink.append(obj)
    else:
        print(json.dumps(obj, indent=1) if args.json else text())


def _check_finite(obj) -> None:
    """No report says Infinity or NaN: every input is range-checked where it is read (docs/reliability.md, Numbers
    at the edges), and should a combination still leave float range, the run is refused naming the figure rather
    than printing it."""
    stack = [(obj, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"the run's {where} came out as {value}: the inputs' values together leave the range "
                            "the cost model computes in; bring them nearer the defaults")


# the run an input makes, by what its reader says it is (frontend/readers/)
RUNS = {readers.WORKLOAD: "training step", readers.WORKLOAD_MODULE: "training step",
        readers.STEP_TABLES: "step tables", readers.TABLE_DIRECTORY: "table directory",
        readers.COMM_MODULE: "collective"}


def _kind(args) -> str:
    if args.list_passes:
        return "list-passes"
    # no input is --collective's; inputs no reader takes go the collective way too, which refuses them by name
    return RUNS.get(readers.kind_of(args.input), "collective")


def run_parsed(args, given: set[str] = frozenset()) -> int:
    """Run a parsed command line (`parse`); the CLI and the sweep points (sweep/point.py) both come here."""
    from . import cli_rules
    kind = _kind(args)
    record, where = _recorded(args, kind)
    filled = {}
    if record:   # what the directory or module records stands in for the options not typed (recorded_run.py)
        from ..driver import recorded_run
        filled = recorded_run.fill(args, getattr(args, "named", given), record)
    cli_rules.check(kind, args, given)
    notices = []
    if args.system:
        from ..interop import astra_system
        # an option typed wins over the file even at its default (`--intra scf` over its FIFO): args.named
        notices = astra_system.apply(args, getattr(args, "named", given), kind == "training step")
    from ...dialects.comm import IRError
    from ...passes import PassError
    try:
        if args.system:
            cli_rules.check(kind, args, given)   # again: an option typed may not apply beside what the file set
        code = _run_kind(args, kind, given)
    except (UserError, IRError, PassError) as e:   # an option the file set is the file's key, not a flag typed
        if not args.system and not filled:
            raise
        e = recorded_run.blamed(e, filled, where) if filled else e
        raise (astra_system.blamed(e, args) if args.system else e) from None
    if record:
        notices += recorded_run.notes(args, record, where)
    for line in notices:   # after the run: a refused run says its one line only
        sys.stderr.write(line + "\n")
    return code


def _recorded(args, kind: str) -> tuple[dict, str]:
    """The run options a table directory, step directory or module given as input records, checked, and where
    (recorded_run.py); ({}, "") for other runs."""
    from ..driver import recorded_run
    read_as = readers.kind_of(args.input)   # the reader's kinds name the inputs that record options
    if kind == "list-passes" or read_as not in recorded_run.INPUTS:
        return {}, ""
    return recorded_run.of_input(read_as, args.input[0])


def _run_kind(args, kind: str, given: set[str]) -> int:
    if kind == "list-passes":
        from ...passes import all_passes
        for name, cls in sorted(all_passes().items()):
            opts = " ".join(f"{k}=<{f.metadata['help']}>" for k, f in cls.options().items())
            print(f"{name:24s} {cls.summary}" + (f"  [{opts}]" if opts else ""))
        return 0
    from ...network.units import parse_size
    try:
        max_memory = parse_size(args.max_memory) if args.max_memory is not None else None
    except UserError as e:
        raise UserError(f"--max-memory: {e}") from None
    if kind in ("training step", "step tables"):
        return _run_workload(args, max_memory, given, kind == "step tables")
    if len(args.input) > 1:
        raise UserError(f"give one .mlir module or table directory, got {len(args.input)} inputs")
    args.input = args.input[0] if args.input else None
    from ..driver import driver
    active = positive_int(args.active_chunks, "--active-chunks")
    run = driver.RunOptions(args.backend, args.execution, args.intra, active, args.switching,
                            timeline=bool(args.timeline or args.plot) and args.backend == "congestion",
                            max_memory=max_memory, local_mem_gbps=_local_mem(args))
    if kind == "table directory":
        return _run_table_dir(args, run)
    return _run_collective(args, run, given)


def _step_semantics(args):
    """--step-semantics, with the per-link bandwidths of an ASTRA-sim network file the system reader converted."""
    from ..driver.workload_driver import StepSemantics
    return StepSemantics(args.step_semantics or "streams", getattr(args, "astra_link_gbps", None))


def _local_mem(args) -> float | None:
    if args.local_mem_bw is None:
        return None
    from ...network.memory import check_local_mem_gbps
    return check_local_mem_gbps(args.local_mem_bw)


def _write_timeline(args, result, meta: dict, title: str) -> None:
    if args.timeline:
        from ...runtime.trace import write_trace
        write_trace(args.timeline, result, meta)
    if args.plot:
        from ...runtime.trace import write_plot
        write_plot(args.plot, result, meta.ndims, title)


def _verify(schedule, max_memory: int | None) -> None:
    """--verify: the schedule's rows read and checked, the pieces they cut its buffers into counted, the memory of
    executing them on symbols estimated, then executed (runtime/verify_symbolic.py)."""
    from ..driver import resources
    from ...runtime.verifier import SymbolicRun
    check = SymbolicRun(schedule)
    resources.verified_cells(check).check(max_memory)
    check.run()


def _run_table_dir(args, run) -> int:
    """Execute tables written earlier with -o."""
    from ..driver import driver
    from ...runtime.tables import DirSchedule
    from ..driver import resources
    schedule = DirSchedule(args.input)
    resources.table_files(args.input, schedule.meta, run.execution != "full", args.verify,
                          run.max_memory).check(run.max_memory)
    result = driver.execute(schedule, run)
    out = {"total_time_us": result.total_ns / 1e3, "npus": schedule.meta.npus, "backend": result.backend,
           "execution": result.mode, "per_dim_bytes": result.per_dim_bytes,
           "per_dim_busy_us": [b / 1e3 for b in result.dim_busy_ns]}
    _write_timeline(args, result, schedule.meta, f"{args.input}: {result.backend} runtime")
    if args.verify:  # the written tables on their own: their meta carries every shard layout
        from ...runtime.verifier import VerificationError
        try:
            _verify(schedule, run.max_memory)
        except VerificationError as e:  # tables given as input are the user's: wrong ones are bad input
            raise UserError(f"{args.input}: the tables do not implement their collectives: {e}") from None
        out["verified"] = True
    _report(args, out, lambda: f"total time {out['total_time_us']:.3f} us on {out['npus']} NPUs ({result.backend}, "
                               f"{result.mode} execution)" + (f"\n{VERIFIED}" if args.verify else ""))
    return 0


def _run_collective(args, run, given: set[str]) -> int:
    """One collective (--collective) or a comm module (.mlir): compile, then report, emit MLIR or emit tables."""
    from ..driver import driver
    from ...dialects import comm
    from ...network.parse import parse_topology, with_endpoint_delay
    from ...passes import PassError
    from ...network.units import parse_size

    topology = None
    if args.topology:
        topology = parse_topology(args.topology, args.bandwidth, args.latency, args.links, args.endpoint_delay)
    elif any((args.bandwidth, args.latency, args.links)):
        raise UserError("--bandwidth/--latency/--links need --topology")

    ctx = comm.new_context()
    if args.input:
        if not args.input.endswith(".mlir"):
            raise UserError(f"cannot compile '{args.input}': expected a .mlir comm module or a table directory")
        if args.collective or args.size or args.dims or args.root is not None:
            raise UserError("give either an input module or --collective/--size/--dims/--root, not both")
        module = driver.read_module(ctx, args.input)
        try:  # the module's own mistakes name its file
            topology = with_endpoint_delay(driver.module_topology(module, topology), args.endpoint_delay)
            comm.verify_module(module, list(topology.shape))
        except (UserError, comm.IRError) as e:
            raise type(e)(f"{args.input}: {e}") from None
    else:
        if not args.collective:
            raise UserError("nothing to compile: give --collective and --size, or an input .mlir module")
        if topology is None:
            raise UserError("--topology is required")
        if not args.size:
            raise UserError("--size is required with --collective")
        dims = int_list(args.dims, "--dims") if args.dims else None
        root = 0
        if args.root is not None:
            try:
                root = int(args.root)
            except ValueError:
                root = -1
            if not 0 <= root < topology.npus:
                raise UserError(f"--root must be an NPU of {args.topology} (0..{topology.npus - 1}), got "
                                f"'{args.root}'")
        module = driver.build_module(ctx, topology, args.collective, parse_size(args.size), dims, root)

    defaults = {}
    if args.chunks is not None:
        defaults["chunks"] = positive_int(args.chunks, "--chunks")
        if args.input and not any(v.opname in comm.COLLECTIVES and v.chunks is None
                                  for v in map(comm.view, comm.ops(module))):
            # the chunk pass fills only collectives without a count: here --chunks would change nothing
            raise UserError(f"--chunks {args.chunks}: every collective of {args.input} already carries its chunk "
                            "count (or has been decomposed into phases); drop --chunks, or edit the count in the "
                            "module")
    if args.algorithm:
        defaults["algorithm"] = args.algorithm
    if args.all_reduce:
        defaults["all_reduce"] = args.all_reduce
    if args.ports is not None:
        from ... import algorithms
        name = algorithms.canonical(args.algorithm or "")
        if name is None or not algorithms.REGISTRY[name].takes_ports:
            takes = " or ".join(n for n, a in algorithms.all_algorithms().items() if a.takes_ports)
            raise UserError(f"--ports applies to --algorithm {takes}")
        defaults["ports"] = positive_int(args.ports, "--ports")
    _check_dimension_options(args, module, defaults, given)
    if args.compare:
        source = str(module)
        reports = {name: driver.compile_schedule(source, ctx, topology, name, defaults,
                                                 dataclasses.replace(run, intra=intra)).report
                   for name, intra in (("baseline", "fifo"), ("themis", "scf"), ("optimal", "scf"))}
        from ..report.report import compare_rows
        compared = {k: r.to_json() for k, r in reports.items()}
        _check_finite(compared)
        print(json.dumps(compared, indent=1) if args.json else compare_rows(reports))
        return 0
    try:
        compiled = driver.compile_schedule(str(module), ctx, topology, args.scheduler, defaults, run,
                                           args.print_ir_after_all, args.pass_pipeline, args.mlir_timing)
    except (UserError, comm.IRError, PassError) as e:
        if not args.input:
            raise
        raise type(e)(f"{args.input}: {e}") from None   # what the module's ops say names its file
    module, schedule = compiled.module, compiled.schedule
    if args.verify:  # before anything is written: a schedule that fails verification is never emitted
        from ..driver import resources
        resources.verification(topology, schedule.plans).check(run.max_memory)
        _verify(schedule, run.max_memory)
        if args.emit != "report":
            sys.stderr.write(VERIFIED + "\n")  # stdout carries the MLIR or the table

    if args.emit == "mlir":   # with how it was run, so that `astra-compile module.mlir` runs it so again
        from ..driver import recorded_run
        recorded_run.with_comm_record(module, run)
        text = str(module)
        if args.output:
            atomic.write_text(args.output, text)
        else:
            sys.stdout.write(text)
        return 0

    if args.emit == "tables":
        return _emit_tables(args, schedule, topology, run)

    if args.emit == "chakra":
        from ..interop import chakra_write
        n = chakra_write.write(chakra_write.one_collective(schedule.meta, topology), topology, _chakra_dir(args),
                               args.force)
        print(f"wrote {n} Chakra traces and comm_group.json to {args.output}")
        return 0

    if args.emit == "msccl-xml":
        from ..interop.msccl_xml import to_xml
        text = to_xml(schedule, f"astra-compile {compiled.report.collectives[0].buffer_kind} on {topology.name} "
                                f"({compiled.report.scheduler})")
        if args.output:
            atomic.write_text(args.output, text)
        else:
            sys.stdout.write(text)
        return 0

    report = compiled.report
    _write_timeline(args, compiled.result, schedule.meta,
                    f"{topology.name}: {report.backend} runtime, {report.scheduler} scheduler")
    if args.verify:
        report = report.with_(verified=True)
    _report(args, report.to_json(), lambda: report.format() + (f"\n{VERIFIED}" if args.verify else ""))
    return 0


def _check_dimension_options(args, module, defaults: dict, given: set[str]) -> None:
    """Refuse the options that act across dimensions where the run has none to act across: a whole-network
    algorithm (--algorithm's, a --system file's or the one a module's phases run), or an all-reduce over one
    dimension. Known only once the module is read: cli_rules refuses what the command line alone shows."""
    from . import cli_rules
    from ..driver import driver
    from ...dialects import comm
    flat = driver.whole_network_run(module, defaults)
    if flat is not None:
        cli_rules.check_whole_network(given, f"--algorithm {flat.name} runs one phase over the whole network"
                                      if "algorithm" in defaults else
                                      f"the phases of {args.input} run {flat.name}, one phase over the whole network")
        defaults.pop("all_reduce", None)   # a --system file's collective-optimization: nothing to split here
        return
    spans = [comm.view(op).dims for op in comm.ops(module) if comm.short_name(op) == "all_reduce"]
    cli_rules.check_all_reduce_split(spans, given, f"the all-reduce runs over dimension {spans[0][0]} alone"
                                     if args.collective and spans else
                                     f"{args.input} holds no all-reduce over several dimensions (one decomposed "
                                     "into phases keeps the split it was given)")


def _chakra_dir(args) -> str:
    if not args.output:
        raise UserError("--emit chakra needs -o DIR (one .et file per rank and comm_group.json go there)")
    return args.output


def _emit_tables(args, schedule, topology, run) -> int:
    from ..driver import recorded_run
    from ...runtime.tables import write_dir
    if args.output:   # with how they execute, so that `astra-compile DIR` runs them as this run would
        write_dir(schedule, args.output, args.table_format, force=args.force, run=recorded_run.of_tables(run))
        print(f"wrote {schedule.meta.npus} tables and meta.json to {args.output}")
        return 0
    if args.npu is None:
        raise UserError("--emit tables needs --npu K (print one table) or -o DIR (write them all)")
    npu = _npu(args)
    if not 0 <= npu < topology.npus:
        raise UserError(f"--npu {npu} outside 0..{topology.npus - 1}")
    if args.table_view == "trees":
        from ..report.tree_table import format_tree_table
        text = format_tree_table(schedule, npu)   # first: a schedule without trees is refused with nothing printed
        print(f"# accelerator {npu} of {topology.npus} on {topology.name}: MultiTree commands")
        print(text)
        return 0
    table = schedule.table(npu)
    if args.json:
        print(json.dumps({c: table[c].tolist() for c in table.cols}))
    else:
        print(f"# accelerator {npu} of {topology.npus} on {topology.name}: {len(table)} rows")
        print(table.to_text(schedule.meta))
    return 0
