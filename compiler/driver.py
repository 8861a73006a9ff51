"""The compiler driver: build or read a comm module, run the pass pipeline, lower it to tables, execute them.

The CLI (cli.py) is a thin layer over these functions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import algorithms
from .dialects import comm
from .network.errors import UserError
from .lower import Schedule
from .plans import plans_from_module
from .passes import DEFAULT_PIPELINE, PassContext, PassManager, parse_pipeline
from .network.topology import Topology
from .network.units import MAX_BYTES, format_size, gbps_to_bytes_per_ns


SUPPORTED = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


@dataclass
class Compiled:
    module: object
    schedule: Schedule
    result: object        # the analytical runtime's Result
    report: dict


def build_module(ctx, topology: Topology, collective: str, nbytes: int, dims: list[int] | None = None):
    """A module holding one collective over `dims` (default: every dimension) of `topology`."""
    if collective not in SUPPORTED:
        raise UserError(f"unknown collective '{collective}'; expected one of {', '.join(SUPPORTED)}")
    if nbytes <= 0:
        raise UserError(f"collective size must be positive, got {nbytes} bytes")
    if nbytes > MAX_BYTES:
        raise UserError(f"collective size {format_size(nbytes)} exceeds the largest collective astra-compile takes, "
                        f"{format_size(MAX_BYTES)}")
    dims = list(range(topology.ndims)) if dims is None else dims
    module = comm.new_module(ctx)
    with ctx, comm.ir.Location.unknown():
        comm.set_topology(module, topology.to_dict())
        comm.create(collective, {"bytes": int(nbytes), "dims": dims, "name": collective},
                    ip=comm.ir.InsertionPoint(module.body))
    comm.verify_module(module, list(topology.shape))
    return module


def read_module(ctx, path: str):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text (a binary file?); expected a .mlir comm module") from None
    return comm.parse_module(text, ctx, source=path)


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
    "baseline": DEFAULT_PIPELINE,                # every chunk: RS dims ascending, AG descending (ASTRA-sim baseline)
    "themis": DEFAULT_PIPELINE + ",themis",      # per-chunk order, least-loaded dimension first
    # CP-SAT split of chunks over orders, then timed against Themis's on the cost model; the faster is kept
    "optimal": DEFAULT_PIPELINE + ",optimal-balance,choose-schedule",
}
DEFAULT_SCHEDULER, DEFAULT_INTRA = "optimal", "scf"
# whole-network algorithms (network and ranks scope, algorithms/) schedule one phase over every dimension: no
# per-dimension phases, no dimension orders
FLAT_PIPELINE = "decompose-all-reduce,chunk,flat-decompose,select-algorithm{{algorithm={}}}"


@dataclass
class RunOptions:
    """How the runtime executes the tables (one interface for both backends)."""
    backend: str = "analytical"      # analytical | congestion
    execution: str = "auto"          # auto | symmetric | full
    intra: str = "scf"               # fifo | scf
    active_chunks: int = 1
    switching: str = "cut-through"   # congestion backend: cut-through | store-and-forward
    timeline: bool = False           # keep every link transfer (congestion backend, full execution)


def execute(schedule: Schedule, run: RunOptions):
    """Run the tables on the chosen backend; both return a runtime.phases.Result."""
    from .runtime.phases import OptionError
    if run.backend == "analytical":
        from .runtime import analytical
        try:
            return analytical.run(schedule, run.execution, run.intra, run.active_chunks)
        except OptionError as e:
            raise UserError(str(e)) from None
    if run.backend == "congestion":
        from .runtime import congestion
        mode = "full" if run.timeline else run.execution
        try:
            return congestion.run(schedule, run.intra, run.active_chunks, run.timeline, run.switching, mode)
        except OptionError as e:
            raise UserError(str(e)) from None
    raise UserError(f"unknown backend '{run.backend}' (analytical or congestion)")


def compile_schedule(source: str, ctx, topology: Topology, scheduler: str, defaults: dict,
                     run: RunOptions | None = None, print_ir: bool = False, pipeline: str | None = None,
                     timing: bool = False) -> Compiled:
    """Compile the module text with a scheduler's pipeline (or an explicit one), lower and time it.

    `optimal` never loses to Themis: its choose-schedule pass times both on this run's cost model and keeps the
    faster, recording the choice in the module; the report repeats it (`optimal_choice`)."""
    run = run or RunOptions()
    # the ordering passes weigh a step's latency by how many chunks share the dimension in the runtime
    defaults = {"active": run.active_chunks, **defaults}
    timed: dict = {}  # module body text -> (schedule, result): a schedule choose-schedule timed is not run again

    def evaluate(module) -> float:
        key = _body(module)
        if key not in timed:
            schedule = lower(module, topology)
            timed[key] = (schedule, execute(schedule, run))
        return timed[key][1].total_ns

    def one(pipe, label, print_ir=False):
        module = comm.parse_module(source, ctx)
        run_passes(module, topology, pipe, defaults, print_ir, evaluate, timing)
        evaluate(module)
        schedule, result = timed[_body(module)]
        report = make_report(schedule, result, label, run)
        choice = comm.schedule_choice(module)
        if choice is not None:
            report.update(optimal_choice=choice["schedule"], themis_time_us=choice["themis_time_ns"] / 1e3,
                          cp_sat_time_us=choice["cp_sat_time_ns"] / 1e3)
        return Compiled(module, schedule, result, report)

    if pipeline is not None:
        return one(pipeline, "custom pipeline", print_ir)
    name = algorithms.canonical(str(defaults.get("algorithm", "")))  # None for a per-dimension list
    if name is not None and algorithms.REGISTRY[name].scope != algorithms.DIMENSION:
        alg = algorithms.REGISTRY[name]
        pipeline = FLAT_PIPELINE.format(alg.phase_name) + (f",{alg.planned_by}" if alg.planned_by else "")
        return one(pipeline, alg.label, print_ir)
    return one(SCHEDULERS[scheduler], scheduler, print_ir)


def _body(module) -> str:
    """The module's ops as text (its attributes aside: the decisions recorded there do not change the tables)."""
    return "\n".join(str(op) for op in module.body.operations)


