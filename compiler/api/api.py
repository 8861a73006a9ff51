"""The Python API for profiling flows: `astra_compile.compile(model_or_trace, topology=...)` -> WorkloadReport.

    import astra_compile
    report = astra_compile.compile("examples/mlp_dp.py", topology="8x8_torus")
    report.total_time_us, report.exposed_comm_time_us, report.collectives, report.mlir

The CLI (`astra-compile model.py --topology ...`) is a thin layer over this function.
"""
from __future__ import annotations

import math
import os
import sys
from types import ModuleType

from ..driver import driver, recorded_run
from ..core import heap, reuse
from ...network.errors import UserError
from ..frontend import readers
from ..frontend.mesh import mesh_text
from ..frontend.trace_world import first_npus, placed
from ..frontend.workload import Workload
from ...runtime.workload_engine import SEMANTICS
from ...network.parse import parse_topology, with_endpoint_delay
from ...network.topology import Topology
from ..driver.workload_driver import (Lowered, StepSemantics, WorkloadOptions, emitted, lower, read_lowered, run,
                                      runner)
from ..core.step_keys import group_key
from ...dialects import workload as wl
from ..report.step_timeline import step_trace
from ..report.workload_report import WorkloadReport, make_report
from ..core.job import DEFAULT_CAPTURE_LIMIT, FASTEST_CHUNKS, Job, Network, RunOptions, StepOptions, roofline, with_cluster, \
    with_gpu


def load_workload(source, world_size: int, mesh: dict | None = None,
                  capture_limit: float | None = DEFAULT_CAPTURE_LIMIT, topology: Topology | None = None,
                  max_memory: int | None = None) -> Workload:
    """A Workload from a model file path, a loaded Python module following the model-file convention, a list of
    execution-trace files (or one), or a Workload. Loading and capturing a model file may take at most
    `capture_limit` seconds of CPU (None: no limit). Chakra traces read for `topology` may become one SPMD program
    (frontend/chakra.as_spmd), and are refused when estimated to need more than `max_memory` bytes (None: this
    machine's available memory)."""
    if isinstance(source, Workload):
        return source
    from ..frontend.model_file import ModelFile
    if isinstance(source, (ModuleType, ModelFile)):
        from ..frontend.capture import capture
        from ..frontend.cpu_limit import cpu_limit
        from ..frontend.model_code import guarded
        from ..frontend.model_file import model_file_from_module
        from ..frontend.torch_state import kept
        spec = source if isinstance(source, ModelFile) else model_file_from_module(source)
        # the limit ends first: nothing stops the restores
        with kept(), guarded(spec.path), cpu_limit(capture_limit, spec.path):
            return capture(spec, world_size, mesh)
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise UserError("nothing to compile: no model file or trace given")
    paths = readers.trace_files(paths)   # a directory of traces: the trace files in it
    shared = reuse.current()
    if shared is not None:  # a sweep or --cache: the same files (by content), world and mesh are captured once
        try:
            key = [[os.path.abspath(p), reuse.file_digest(p)] for p in paths], world_size, \
                sorted((mesh or {}).items()), list(topology.shape) if topology is not None else None
        except OSError:
            key = None  # the load below names the file it cannot read
        if key is not None:
            return shared.get("workload", key,
                              lambda: readers.load(paths, world_size, mesh, capture_limit, topology, max_memory),
                              Workload.to_json, Workload.from_json)
    return readers.load(paths, world_size, mesh, capture_limit, topology, max_memory)


def _is_module(source) -> bool:
    torch = sys.modules.get("torch")   # not imported: it cannot be an nn.Module
    return torch is not None and isinstance(source, torch.nn.Module)


DEFAULT_TOPOLOGY = "8x8_torus"   # compile()'s network when neither `topology` nor a job gives one
# compile()'s keyword overrides -> (group, field) of the Job (job.py); step_semantics sets two fields
OVERRIDES = {
    **{k: ("network", k) for k in ("topology", "bandwidth", "latency", "links", "endpoint_delay", "cluster")},
    **{k: ("compile", k) for k in ("scheduler", "chunks", "algorithm", "all_reduce")},
    **{k: ("run", k) for k in ("backend", "switching", "intra", "max_memory", "local_mem_gbps")},
    **{k: ("step", k) for k in ("mesh", "peak_tflops", "mem_bw_gbps", "rank", "capture_limit", "example_inputs",
                                "parallelize", "loss", "optimizer", "iteration", "keep_tables", "mem_latency_ns",
                                "pool", "offload", "in_switch", "cache", "gpu", "op_times")},
    "step_semantics": ("step", "semantics"),
}


