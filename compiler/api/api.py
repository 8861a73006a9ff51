"""The Python API for profiling flows: `astra_compile.compile(model_or_trace, topology=...)` -> WorkloadReport.

    import astra_compile
    report = astra_compile.compile("examples/mlp_dp.py", topology="8x8_torus")
    report.total_time_us, report.exposed_comm_time_us, report.collectives, report.mlir

The CLI (`astra-compile model.py --topology ...`) is a thin layer over this function.
"""
from __future__ import annotations

import inspect
import os
import sys
from types import ModuleType

from ..driver import driver, recorded_run
from ..core import reuse
from ...network.errors import UserError
from ..frontend.cpu_limit import DEFAULT_SECONDS as DEFAULT_CAPTURE_LIMIT
from ..frontend import readers
from ..frontend.workload import Workload
from ...runtime.workload_engine import SEMANTICS, Roofline
from ...network.parse import parse_topology, with_endpoint_delay
from ...network.topology import Topology
from ..driver.workload_driver import (Lowered, StepSemantics, WorkloadOptions, emitted, lower, read_lowered, run,
                                      runner)
from ..core.step_keys import group_key
from ..report.step_timeline import step_trace
from ..report.workload_report import WorkloadReport, make_report


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


def compile(source, topology: str | Topology = "8x8_torus", *, bandwidth=None, latency=None, links=None,
            endpoint_delay=None,
            mesh: str | dict | None = None, scheduler: str = driver.DEFAULT_SCHEDULER, chunks: int | None = None,
            algorithm: str | None = None, all_reduce: str | None = None, backend: str = "analytical",
            switching: str = "cut-through", intra: str = driver.DEFAULT_INTRA,
            peak_tflops: float = Roofline.peak_tflops, mem_bw_gbps: float = Roofline.mem_gbps,
            rank: int = 0, max_memory: int | None = None,
            capture_limit: float | None = DEFAULT_CAPTURE_LIMIT, example_inputs=None, parallelize=None,
            loss=None, optimizer=None, iteration: int | None = None, keep_tables: bool = False,
            local_mem_gbps: float | None = None, mem_latency_ns: float = 0.0, pool=None, offload=None,
            in_switch: bool = False, step_semantics: str | StepSemantics = "streams",
            use_recorded: bool = True) -> WorkloadReport:
    """Capture (or import) one training step, compile its collectives for `topology` and time the step.

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
    sends, its network view of messages and sub-world groups; docs/astra-sim.md). A step table directory or workload module records the run options that shaped the
    figure of the run that wrote it (docs/tables.md, "Recorded run options"): with `use_recorded` (the default)
    each of these parameters left at its default takes the recorded value; False takes every parameter as given."""
    read_as = readers.kind_of([source]) if isinstance(source, (str, os.PathLike)) else None
    # a .mlir is read as a workload module, which refuses a comm module: this API times training steps
    step_module = read_as in (readers.WORKLOAD_MODULE, readers.COMM_MODULE)
    if read_as == readers.STEP_TABLES:
        return _compile_step_dir(os.fspath(source), topology, backend, intra, peak_tflops, mem_bw_gbps, max_memory,
                                 rank, local_mem_gbps, mem_latency_ns, pool, switching, step_semantics, use_recorded)
    if topology is None and not step_module:
        raise UserError("a topology is required (a workload .mlir module names its own)")
    if topology is None and any(v is not None for v in (bandwidth, latency, links)):
        raise UserError("--bandwidth/--latency/--links need --topology")
    topo = topology if isinstance(topology, Topology) or topology is None else \
        parse_topology(topology, bandwidth, latency, links)
    topo = topo and with_endpoint_delay(topo, endpoint_delay)
    if mesh is not None:
        from ..frontend.mesh import check_axes, parse_mesh
        mesh = parse_mesh(mesh) if isinstance(mesh, str) else check_axes(mesh)
    _check_roofline(peak_tflops, mem_bw_gbps)
    step = _semantics(step_semantics)
    if step_module:  # written by --emit mlir: already lowered, with its topology, source and mesh
        if mesh or iteration is not None or offload or in_switch or \
                any(v is not None for v in (example_inputs, parallelize, loss, optimizer)):
            raise UserError(f"{os.fspath(source)}: a workload module is already captured and lowered: mesh, "
                            "iteration, offload and the nn.Module options do not apply")
        lowered, topo, recorded = read_lowered(os.fspath(source), topo, endpoint_delay)
        if use_recorded and recorded["run"]:
            (backend, intra, switching, local_mem_gbps, peak_tflops, mem_bw_gbps, mem_latency_ns, step_semantics,
             pool, scheduler, chunks, algorithm, all_reduce) = _with_recorded(recorded["run"], dict(
                backend=backend, intra=intra, switching=switching, local_mem_gbps=local_mem_gbps,
                peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps, mem_latency_ns=mem_latency_ns,
                step_semantics=step_semantics, pool=pool, scheduler=scheduler, chunks=chunks, algorithm=algorithm,
                all_reduce=all_reduce)).values()
            step = _semantics(step_semantics)
    elif _is_module(source):
        from ..frontend.module_object import model_file_from_object
        source = model_file_from_object(source, example_inputs, parallelize, loss, optimizer)
    elif any(v is not None for v in (example_inputs, parallelize, loss, optimizer)):
        raise UserError("example_inputs, parallelize, loss and optimizer go with an nn.Module source; a model file "
                        "defines them itself")
    if not step_module:
        workload = load_workload(source, topo.npus, mesh, capture_limit, topo, max_memory)
        if iteration is not None:
            workload = workload.only_iteration(iteration)
        from ..frontend.offload import host_states, offload as place, parse_states
        states = parse_states(",".join(offload) if isinstance(offload, (tuple, list)) else offload)
        states, at_states = host_states(workload, states, pool)
        workload = place(workload, states, in_switch, at_states)
        lowered = _lowered(workload, topo)
        recorded = {"source": workload.source, "mesh": ",".join(f"{k}={v}" for k, v in workload.mesh.items()),
                    **({"placement": workload.placement} if workload.placement else {})}
    defaults = {k: v for k, v in (("chunks", chunks), ("algorithm", algorithm), ("all_reduce", all_reduce))
                if v is not None}
    run_opts = driver.RunOptions(backend=backend, intra=intra, switching=_switching(switching, backend),
                                 max_memory=max_memory, local_mem_gbps=_local_mem(local_mem_gbps))
    opts = WorkloadOptions(scheduler, defaults, run_opts, Roofline(peak_tflops, mem_bw_gbps), keep_tables,
                           *_memory(mem_latency_ns, pool, topo), step=step)
    report, times = _timed(lowered, topo, opts, None, recorded | {"scheduler": scheduler}, rank)
    if not step_module:
        from ..interop import chakra_write

        def collective_ns(op, group) -> float:   # a broadcast's time, which ASTRA-sim replays
            took = times.get(group_key(topo, op.collective, op.bytes, group, op.root)) if len(group) > 1 else None
            return took.time_ns if took is not None else 0.0
        report.chakra = lambda out_dir, force=False: chakra_write.write(workload, topo, out_dir, force,
                                                                        roofline=opts.roofline,
                                                                        collective_ns=collective_ns)
    return report