def run_passes(module, topology: Topology, pipeline: str | None = None, flags: dict | None = None,
               print_ir: bool = False, evaluate=None, timing: bool = False) -> None:
    """Run a pipeline on the module. `flags` (command-line values: chunks, algorithm, ports, active) fill the options
    the pipeline's passes have and leave unset, so --pass-pipeline 'chunk' --chunks 8 chunks in 8."""
    comm.verify_module(module, list(topology.shape))
    passes = [p.with_unset(flags or {}) for p in parse_pipeline(pipeline if pipeline is not None else
                                                                DEFAULT_PIPELINE)]
    PassManager(passes).run(module, PassContext(topology, evaluate), print_ir, timing)


def lower(module, topology: Topology) -> Schedule:
    return Schedule(topology, plans_from_module(module))


# ---- report ---------------------------------------------------------------------------------------------------

def lower_bound_bytes(kind: str, nbytes: int, group: int) -> float:
    """Bytes each NPU must send at least (the numerator of the ideal time in seed 000)."""
    if kind == "all_reduce":
        return 2 * (group - 1) / group * nbytes
    return (group - 1) / group * nbytes


def ideal_time_ns(schedule: Schedule) -> tuple[float, float, float]:
    """(ideal ns, lower-bound bytes per NPU, bandwidth GB/s) summed over the schedule's buffers, run one after
    another; ideal = bytes each NPU must send / the sum of its link bandwidths in the group's dimensions."""
    topo = schedule.topology
    seen, total_ns, total_bytes, bw = set(), 0.0, 0.0, 0.0
    for p in schedule.plans:
        if p.buffer in seen:
            continue
        seen.add(p.buffer)
        group = 1
        for d in p.group_dims:
            group *= topo.dims[d].size
        gbps = sum(topo.dims[d].effective_gbps for d in p.group_dims)
        nb = lower_bound_bytes(p.buffer_kind, p.bytes, group)
        total_ns += nb / gbps_to_bytes_per_ns(gbps)
        total_bytes += nb
        bw = max(bw, gbps)
    return total_ns, total_bytes, bw