def job_of(job: Job | None = None, topology=..., **overrides) -> Job:
    """The Job compile() runs: `job` (None: the defaults on DEFAULT_TOPOLOGY) with `topology` (... : the job's)
    and each keyword override (OVERRIDES) set."""
    # a cluster without a topology is the cluster's topology, not the default
    default_topology = None if "cluster" in overrides and topology is ... else DEFAULT_TOPOLOGY
    job = Job(network=Network(topology=default_topology)) if job is None else job
    if not isinstance(job, Job):
        raise TypeError(f"job must be an astra_compile.compiler.core.job.Job, got {type(job).__name__}")
    if topology is not ...:
        overrides = {"topology": topology, **overrides}
    changes: dict = {}
    for name, value in overrides.items():
        if name not in OVERRIDES:
            raise TypeError(f"compile() got an unexpected keyword argument '{name}'")
        group, key = OVERRIDES[name]
        fields = changes.setdefault(group, {})
        if name == "step_semantics":   # a name, or a StepSemantics with an ASTRA-sim file's link bandwidths
            semantics = value if isinstance(value, StepSemantics) else StepSemantics(value)
            fields.update(semantics=semantics.name, astra_link_gbps=semantics.link_gbps)
        else:
            fields[key] = value
    for group, fields in changes.items():
        job = job.replace(group, **fields)
    # a roofline figure set beside a gpu overrides the device's (with_gpu): named, or away from its default
    default = StepOptions()
    given = {k for k in ("peak_tflops", "mem_bw_gbps") if k in overrides or getattr(job.step, k) != getattr(default, k)}
    return with_gpu(with_cluster(job), given)


def compile(source, topology=..., *, job: Job | None = None, use_recorded: bool = True,
            **overrides) -> WorkloadReport:
    """Capture (or import) one training step, compile its collectives for the job's topology and time the step.

    `job` (compiler/core/job.py: one frozen configuration, as the command line builds it) says how; `topology` and
    each keyword override (OVERRIDES: the names below) replace a field of it (without a job: the defaults, on
    DEFAULT_TOPOLOGY), so `compile(src, "Ring(8)", chunks=4)` is `compile(src, job=Job(network=Network("Ring(8)"),
    compile=CompileOptions(chunks=4)))`.

    `source`: a model file, an imported module following the model-file convention, execution-trace files, a
    workload .mlir module written by --emit mlir (timed on its own topology unless `topology` gives one of the
    same shape; topology=None takes its own), a step table directory written by --emit tables -o (its own
    topology and compiled collectives: topology=None), a Workload (astra_compile.record's), or an nn.Module (before
    parallelization) with `example_inputs` (one rank's batch) and optionally `parallelize(module, mesh)`,
    `loss(output)` and `optimizer(parameters)`, as a model file would define them (frontend/module_object.py). May be called after init_process_group.
    `bandwidth`, `latency` and `links` are --bandwidth/--latency/--links for a topology given by name;
    `endpoint_delay` (ns per message, --endpoint-delay) applies to any topology, a workload module's own too.
    `mesh` ('dp=8,tp=8' or a dict) shapes the device mesh of a model file; `chunks`/`algorithm`/`scheduler`
    apply to every collective as on the collective command line, `all_reduce` ('hierarchical' or
    'per-dimension', --all-reduce) to every all-reduce; `switching` ('cut-through' or 'store-and-forward',
    --switching) is how the congestion backend forwards the step's collectives and messages; the roofline turns
    FLOPs and bytes into compute time. `rank` picks whose step the report details (multi-rank traces); `iteration` keeps one iteration of a
    trace that holds several (the report otherwise times them all, and each). `max_memory` (bytes) refuses a
    collective estimated to need more (default: this machine's available memory); `capture_limit` bounds the CPU
    seconds a model file may take to load and capture. `keep_tables`: keep each collective's schedule so that
    `report.step_tables(fmt)` gives the step's per-accelerator tables (runtime/step_tables.py). `local_mem_gbps`:
    ASTRA-sim's local-mem-bw reduction term in every collective (network/memory.py; None: off). `mem_latency_ns`:
    the local memory's access latency (its bandwidth is `mem_bw_gbps`); `pool`: the remote memory pool that remote
    loads and stores use (a pool file's path, or network/memory_pool's HierMem or ZeroInfinity; docs/memory.md).
    `offload` ("params,grads,optimizer" or a tuple of them) keeps those states in the pool, moved where the step
    needs them, and `in_switch` lets the pool's switches do the FSDP all-gathers and reduce-scatters
    (frontend/offload.py). `step_semantics`: "streams" (this tool's: a stream per process group, messages meet
    their receives) or "astra-sim" (ASTRA-sim's workload layer: one collective or send in flight per NPU, eager
    sends, its network view of messages and sub-world groups; docs/astra-sim.md). `cache`: a directory that keeps
    the captured step and each compiled collective for later runs (--cache). A step's collectives run with the
    job's backend, intra, switching, max_memory and local_mem_gbps (its other run options are the collective
    command line's). A step table directory or workload module records the run options that shaped the
    figure of the run that wrote it (docs/tables.md, "Recorded run options"): with `use_recorded` (the default)
    each of these options left at its default takes the recorded value; False takes every option as given."""
    job = job_of(job, topology, **overrides)
    cache = job.step.cache
    shared = reuse.current()
    with heap.compiling():
        if cache and (shared is None or shared.directory != os.path.abspath(cache)):
            with reuse.using(reuse.open_dir(cache)):
                return _compile(source, job, use_recorded)
        return _compile(source, job, use_recorded)


