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
from ..core.job import FASTEST_CHUNKS, Job, from_options
from .parser import capture_limit, chunk_count, fail, int_list, parse, positive_int

VERIFIED = "verified: every NPU's buffer matches the collective's definition"


def run_command(argv: list[str]) -> int:
    """Run the command line `argv` of a run (no subcommand): its exit status; a refusal is one line."""
    values, given, named = parse(argv)
    job = from_options(values)
    # imported here so --help stays instant and argument errors need no MLIR
    from ...runtime.verifier import VerificationError
    # warnings (a model file's, torch's) are shown after a run that ends; a refused run says its one line only
    with warnings.catch_warnings(record=True) as caught:
        try:
            code = run_job(job, given, named)
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


def _run_workload(job: Job, given: set[str], step_dir: bool, sink: list | None) -> int:
    """model.py, execution traces, a workload module or a step table directory -> the step report (or the workload
    MLIR, or the step's tables)."""
    from ..core import reuse
    from ..api.api import compile as compile_workload
    out, inputs = job.outputs, job.inputs
    if out.emit == "tables" and out.output is None and out.npu is None:
        raise UserError("--emit tables needs --npu K (print one accelerator's step table) or -o DIR (write them all)")
    if out.emit == "msccl-xml":
        raise UserError("--emit msccl-xml writes one collective's schedule (--collective, or a comm .mlir module), "
                        "not a training step")
    if step_dir:
        if out.emit == "mlir":
            raise UserError(f"--emit mlir: {inputs[0]} holds the step's tables, not its workload module")
        # the options the directory records are in the job already (run_job): each as given or as recorded
        report = compile_workload(inputs[0], job=job.replace("run", local_mem_gbps=_local_mem(job)),
                                  use_recorded=False)
    else:
        if not job.network.topology and readers.kind_of(list(inputs)) != readers.WORKLOAD_MODULE:
            raise UserError("--topology is required")
        chunks = chunk_count(job.compile.chunks) if job.compile.chunks is not None else None
        with reuse.using(reuse.open_dir(job.step.cache) if job.step.cache else reuse.current()):
            job = job.replace("compile", chunks=chunks)
            job = job.replace("step", capture_limit=capture_limit(job.step.capture_limit),
                              keep_tables=out.emit == "tables")
            job = job.replace("run", local_mem_gbps=_local_mem(job))
            report = compile_workload(inputs if len(inputs) > 1 else inputs[0], job=job, use_recorded=False)
    _check_step_options(report, given)
    if out.emit == "tables":
        return _emit_step_tables(job, report)
    if out.emit == "chakra":
        if not report.writes_chakra:
            raise UserError(f"--emit chakra: {inputs[0]} holds a lowered step, not its workload: give the model "
                            "file or traces it came from")
        n = report.chakra(_chakra_dir(job), out.force)
        print(f"wrote {n} Chakra traces and comm_group.json to {out.output}; step time "
              f"{report.total_time_us:.3f} us")
        return 0
    if out.emit == "mlir":
        if out.output:
            atomic.write_text(out.output, report.mlir)
        else:
            sys.stdout.write(report.mlir)
        return 0
    if out.timeline:
        from ...runtime.trace import write_chrome
        write_chrome(out.timeline, report.timeline())
    if out.plot:
        from ..report import breakdown_plot
        breakdown_plot.write(out.plot, [(report.topology, report.breakdown_us)],
                             f"{report.source}: step time breakdown")
    _report(job, report.to_dict(), report.format, sink)
    return 0


def _check_step_options(report, given: set[str]) -> None:
    """Refuse what the step turned out not to use, before anything is written: known once its collectives are
    (every rank's). Options that describe the machine (--pool, --mem-latency, the network's) are not refused where
    the step leaves part of it unused: an ASTRA-sim run gives its remote memory file with every step."""
    from . import cli_rules
    spans = [k[2] for k in report.collective_keys if k[0] == "all_reduce"]
    cli_rules.check_all_reduce_split(spans, given, "each of the step's all-reduces runs over one dimension"
                                     if spans else "the step has no all-reduce")


