"""The per-step report of a workload: total time, compute, exposed communication, and every collective.

`WorkloadReport.to_dict()` is what `--json` prints; `format()` is the text report.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field, fields
from typing import Callable

from ...network.errors import UserError
from ...network.units import format_size
from ..frontend.workload import PHASES
from ...dialects.workload import MEMORY, P2P, dtype_of, peer
from ...network.dtypes import DEFAULT as DEFAULT_DTYPE, DTYPES
from ...runtime.workload_engine import BREAKDOWN
from ..core.step_keys import key_parts
from .memory_report import format_memory


# keys --json leaves out where they do not apply (a placement, the congestion backend, a pool, an endpoint delay)
# and the FLOPs per compute dtype (a step whose compute is all fp32), the GPU (no --gpu) and the cluster (no --cluster)
OPTIONAL = ("placement", "switching", "pool", "endpoint_delay_ns", "gpu", "cluster", "host_wait_us", "host_issue_us",
            "flops_by_dtype")
NOT_JSON = {"json": False}


@dataclass(frozen=True)
class WorkloadReport:
    """One training step's report: a field per key of what `--json` prints (`to_dict`, schema in
    workload_report.schema.json beside this file, keys in this order), the compiled module, and what can be made
    from the run when asked (`timeline`, `step_tables`, `chakra`), each given when the report is made."""
    source: str
    topology: str
    npus: int
    mesh: str
    placement: str | None
    backend: str
    scheduler: str
    peak_tflops: float
    switching: str | None                  # congestion backend
    mem_bw_gbps: float
    mem_latency_ns: float
    rank: int
    pool: str | None                       # the remote memory pool, described
    endpoint_delay_ns: float | None
    gpu: dict | None                       # --gpu: the device's name, description and where its numbers came from
    cluster: dict | None                   # --cluster: its name, nodes, GPUs, description and sources
    total_time_us: float
    compute_time_us: float
    measured_compute_us: float
    measured_ops: int
    exposed_comm_time_us: float
    host_wait_us: float | None             # --gpu: compute stream idle, waiting for the host to issue its next op
    host_issue_us: float | None            # --gpu: when the host has issued the step's last compute op
    comm_time_us: float
    local_memory_time_us: float
    remote_memory_time_us: float
    breakdown_us: dict
    memory_summary: list
    memory: dict | None                    # memory per rank against the GPU's (memory_report.py); None: not known
    ops: int
    flops: int
    flops_by_dtype: dict | None            # DTYPES name -> FLOPs computed in it; None: all fp32
    phases: list
    iterations: list
    collectives: list
    collective_summary: list
    # not in --json: the workload module as compiled (wl + comm dialects), printed when `mlir` is first read
    module_text: Callable[[], str] | None = field(default=None, repr=False, compare=False, metadata=NOT_JSON)
    # every distinct collective the step's programs run, all ranks': its key (workload_driver.collective_key:
    # kind, bytes, dims, ...)
    collective_keys: tuple = field(default=(), repr=False, compare=False, metadata=NOT_JSON)
    # what `timeline`, `step_tables` and `chakra` call (None: this report cannot make it)
    timeline_of: Callable[[], dict] | None = field(default=None, repr=False, compare=False, metadata=NOT_JSON)
    step_tables_of: Callable[[str], object] | None = field(default=None, repr=False, compare=False,
                                                           metadata=NOT_JSON)
    chakra_of: Callable[[str, bool], int] | None = field(default=None, repr=False, compare=False, metadata=NOT_JSON)

    def __getitem__(self, key):
        return self.to_dict()[key]

    @functools.cached_property
    def mlir(self) -> str:
        """The workload module as compiled, as --emit mlir writes it: printed once, on first reading ("" for a step
        table directory, which holds no module)."""
        return self.module_text() if self.module_text is not None else ""

    @property
    def data(self) -> dict:
        """The --json object (to_dict)."""
        return self.to_dict()

    def to_dict(self) -> dict:
        """What --json prints: every figure, in the schema's order, without the keys that do not apply."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.metadata.get("json", True)}
        for key in OPTIONAL:
            if out[key] is None:
                del out[key]
        return out

    def format(self) -> str:
        return format_report(self.to_dict())

    def timeline(self) -> dict:
        """The step as a Chrome trace (compiler/report/step_timeline.py)."""
        return self._made(self.timeline_of, "a timeline")()

    def step_tables(self, table_format: str):
        """The step's per-accelerator tables (runtime/step_tables.StepTables) in a table format: a report of
        compile(..., keep_tables=True) or of a step table directory."""
        return self._made(self.step_tables_of, "the step's tables (compile it with keep_tables=True)")(table_format)

    @property
    def writes_chakra(self) -> bool:
        """Can `chakra` write this step? Only a step compiled from a model file, traces or a Workload (a lowered
        .mlir module or step directory no longer holds one)."""
        return self.chakra_of is not None

    def chakra(self, out_dir: str, force: bool = False) -> int:
        """Write the step as Chakra execution traces, one per rank (interop/chakra_write.write); the traces written."""
        return self._made(self.chakra_of, "Chakra traces (from a lowered step)")(out_dir, force)

    def with_(self, **changes) -> "WorkloadReport":
        return dataclasses.replace(self, **changes)

    @staticmethod
    def _made(make, what: str):
        if make is None:
            raise UserError(f"this report cannot give {what}")
        return make