def _timed(lowered: Lowered, topo: Topology, opts: WorkloadOptions, times, recorded: dict, rank: int):
    """The step's report, and each collective's time (workload_driver.CollectiveTimes)."""
    result, times = run(lowered, topo, opts, times)
    program = rank   # the program rank `rank` runs: in an SPMD step, the one that stands for it
    if 0 <= rank < topo.npus:
        runs = runner(lowered.programs, lowered.spmd)
        program = lowered.programs[0].rank if runs is None else runs.get(rank, rank)
    if program not in result.ranks:
        raise UserError(f"rank {rank} is not among the workload's programs ({sorted(result.ranks)})")
    info = {"source": recorded["source"], "topology": topo.name, "npus": topo.npus, "mesh": recorded["mesh"],
            **({"placement": recorded["placement"]} if recorded.get("placement") else {}),
            "backend": opts.run.backend, "scheduler": recorded["scheduler"], "peak_tflops": opts.roofline.peak_tflops,
            **({"switching": opts.run.switching} if opts.run.backend == "congestion" else {}),
            "mem_bw_gbps": opts.roofline.mem_gbps, "mem_latency_ns": opts.mem_latency_ns, "rank": rank,
            **({"pool": opts.pool.describe()} if opts.pool is not None else {}),
            **({"endpoint_delay_ns": topo.endpoint_delay_ns} if topo.endpoint_delay_ns else {})}
    report = make_report(info, result, times, lowered.programs, program)
    # printed when asked, with the options its collectives are compiled and the step is timed with again
    report.module_text = lambda: emitted(lowered, times, recorded_run.of_module(opts))
    report.collective_keys = tuple(times)
    report.timeline = lambda: step_trace(result, lowered.programs, times, info)
    if opts.keep_schedules:
        from ..interop import step_dir
        report.step_tables = lambda fmt: step_dir.build(lowered, times, info | {"topology_dict": topo.to_dict(),
                                                                                "run": recorded_run.of_step(opts)}, fmt)
    return report, times


