"""The one configuration of a run: a frozen, typed `Job`, built by the command line (`from_options`, from its parsed
options), by the Python API (`api.compile(source, job=..., **overrides)`), by an ASTRA-sim system file (its reader,
interop/astra_system.py, returns option values this module takes) and by a sweep (one Job per point), and the only
configuration that crosses the stages after them.

    Job
      inputs, system        what is compiled (paths), and the ASTRA-sim system file that filled options
      collective            --collective/--size/--dims/--root: one collective to compile
      network   Network     the topology and what overrides its bandwidth, latency, links, endpoint delay; a cluster
      compile   CompileOptions  scheduler, algorithm, chunks, all-reduce split, ports, pass pipeline
      run       RunOptions  how the tables execute (backend, execution, intra, ...): the runtime takes it as is
      step      StepOptions a training step: mesh, capture limit, roofline, memories, step semantics, ...
      outputs   Outputs     what the run writes or prints (--emit, -o, --json, --timeline, ...)

Each group is a frozen dataclass; change one with `dataclasses.replace` (`Job.replace(group, **fields)` for a
field of a group). A later kind of configuration is one more group: a frozen
dataclass, a field of Job with its default, and its command-line options in OPTIONS.

A value holds what the run uses: a count as an int, a size in bytes. The command line's text for an option is read
into that form where it can be read (`from_options`); text that cannot be read is kept as given, so that the stage
that reads the option refuses it with the command's own line, at the point in the run where the command always has
(the order of the refusals is the command's, whatever else is wrong).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...network.errors import UserError
from ...runtime.run_record import FASTEST_CHUNKS   # noqa: F401  (the --chunks value every layer names from here)

DEFAULT_CAPTURE_LIMIT = 600.0   # CPU seconds a model file may take to load and capture (--capture-limit)


def _engine():
    """runtime/workload_engine (the step semantics' names, the roofline's defaults), imported when a StepOptions is
    made, not with this module: the command line's parser imports this module before its Ctrl-C handler is set,
    and the engine's numpy takes a tenth of a second to load."""
    from ...runtime import workload_engine
    return workload_engine


@dataclass(frozen=True)
class Network:
    """The network: `topology` (a notation, an ASTRA-sim network file or a graph, as text, or a parsed
    network.topology.Topology) and what overrides it per dimension (text as typed, e.g. "50,50", or numbers)."""
    topology: object = None
    bandwidth: object = None       # GB/s per dimension
    latency: object = None         # ns per hop per dimension
    links: object = None           # links per dimension
    endpoint_delay: object = None  # ns every message spends at its endpoints
    # --cluster: "NAME:NODES" as typed, or the network/clusters.Cluster it names (with_cluster: it fills the
    # topology, bandwidth, latency and the GPU where they are not given)
    cluster: object = None


@dataclass(frozen=True)
class Collective:
    """One collective to compile (--collective; a .mlir module as input holds its own): as typed, checked against
    the topology when the module is built."""
    kind: str | None = None        # all_reduce, reduce_scatter, ...
    size: str | None = None        # full buffer, e.g. "1GB"
    dims: str | None = None        # topology dimensions of its groups, e.g. "0,1" (None: all)
    root: str | None = None        # a broadcast's or reduce's root NPU


@dataclass(frozen=True)
class CompileOptions:
    """How collectives are compiled (the pass pipeline's options)."""
    scheduler: str | None = None   # baseline | themis | optimal; None: optimal (a .mlir module keeps its own)
    algorithm: str | None = None   # one, or one per dimension, comma-separated; None: each block's own
    # chunks per collective, or FASTEST_CHUNKS; None: 1 (or what a module's collectives carry), and with a
    # --cluster FASTEST_CHUNKS
    chunks: int | str | None = None
    all_reduce: str | None = None  # hierarchical | per-dimension; None: hierarchical
    ports: int | None = None       # multitree's injection ports
    pass_pipeline: str | None = None
    print_ir_after_all: bool = False
    mlir_timing: bool = False
    compare: bool = False          # every scheduler side by side


@dataclass(frozen=True)
class RunOptions:
    """How the runtime executes the tables (one interface for both backends; the runtime takes this object)."""
    backend: str = "analytical"      # analytical | congestion
    execution: str = "auto"          # auto | symmetric | full
    intra: str = "scf"               # fifo | scf
    active_chunks: int = 1
    switching: str = "cut-through"   # congestion backend: cut-through | store-and-forward
    timeline: bool = False           # keep every link transfer (congestion backend, full execution)
    max_memory: int | None = None    # refuse a run estimated to need more bytes (None: this machine's memory)
    local_mem_gbps: float | None = None  # ASTRA-sim's local-mem-bw: reductions cost local memory time (None: off)
    verify: bool = False             # also execute the schedule on data and check every NPU's result