def _compile(source, job: Job, use_recorded: bool) -> WorkloadReport:
    read_as = readers.kind_of([source]) if isinstance(source, (str, os.PathLike)) else None
    # a .mlir is read as a workload module, which refuses a comm module: this API times training steps
    step_module = read_as in (readers.WORKLOAD_MODULE, readers.COMM_MODULE)
    if read_as == readers.STEP_TABLES:
        return _compile_step_dir(os.fspath(source), job, use_recorded)
    net, step = job.network, job.step
    topology = net.topology
    if topology is None and not step_module:
        raise UserError("a topology is required (a workload .mlir module names its own)")
    if topology is None and any(v is not None for v in (net.bandwidth, net.latency, net.links)):
        raise UserError("--bandwidth/--latency/--links need --topology")
    topo = topology if isinstance(topology, Topology) or topology is None else \
        parse_topology(topology, net.bandwidth, net.latency, net.links)
    topo = topo and with_endpoint_delay(topo, net.endpoint_delay)
    mesh = step.mesh
    if mesh is not None:
        from ..frontend.mesh import check_axes, parse_mesh
        mesh = parse_mesh(mesh) if isinstance(mesh, str) else check_axes(mesh)
    _check_roofline(step.peak_tflops, step.mem_bw_gbps)
    semantics = _semantics(step)
    module_options = any(v is not None for v in (step.example_inputs, step.parallelize, step.loss, step.optimizer))
    if step_module:  # written by --emit mlir: already lowered, with its topology, source and mesh
        if mesh or step.iteration is not None or step.offload or step.in_switch or module_options \
                or step.op_times is not None:
            raise UserError(f"{os.fspath(source)}: a workload module is already captured and lowered: mesh, "
                            "iteration, offload, --op-times and the nn.Module options do not apply")
        lowered, topo, recorded = read_lowered(os.fspath(source), topo, net.endpoint_delay)
        if use_recorded and recorded["run"]:
            job = _with_recorded(recorded["run"], job, RECORDED_BY_MODULE)
            step = job.step
            semantics = _semantics(step)
    elif _is_module(source):
        from ..frontend.module_object import model_file_from_object
        source = model_file_from_object(source, step.example_inputs, step.parallelize, step.loss, step.optimizer)
    elif module_options:
        raise UserError("example_inputs, parallelize, loss and optimizer go with an nn.Module source; a model file "
                        "defines them itself")
    if not step_module:
        # one GPU of a node (--cluster NAME:1x1): no dimension holds it, so it runs on NPU 0 of the node's fabric
        alone = net.cluster is not None and net.cluster.gpus == 1 and topo.npus > 1
        if alone and mesh is not None and math.prod(mesh.values()) != 1:
            raise UserError(f"mesh {mesh_text(mesh)} has {math.prod(mesh.values())} ranks but --cluster "
                            f"{net.cluster.name}:1x1 is one GPU")
        workload = load_workload(source, 1 if alone else topo.npus, mesh, step.capture_limit, topo,
                                 job.run.max_memory)
        if alone:
            workload = placed(workload, topo.npus, f"one GPU: {first_npus(1)} of the {net.cluster.name} node's "
                                                   f"{topo.npus}")
        if step.iteration is not None:
            workload = workload.only_iteration(step.iteration)
        if step.op_times is not None:
            from ..frontend.op_times import with_op_times
            workload = with_op_times(workload, os.fspath(step.op_times))
        from ..frontend.offload import host_states, offload as place, parse_states
        offload = step.offload
        states = parse_states(",".join(offload) if isinstance(offload, (tuple, list)) else offload)
        states, at_states = host_states(workload, states, step.pool)
        workload = place(workload, states, step.in_switch, at_states)
        from ..frontend.trace_memory import captured_step
        captured_step(workload).check(job.run.max_memory)   # the lowering and the engine hold every op
        lowered = _lowered(workload, topo)
        heap.settled()   # the workload and its programs live until the step is timed
        recorded = {"source": workload.source, "mesh": ",".join(f"{k}={v}" for k, v in workload.mesh.items()),
                    **({"placement": workload.placement} if workload.placement else {})}
    if net.cluster is not None:   # read by job_of (with_cluster): the report's header says it
        recorded = {**recorded, "cluster": net.cluster.describe()}
    scheduler = job.compile.scheduler or driver.DEFAULT_SCHEDULER
    # with a --cluster, each collective runs in the fastest of several chunk counts, as NCCL pipelines it
    chunks = job.compile.chunks if job.compile.chunks is not None or net.cluster is None else FASTEST_CHUNKS
    defaults = {k: v for k, v in (("chunks", chunks), ("algorithm", job.compile.algorithm),
                                  ("all_reduce", job.compile.all_reduce)) if v is not None}
    opts = WorkloadOptions(scheduler, defaults, _run_options(job.run), roofline(step), step.keep_tables,
                           *_memory(step.mem_latency_ns, step.pool, topo), step=semantics, gpu=_gpu(step),
                           device=step.gpu)
    return _timed(lowered, topo, opts, None, recorded | {"scheduler": scheduler}, step.rank,
                  None if step_module else workload, gpu=step.gpu)


