"""A training step's timeline as a Chrome trace (Perfetto, chrome://tracing): `--timeline FILE.json` on a step.

One process per accelerator (rank program run), with one track for its compute stream and one per process-group
stream (the streams the workload engine runs, runtime/workload_engine.py); every compute op and collective is a
slice named after it, with its FLOPs and bytes, a collective also with its group, algorithm and size; messages
(send / recv) run on one track per peer and direction. Waits are points of order with no time of their own and get
no slice. An SPMD step has one program, for rank 0, standing for every rank (a pipeline: one per stage). Times are
microseconds, as the trace format expects.
"""
from __future__ import annotations

from ...dialects.workload import MEMORY, P2P, peer as wl_peer
from ..core.step_keys import p2p_stream

COMPUTE_TRACK = 0


def step_trace(result, programs, times, info: dict) -> dict:
    """The Chrome trace of a run: `result` the workload engine's, `programs` the workload module's rank programs
    (dialects/workload.programs), `times` the collectives' compiled times (workload_driver.CollectiveTimes)."""
    events = []
    for prog in sorted(programs, key=lambda p: p.rank):
        r = result.ranks.get(prog.rank)
        if r is None:
            continue
        pid = prog.rank
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"accelerator {pid}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": COMPUTE_TRACK,
                       "args": {"name": "compute"}})
        streams: dict[str, int] = {}
        for i, op in enumerate(prog.ops):
            if op.kind == "wait":
                continue
            start, end = float(r.start_ns[i]), float(r.end_ns[i])
            span = {"ph": "X", "pid": pid, "ts": start / 1e3, "dur": (end - start) / 1e3}
            part = {k: op.attrs[a] for k, a in (("phase", "wl.phase"), ("iteration", "wl.iteration"))
                    if a in op.attrs}
            if op.kind == "compute":
                events.append({**span, "name": op.name, "cat": "compute", "tid": COMPUTE_TRACK,
                               "args": {"flops": int(op.attrs.get("flops", 0)), "bytes": int(op.attrs.get("bytes", 0)),
                                        **part}})
                continue
            if op.kind in MEMORY:   # one track per memory, which serves one transfer at a time (workload_engine)
                where = op.attrs["location"]
                tid = _track(events, streams, pid, ("memory", where), f"{where} memory")
                events.append({**span, "name": f"{op.kind} {op.name}", "cat": "memory", "tid": tid,
                               "args": {"bytes": int(op.attrs["bytes"]), "location": where,
                                        "in_switch": int(op.attrs.get("wl.in_switch", 1)), **part}})
                continue
            done = times.of(op)
            if op.kind in P2P:   # messages to (from) one peer share a stream (core/step_keys.p2p_stream)
                peer = wl_peer(op)
                tid = _track(events, streams, pid, p2p_stream(op),
                             f"send to rank {peer}" if op.kind == "send" else f"recv from rank {peer}")
                events.append({**span, "name": op.kind, "cat": "p2p", "tid": tid,
                               "args": {"bytes": int(op.attrs["bytes"]), "peer": peer, "route": done.algorithm,
                                        **part}})
                continue
            group = op.attrs["wl.group"]
            _track(events, streams, pid, group, f"group {group} ({len(prog.groups[group])} ranks)")
            events.append({**span, "name": op.kind, "cat": "collective", "tid": streams[group],
                           "args": {"bytes": int(op.attrs["bytes"]), "group": group, "dims": list(op.attrs["dims"]),
                                    "algorithm": done.algorithm, **part,
                                    **({"fallback": done.fallback} if done.fallback else {})}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {**info, "total_us": result.total_ns / 1e3}}


def _track(events: list, streams: dict, pid: int, key, name: str) -> int:
    """The track of a stream (a process group's, the messages with one peer, a memory's copies), named when first
    used."""
    if key not in streams:
        streams[key] = len(streams) + 1
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": streams[key], "args": {"name": name}})
    return streams[key]