def _compile_step_dir(path: str, topology, backend: str, intra: str, peak_tflops: float, mem_bw_gbps: float,
                      max_memory: int | None, rank: int, local_mem_gbps: float | None = None,
                      mem_latency_ns: float = 0.0, pool=None, switching: str = "cut-through",
                      step_semantics="streams", use_recorded: bool = True) -> WorkloadReport:
    """A step table directory (--emit tables -o DIR): its collectives' tables executed on `backend`, then the step;
    the run options it records stand in for those left at their defaults (`use_recorded`)."""
    from ..interop import step_dir
    if topology is not None:
        raise UserError(f"{path}: a step table directory runs on the topology it was compiled for (meta.json); "
                        "give no topology")
    record, where = recorded_run.of_input("step tables", path)
    if use_recorded and record:
        (backend, intra, switching, local_mem_gbps, peak_tflops, mem_bw_gbps, mem_latency_ns, step_semantics,
         pool) = _with_recorded(record, dict(
            backend=backend, intra=intra, switching=switching, local_mem_gbps=local_mem_gbps, peak_tflops=peak_tflops,
            mem_bw_gbps=mem_bw_gbps, mem_latency_ns=mem_latency_ns, step_semantics=step_semantics,
            pool=pool)).values()
    step, written = _semantics(step_semantics), _recorded_semantics(record)
    if step != written and where:   # its collectives' schedules are what they were compiled as under them
        said = "records them" if "step_semantics" in record else "records none: streams"
        raise UserError(f"{path}: the step was compiled under step semantics {written.name} (its meta.json {said}); "
                        f"it re-runs under them, not {step.name}" +
                        (" with other link bandwidths" if step.name == written.name else "") +
                        ": compile the model file, traces or step.mlir again for other semantics")
    _check_roofline(peak_tflops, mem_bw_gbps)
    run_opts = driver.RunOptions(backend=backend, intra=intra, switching=_switching(switching, backend),
                                 max_memory=max_memory, local_mem_gbps=_local_mem(local_mem_gbps))
    lowered, topo, recorded, times, step_tables = step_dir.load(path, run_opts, step)
    opts = WorkloadOptions(recorded["scheduler"], {}, run_opts, Roofline(peak_tflops, mem_bw_gbps), False,
                           *_memory(mem_latency_ns, pool, topo), step=step)
    report, _ = _timed(lowered, topo, opts, times, recorded, rank)
    report.step_tables = lambda fmt: step_tables
    return report


def _with_recorded(record: dict, values: dict) -> dict:
    """`values` (compile()'s parameters by name, in order) with each one left at its default taking the value the
    step directory or workload module records (recorded_run.py; a record's astra_link_gbps goes with its
    step_semantics)."""
    defaults = inspect.signature(compile).parameters
    out = dict(values)
    for name, value in values.items():
        if name == "step_semantics":
            if "step_semantics" in record and _semantics(value) == StepSemantics():
                out[name] = _recorded_semantics(record)
        elif name in record and value == defaults[name].default:
            out[name] = record[name]
    return out


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


def _semantics(step) -> StepSemantics:
    if isinstance(step, StepSemantics):
        return step
    if step not in SEMANTICS:
        raise UserError(f"--step-semantics must be one of {', '.join(SEMANTICS)}, got {step!r}")
    return StepSemantics(step)


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