def _emit_step_tables(job: Job, report) -> int:
    from ..interop import step_dir
    from ...runtime import step_tables
    out = job.outputs
    step = report.step_tables(out.table_format)
    if out.output:
        step_tables.write(out.output, step, force=out.force)
        ranks = step.meta["npus"]
        print(f"wrote the step of {ranks} accelerators to {out.output}: {len(step.programs)} program table(s), "
              f"{len(step.collectives)} collective schedule(s), meta.json; step time "
              f"{report.total_time_us:.3f} us")
        return 0
    npu = _npu(job)
    print(step_dir.format_npu(step, npu, out.json))
    return 0


def _npu(job: Job) -> int:
    """--npu K (an empty value is -1, which the range checks refuse)."""
    text = job.outputs.npu
    return int_list(text, "--npu")[0] if text.strip() else -1


def _report(job: Job, obj: dict, text, sink: list | None) -> None:
    """Print a run's report: its --json object or its text (`text()`); with a `sink` (a sweep point's:
    sweep/point.py) append the JSON object to it instead, computed by exactly the command's code path."""
    _check_finite(obj)
    if sink is not None:
        sink.append(obj)
    else:
        print(json.dumps(obj, indent=1) if job.outputs.json else text())


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


def kind_of(job: Job) -> str:
    """Which kind of run the job is (cli_rules.ALLOWED's keys): what its inputs are."""
    if job.outputs.list_passes:
        return "list-passes"
    # no input is --collective's; inputs no reader takes go the collective way too, which refuses them by name
    return RUNS.get(readers.kind_of(list(job.inputs)), "collective")


def run_job(job: Job, given: set[str] = frozenset(), named: set[str] | None = None,
            sink: list | None = None) -> int:
    """Run the Job of a command line (`given`: the options that differ from their defaults, `named`: those typed,
    at their defaults too; parse); the CLI and the sweep points (sweep/point.py, with a `sink` for the report)
    both come here. The options a table directory, step directory or module records, and those an ASTRA-sim
    system file sets, fill the job first."""
    from . import cli_rules
    named = given if named is None else named
    kind = kind_of(job)
    record, where = _recorded(job, kind)
    filled = {}
    if record:   # what the directory or module records stands in for the options not typed (recorded_run.py)
        from ..driver import recorded_run
        filled = recorded_run.filled(named, record)
        job = job.with_options(recorded_run.as_options(filled))
    cli_rules.check(kind, job, given)
    notices, origin = [], {}
    if job.system:
        from ..interop import astra_system
        # an option typed wins over the file even at its default (`--intra scf` over its FIFO): named
        values, origin, notices = astra_system.read(job, named, kind == "training step")
        job = job.with_options(values)
    if job.network.cluster is not None:   # its topology and GPU where not typed; a lone collective has no GPU
        from ..core.job import with_cluster
        job = with_cluster(job, kind != "collective")
    if job.step.gpu is not None:   # the device's roofline, but for --peak-tflops/--mem-bw typed beside it
        from ..core.job import with_gpu
        job = with_gpu(job, {field for dest, field in (("peak_tflops", "peak_tflops"), ("mem_bw", "mem_bw_gbps"))
                             if dest in named})
    from ...dialects.comm import IRError
    from ...passes import PassError
    try:
        if job.system:
            cli_rules.check(kind, job, given)   # again: an option typed may not apply beside what the file set
        code = _run_kind(job, kind, given, sink)
    except (UserError, IRError, PassError) as e:   # an option the file set is the file's key, not a flag typed
        if not job.system and not filled:
            raise
        e = recorded_run.blamed(e, filled, where) if filled else e
        raise (astra_system.blamed(e, job, origin) if job.system else e) from None
    if record:
        notices += recorded_run.notes(job, record, where)
    for line in notices:   # after the run: a refused run says its one line only
        sys.stderr.write(line + "\n")
    return code


def _recorded(job: Job, kind: str) -> tuple[dict, str]:
    """The run options a table directory, step directory or module given as input records, checked, and where
    (recorded_run.py); ({}, "") for other runs."""
    from ..driver import recorded_run
    read_as = readers.kind_of(list(job.inputs))   # the reader's kinds name the inputs that record options
    if kind == "list-passes" or read_as not in recorded_run.INPUTS:
        return {}, ""
    return recorded_run.of_input(read_as, job.inputs[0])