def _gpu(step) -> dict | None:
    """The report's "gpu" object (--gpu's device: name, description, where its numbers came from), None without."""
    return None if step.gpu is None else step.gpu.describe()


def _run_options(run: RunOptions) -> RunOptions:
    """The options a step's collectives run with: the job's backend, intra, switching, memory limit and
    local-mem-bw, checked; the rest (execution, active chunks) are the collective command line's defaults."""
    return RunOptions(backend=run.backend, intra=run.intra, switching=_switching(run.switching, run.backend),
                      max_memory=run.max_memory, local_mem_gbps=_local_mem(run.local_mem_gbps))


def _timed(lowered: Lowered, topo: Topology, opts: WorkloadOptions, times, recorded: dict, rank: int,
           workload: Workload | None = None, step_tables=None, gpu=None) -> WorkloadReport:
    """The step's report; `workload`: the step it was lowered from (its Chakra traces can be written), None for a
    lowered module or step directory; `step_tables`: the tables of a step directory (else built when asked); `gpu`:
    the --gpu device, whose memory the step's is held against."""
    result, times = run(lowered, topo, opts, times)
    program = rank   # the program rank `rank` runs: in an SPMD step, the one that stands for it
    if 0 <= rank < topo.npus:
        runs = runner(lowered.programs, lowered.spmd)
        program = lowered.programs[0].rank if runs is None else runs.get(rank, rank)
    if program not in result.ranks:
        raise UserError(f"rank {rank} is not among the workload's programs ({sorted(result.ranks)})")
    from ..report.memory_report import with_most
    memory = memory_per_program(lowered.programs, gpu)
    info = {"source": recorded["source"], "topology": topo.name, "npus": topo.npus, "mesh": recorded["mesh"],
            **({"placement": recorded["placement"]} if recorded.get("placement") else {}),
            "backend": opts.run.backend, "scheduler": recorded["scheduler"], "peak_tflops": opts.roofline.peak_tflops,
            **({"switching": opts.run.switching} if opts.run.backend == "congestion" else {}),
            "mem_bw_gbps": opts.roofline.mem_gbps, "mem_latency_ns": opts.mem_latency_ns, "rank": rank,
            **({"pool": opts.pool.describe()} if opts.pool is not None else {}),
            **({"endpoint_delay_ns": topo.endpoint_delay_ns} if topo.endpoint_delay_ns else {}),
            **({"gpu": opts.gpu} if opts.gpu is not None else {}),
            **({"cluster": recorded["cluster"]} if recorded.get("cluster") else {}),
            "memory": with_most(memory, program)}
    if step_tables is not None:
        step_tables_of = lambda fmt: step_tables   # noqa: E731 (the directory's own, whatever the format)
    elif opts.keep_schedules:
        from ..interop import step_dir
        step_tables_of = lambda fmt: step_dir.build(   # noqa: E731
            lowered, times, info | {"topology_dict": topo.to_dict(), "run": recorded_run.of_step(opts)}, fmt)
    else:
        step_tables_of = None
    # the module printed when asked, with the options its collectives are compiled and the step is timed with again
    return make_report(info, result, times, lowered.programs, program,
                       module_text=lambda: emitted(lowered, times, recorded_run.of_module(opts)),
                       collective_keys=tuple(times),
                       timeline_of=lambda: step_trace(result, lowered.programs, times, info),
                       step_tables_of=step_tables_of,
                       chakra_of=_chakra_writer(workload, topo, opts, times) if workload is not None else None)


