"""Analytical runtime: executes schedule tables with the ASTRA-sim analytical cost model.

Cost of a message (the rows of one step sharing peer and lane): latency x hops + bytes / link bandwidth, with no
contention between messages (ASTRA-sim's congestion-unaware backend). A step of a phase ends on an NPU when its own
messages are sent and the messages it receives in that step have arrived; the next step starts then.

Chunks pipeline across dimensions: chunk c's phase i+1 becomes ready when its phase i ends (and a collective's
first phase when the collectives it depends on have finished that chunk). Each NPU serves each dimension one phase
at a time, first-in first-out (ASTRA-sim's baseline intra-dimension policy with one active chunk per dimension);
phases that become ready at the same time queue in (chunk, collective, phase) order.

Two executions with the same semantics:
- `symmetric`: when every NPU runs a relabelled copy of NPU 0's table (ring, direct, halving-doubling on the
  Ring/FC/Switch blocks), every NPU's timeline is identical, so NPU 0's table alone gives the exact result: a
  message it receives in step s left its peer when NPU 0's own step s began.
- `full`: every NPU's table, every message, with the receive side waiting for the real sender. Used for asymmetric
  schedules (trees) and to check the symmetric shortcut.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from .tables import SEND, Schedule, Table, TableError

GIB = 2 ** 30


class DeadlockError(TableError, RuntimeError):
    """The tables cannot run to completion: a receive waits for data that never comes."""


@dataclass
class Result:
    mode: str
    total_ns: float
    ndims: int
    # one row per executed phase (per NPU in full mode): coll, flow, stage, dim, start, end (ns), npu
    phases: dict = field(default_factory=dict)
    per_dim_bytes: list = field(default_factory=list)   # bytes each NPU sends per dimension (max over NPUs)
    dim_busy_ns: list = field(default_factory=list)     # time each dimension is busy on the busiest NPU
    collective_end_ns: list = field(default_factory=list)


def _messages(t: Table, latency_ns: list[float]):
    """Aggregate rows into messages: returns dict of arrays keyed like the table plus `cost` (ns)."""
    if not len(t):
        return {k: np.zeros(0, np.int64) for k in ("npu", "coll", "flow", "stage", "step", "send", "peer", "lane",
                                                   "dim", "bytes", "cost")}
    send = (t["op"] == SEND).astype(np.int64)
    keys = (t["lane"], t["peer"], send, t["step"], t["stage"], t["flow"], t["coll"], t["npu"])
    order = np.lexsort(keys)
    sk = np.stack([k[order].astype(np.int64) for k in keys])
    first = np.concatenate([[True], np.any(sk[:, 1:] != sk[:, :-1], axis=0)])
    starts = np.flatnonzero(first)
    nbytes = np.add.reduceat(t["bytes"][order], starts)
    o = order[starts]
    lat = np.asarray(latency_ns, dtype=np.float64)[t["dim"][o]]
    cost = lat * t["hops"][o] + nbytes / (t["gbps"][o] * GIB / 1e9)
    return {"npu": t["npu"][o], "coll": t["coll"][o], "flow": t["flow"][o], "stage": t["stage"][o],
            "step": t["step"][o], "send": send[o], "peer": t["peer"][o], "lane": t["lane"][o], "dim": t["dim"][o],
            "bytes": nbytes, "cost": cost}


def _per_dim_bytes(t: Table, ndims: int) -> np.ndarray:
    s = t["op"] == SEND
    return np.bincount(t["dim"][s].astype(np.int64), weights=t["bytes"][s], minlength=ndims).astype(np.int64)


class _Dims:
    """First-in first-out service of phases on (npu, dim) servers, one phase at a time per server."""

    def __init__(self):
        self.queue: dict = {}
        self.busy: set = set()

    def ready(self, server, priority, item) -> None:
        heapq.heappush(self.queue.setdefault(server, []), (priority, item))

    def dispatch(self, server):
        """Next phase to start on an idle server, or None."""
        if server in self.busy or not self.queue.get(server):
            return None
        self.busy.add(server)
        return heapq.heappop(self.queue[server])[1]

    def release(self, server) -> None:
        self.busy.discard(server)


class _GroupOrder:
    """First-in first-out service of phases in one order shared by every member of a dimension's group.

    A phase joins the order of its (dimension, group) when the last member of the group has it ready, and every
    member then starts the group's phases in that order, each as soon as its own previous phase on the dimension is
    done. A per-NPU order could let two members start different chunks on the same dimension and wait on each other
    forever (as NCCL requires, all ranks of a communicator issue collectives in the same order)."""

    def __init__(self, shape: list[int]):
        self.shape = shape
        self.strides = [int(np.prod(shape[:d])) for d in range(len(shape))]
        self.count: dict = {}     # (group, key) -> [members ready, latest ready time]
        self.pending: list = []   # (priority, group, key) that became ready in the current instant
        self.order: dict = {}     # group -> list of keys
        self.position: dict = {}  # (npu, dim) -> index of its next phase in its group's order
        self.busy: set = set()

    def group(self, npu: int, dim: int):
        return dim, npu - ((npu // self.strides[dim]) % self.shape[dim]) * self.strides[dim]

    def members(self, group):
        dim, base = group
        return [base + i * self.strides[dim] for i in range(self.shape[dim])]

    def ready(self, npu: int, dim: int, key, now: float) -> None:
        group = self.group(npu, dim)
        c = self.count.setdefault((group, key), [0, 0.0])
        c[0] += 1
        c[1] = max(c[1], now)
        if c[0] == self.shape[dim]:
            del self.count[(group, key)]
            self.pending.append((_priority(c[1], *key), group, key))

    def flush(self) -> set:
        """Append the phases that became group-ready, in priority order; return the servers to look at."""
        touched = set()
        for _, group, key in sorted(self.pending):
            self.order.setdefault(group, []).append(key)
            touched.update((m, group[0]) for m in self.members(group))
        self.pending.clear()
        return touched

    def dispatch(self, server):
        npu, dim = server
        if server in self.busy:
            return None
        order = self.order.get(self.group(npu, dim), [])
        pos = self.position.get(server, 0)
        if pos >= len(order):
            return None
        self.position[server] = pos + 1
        self.busy.add(server)
        return order[pos]

    def release(self, server) -> None:
        self.busy.discard(server)


def _successors(meta: dict):
    """For each collective: the phases that wait on (coll, flow, last stage) finishing."""
    colls = meta["collectives"]
    succ = {}
    for ci, c in enumerate(colls):
        for d in c["deps"]:
            succ.setdefault(d, []).append(ci)
    pending_first = {ci: len(c["deps"]) for ci, c in enumerate(colls)}
    return succ, pending_first


def _dep_flows(meta, producer: int, consumer: int, flow: int):
    """Chunks of `consumer` released when chunk `flow` of `producer` finishes.

    Chunk by chunk only inside one buffer (an all_reduce's all_gather half picks up each chunk its reduce_scatter
    half finished); a collective on another buffer waits for the whole producer (None)."""
    p, c = meta["collectives"][producer], meta["collectives"][consumer]
    return [flow] if p["buffer"] == c["buffer"] and p["chunks"] == c["chunks"] else None


class _Chains:
    """Readiness of phases: chunk chains inside a collective and per-chunk dependencies between collectives."""

    def __init__(self, meta: dict):
        self.meta = meta
        self.colls = meta["collectives"]
        self.succ, _ = _successors(meta)
        self.waiting = {}   # (npu, coll, flow) -> number of producer chunks still running
        self.done_all = {}  # (npu, coll) -> chunks done

    def initial(self, npu):
        out = []
        for ci, c in enumerate(self.colls):
            for f in range(c["chunks"]):
                self.waiting[(npu, ci, f)] = len(c["deps"])
                if not c["deps"]:
                    out.append((ci, f, 0))
        return out

    def finished(self, npu, coll, flow, stage):
        """Phases made ready by (coll, flow, stage) finishing on npu."""
        c = self.colls[coll]
        if stage + 1 < len(c["stages"]):
            return [(coll, flow, stage + 1)]
        out = []
        self.done_all[(npu, coll)] = self.done_all.get((npu, coll), 0) + 1
        for consumer in self.succ.get(coll, []):
            flows = _dep_flows(self.meta, coll, consumer, flow)
            if flows is None:
                if self.done_all[(npu, coll)] < c["chunks"]:
                    continue
                flows = range(self.colls[consumer]["chunks"])
            for f in flows:
                self.waiting[(npu, consumer, f)] -= 1
                if self.waiting[(npu, consumer, f)] == 0:
                    out.append((consumer, f, 0))
        return out


def _priority(ready_ns, coll, flow, stage):
    return (ready_ns, flow, coll, stage)


def run(schedule: Schedule, mode: str = "auto") -> Result:
    meta = schedule.meta
    if mode == "auto":
        mode = "symmetric" if meta.get("symmetric") else "full"
    if mode == "symmetric":
        return _run_symmetric(schedule)
    if mode == "full":
        return _run_full(schedule)
    raise ValueError(f"unknown mode {mode}")


def _table(schedule: Schedule, npu: int) -> Table:
    try:
        return schedule.table(npu, deps=False)
    except TypeError:
        return schedule.table(npu)


def _run_symmetric(schedule: Schedule) -> Result:
    meta = schedule.meta
    ndims = len(meta["latency_ns"])
    t = _table(schedule, 0)
    m = _messages(t, meta["latency_ns"])
    # step time = slowest message of the step (sent or received); phase time = sum of its steps
    step_key = np.stack([m["coll"], m["flow"], m["stage"], m["step"]]).astype(np.int64)
    durations: dict = {}
    dims: dict = {}
    if len(m["cost"]):
        order = np.lexsort(step_key[::-1])
        sk = step_key[:, order]
        first = np.concatenate([[True], np.any(sk[:, 1:] != sk[:, :-1], axis=0)])
        starts = np.flatnonzero(first)
        step_time = np.maximum.reduceat(m["cost"][order], starts)
        for (c, f, s), st, d in zip(sk[:3, starts].T.tolist(), step_time.tolist(), m["dim"][order][starts].tolist()):
            durations[(c, f, s)] = durations.get((c, f, s), 0.0) + st
            dims[(c, f, s)] = d
    return _simulate(meta, [0], lambda npu, key: durations.get(key, 0.0),
                     lambda key: dims.get(key, meta["collectives"][key[0]]["stages"][key[2]]["dim"]),
                     ndims, mode="symmetric", per_dim_bytes=_per_dim_bytes(t, ndims))


def _simulate(meta, npus, duration, dim_of, ndims, mode, per_dim_bytes) -> Result:
    """FIFO-per-dimension event simulation of phases with known durations (the symmetric case)."""
    chains = _Chains(meta)
    servers = _Dims()
    events = []  # (time, seq, npu, key)
    seq = 0
    rec = {k: [] for k in ("npu", "coll", "flow", "stage", "dim", "start", "end")}

    def start_ready(now, touched):
        nonlocal seq
        for server in sorted(touched):
            key = servers.dispatch(server)
            if key is not None:
                npu = server[0]
                end = now + duration(npu, key)
                for name, v in zip(rec, (npu, *key, server[1], now, end)):
                    rec[name].append(v)
                heapq.heappush(events, (end, seq, npu, key))
                seq += 1

    touched = set()
    for npu in npus:
        for key in chains.initial(npu):
            server = (npu, dim_of(key))
            servers.ready(server, _priority(0.0, *key), key)
            touched.add(server)
    start_ready(0.0, touched)
    while events:
        now = events[0][0]
        touched = set()
        while events and events[0][0] == now:
            _, _, npu, key = heapq.heappop(events)
            server = (npu, dim_of(key))
            servers.release(server)
            touched.add(server)
            for nxt in chains.finished(npu, *key):
                s2 = (npu, dim_of(nxt))
                servers.ready(s2, _priority(now, *nxt), nxt)
                touched.add(s2)
        start_ready(now, touched)
    return _result(meta, mode, rec, ndims, per_dim_bytes)


def _result(meta, mode, rec, ndims, per_dim_bytes) -> Result:
    phases = {k: np.asarray(v) for k, v in rec.items()}
    total = float(phases["end"].max()) if len(phases["end"]) else 0.0
    busy = np.zeros(ndims)
    if len(phases["end"]):
        for npu in np.unique(phases["npu"]):
            sel = phases["npu"] == npu
            b = np.bincount(phases["dim"][sel], weights=(phases["end"] - phases["start"])[sel], minlength=ndims)
            busy = np.maximum(busy, b)
    ends = [float(phases["end"][phases["coll"] == ci].max()) if np.any(phases["coll"] == ci) else 0.0
            for ci in range(len(meta["collectives"]))]
    return Result(mode, total, ndims, phases, [int(x) for x in per_dim_bytes], busy.tolist(), ends)


def _run_full(schedule: Schedule) -> Result:
    """Every NPU, every message: a step ends when its sends are out and its receives have arrived."""
    meta = schedule.meta
    ndims = len(meta["latency_ns"])
    npus = meta["npus"]
    tables = [_table(schedule, n) for n in range(npus)]
    per_dim = np.max([_per_dim_bytes(t, ndims) for t in tables], axis=0) if tables else np.zeros(ndims)
    m = _messages(Table.concat(tables), meta["latency_ns"])
    # per (npu, coll, flow, stage): number of steps, dim; per (npu, phase, step): own send cost, sends, recv count
    sends: dict = {}
    expect: dict = {}
    phase_steps: dict = {}
    phase_dim: dict = {}
    for npu, c, f, s, st, snd, peer, d, cost in zip(*(m[k].tolist() for k in (
            "npu", "coll", "flow", "stage", "step", "send", "peer", "dim", "cost"))):
        pk = (npu, c, f, s)
        phase_steps[pk] = max(phase_steps.get(pk, 0), st + 1)
        phase_dim[(c, s)] = d
        if snd:
            sends.setdefault((pk, st), []).append((peer, cost))
        else:
            expect[(pk, st)] = expect.get((pk, st), 0) + 1
    chains = _Chains(meta)
    servers = _GroupOrder([d["size"] for d in meta["topology"]["dims"]])
    events = []
    seq = 0
    arrived: dict = {}   # (pk, step) -> [count, latest arrival]
    begun: dict = {}     # (pk, step) -> (begin time, own sends done)
    rec = {k: [] for k in ("npu", "coll", "flow", "stage", "dim", "start", "end")}
    starts: dict = {}

    def dim_of(c, s):
        return phase_dim.get((c, s), meta["collectives"][c]["stages"][s]["dim"])

    def push(time, kind, data):
        nonlocal seq
        heapq.heappush(events, (time, seq, kind, data))
        seq += 1

    def begin_step(pk, st, now):
        own = now
        for peer, cost in sends.get((pk, st), ()):
            own = max(own, now + cost)
            rk = ((peer,) + pk[1:], st)
            a = arrived.setdefault(rk, [0, 0.0])
            a[0] += 1
            a[1] = max(a[1], now + cost)
            check(rk)
        begun[(pk, st)] = (now, own)
        check((pk, st))

    def check(sk):
        if sk not in begun:
            return
        pk, st = sk
        a = arrived.get(sk, [0, 0.0])
        if a[0] < expect.get(sk, 0):
            return
        begin, own = begun.pop(sk)
        push(max(own, a[1], begin), "step_done", sk)

    def start_ready(now, touched):
        for server in sorted(touched | servers.flush()):
            key = servers.dispatch(server)
            if key is not None:
                pk = (server[0],) + key
                starts[pk] = now
                begin_step(pk, 0, now) if phase_steps.get(pk, 0) else push(now, "phase_done", pk)

    for npu in range(npus):
        for key in chains.initial(npu):
            servers.ready(npu, dim_of(key[0], key[2]), key, 0.0)
    start_ready(0.0, set())
    while events:
        now = events[0][0]
        touched = set()
        while events and events[0][0] == now:
            _, _, kind, data = heapq.heappop(events)
            if kind == "step_done":
                pk, st = data
                if st + 1 < phase_steps[pk]:
                    begin_step(pk, st + 1, now)
                else:
                    push(now, "phase_done", pk)
                continue
            pk = data
            npu, c, f, s = pk
            server = (npu, dim_of(c, s))
            for name, v in zip(rec, (npu, c, f, s, server[1], starts[pk], now)):
                rec[name].append(v)
            servers.release(server)
            touched.add(server)
            for nxt in chains.finished(npu, c, f, s):
                servers.ready(npu, dim_of(nxt[0], nxt[2]), nxt, now)
        start_ready(now, touched)
    waiting = [k for k, v in expect.items() if arrived.get(k, [0])[0] < v]
    if waiting:
        (npu, c, f, s), st = waiting[0]
        raise DeadlockError(f"NPU {npu} waits forever in collective {c} chunk {f} phase {s} step {st}")
    if servers.count:
        (group, (c, f, s)), _ = next(iter(servers.count.items()))
        raise DeadlockError(f"collective {c} chunk {f} phase {s} never becomes ready on every NPU of its group")
    return _result(meta, "full", rec, ndims, per_dim)