def _run_kind(job: Job, kind: str, given: set[str], sink: list | None) -> int:
    if kind == "list-passes":
        from ...passes import all_passes
        for name, cls in sorted(all_passes().items()):
            opts = " ".join(f"{k}=<{f.metadata['help']}>" for k, f in cls.options().items())
            print(f"{name:24s} {cls.summary}" + (f"  [{opts}]" if opts else ""))
        return 0
    max_memory = job.run.max_memory
    if isinstance(max_memory, str):   # as typed: it does not read as a size (job.from_options)
        from ...network.units import parse_size
        try:
            parse_size(max_memory)
        except UserError as e:
            raise UserError(f"--max-memory: {e}") from None
    if kind in ("training step", "step tables"):
        return _run_workload(job, given, kind == "step tables", sink)
    if len(job.inputs) > 1:
        raise UserError(f"give one .mlir module or table directory, got {len(job.inputs)} inputs")
    active = positive_int(job.run.active_chunks, "--active-chunks")
    out = job.outputs
    run = dataclasses.replace(job.run, active_chunks=active, local_mem_gbps=_local_mem(job),
                              timeline=bool(out.timeline or out.plot) and job.run.backend == "congestion")
    job = dataclasses.replace(job, run=run)
    if kind == "table directory":
        return _run_table_dir(job, sink)
    return _run_collective(job, given, sink)


def _local_mem(job: Job) -> float | None:
    if job.run.local_mem_gbps is None:
        return None
    from ...network.memory import check_local_mem_gbps
    return check_local_mem_gbps(job.run.local_mem_gbps)


def _write_timeline(job: Job, result, meta: dict, title: str) -> None:
    if job.outputs.timeline:
        from ...runtime.trace import write_trace
        write_trace(job.outputs.timeline, result, meta)
    if job.outputs.plot:
        from ...runtime.trace import write_plot
        write_plot(job.outputs.plot, result, meta.ndims, title)


def _verify(schedule, max_memory: int | None) -> None:
    """--verify: the schedule's rows read and checked, the pieces they cut its buffers into counted, the memory of
    executing them on symbols estimated, then executed (runtime/verify_symbolic.py)."""
    from ..driver import resources
    from ...runtime.verifier import SymbolicRun
    check = SymbolicRun(schedule)
    resources.verified_cells(check).check(max_memory)
    check.run()


def _run_table_dir(job: Job, sink: list | None) -> int:
    """Execute tables written earlier with -o."""
    from ..driver import driver
    from ...runtime.tables import DirSchedule
    from ..driver import resources
    path, run = job.inputs[0], job.run
    schedule = DirSchedule(path)
    resources.table_files(path, schedule.meta, run.execution != "full", run.verify,
                          run.max_memory).check(run.max_memory)
    result = driver.execute(schedule, run)
    out = {"total_time_us": result.total_ns / 1e3, "npus": schedule.meta.npus, "backend": result.backend,
           "execution": result.mode, "per_dim_bytes": result.per_dim_bytes,
           "per_dim_busy_us": [b / 1e3 for b in result.dim_busy_ns]}
    _write_timeline(job, result, schedule.meta, f"{path}: {result.backend} runtime")
    if run.verify:  # the written tables on their own: their meta carries every shard layout
        from ...runtime.verifier import VerificationError
        try:
            _verify(schedule, run.max_memory)
        except VerificationError as e:  # tables given as input are the user's: wrong ones are bad input
            raise UserError(f"{path}: the tables do not implement their collectives: {e}") from None
        out["verified"] = True
    _report(job, out, lambda: f"total time {out['total_time_us']:.3f} us on {out['npus']} NPUs ({result.backend}, "
                              f"{result.mode} execution)" + (f"\n{VERIFIED}" if run.verify else ""), sink)
    return 0


