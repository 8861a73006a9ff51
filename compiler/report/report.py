"""The report of a compiled collective module: one frozen dataclass (`Report`), what `--json` prints (`to_json`,
schema in report.schema.json beside this file) and the text report (`format`), built once from the schedule, the
runtime's result and the decisions recorded in the module.

Figures: the total time; the ideal time (the fewest bytes each NPU must send over the sum of its link bandwidths,
ASTRA-sim's definition) and the bandwidth utilisation ideal / total; the link-capacity bound (the larger of the
ideal and the busiest NPU's own traffic per dimension over that dimension's bandwidth): a time below it is
impossible on real links and the report says so (`exceeds_link_capacity`, `physics_note`).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ... import algorithms
from ...dialects.comm import ROOTED
from ...network.topology import Topology
from ...network.units import format_size, gbps_to_bytes_per_ns

if TYPE_CHECKING:   # an annotation only: no import at run time
    from ..lowering.lower import Schedule

SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "report.schema.json")
# keys --json leaves out when they do not apply (congestion backend only, optimal scheduler only, --verify only)
OPTIONAL = ("switching", "link_utilization", "optimal_choice", "themis_time_us", "cp_sat_time_us", "baseline_time_us",
            "verified", "local_mem_gbps", "endpoint_delay_ns", "pass_pipeline", "cluster")


@dataclass(frozen=True)
class StageReport:
    kind: str
    dim: int
    algorithm: str


@dataclass(frozen=True)
class CollectiveEntry:
    name: str
    kind: str
    buffer: str
    buffer_kind: str
    bytes: int
    chunks: int
    dims: tuple[int, ...]
    stages: tuple[StageReport, ...]
    end_us: float


@dataclass(frozen=True)
class DimReport:
    dim: int
    block: str
    size: int
    bandwidth_gbps: float
    latency_ns: float
    algorithms: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    topology: str
    npus: int
    backend: str
    execution: str
    scheduler: str
    intra: str
    active_chunks: int
    total_time_us: float
    ideal_time_us: float
    bw_utilization: float
    gap_to_ideal_pct: float
    ideal_bytes_per_npu: float
    ideal_bandwidth_gbps: float
    capacity_bound_us: float
    exceeds_link_capacity: bool
    per_dim_bytes: tuple[int, ...]
    per_dim_busy_us: tuple[float, ...]
    dims: tuple[DimReport, ...]
    collectives: tuple[CollectiveEntry, ...]
    switching: str | None = None           # congestion backend
    link_utilization: dict | None = None   # congestion backend: the busiest links, mean use per dimension
    optimal_choice: str | None = None      # optimal scheduler: which orders choose-schedule kept
    themis_time_us: float | None = None
    cp_sat_time_us: float | None = None
    baseline_time_us: float | None = None  # None also where a module recorded the choice without it (older)
    verified: bool | None = None           # --verify
    local_mem_gbps: float | None = None    # --local-mem-bw: reductions cost local memory time
    endpoint_delay_ns: float | None = None  # --endpoint-delay: what every message spends at its endpoints
    pass_pipeline: str | None = None       # the passes that ran, every option resolved (None: no pass ran here)
    cluster: dict | None = None            # --cluster: the preset the topology came from (Cluster.describe())

    def with_(self, **changes) -> "Report":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        for key in OPTIONAL:
            if out[key] is None:
                del out[key]
        return out

    def physics_note(self) -> str | None:
        """One line when the time beats what the links can carry (never a utilisation above 100 % without it)."""
        if not self.exceeds_link_capacity:
            return None
        fix = ("--backend congestion makes them share it" if self.backend == "analytical" else
               "this is a defect of the congestion model: please report it")
        return (f"note: {self.total_time_us:.3f} us beats the link-capacity bound of {self.capacity_bound_us:.3f} "
                f"us: the {self.backend} backend lets each of an NPU's concurrent messages use a whole link (as "
                f"ASTRA-sim's congestion-unaware backend does); {fix}")

    def format(self) -> str:
        return _format(self)


def make_report(schedule, result, scheduler: str, run, choice: dict | None = None,
                pass_pipeline: str | None = None) -> Report:
    """The report of a lowered schedule (compiler/lowering/lower.py) run on `run`'s backend; `choice` is what
    choose-schedule recorded in the module (comm.schedule_choice), if it ran; `pass_pipeline` the passes that
    made the schedule (passes.pipeline_spec)."""
    topo = schedule.topology
    ideal_ns, ideal_bytes, bw = ideal_time_ns(schedule)
    # no schedule can beat either bound: the ideal (the fewest bytes over all links) or its own traffic per link
    bound_ns = max(capacity_bound_ns(topo, result.per_dim_bytes), ideal_ns)
    exceeds = result.total_ns < bound_ns * (1 - 1e-9)  # a relative margin: float sums may differ in the last bits
    algos = [tuple(sorted({s.algorithm for p in schedule.plans for s in p.stages if s.dim in (d, -1)}))
             for d in range(topo.ndims)]
    colls = tuple(CollectiveEntry(p.name, p.kind, p.buffer, p.buffer_kind, p.bytes, p.chunks, tuple(p.group_dims),
                                  tuple(StageReport(s.kind, s.dim, s.algorithm) for s in p.stages),
                                  result.collective_end_ns[p.index] / 1e3) for p in schedule.plans)
    congestion = result.backend == "congestion"
    return Report(
        topo.name, topo.npus, result.backend, result.mode, scheduler, run.intra, run.active_chunks,
        result.total_ns / 1e3, ideal_ns / 1e3,
        (ideal_ns / result.total_ns) if result.total_ns else 0.0,
        (100 * (result.total_ns / ideal_ns - 1)) if ideal_ns else 0.0,
        ideal_bytes, bw, bound_ns / 1e3, bool(exceeds),
        tuple(result.per_dim_bytes), tuple(b / 1e3 for b in result.dim_busy_ns),
        tuple(DimReport(i, d.block, d.size, d.effective_gbps, d.latency_ns, algos[i])
              for i, d in enumerate(topo.dims)),
        colls,
        switching=run.switching if congestion else None,
        link_utilization=link_summary(result) if congestion else None,
        local_mem_gbps=run.local_mem_gbps,
        endpoint_delay_ns=topo.endpoint_delay_ns or None,
        pass_pipeline=pass_pipeline,
        optimal_choice=choice["schedule"] if choice else None,
        themis_time_us=choice["themis_time_ns"] / 1e3 if choice else None,
        cp_sat_time_us=choice["cp_sat_time_ns"] / 1e3 if choice else None,
        baseline_time_us=choice["baseline_time_ns"] / 1e3 if choice and choice["baseline_time_ns"] is not None
        else None)


def lower_bound_bytes(kind: str, nbytes: int, group: int, in_network: bool = False) -> float:
    """Bytes each NPU must send (or receive) at least: the numerator of ASTRA-sim's ideal time. Where switches
    reduce in the network (in_switch) an all-reduce needs each NPU's buffer to cross its link only once each way.
    A broadcast's every NPU but the root must receive the whole buffer, and a reduce's root as much."""
    if kind in ROOTED:
        return float(nbytes)
    if kind == "all_reduce":
        return (min(2 * (group - 1) / group, 1.0) if in_network else 2 * (group - 1) / group) * nbytes
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
        dims = schedule.meta.buffer_dims(p.buffer)   # an all_reduce run per dimension: all its pairs' together
        group = 1
        for d in dims:
            group *= topo.dims[d].size
        gbps = sum(topo.dims[d].effective_gbps for d in dims)
        in_network = any(algorithms.for_phase(s.algorithm, s.dim == -1).in_network
                         for q in schedule.plans if q.buffer == p.buffer for s in q.stages)
        nb = lower_bound_bytes(p.buffer_kind, p.bytes, group, in_network)
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


def _format(r: "Report") -> str:
    lines = []
    for c in r.collectives:
        lines.append(f"{c.name}: {c.kind} of {format_size(c.bytes)} over dims "
                     f"{','.join(map(str, c.dims))}, {c.chunks} chunks, ends at {c.end_us:.3f} us")
    if r.cluster:   # the same line as a training step's report (workload_report.py)
        c = r.cluster
        lines.append(f"cluster         {c['name']} x {c['nodes']} nodes ({c['gpus']} GPUs): {c['description']}; "
                     f"{c['source']}")
    lines += [
        f"topology        {r.topology} ({r.npus} NPUs)"
        + (f", endpoint delay {r.endpoint_delay_ns:g} ns per message" if r.endpoint_delay_ns else ""),
        f"runtime         {r.backend}" + (f" {r.switching}" if r.switching is not None else "")
        + f" ({r.execution} execution), scheduler {r.scheduler}"
        + (f" ({r.optimal_choice} kept; cp-sat {r.cp_sat_time_us:.3f} us, themis {r.themis_time_us:.3f} us"
           + (f", baseline {r.baseline_time_us:.3f} us" if r.baseline_time_us is not None else "") + ")"
           if r.optimal_choice is not None else "") + ", "
        f"intra-dimension {r.intra}, {r.active_chunks} active chunk(s) per dimension"
        + (f", reductions at local-mem-bw {r.local_mem_gbps:g} GB/s" if r.local_mem_gbps is not None else ""),
        "",
        f"total time      {r.total_time_us:.3f} us",
        f"ideal time      {r.ideal_time_us:.3f} us  ({r.ideal_bytes_per_npu / 2**20:.2f} MB per NPU over "
        f"{r.ideal_bandwidth_gbps:g} GB/s)",
        f"bw utilization  {100 * r.bw_utilization:.2f} %  ({r.gap_to_ideal_pct:.2f} % above ideal)",
    ]
    note = r.physics_note()
    lines += [note, ""] if note else [""]
    head = ("dim", "block", "NPUs", "GB/s", "latency ns", "algorithm", "sent per NPU", "busy us", "busy %")
    rows = [head]
    for d, nb, busy in zip(r.dims, r.per_dim_bytes, r.per_dim_busy_us):
        rows.append((str(d.dim), d.block, str(d.size), f"{d.bandwidth_gbps:g}", f"{d.latency_ns:g}",
                     ",".join(d.algorithms) or "-", f"{nb / 2**20:.2f} MB", f"{busy:.3f}",
                     f"{100 * busy / r.total_time_us:.1f}" if r.total_time_us else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines += ["  ".join(v.rjust(w) if i != 1 and i != 5 else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
              .rstrip() for row in rows]
    links = r.link_utilization
    if links:
        rep = " (representative link of each class: the network's symmetry makes the others identical)" \
            if r.execution == "symmetric" else ""
        lines += ["", f"links ({r.switching}): {links['links']} simulated{rep}; mean utilisation per dimension "
                  + ", ".join(f"dim {d} {100 * u:.1f} %" for d, u in links["mean_utilization_per_dim"].items()),
                  "busiest links:"]
        lines += [f"  {l['link']:28s} busy {l['busy_us']:12.3f} us  {100 * l['utilization']:6.1f} %  "
                  f"{l['bytes'] / 2**20:10.2f} MB" for l in links["busiest"]]
    return "\n".join(lines)


def compare_rows(reports: dict[str, "Report"]) -> str:
    """Schedulers side by side for one workload: time, utilisation and busy time per dimension."""
    first = next(iter(reports.values()))
    head = ["scheduler", "intra", "total us", "ideal us", "bw util %"] + [f"dim {d.dim} busy us" for d in first.dims]
    rows = [head]
    for name, r in reports.items():
        rows.append([name, r.intra, f"{r.total_time_us:.3f}", f"{r.ideal_time_us:.3f}",
                     f"{100 * r.bw_utilization:.2f}"] + [f"{b:.3f}" for b in r.per_dim_busy_us])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines += [f"{name}: {r.physics_note()}" for name, r in reports.items() if r.physics_note()]
    return "\n".join(lines)