def memory_per_program(programs: list, gpu) -> dict:
    """Program rank -> its report `memory` object (compiler/report/memory_report.py; None where not known: a
    trace), and the one warning of a program that needs more than the --gpu device holds."""
    from ..report.memory_report import memory_object, warn_over_capacity
    memory = {}
    for prog in programs:
        groups = sum(1 for ranks in prog.groups.values() if len(ranks) > 1) + \
            any(op.kind in wl.P2P for op in prog.ops)
        memory[prog.rank] = memory_object(prog.memory, groups, gpu)
    if gpu is not None:
        warn_over_capacity(memory, gpu)
    return memory


def _chakra_writer(workload: Workload, topo: Topology, opts: WorkloadOptions, times):
    """report.chakra: the step as Chakra traces, each collective's time as this run's (a broadcast's, which
    ASTRA-sim replays)."""
    from ..interop import chakra_write

    def collective_ns(op, group) -> float:
        took = times.get(group_key(topo, op.collective, op.bytes, group, op.root)) if len(group) > 1 else None
        return took.time_ns if took is not None else 0.0
    return lambda out_dir, force=False: chakra_write.write(workload, topo, out_dir, force, roofline=opts.roofline,
                                                           collective_ns=collective_ns)


def _compile_step_dir(path: str, job: Job, use_recorded: bool = True) -> WorkloadReport:
    """A step table directory (--emit tables -o DIR): its collectives' tables executed on the job's backend, then
    the step; the run options it records stand in for those left at their defaults (`use_recorded`)."""
    from ..interop import step_dir
    if job.network.topology is not None:
        raise UserError(f"{path}: a step table directory runs on the topology it was compiled for (meta.json); "
                        "give no topology")
    record, where = recorded_run.of_input("step tables", path)
    if use_recorded and record:
        job = _with_recorded(record, job, RECORDED_BY_STEP)
    step, written = _semantics(job.step), _recorded_semantics(record)
    if step != written and where:   # its collectives' schedules are what they were compiled as under them
        said = "records them" if "step_semantics" in record else "records none: streams"
        raise UserError(f"{path}: the step was compiled under step semantics {written.name} (its meta.json {said}); "
                        f"it re-runs under them, not {step.name}" +
                        (" with other link bandwidths" if step.name == written.name else "") +
                        ": compile the model file, traces or step.mlir again for other semantics")
    _check_roofline(job.step.peak_tflops, job.step.mem_bw_gbps)
    run_opts = _run_options(job.run)
    lowered, topo, recorded, times, step_tables = step_dir.load(path, run_opts, step)
    opts = WorkloadOptions(recorded["scheduler"], {}, run_opts, roofline(job.step), False,
                           *_memory(job.step.mem_latency_ns, job.step.pool, topo), step=step, gpu=_gpu(job.step),
                           device=job.step.gpu)
    return _timed(lowered, topo, opts, times, recorded, job.step.rank, step_tables=step_tables, gpu=job.step.gpu)


# the options a step directory and a workload module record (recorded_run.py), by compile()'s names
RECORDED_BY_STEP = ("backend", "intra", "switching", "local_mem_gbps", "peak_tflops", "mem_bw_gbps", "mem_latency_ns",
                    "step_semantics", "pool", "gpu")
RECORDED_BY_MODULE = RECORDED_BY_STEP + ("scheduler", "chunks", "algorithm", "all_reduce")