def make_report(module_info: dict, result, times, progs, rank: int = 0, **made) -> WorkloadReport:
    """Report rank `rank`'s step (any rank of an SPMD workload); the step time is the slowest rank's. `module_info`:
    the run's description (its keys leave out those that do not apply); `made`: WorkloadReport's other fields
    (mlir, collective_keys, timeline_of, step_tables_of, chakra_of)."""
    prog = next(p for p in progs if p.rank == rank)
    r = result.ranks[rank]
    calls = []
    memory: dict[tuple, dict] = {}
    for i, op in enumerate(prog.ops):
        if op.kind in ("compute", "wait"):
            continue
        if op.kind in MEMORY:
            a = op.attrs
            group = int(a.get("wl.in_switch", 1))
            row = memory.setdefault((op.kind, a["location"], group, a["bytes"]),
                                    {"kind": op.kind, "location": a["location"], "in_switch": group, "bytes": a["bytes"],
                                     "time_us": (r.end_ns[i] - r.start_ns[i]) / 1e3, "count": 0, "total_us": 0.0})
            row["count"] += 1
            row["total_us"] += row["time_us"]
            continue
        key = times.key(op)
        if op.kind in P2P:
            calls.append({"op": i, "kind": op.kind, "group": "p2p", "group_size": 2,
                          "dims": [d for d, b in enumerate(times[key].dim_busy_ns) if b > 0], "bytes": key[1],
                          "algorithm": times[key].algorithm, "time_us": times[key].time_ns / 1e3,
                          "start_us": r.start_ns[i] / 1e3, "end_us": r.end_ns[i] / 1e3, "peer": peer(op)})
            continue
        group = op.attrs["wl.group"]
        calls.append({"op": i, "kind": op.kind, "group": group, "group_size": len(prog.groups[group]),
                      "dims": list(key[2]), "bytes": key[1], "algorithm": times[key].algorithm,
                      "time_us": times[key].time_ns / 1e3, "start_us": r.start_ns[i] / 1e3,
                      "end_us": r.end_ns[i] / 1e3, **({"fallback": times[key].fallback} if times[key].fallback
                                                      else {}),
                      **({"part": [[d, *p] for d, p in key_parts(key).items()]} if key_parts(key) else {})})
    flops = sum(int(op.attrs.get("flops", 0)) for op in prog.ops if op.kind == "compute")
    by_dtype = {d: 0 for d in DTYPES}
    for op in prog.ops:
        if op.kind == "compute":
            by_dtype[dtype_of(op.attrs)] += int(op.attrs.get("flops", 0))
    by_dtype = {d: f for d, f in by_dtype.items() if f}
    info = {key: module_info.get(key) for key in ("source", "topology", "npus", "mesh", "placement", "backend",
                                                   "scheduler", "peak_tflops", "switching", "mem_bw_gbps",
                                                   "mem_latency_ns", "rank", "pool", "endpoint_delay_ns", "gpu",
                                                   "cluster", "memory")}
    data = {**info,
            "total_time_us": result.total_ns / 1e3, "compute_time_us": r.compute_ns / 1e3,
            "measured_compute_us": r.measured_ns / 1e3, "measured_ops": r.measured_ops,
            "exposed_comm_time_us": (result.total_ns - r.compute_ns - r.host_wait_ns) / 1e3,
            "host_wait_us": r.host_wait_ns / 1e3 if info.get("gpu") else None,
            "host_issue_us": r.host_issue_ns / 1e3 if info.get("gpu") else None, "comm_time_us": r.comm_ns / 1e3,
            "local_memory_time_us": r.local_memory_ns / 1e3, "remote_memory_time_us": r.remote_memory_ns / 1e3,
            "breakdown_us": {name: r.breakdown_ns.get(name, 0.0) / 1e3 for name in BREAKDOWN},
            "memory_summary": list(memory.values()),
            "ops": len(prog.ops), "flops": flops,
            "flops_by_dtype": by_dtype if set(by_dtype) - {DEFAULT_DTYPE} else None, "phases": phases(prog, r, times),
            "iterations": iterations(prog, r, times),
            "collectives": calls, "collective_summary": summarize(calls)}
    return WorkloadReport(**data, **made)


