"""torch.profiler (Kineto, Chrome-trace JSON) traces: measured durations for the ops of an execution trace.

A Kineto trace has the times, not the graph: it is read together with the ExecutionTraceObserver trace of the
same rank and the same steps (`torch.profiler.profile(execution_trace_observer=...)` writes both), and each
operator call of the execution trace takes its measured time from the Kineto event with the same record-function
id (`rf_id` in the execution trace, "Record function id" in Kineto):
- a GPU run (device events: kernels, memcpy, memset): the time of the device work the call launched, itself or
  through the calls nested in it (kernels carry the "External id" of the CPU op that launched them; CPU ops nest
  by time on their thread);
- a CPU run (no device events): the call's own duration.
A call the Kineto trace does not have keeps the roofline. The rank of a Kineto file is its distributedInfo.rank,
else its name (as for execution traces).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..network.errors import UserError

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def is_kineto(data) -> bool:
    return isinstance(data, dict) and "traceEvents" in data


@dataclass
class Kineto:
    path: str
    rank: int | None                   # distributedInfo.rank, when recorded
    measured_ns: dict[int, float] = field(default_factory=dict)   # record-function id -> measured time
    device: bool = False               # device events present: times are device work, not CPU time


def read_kineto(path: str, data: dict) -> Kineto:
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise UserError(f"{path}: a profiler trace whose traceEvents is not a list")
    info = data.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if not (isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 2**31):
        rank = None
    ops, device = [], []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat != "cpu_op" and cat not in DEVICE_CATEGORIES:
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        ts, dur = e.get("ts"), e.get("dur")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e18
                   for v in (ts, dur)) or dur < 0:
            raise UserError(f"{path}: event #{i} ({str(e.get('name'))[:60]}): expected numeric ts and a "
                            f"non-negative dur, got ts={ts!r} dur={dur!r}")
        (ops if cat == "cpu_op" else device).append((e, args))
    out = Kineto(path, rank, device=bool(device))
    if not device:   # a CPU run: each call's own duration
        for e, args in ops:
            rf = args.get("Record function id")
            if isinstance(rf, int):
                out.measured_ns[rf] = float(e["dur"]) * 1e3
        return out
    # a GPU run: device time of what each call launched, itself or through its nested calls
    by_external = {args.get("External id"): (e, args) for e, args in ops if isinstance(args.get("External id"), int)}
    parent = _nesting(ops)
    total: dict[int, float] = defaultdict(float)   # id(event) -> device ns
    for e, args in device:
        owner = by_external.get(args.get("External id"))
        seen = set()
        while owner is not None and id(owner[0]) not in seen:
            seen.add(id(owner[0]))
            total[id(owner[0])] += float(e["dur"]) * 1e3
            owner = parent.get(id(owner[0]))
    for e, args in ops:
        rf = args.get("Record function id")
        if isinstance(rf, int):
            out.measured_ns[rf] = total.get(id(e), 0.0)
    return out


def _nesting(ops: list[tuple]) -> dict[int, tuple]:
    """id(event) -> the (event, args) of the CPU op it runs inside, by time on the same thread."""
    parent: dict[int, tuple] = {}
    by_thread = defaultdict(list)
    for item in ops:
        by_thread[(item[0].get("pid"), item[0].get("tid"))].append(item)
    for items in by_thread.values():
        items.sort(key=lambda it: (it[0]["ts"], -it[0]["dur"]))
        stack: list[tuple] = []
        for item in items:
            start = item[0]["ts"]
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] < start:
                stack.pop()
            if stack:
                parent[id(item[0])] = stack[-1]
            stack.append(item)
    return parent