def link_summary(result, top: int = 8) -> dict:
    """Per-link busy time and traffic (congestion backend): the busiest links and the mean per dimension."""
    links = result.links
    if not links:
        return {}
    total = result.total_ns or 1.0
    busy = np.asarray(links["busy_ns"], dtype=float)
    dims = np.asarray(links["dim"])
    order = np.argsort(-busy, kind="stable")[:top]
    return {
        "links": len(busy),
        # link transfers simulated, and those they stand for (symmetric execution: every link of the network)
        "transfers": dict(result.link_transfers),
        "busiest": [{"link": links["name"][i], "busy_us": busy[i] / 1e3, "utilization": busy[i] / total,
                     "bytes": int(links["bytes"][i])} for i in order],
        "mean_utilization_per_dim": {int(d): float(busy[dims == d].mean() / total) for d in np.unique(dims)},
    }


def capacity_bound_ns(topology: Topology, per_dim_bytes) -> float:
    """The time the busiest NPU needs at least to push what it sends in a dimension through its links there (their
    bandwidths sum to the dimension's per-NPU bandwidth). No cost model may beat it; the analytical one does when
    an NPU's concurrent messages each take a whole link (direct, trees), as ASTRA-sim's congestion-unaware
    backend does."""
    return max((nbytes / gbps_to_bytes_per_ns(topology.dims[d].effective_gbps) for d, nbytes in enumerate(per_dim_bytes)),
               default=0.0)


def physics_note(r: dict) -> str | None:
    """One line when a report's time beats what the links can carry (never a utilisation above 100 % without it)."""
    if not r["exceeds_link_capacity"]:
        return None
    fix = ("--backend congestion makes them share it" if r["backend"] == "analytical" else
           "this is a defect of the congestion model: please report it")
    return (f"note: {r['total_time_us']:.3f} us beats the link-capacity bound of {r['capacity_bound_us']:.3f} us: "
            f"the {r['backend']} backend lets each of an NPU's concurrent messages use a whole link (as ASTRA-sim's "
            f"congestion-unaware backend does); {fix}")


def make_report(schedule: Schedule, result, scheduler: str = "baseline", run: RunOptions | None = None) -> dict:
    run = run or RunOptions(intra="fifo")
    topo = schedule.topology
    ideal_ns, ideal_bytes, bw = ideal_time_ns(schedule)
    total_us = result.total_ns / 1e3
    # no schedule can beat either bound: the ideal (the fewest bytes over all links) or its own traffic per link
    bound_ns = max(capacity_bound_ns(topo, result.per_dim_bytes), ideal_ns)
    exceeds = result.total_ns < bound_ns * (1 - 1e-9)  # a relative margin: float sums may differ in the last bits
    algos = [sorted({s.algorithm for p in schedule.plans for s in p.stages if s.dim in (d, -1)})
             for d in range(topo.ndims)]
    colls = []
    for p in schedule.plans:
        colls.append({"name": p.name, "kind": p.kind, "buffer": p.buffer, "buffer_kind": p.buffer_kind,
                      "bytes": p.bytes, "chunks": p.chunks, "dims": p.group_dims,
                      "stages": [{"kind": s.kind, "dim": s.dim, "algorithm": s.algorithm} for s in p.stages],
                      "end_us": result.collective_end_ns[p.index] / 1e3})
    return {
        "topology": topo.name, "npus": topo.npus, "backend": result.backend, "execution": result.mode,
        "scheduler": scheduler, "intra": run.intra, "active_chunks": run.active_chunks,
        **({"switching": run.switching, "link_utilization": link_summary(result)}
           if result.backend == "congestion" else {}),
        "total_time_us": total_us, "ideal_time_us": ideal_ns / 1e3,
        "bw_utilization": (ideal_ns / result.total_ns) if result.total_ns else 0.0,
        "gap_to_ideal_pct": (100 * (result.total_ns / ideal_ns - 1)) if ideal_ns else 0.0,
        "ideal_bytes_per_npu": ideal_bytes, "ideal_bandwidth_gbps": bw,
        "capacity_bound_us": bound_ns / 1e3, "exceeds_link_capacity": bool(exceeds),
        "per_dim_bytes": result.per_dim_bytes,
        "per_dim_busy_us": [b / 1e3 for b in result.dim_busy_ns],
        "dims": [{"dim": i, "block": d.block, "size": d.size, "bandwidth_gbps": d.effective_gbps,
                  "latency_ns": d.latency_ns, "algorithms": algos[i]} for i, d in enumerate(topo.dims)],
        "collectives": colls,
    }