def parts(prog, r, times, attr: str) -> list[dict]:
    """The run split by an op attribute (wl.phase, wl.iteration): when each part's ops ran (first start to last
    end), its compute time and FLOPs, and the collectives issued in it. Parts overlap in time where
    communication of one runs under the next (a backward reduce-scatter under the optimizer step). Ops without
    the attribute belong to no part."""
    out: dict = {}
    for i, op in enumerate(prog.ops):
        name = op.attrs.get(attr)
        if name is None or name == "":
            continue
        part = out.setdefault(name, {"start_us": r.start_ns[i] / 1e3, "end_us": 0.0, "ops": 0, "flops": 0,
                                     "compute_us": 0.0, "collectives": 0, "comm_us": 0.0})
        part["start_us"] = min(part["start_us"], r.start_ns[i] / 1e3)
        part["end_us"] = max(part["end_us"], r.end_ns[i] / 1e3)
        part["ops"] += 1
        if op.kind == "compute":
            part["flops"] += int(op.attrs.get("flops", 0))
            part["compute_us"] += (r.end_ns[i] - r.start_ns[i]) / 1e3
        elif op.kind != "wait" and op.kind not in MEMORY:
            part["collectives"] += 1
            part["comm_us"] += times.of(op).time_ns / 1e3
    return [{"name": name, **part} for name, part in out.items()]


def phases(prog, r, times) -> list[dict]:
    """The step by part (wl.phase) in the order forward, backward, optimizer; empty when the workload does not
    say (a .mlir module without wl.phase)."""
    order = {p: k for k, p in enumerate(PHASES)}
    found = [{"phase": p.pop("name"), **p} for p in parts(prog, r, times, "wl.phase")]
    return sorted(found, key=lambda p: (order.get(p["phase"], len(order)), p["start_us"]))


def iterations(prog, r, times) -> list[dict]:
    """A trace of several training iterations, by iteration (wl.iteration); empty for one step."""
    found = [{"iteration": int(p.pop("name")), **p} for p in parts(prog, r, times, "wl.iteration")]
    return sorted(found, key=lambda p: p["iteration"]) if len(found) > 1 else []


def summarize(calls: list[dict]) -> list[dict]:
    """Calls grouped by (kind, group, bytes, a message's peer), in order of first appearance."""
    rows: dict[tuple, dict] = {}
    for c in calls:
        key = (c["kind"], c["group"], c["bytes"], c.get("peer"))
        row = rows.setdefault(key, {k: c[k] for k in ("kind", "group", "peer", "group_size", "dims", "part", "bytes",
                                                      "algorithm", "time_us", "fallback") if k in c}
                              | {"count": 0, "total_us": 0.0})
        row["count"] += 1
        row["total_us"] += c["time_us"]
    return list(rows.values())


def _dims(s: dict) -> str:
    """The dims column: "0,1", and where the group covers part of a dimension its members there: "0:4,1"."""
    part = {p[0]: p[1] for p in s.get("part", [])}
    return ",".join(f"{d}:{part[d]}" if d in part else str(d) for d in s["dims"])


def size_labels(values) -> dict[int, str]:
    """Each byte count -> its label in the report (format_size): two different counts never print the same (33587200
    and 33583104 B are both "32.03MB" at two decimals), so those that would take more decimals, and where even
    that cannot tell them apart, their exact bytes."""
    labels = {int(v): format_size(v) for v in set(values)}
    for decimals in range(3, 13):
        clash = _clashing(labels)
        if not clash:
            return labels
        labels.update({v: format_size(v, decimals) for v in clash})
    labels.update({v: f"{v}B" for v in _clashing(labels)})
    return labels


def _clashing(labels: dict[int, str]) -> list[int]:
    seen: dict[str, list[int]] = {}
    for v, text in labels.items():
        seen.setdefault(text, []).append(v)
    return [v for vs in seen.values() if len(vs) > 1 for v in vs]


FLOP_UNITS = (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3))


def format_flops(flops: int) -> str:
    """FLOPs in the largest decimal unit that keeps the value at 1 or more, three decimals (2.951 TFLOP, 41.943
    MFLOP), whole FLOPs below 1000: a small model's step is not 0.000 TFLOP."""
    for unit, scale in FLOP_UNITS:
        if flops >= scale:
            return f"{flops / scale:.3f} {unit}"
    return f"{int(flops)} FLOP"