def _with_recorded(record: dict, job: Job, names: tuple) -> Job:
    """`job` with each of `names` (compile()'s overrides) left at its default taking the value the step
    directory or workload module records (recorded_run.py; a record's astra_link_gbps goes with its
    step_semantics)."""
    default = Job()
    changes = {}
    for name in names:
        group, key = OVERRIDES[name]
        if name == "step_semantics":
            if "step_semantics" in record and _semantics(job.step) == StepSemantics():
                changes["step_semantics"] = _recorded_semantics(record)
        elif name in record and _at_default(name, getattr(getattr(job, group), key),
                                            getattr(getattr(default, group), key)):
            changes[name] = record[name]
    return job_of(job, **changes)


def _at_default(name: str, value, default) -> bool:
    """Is a Job's value its default? (a scheduler named as the default is the default.)"""
    if name == "scheduler":
        return value in (None, driver.DEFAULT_SCHEDULER)
    return value == default


def _recorded_semantics(record: dict) -> StepSemantics:
    link = record.get("astra_link_gbps")
    return StepSemantics(record.get("step_semantics", StepSemantics().name), tuple(link) if link else None)


def _memory(latency_ns, pool, topo) -> tuple[float, object]:
    """The local memory latency and the pool of a run on `topo`, checked (a pool file is read here): the pool's
    GPUs are the topology's NPUs."""
    from ...network.memory import check_latency_ns
    from ...network.memory_pool import AstraSimRemote, HierMem, ZeroInfinity
    latency = check_latency_ns(latency_ns, "mem_latency_ns (--mem-latency)")
    pool_path = pool if isinstance(pool, (str, os.PathLike)) else None
    if pool_path is not None:
        from ...network import pool_file
        pool = pool_file.load(os.fspath(pool))
    elif pool is not None and not isinstance(pool, (HierMem, ZeroInfinity, AstraSimRemote)):
        raise UserError(f"pool must be a pool file's path, a HierMem, a ZeroInfinity or an AstraSimRemote, got "
                        f"{type(pool).__name__}")
    if isinstance(pool, AstraSimRemote):   # a per-NPU memory or one pool: for every NPU of this run
        pool = pool.for_npus(topo.npus)
        if pool.memory_type == "none":
            return latency, pool
    if pool is not None and pool.gpus != topo.npus:
        where = f"pool file {os.fspath(pool_path)}: " if pool_path is not None else "pool: "
        sizes = "num-nodes x num-npus-per-node" if isinstance(pool, AstraSimRemote) else "nodes x gpus_per_node"
        raise UserError(f"{where}{sizes} is {pool.nodes} x {pool.gpus_per_node} = {pool.gpus} GPUs but "
                        f"{topo.name} has {topo.npus} NPUs")
    return latency, pool


def _switching(switching, backend: str) -> str:
    """How the congestion backend forwards a message (runtime/congestion.SWITCHING); only it has a choice."""
    from ...runtime.congestion import SWITCHING
    if switching not in SWITCHING:
        raise UserError(f"switching must be one of {', '.join(SWITCHING)}, got {switching!r}")
    if switching != SWITCHING[0] and backend != "congestion":
        raise UserError(f"switching {switching} applies to the congestion backend, not {backend}")
    return switching


def _local_mem(gbps) -> float | None:
    from ...network.memory import check_local_mem_gbps
    return None if gbps is None else check_local_mem_gbps(gbps, "local_mem_gbps (--local-mem-bw)")


def _semantics(step: StepOptions) -> StepSemantics:
    """A step's semantics (its name checked), with an ASTRA-sim network file's link bandwidths."""
    if step.semantics not in SEMANTICS:
        raise UserError(f"--step-semantics must be one of {', '.join(SEMANTICS)}, got {step.semantics!r}")
    return StepSemantics(step.semantics, step.astra_link_gbps)


def _check_roofline(peak_tflops, mem_bw_gbps) -> None:
    from ...network.units import check_roofline
    check_roofline(peak_tflops, mem_bw_gbps)


def _lowered(workload: Workload, topo: Topology) -> Lowered:
    """The workload lowered for `topo`; in a sweep, once per captured workload and topology (a sweep over the
    compute roofline lowers the step once, not once per point)."""
    shared = reuse.current()
    held = shared.digest_of(workload) if shared is not None else None
    if held is None:
        return lower(workload, topo)
    return shared.memo("lowered", [held, topo.to_dict()], lambda: lower(workload, topo))