def format_report(r: dict) -> str:
    lines = []
    for c in r["collectives"]:
        lines.append(f"{c['name']}: {c['kind']} of {format_size(c['bytes'])} over dims "
                     f"{','.join(map(str, c['dims']))}, {c['chunks']} chunks, ends at {c['end_us']:.3f} us")
    lines += [
        f"topology        {r['topology']} ({r['npus']} NPUs)",
        f"runtime         {r['backend']}" + (f" {r['switching']}" if "switching" in r else "")
        + f" ({r['execution']} execution), scheduler {r['scheduler']}"
        + (f" ({r['optimal_choice']} kept; cp-sat {r['cp_sat_time_us']:.3f} us, themis {r['themis_time_us']:.3f} us)"
           if "optimal_choice" in r else "") + ", "
        f"intra-dimension {r['intra']}, {r['active_chunks']} active chunk(s) per dimension",
        "",
        f"total time      {r['total_time_us']:.3f} us",
        f"ideal time      {r['ideal_time_us']:.3f} us  ({r['ideal_bytes_per_npu'] / 2**20:.2f} MB per NPU over "
        f"{r['ideal_bandwidth_gbps']:g} GB/s)",
        f"bw utilization  {100 * r['bw_utilization']:.2f} %  ({r['gap_to_ideal_pct']:.2f} % above ideal)",
    ]
    note = physics_note(r)
    lines += [note, ""] if note else [""]
    head = ("dim", "block", "NPUs", "GB/s", "latency ns", "algorithm", "sent per NPU", "busy us", "busy %")
    rows = [head]
    for d, nb, busy in zip(r["dims"], r["per_dim_bytes"], r["per_dim_busy_us"]):
        rows.append((str(d["dim"]), d["block"], str(d["size"]), f"{d['bandwidth_gbps']:g}", f"{d['latency_ns']:g}",
                     ",".join(d["algorithms"]) or "-", f"{nb / 2**20:.2f} MB", f"{busy:.3f}",
                     f"{100 * busy / r['total_time_us']:.1f}" if r["total_time_us"] else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines += ["  ".join(v.rjust(w) if i != 1 and i != 5 else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
              .rstrip() for row in rows]
    links = r.get("link_utilization")
    if links:
        rep = " (representative link of each class: the network's symmetry makes the others identical)" \
            if r["execution"] == "symmetric" else ""
        lines += ["", f"links ({r['switching']}): {links['links']} simulated{rep}; mean utilisation per dimension "
                  + ", ".join(f"dim {d} {100 * u:.1f} %" for d, u in links["mean_utilization_per_dim"].items()),
                  "busiest links:"]
        lines += [f"  {l['link']:28s} busy {l['busy_us']:12.3f} us  {100 * l['utilization']:6.1f} %  "
                  f"{l['bytes'] / 2**20:10.2f} MB" for l in links["busiest"]]
    return "\n".join(lines)


def compare_rows(reports: dict) -> str:
    """Schedulers side by side for one workload: time, utilisation and busy time per dimension."""
    first = next(iter(reports.values()))
    head = ["scheduler", "intra", "total us", "ideal us", "bw util %"] + [f"dim {d['dim']} busy us"
                                                                           for d in first["dims"]]
    rows = [head]
    for name, r in reports.items():
        rows.append([name, r["intra"], f"{r['total_time_us']:.3f}", f"{r['ideal_time_us']:.3f}",
                     f"{100 * r['bw_utilization']:.2f}"] + [f"{b:.3f}" for b in r["per_dim_busy_us"]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines += [f"{name}: {physics_note(r)}" for name, r in reports.items() if physics_note(r)]
    return "\n".join(lines)