def format_report(d: dict) -> str:
    b = d["breakdown_us"]
    sizes = size_labels([s["bytes"] for s in d["collective_summary"]] + [m["bytes"] for m in d["memory_summary"]])
    lines = [
        f"workload        {d['source']} ({d['ops']} ops, {format_flops(d['flops'])} per rank"
        + "".join(f"; {name} {format_flops(f)}" for name, f in d.get("flops_by_dtype", {}).items()) + ")",
        *([f"cluster         {d['cluster']['name']} x {d['cluster']['nodes']} nodes ({d['cluster']['gpus']} GPUs): "
           f"{d['cluster']['description']}; {d['cluster']['source']}"] if d.get("cluster") else []),
        f"topology        {d['topology']} ({d['npus']} NPUs)" + (f", mesh {d['mesh']}" if d.get("mesh") else "")
        + (f", endpoint delay {d['endpoint_delay_ns']:g} ns per message" if d.get("endpoint_delay_ns") else ""),
        *([f"placement       {d['placement']}"] if d.get("placement") else []),
        f"runtime         {d['backend']} network" + (f" ({d['switching']})" if d.get("switching") else "") +
        f", scheduler {d['scheduler']}; compute {'model of the gpu below' if d.get('gpu') else 'roofline'} "
        f"{d['peak_tflops']:g} TFLOPS, {d['mem_bw_gbps']:g} GB/s",
        *([f"gpu             {d['gpu']['name']} ({d['gpu']['description']}): per-dtype peaks, fp32's above; "
           f"{d['gpu']['source']}"] if d.get("gpu") else []),
        "",
        f"step time       {d['total_time_us']:.3f} us",
        f"compute         {d['compute_time_us']:.3f} us" + (
            f"  ({d['measured_compute_us']:.3f} us of it measured by the profiler, {d['measured_ops']} ops; the "
            f"rest from the {'compute model' if d.get('gpu') else 'roofline'})" if d.get("measured_ops") else ""),
        # the step's breakdown (breakdown_us): communication that nothing else covers, and time when nothing runs
        # on this rank (a pipeline bubble, a wait for a slower rank), which exposed_comm_time_us counts in
        f"exposed comm    {b['exposed_comm']:.3f} us  (communication {d['comm_time_us']:.3f} us in all, "
        f"{max(0.0, d['comm_time_us'] - b['exposed_comm']):.3f} us hidden under compute)",
        f"idle            {b['idle']:.3f} us  (nothing running on this rank: pipeline bubble, waits for other ranks"
        + (f"; {d['host_wait_us']:.3f} us of it waiting for the host to issue kernels" if d.get("host_wait_us")
           else "") + ")",
        "",
    ]
    lines += format_memory(d["memory"])
    if d["memory_summary"]:
        lines += [f"memory          local {d['local_memory_time_us']:.3f} us, remote {d['remote_memory_time_us']:.3f} us"
                  + (f" (pool: {d['pool']})" if d.get("pool") else ""),
                  "breakdown       " + ", ".join(f"{name.replace('_', ' ')} {b[name]:.3f}" for name in BREAKDOWN)
                  + " us"]
        for m in d["memory_summary"]:
            switched = f" in-switch over {m['in_switch']} GPUs" if m["in_switch"] > 1 else ""
            lines.append(f"  {m['kind']:<5s} {m['location']:<6s}{switched} "
                         f"{sizes[m['bytes']]} x {m['count']}: {m['time_us']:.3f} us each, "
                         f"{m['total_us']:.3f} us in all")
        lines.append("")
    for key, label in (("phases", "{}"), ("iterations", "iteration {}")):
        for p in d.get(key, []):
            lines.append(f"{label.format(p[key[:-1]]):<16s}{p['start_us']:.3f} - {p['end_us']:.3f} us: compute "
                         f"{p['compute_us']:.3f} us, {p['collectives']} collectives ({p['comm_us']:.3f} us)")
        if d.get(key):
            lines.append("")
    head = ("collective", "group", "ranks", "dims", "size", "count", "algorithm", "us each", "us total")
    rows = [head] + [(s["kind"], s["group"] + (f" {s['peer']}" if "peer" in s else ""), str(s["group_size"]), _dims(s),
                      sizes[s["bytes"]], str(s["count"]), s["algorithm"], f"{s['time_us']:.3f}",
                      f"{s['total_us']:.3f}") for s in d["collective_summary"]]
    if len(rows) == 1:
        return "\n".join(lines + ["no collectives"])
    notes = [f"note: {s['kind']} of {sizes[s['bytes']]} on {s['group']} ran {s['fallback']}"
             for s in d["collective_summary"] if s.get("fallback")]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    left = (0, 1, 6)
    lines += ["  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
              .rstrip() for row in rows]
    return "\n".join(lines + ([""] + notes if notes else []))