@dataclass(frozen=True)
class StepOptions:
    """A training step (a model file, execution traces, a workload module or a step directory)."""
    mesh: object = None              # "dp=8,tp=8" or {"dp": 8, "tp": 8}; None: the file's, else dp over all
    # CPU seconds a model file may take to load and capture (None: no limit)
    capture_limit: float | None = DEFAULT_CAPTURE_LIMIT
    cache: str | None = None         # a directory keeping captured steps and compiled collectives
    iteration: int | None = None     # a trace of several iterations: time this one alone
    semantics: str = field(default_factory=lambda: _engine().STREAMS)   # streams | astra-sim
    astra_link_gbps: tuple | None = None  # astra-sim semantics: an ASTRA-sim network file's per-link bandwidths
    peak_tflops: float = field(default_factory=lambda: _engine().Roofline.peak_tflops)
    mem_bw_gbps: float = field(default_factory=lambda: _engine().Roofline.mem_gbps)
    mem_latency_ns: float = 0.0
    # --gpu: a preset's name or a device file's path as typed, or the network/devices.Device it names (with_gpu)
    gpu: object = None
    pool: object = None              # a pool file's path or a network/memory_pool object
    offload: object = None           # "params,grads,optimizer" or a tuple of them
    in_switch: bool = False
    op_times: str | None = None      # --op-times: a GPU profile whose measured op times the step's ops take
    rank: int = 0                    # whose step the report shows
    keep_tables: bool = False        # keep each collective's schedule (the step's tables)
    # an nn.Module given to the API: what the model file convention's functions would give
    example_inputs: object = None
    parallelize: object = None
    loss: object = None
    optimizer: object = None


@dataclass(frozen=True)
class Outputs:
    """What a run writes or prints."""
    emit: str = "report"             # report | mlir | tables | msccl-xml | chakra
    output: str | None = None        # -o: a file or a directory
    npu: str | None = None           # --emit tables: print this accelerator's table (as typed)
    table_format: str = "csv"
    table_view: str = "rows"
    json: bool = False
    timeline: str | None = None      # a Chrome trace file
    plot: str | None = None          # an image file
    force: bool = False
    list_passes: bool = False


@dataclass(frozen=True)
class Job:
    inputs: tuple = ()               # paths: a model file, traces, a .mlir module, a table or step directory
    system: str | None = None        # the ASTRA-sim system file that filled options (blamed in messages)
    collective: Collective = field(default_factory=Collective)
    network: Network = field(default_factory=Network)
    compile: CompileOptions = field(default_factory=CompileOptions)
    run: RunOptions = field(default_factory=RunOptions)
    step: StepOptions = field(default_factory=StepOptions)
    outputs: Outputs = field(default_factory=Outputs)

    def replace(self, group: str, **changes) -> "Job":
        """This Job with fields of one group changed (`group` None: the Job's own fields)."""
        if group is None:
            return dataclasses.replace(self, **changes)
        return dataclasses.replace(self, **{group: dataclasses.replace(getattr(self, group), **changes)})

    def option(self, dest: str):
        """The value of a command-line option (its argparse dest, OPTIONS), as this Job holds it."""
        group, name = OPTIONS[dest]
        return getattr(self if group is None else getattr(self, group), name)

    def with_options(self, values: dict) -> "Job":
        """This Job with command-line options set (dest -> value, as parsed: text as typed), each read into the
        Job's form where it can be read (the module docstring)."""
        changes: dict = {}
        for dest, value in values.items():
            group, name = OPTIONS[dest]
            changes.setdefault(group, {})[name] = _read(dest, value)
        out = self
        for group, fields in changes.items():
            out = out.replace(group, **fields)
        return out


# command-line option (argparse dest) -> (group, field) of the Job; astra_link_gbps is no option (an ASTRA-sim
# network file's per-link bandwidths, which the system file reader sets: astra_system.py)
OPTIONS = {
    "input": (None, "inputs"), "system": (None, "system"),
    "collective": ("collective", "kind"), "size": ("collective", "size"), "dims": ("collective", "dims"),
    "root": ("collective", "root"),
    **{k: ("network", k) for k in ("topology", "bandwidth", "latency", "links", "endpoint_delay", "cluster")},
    **{k: ("compile", k) for k in ("scheduler", "algorithm", "chunks", "all_reduce", "ports", "pass_pipeline",
                                   "print_ir_after_all", "mlir_timing", "compare")},
    **{k: ("run", k) for k in ("backend", "execution", "intra", "active_chunks", "switching", "max_memory",
                               "verify")},
    "local_mem_bw": ("run", "local_mem_gbps"),
    **{k: ("step", k) for k in ("mesh", "capture_limit", "cache", "iteration", "peak_tflops", "pool", "offload",
                                "in_switch", "astra_link_gbps", "op_times")},
    "step_semantics": ("step", "semantics"), "mem_bw": ("step", "mem_bw_gbps"),
    "mem_latency": ("step", "mem_latency_ns"), "gpu": ("step", "gpu"),
    **{k: ("outputs", k) for k in ("emit", "output", "npu", "table_format", "table_view", "json", "timeline", "plot",
                                   "force", "list_passes")},
}
COUNTS = ("chunks", "ports", "active_chunks")



