"""torch.profiler (Kineto, Chrome-trace JSON) traces: measured durations for the ops of an execution trace.

A Kineto trace has the times, not the graph: it is best read together with the ExecutionTraceObserver trace of
the same rank and the same steps (`torch.profiler.profile(execution_trace_observer=...)` writes both), and each
operator call of the execution trace takes its measured time from the Kineto event with the same record-function
id (`rf_id` in the execution trace, "Record function id" in Kineto):
- a GPU run (device events: kernels, memcpy, memset): the time of the device work the call launched, itself or
  through the calls nested in it (kernels carry the "External id" of the CPU op that launched them; CPU ops nest
  by time on their thread);
- a CPU run (no device events): the call's own duration.
A call the Kineto trace does not have keeps the roofline. The rank of a Kineto file is its distributedInfo.rank,
else its name (as for execution traces).

Alone (recorded with record_shapes=True), `as_execution_trace` reads it as the execution trace it lacks; the
importer then takes dependencies from the recorded order (et_import._happens_before).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from ...network.errors import UserError

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def is_kineto(data) -> bool:
    return isinstance(data, dict) and "traceEvents" in data


@dataclass
class Kineto:
    path: str
    rank: int | None                   # distributedInfo.rank, when recorded
    measured_ns: dict[int, float] = field(default_factory=dict)   # record-function id -> measured time
    device: bool = False               # device events present: times are device work, not CPU time
    # record-function id -> that of the call it runs inside (same thread, by time): a nested call's time is part
    # of its enclosing call's, whatever the execution trace says about their nesting
    nested_in: dict[int, int] = field(default_factory=dict)


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
    parent = nesting(ops)
    for e, args in ops:
        rf, up = args.get("Record function id"), parent.get(id(e))
        if isinstance(rf, int) and up is not None and isinstance(up[1].get("Record function id"), int):
            out.nested_in[rf] = up[1]["Record function id"]
    if not device:   # a CPU run: each call's own duration
        for e, args in ops:
            rf = args.get("Record function id")
            if isinstance(rf, int):
                out.measured_ns[rf] = float(e["dur"]) * 1e3
        return out
    # a GPU run: device time of what each call launched, itself or through its nested calls
    by_external = {args.get("External id"): (e, args) for e, args in ops if isinstance(args.get("External id"), int)}
    total: dict[int, float] = defaultdict(float)   # id(event) -> device ns
    for e, args in device:
        external = args.get("External id")   # (a hostile file's list id matches no call)
        owner = by_external.get(external) if isinstance(external, int) else None
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


def nesting(ops: list[tuple]) -> dict[int, tuple]:
    """id(event) -> the (event, args) of the CPU op it runs inside, by time on the same thread."""
    parent: dict[int, tuple] = {}
    by_thread = defaultdict(list)
    for item in ops:
        # a thread's ids as written (a hostile file's list or dict ids, unhashable, by their text)
        by_thread[tuple(v if isinstance(v, (int, str)) else repr(v) for v in (item[0].get("pid"), item[0].get("tid")))
                  ].append(item)
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


# ---------------------------------------------------------------------------------- a profiler trace alone

ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                  "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1,
                  "c10::Float8_e5m2": 1, "c10::complex<float>": 8, "c10::complex<double>": 16}
RANGES = ("cpu_op", "user_annotation")  # operator calls and record_function ranges (ProfilerStep#, Optimizer.*)
THREAD, ROOT = "[pytorch|profiler|execution_trace|thread]", "[pytorch|profiler|execution_trace|process]"
PG_RECORD = "## process_group:init ##"
COMM_PREFIXES = ("c10d::", "_c10d_functional")


def as_execution_trace(path: str, data: dict) -> tuple[dict, dict[int, tuple[float, float]]]:
    try:
        return _as_execution_trace(path, data)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:  # not the shape torch writes
        raise UserError(f"{path}: malformed profiler trace ({type(e).__name__}: {e})".replace("\n", " ")) from None


def timed(e) -> bool:
    """A complete event with a name, a finite start and a non-negative duration."""
    return (isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)
            and all(isinstance(e.get(k), (int, float)) and not isinstance(e.get(k), bool) and abs(e[k]) < 1e18
                    for k in ("ts", "dur")) and e["dur"] >= 0)


def _as_execution_trace(path: str, data: dict) -> tuple[dict, dict[int, tuple[float, float]]]:
    """A profiler trace recorded with record_shapes=True, read as the execution trace it lacks: (the trace in the
    execution-trace JSON form the importer reads, node id -> (start, end) ns of what the node did).

    Nodes are the operator calls and ranges in order of their start, nested by time on their thread; a tensor
    argument becomes a tensor of its recorded shape and dtype that no other call shares (the profiler records no
    tensor identities, so data dependencies come from the times instead: see et_import); process groups come from
    distributedInfo.pg_config. A collective's end is when its backend finished it: gloo's record on its worker
    thread (the call's record-function id + 1), else (NCCL, whose kernels are not matched yet) the call's own
    end."""
    events = [e for e in data["traceEvents"] if timed(e) and e.get("cat") in RANGES]
    calls = [e for e in events if not str(e["name"]).startswith("gloo:")]
    if not calls:
        raise UserError(f"{path}: the profiler trace holds no operator calls")
    args = lambda e: e.get("args") if isinstance(e.get("args"), dict) else {}  # noqa: E731
    if not any("Input Dims" in args(e) for e in calls):
        raise UserError(f"{path}: a profiler trace alone needs the shapes of every call: record it with "
                        "torch.profiler.profile(record_shapes=True), or give the ExecutionTraceObserver trace too")
    info = data.get("distributedInfo") if isinstance(data.get("distributedInfo"), dict) else {}
    groups = [{"pg_name": str(g.get("pg_name")), "pg_desc": str(g.get("pg_desc", "")), "ranks": g.get("ranks"),
               "group_size": g.get("pg_size")} for g in info.get("pg_config") or [] if isinstance(g, dict)]
    for g in groups:  # the world is recorded with its ranks listed: the importer's convention is an empty list
        if g["pg_desc"] == "default_pg":
            g["ranks"] = []
    backend_end, backend_types = {}, {}  # by the record-function id of the call that started the backend's work
    for e in events:
        rf = args(e).get("Record function id")
        if str(e["name"]).startswith("gloo:") and isinstance(rf, int) and not isinstance(rf, bool):
            backend_end[rf - 1] = (e["ts"] + e["dur"]) * 1e3
            backend_types[rf - 1] = args(e).get("Input type")
    calls.sort(key=lambda e: (e["ts"], -e["dur"]))
    thread = lambda e: (str(e.get("pid")), str(e.get("tid")))  # noqa: E731
    threads = sorted({thread(e) for e in calls})
    nodes = [_node(1, ROOT, 1), _node(2, PG_RECORD, 1, [json.dumps(groups)], [[]], ["String"])]
    thread_id = {t: 3 + i for i, t in enumerate(threads)}
    nodes += [_node(i, THREAD, 1) for i in thread_id.values()]
    ids = {id(e): len(nodes) + 1 + k for k, e in enumerate(calls)}
    stacks: dict = {t: [] for t in threads}
    spans: dict[int, tuple[float, float]] = {}
    cpu_end: dict[int, float] = {}
    tensor = [100]   # tensor and storage ids, fresh for every argument
    for e in calls:
        stack = stacks[thread(e)]
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"]:
            stack.pop()
        parent = ids[id(stack[-1])] if stack else thread_id[thread(e)]
        stack.append(e)
        a = args(e)
        rf = a.get("Record function id")
        try:
            values, shapes, types = _inputs(a, tensor, backend_types.get(rf), e["name"].startswith(COMM_PREFIXES))
        except ValueError as err:
            raise UserError(f"{path}: {e['name']} at {e['ts']} us: {err}") from None
        node = _node(ids[id(e)], e["name"], parent, values, shapes, types)
        if isinstance(rf, int) and not isinstance(rf, bool):
            node["attrs"].append({"name": "rf_id", "type": "uint64", "value": rf})
        nodes.append(node)
        spans[node["id"]] = (e["ts"] * 1e3, backend_end.get(rf, (e["ts"] + e["dur"]) * 1e3))
        cpu_end[node["id"]] = (e["ts"] + e["dur"]) * 1e3
    # the observer writes a call when it ends: nodes in order of their ends, inner calls first
    order = sorted(nodes[len(thread_id) + 2:], key=lambda n: (cpu_end[n["id"]], -n["id"]))
    trace = {"schema": "kineto", "nodes": nodes[:len(thread_id) + 2] + order}
    rank = info.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        trace["rank"] = rank
    return trace, spans


def _node(id_: int, name: str, parent: int, values=(), shapes=(), types=()) -> dict:
    return {"id": id_, "name": name, "ctrl_deps": parent,
            "inputs": {"values": list(values), "shapes": list(shapes), "types": list(types)},
            "outputs": {"values": [], "shapes": [], "types": []}, "attrs": []}


def _inputs(a: dict, counter: list, backend_types, collective: bool) -> tuple[list, list, list]:
    """A call's recorded arguments as execution-trace inputs: tensors of the recorded shapes and dtypes (a tensor
    list takes its dtype from the backend's record of the same collective; a compute call's list, whose bytes
    its measured time makes moot, counts no bytes), scalars from "Concrete Inputs"."""
    dims, types = a.get("Input Dims") or [], a.get("Input type") or []
    concrete = a.get("Concrete Inputs") or []
    values, shapes, out_types = [], [], []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if t == "TensorList" and isinstance(d, list):
            inner = backend_types[0] if isinstance(backend_types, list) and backend_types else None
            if inner not in ELEMENT_BYTES and collective:
                raise ValueError("its tensor list has no recorded dtype (no backend record of the same call)")
            values.append([_tensor(s, inner, counter) for s in d])
            inner = inner if inner in ELEMENT_BYTES else "unknown"
            shapes.append(d)
            out_types.append(f"GenericList[Tensor({inner})]")
        elif t in ELEMENT_BYTES and isinstance(d, list):
            values.append(_tensor(d, t, counter))
            shapes.append(d)
            out_types.append(f"Tensor({t})")
        else:
            text = concrete[i] if i < len(concrete) and isinstance(concrete[i], str) else ""
            values.append(int(text) if text.lstrip("-").isdigit() and len(text) < 19 else text)
            shapes.append([])
            out_types.append("Int" if isinstance(values[-1], int) else "")
    return values, shapes, out_types


def _tensor(shape, dtype: str, counter: list) -> list:
    """[tensor id, storage id, offset, elements, element bytes, device], as the execution trace writes a tensor."""
    if not isinstance(shape, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**40
                                              for x in shape):
        raise ValueError(f"a tensor shape {shape!r} that is not a list of sizes")
    counter[0] += 1
    numel = 1
    for x in shape:
        numel *= x
    if numel >= 2**50:
        raise ValueError(f"a tensor of {numel} elements")
    return [counter[0], counter[0], 0, numel, ELEMENT_BYTES.get(dtype, 0), "cpu"]