def _run_collective(job: Job, given: set[str], sink: list | None) -> int:
    """One collective (--collective) or a comm module (.mlir): compile, then report, emit MLIR or emit tables."""
    from ..driver import driver
    from ...dialects import comm
    from ...network.parse import parse_topology, with_endpoint_delay
    from ...passes import PassError
    from ...network.units import parse_size

    net, coll, opts, run, out = job.network, job.collective, job.compile, job.run, job.outputs
    source = job.inputs[0] if job.inputs else None
    topology = None
    if net.topology:
        topology = parse_topology(net.topology, net.bandwidth, net.latency, net.links, net.endpoint_delay)
    elif any((net.bandwidth, net.latency, net.links)):
        raise UserError("--bandwidth/--latency/--links need --topology")

    ctx = comm.new_context()
    if source:
        if not source.endswith(".mlir"):
            raise UserError(f"cannot compile '{source}': expected a .mlir comm module or a table directory")
        if coll.kind or coll.size or coll.dims or coll.root is not None:
            raise UserError("give either an input module or --collective/--size/--dims/--root, not both")
        module = driver.read_module(ctx, source)
        try:  # the module's own mistakes name its file
            topology = with_endpoint_delay(driver.module_topology(module, topology), net.endpoint_delay)
            comm.verify_module(module, list(topology.shape))
        except (UserError, comm.IRError) as e:
            raise type(e)(f"{source}: {e}") from None
    else:
        if not coll.kind:
            raise UserError("nothing to compile: give --collective and --size, or an input .mlir module")
        if topology is None:
            raise UserError("--topology is required")
        if not coll.size:
            raise UserError("--size is required with --collective")
        dims = int_list(coll.dims, "--dims") if coll.dims else None
        root = 0
        if coll.root is not None:
            try:
                root = int(coll.root)
            except ValueError:
                root = -1
            if not 0 <= root < topology.npus:
                raise UserError(f"--root must be an NPU of {net.topology} (0..{topology.npus - 1}), got "
                                f"'{coll.root}'")
        module = driver.build_module(ctx, topology, coll.kind, parse_size(coll.size), dims, root)

    defaults = {}
    if opts.chunks is not None:
        defaults["chunks"] = chunk_count(opts.chunks)
        if source and not any(v.opname in comm.COLLECTIVES and v.chunks is None
                              for v in map(comm.view, comm.ops(module))):
            # the chunk pass fills only collectives without a count: here --chunks would change nothing
            raise UserError(f"--chunks {opts.chunks}: every collective of {source} already carries its chunk "
                            "count (or has been decomposed into phases); drop --chunks, or edit the count in the "
                            "module")
    elif net.cluster is not None and not source:   # NCCL pipelines a collective over the node and the NICs
        defaults["chunks"] = FASTEST_CHUNKS
    if opts.algorithm:
        defaults["algorithm"] = opts.algorithm
    if opts.all_reduce:
        defaults["all_reduce"] = opts.all_reduce
    if opts.ports is not None:
        from ... import algorithms
        name = algorithms.canonical(opts.algorithm or "")
        if name is None or not algorithms.REGISTRY[name].takes_ports:
            takes = " or ".join(n for n, a in algorithms.all_algorithms().items() if a.takes_ports)
            raise UserError(f"--ports applies to --algorithm {takes}")
        defaults["ports"] = positive_int(opts.ports, "--ports")
    _check_dimension_options(job, module, defaults, given)
    if opts.compare:
        text = str(module)
        reports = {name: driver.compile_schedule(text, ctx, topology, name, defaults,
                                                 dataclasses.replace(run, intra=intra)).report
                   for name, intra in (("baseline", "fifo"), ("themis", "scf"), ("optimal", "scf"))}
        from ..report.report import compare_rows
        compared = {k: r.to_json() for k, r in reports.items()}
        _check_finite(compared)
        print(json.dumps(compared, indent=1) if out.json else compare_rows(reports))
        return 0
    try:
        compiled = driver.compile_schedule(str(module), ctx, topology, opts.scheduler, defaults, run,
                                           opts.print_ir_after_all, opts.pass_pipeline, opts.mlir_timing)
    except (UserError, comm.IRError, PassError) as e:
        if not source:
            raise
        raise type(e)(f"{source}: {e}") from None   # what the module's ops say names its file
    module, schedule = compiled.module, compiled.schedule
    if run.verify:  # before anything is written: a schedule that fails verification is never emitted
        from ..driver import resources
        resources.verification(topology, schedule.plans).check(run.max_memory)
        _verify(schedule, run.max_memory)
        if out.emit != "report":
            sys.stderr.write(VERIFIED + "\n")  # stdout carries the MLIR or the table

    if out.emit == "mlir":   # with how it was run, so that `astra-compile module.mlir` runs it so again
        from ..driver import recorded_run
        recorded_run.with_comm_record(module, run)
        text = str(module)
        if out.output:
            atomic.write_text(out.output, text)
        else:
            sys.stdout.write(text)
        return 0

    if out.emit == "tables":
        return _emit_tables(job, schedule, topology)

    if out.emit == "chakra":
        from ..interop import chakra_write
        n = chakra_write.write(chakra_write.one_collective(schedule.meta, topology), topology, _chakra_dir(job),
                               out.force)
        print(f"wrote {n} Chakra traces and comm_group.json to {out.output}")
        return 0

    if out.emit == "msccl-xml":
        from ..interop.msccl_xml import to_xml
        text = to_xml(schedule, f"astra-compile {compiled.report.collectives[0].buffer_kind} on {topology.name} "
                                f"({compiled.report.scheduler})")
        if out.output:
            atomic.write_text(out.output, text)
        else:
            sys.stdout.write(text)
        return 0

    report = compiled.report
    _write_timeline(job, compiled.result, schedule.meta,
                    f"{topology.name}: {report.backend} runtime, {report.scheduler} scheduler")
    if run.verify:
        report = report.with_(verified=True)
    if job.network.cluster is not None:   # read by with_cluster: the header says which cluster, as a step's does
        report = report.with_(cluster=job.network.cluster.describe())
    _report(job, report.to_json(), lambda: report.format() + (f"\n{VERIFIED}" if run.verify else ""), sink)
    return 0