def from_options(values: dict) -> Job:
    """The Job of a command line's parsed options (argparse dest -> value; those not in OPTIONS, such as
    --version's, are the parser's own)."""
    return Job().with_options({k: v for k, v in values.items() if k in OPTIONS})


def with_cluster(job: Job, gpu_applies: bool = True) -> Job:
    """The job with its --cluster read (network/clusters.py; one UserError when it names none): network.cluster
    the Cluster, and what it sets where the job does not give it: the topology, and with the cluster's topology
    its bandwidth and latency per dimension (a --bandwidth or --latency given replaces the cluster's, as on any
    topology); step.gpu the node's GPU preset where `gpu_applies` (not on a lone collective, which has no compute).
    Run before with_gpu, which reads that preset. A job without --cluster is returned as is; so is one read twice."""
    if job.network.cluster is None:
        return job
    from ...network.clusters import resolve
    cluster = resolve(job.network.cluster)
    net = job.network
    if not gpu_applies and cluster.gpus == 1 and net.topology is None:   # a lone collective over one GPU
        raise UserError(f"--cluster {cluster.name}:1x1: one GPU, over which a collective moves nothing; give 2 GPUs "
                        "or more (docs/clusters.md)")
    changes = {"cluster": cluster}
    if net.topology is None:
        changes.update(topology=cluster.topology(),
                       **({"bandwidth": cluster.bandwidth()} if net.bandwidth is None else {}),
                       **({"latency": cluster.latency()} if net.latency is None else {}))
    job = job.replace("network", **changes)
    return job.replace("step", gpu=cluster.gpu) if gpu_applies and job.step.gpu is None else job


def with_gpu(job: Job, given) -> Job:
    """The job with its --gpu read: step.gpu the Device it names (a preset or a device file; one UserError when it
    names neither), and the roofline's peak_tflops (fp32's) and mem_bw_gbps the device's, unless given (`given`:
    the StepOptions fields set explicitly, "peak_tflops" and "mem_bw_gbps": they override the device's fp32 peak
    and bandwidth; docs/compute.md). A job without --gpu, or whose device is read already, is returned as is."""
    gpu = job.step.gpu
    from ...network.devices import Device, resolve
    if gpu is None or isinstance(gpu, Device):
        return job
    device = resolve(gpu)
    changes = {"gpu": device}
    if "peak_tflops" not in given:
        changes["peak_tflops"] = device.peak("fp32")
    if "mem_bw_gbps" not in given:
        changes["mem_bw_gbps"] = device.mem_gbps
    return job.replace("step", **changes)


def roofline(step: StepOptions):
    """The step's compute roofline: one peak for every dtype (peak_tflops), or with a --gpu device read
    (with_gpu) the device's peak per dtype, fp32's being peak_tflops, and its compute model."""
    engine = _engine()
    peaks, model = None, None
    if step.gpu is not None:
        from ...network.dtypes import FP32
        peaks = tuple(step.peak_tflops if code == FP32 else p for code, p in enumerate(step.gpu.peak_tflops))
        model = step.gpu.compute_model()
    return engine.Roofline(step.peak_tflops, step.mem_bw_gbps, peaks, model)


def _read(dest: str, value):
    """A command-line option's value in the Job's form; text that does not read is kept as typed (refused later by
    the stage that reads it, with the command's message)."""
    if dest in COUNTS and isinstance(value, str):
        try:   # only a count written plainly: "08" stays as typed, as messages quote it
            return int(value) if str(int(value)) == value else value
        except ValueError:
            return value
    if dest == "max_memory" and isinstance(value, str):
        from ...network.units import parse_size
        try:
            return parse_size(value)
        except UserError:
            return value
    if dest == "input":
        return tuple(value or ())
    if dest == "step_semantics" and value is None:
        return _engine().STREAMS
    if dest == "astra_link_gbps" and value is not None:
        return tuple(value)
    return value