def _check_dimension_options(job: Job, module, defaults: dict, given: set[str]) -> None:
    """Refuse the options that act across dimensions where the run has none to act across: a whole-network
    algorithm (--algorithm's, a --system file's or the one a module's phases run), or an all-reduce over one
    dimension. Known only once the module is read: cli_rules refuses what the command line alone shows."""
    from . import cli_rules
    from ..driver import driver
    from ...dialects import comm
    source = job.inputs[0] if job.inputs else None
    flat = driver.whole_network_run(module, defaults)
    if flat is not None:
        cli_rules.check_whole_network(given, f"--algorithm {flat.name} runs one phase over the whole network"
                                      if "algorithm" in defaults else
                                      f"the phases of {source} run {flat.name}, one phase over the whole network")
        defaults.pop("all_reduce", None)   # a --system file's collective-optimization: nothing to split here
        return
    spans = [comm.view(op).dims for op in comm.ops(module) if comm.short_name(op) == "all_reduce"]
    cli_rules.check_all_reduce_split(spans, given, f"the all-reduce runs over dimension {spans[0][0]} alone"
                                     if job.collective.kind and spans else
                                     f"{source} holds no all-reduce over several dimensions (one decomposed "
                                     "into phases keeps the split it was given)")


def _chakra_dir(job: Job) -> str:
    if not job.outputs.output:
        raise UserError("--emit chakra needs -o DIR (one .et file per rank and comm_group.json go there)")
    return job.outputs.output


def _emit_tables(job: Job, schedule, topology) -> int:
    from ..driver import recorded_run
    from ...runtime.tables import write_dir
    out = job.outputs
    if out.output:   # with how they execute, so that `astra-compile DIR` runs them as this run would
        write_dir(schedule, out.output, out.table_format, force=out.force, run=recorded_run.of_tables(job.run))
        print(f"wrote {schedule.meta.npus} tables and meta.json to {out.output}")
        return 0
    if out.npu is None:
        raise UserError("--emit tables needs --npu K (print one table) or -o DIR (write them all)")
    npu = _npu(job)
    if not 0 <= npu < topology.npus:
        raise UserError(f"--npu {npu} outside 0..{topology.npus - 1}")
    if out.table_view == "trees":
        from ..report.tree_table import format_tree_table
        text = format_tree_table(schedule, npu)   # first: a schedule without trees is refused with nothing printed
        print(f"# accelerator {npu} of {topology.npus} on {topology.name}: MultiTree commands")
        print(text)
        return 0
    table = schedule.table(npu)
    if out.json:
        print(json.dumps({c: table[c].tolist() for c in table.cols}))
    else:
        print(f"# accelerator {npu} of {topology.npus} on {topology.name}: {len(table)} rows")
        print(table.to_text(schedule.meta))
    return 0

