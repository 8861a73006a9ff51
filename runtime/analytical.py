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
                                                   "dim", "bytes", "cost", "link_ns")}
    send = (t["op"] == SEND).astype(np.int64)
    keys = (t["lane"], t["peer"], send, t["step"], t["stage"], t["flow"], t["coll"], t["npu"])
    order = np.lexsort(keys)
    sk = np.stack([k[order].astype(np.int64) for k in keys])
    first = np.concatenate([[True], np.any(sk[:, 1:] != sk[:, :-1], axis=0)])
    starts = np.flatnonzero(first)
    nbytes = np.add.reduceat(t["bytes"][order], starts)
    o = order[starts]
    lat = np.asarray(latency_ns, dtype=np.float64)[t["dim"][o]]
    link_ns = nbytes / (t["gbps"][o] * GIB / 1e9)
    cost = lat * t["hops"][o] + link_ns
    return {"link_ns": link_ns, "npu": t["npu"][o], "coll": t["coll"][o], "flow": t["flow"][o], "stage": t["stage"][o],
            "step": t["step"][o], "send": send[o], "peer": t["peer"][o], "lane": t["lane"][o], "dim": t["dim"][o],
            "bytes": nbytes, "cost": cost}


def _per_dim_bytes(t: Table, ndims: int) -> np.ndarray:
    s = t["op"] == SEND
    return np.bincount(t["dim"][s].astype(np.int64), weights=t["bytes"][s], minlength=ndims).astype(np.int64)


class _GroupOrder:
    """Service of phases on a dimension in one order shared by every member of the dimension's group.

    A phase becomes eligible on a (dimension, group) when the last member of the group has it ready. When a member
    needs its next phase and the group's order has none left for it, the group picks the best eligible phase by the
    intra-dimension policy and appends it to the order; every member starts the group's phases in that order, each
    as soon as its own previous phase on the dimension is done. A per-NPU order could let two members start
    different chunks on the same dimension and wait on each other forever (as NCCL requires, all ranks of a
    communicator issue their collectives in the same order)."""

    def __init__(self, shape: list[int], priority):
        self.shape = shape
        self.priority = priority  # (npu, now, key) -> sort key
        self.strides = [int(np.prod(shape[:d])) for d in range(len(shape))]
        self.count: dict = {}     # (group, key) -> [members ready, latest ready time]
        self.eligible: dict = {}  # group -> heap of (priority, key)
        self.order: dict = {}     # group -> list of keys
        self.position: dict = {}  # (npu, dim) -> index of its next phase in its group's order
        self.running: dict = {}   # (npu, dim) -> phases in progress
        self.touched: set = set()

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
            heapq.heappush(self.eligible.setdefault(group, []), (self.priority(npu, c[1], key), key))
            self.touched.update((m, dim) for m in self.members(group))

    def flush(self) -> set:
        """Servers whose group gained eligible phases since the last call."""
        out, self.touched = self.touched, set()
        return out

    def active(self, server) -> int:
        return self.running.get(server, 0)

    def dispatch(self, server):
        """The next phase `server` (npu, dim) should start, in its group's order, or None."""
        npu, dim = server
        group = self.group(npu, dim)
        order = self.order.setdefault(group, [])
        pos = self.position.get(server, 0)
        if pos >= len(order):
            if not self.eligible.get(group):
                return None
            order.append(heapq.heappop(self.eligible[group])[1])
        self.position[server] = pos + 1
        self.running[server] = self.running.get(server, 0) + 1
        return order[pos]

    def release(self, server) -> None:
        self.running[server] -= 1


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


INTRA_POLICIES = ("fifo", "scf")


def _priority(intra: str, size: float, ready_ns: float, coll: int, flow: int, stage: int):
    """Service order of ready phases on a dimension: first-in first-out, or smallest chunk first (SCF: the phase
    with the smallest region, ties first-in first-out)."""
    if intra == "scf":
        return (size, ready_ns, flow, coll, stage)
    return (ready_ns, flow, coll, stage)


def _phase_sizes(t: Table) -> dict:
    """(coll, flow, stage) -> bytes of the region the phase works on (the span of its rows on this NPU)."""
    if not len(t):
        return {}
    key = np.stack([t["coll"], t["flow"], t["stage"]]).astype(np.int64)
    order = np.lexsort(key[::-1])
    k = key[:, order]
    starts = np.flatnonzero(np.concatenate([[True], np.any(k[:, 1:] != k[:, :-1], axis=0)]))
    lo = np.minimum.reduceat(t["offset"][order], starts)
    hi = np.maximum.reduceat((t["offset"] + t["bytes"])[order], starts)
    return dict(zip(map(tuple, k[:, starts].T.tolist()), (hi - lo).tolist()))


def run(schedule: Schedule, mode: str = "auto", intra: str = "fifo", active_chunks: int = 1) -> Result:
    """Execute the tables.

    mode: auto | symmetric | full; intra: the per-dimension queue policy, fifo | scf; active_chunks: phases a
    dimension works on at once (ASTRA-sim's active-chunks-per-dimension)."""
    meta = schedule.meta
    if intra not in INTRA_POLICIES:
        raise ValueError(f"unknown intra-dimension policy {intra}")
    if active_chunks < 1:
        raise ValueError("active_chunks must be at least 1")
    if mode == "auto":
        mode = "symmetric" if meta.get("symmetric") else "full"
    if mode not in ("symmetric", "full"):
        raise ValueError(f"unknown mode {mode}")
    npus = [0] if mode == "symmetric" else list(range(meta["npus"]))
    return _Engine(meta, {n: _table(schedule, n) for n in npus}, mode, intra, active_chunks).run()


def _table(schedule: Schedule, npu: int) -> Table:
    try:
        return schedule.table(npu, deps=False)
    except TypeError:
        return schedule.table(npu)


class _Engine:
    """Event simulation shared by both executions.

    Per NPU and dimension: up to `active` phases in progress, admitted in one order per dimension group (policy
    fifo or scf); their ready steps queue first-in first-out for the dimension's links, which serialise one step
    at a time (the step's longest transmission, bytes / link bandwidth). A step starts when the links take it: its
    messages leave, arrive latency x hops + bytes / bandwidth later, and the step ends when its own messages have
    arrived and those it receives have come in. With active = 1 a phase's steps follow each other with nothing in
    between (ASTRA-sim's baseline); with more, other chunks' steps use the links while a step's latency elapses.
    In symmetric mode only NPU 0 runs and a message it receives in a step arrives as its own twin message would."""

    def __init__(self, meta, tables: dict, mode: str, intra: str, active: int):
        self.meta, self.mode, self.active = meta, mode, active
        self.ndims = len(meta["latency_ns"])
        self.npus = list(tables)
        self.symmetric = mode == "symmetric"
        shape = [d["size"] for d in meta["topology"]["dims"]]
        sizes = {n: _phase_sizes(t) for n, t in tables.items()}
        self.order = _GroupOrder([1] * len(shape) if self.symmetric else shape,
                                 lambda npu, now, key: _priority(intra, sizes[npu].get(key, 0), now, *key))
        self.per_dim = np.max([_per_dim_bytes(t, self.ndims) for t in tables.values()], axis=0)
        self._build_steps(Table.concat(list(tables.values())))

    def _build_steps(self, table: Table) -> None:
        """steps[(npu, c, f, s)] = list of [link time, sends [(peer, cost)], own cost, receives, own-receive cost]."""
        m = _messages(table, self.meta["latency_ns"])
        self.steps, self.dim = {}, {}
        cols = [m[k].tolist() for k in ("npu", "coll", "flow", "stage", "step", "send", "peer", "dim", "cost",
                                        "link_ns")]
        for npu, c, f, s, st, snd, peer, d, cost, link_ns in zip(*cols):
            pk = (npu, c, f, s)
            steps = self.steps.setdefault(pk, [])
            while len(steps) <= st:
                steps.append([0.0, [], 0.0, 0, 0.0])
            rec = steps[st]
            self.dim[pk] = d
            if snd:
                rec[0] = max(rec[0], link_ns)
                rec[1].append((peer, cost))
                rec[2] = max(rec[2], cost)
            else:
                rec[3] += 1
                rec[4] = max(rec[4], cost)

    def dim_of(self, npu, key) -> int:
        return self.dim.get((npu,) + key, self.meta["collectives"][key[0]]["chunk_dims"][key[1]][key[2]])

    def run(self) -> Result:
        chains = _Chains(self.meta)
        events = []   # (time, seq, kind, data)
        seq = 0
        links: dict = {}      # (npu, dim) -> heap of (ready time, seq, (pk, step))
        link_busy: set = set()
        arrived: dict = {}    # (pk, step) -> [count, latest arrival]
        begun: dict = {}      # (pk, step) -> (begin, own messages done)
        starts: dict = {}
        rec = {k: [] for k in ("npu", "coll", "flow", "stage", "dim", "start", "end")}

        def push(time, kind, data):
            nonlocal seq
            heapq.heappush(events, (time, seq, kind, data))
            seq += 1

        def step_ready(pk, st, now, touched):
            nonlocal seq
            server = (pk[0], self.dim_of(pk[0], pk[1:]))
            heapq.heappush(links.setdefault(server, []), (now, seq, (pk, st)))
            seq += 1
            touched.add(("link",) + server)

        def begin(pk, st, now):
            link_ns, sends, own, _, self_recv = self.steps[pk][st] if st < len(self.steps.get(pk, ())) else \
                (0.0, (), 0.0, 0, 0.0)
            for peer, cost in sends:
                if not self.symmetric:
                    rk = ((peer,) + pk[1:], st)
                    a = arrived.setdefault(rk, [0, 0.0])
                    a[0] += 1
                    a[1] = max(a[1], now + cost)
                    check(rk)
            if self.symmetric:  # the twin of every message it receives left its peer now
                arrived[(pk, st)] = [self.steps[pk][st][3] if st < len(self.steps.get(pk, ())) else 0,
                                     now + self_recv]
            begun[(pk, st)] = (now, now + own)
            check((pk, st))
            return link_ns

        def check(sk):
            if sk not in begun:
                return
            pk, st = sk
            expect = self.steps[pk][st][3] if st < len(self.steps.get(pk, ())) else 0
            a = arrived.get(sk, [0, 0.0])
            if a[0] < expect:
                return
            b, own = begun.pop(sk)
            arrived.pop(sk, None)
            push(max(own, a[1], b), "step_done", sk)

        def dispatch(now, touched):
            touched |= {("phase",) + s for s in self.order.flush()}
            for item in sorted(touched):
                if item[0] == "phase":
                    server = item[1:]
                    while self.order.active(server) < self.active:
                        key = self.order.dispatch(server)
                        if key is None:
                            break
                        pk = (server[0],) + key
                        starts[pk] = now
                        step_ready(pk, 0, now, touched)
            for item in sorted(t for t in touched if t[0] == "link"):
                server = item[1:]
                if server in link_busy or not links.get(server):
                    continue
                _, _, (pk, st) = heapq.heappop(links[server])
                link_busy.add(server)
                push(now + begin(pk, st, now), "link_free", server)

        for npu in self.npus:
            for key in chains.initial(npu):
                self.order.ready(npu, self.dim_of(npu, key), key, 0.0)
        dispatch(0.0, set())
        while events:
            now = events[0][0]
            touched = set()
            while events and events[0][0] == now:
                _, _, kind, data = heapq.heappop(events)
                if kind == "link_free":
                    link_busy.discard(data)
                    touched.add(("link",) + data)
                    continue
                if kind == "step_done":
                    pk, st = data
                    if st + 1 < len(self.steps.get(pk, ())):
                        step_ready(pk, st + 1, now, touched)
                        continue
                npu, c, f, s = pk
                d = self.dim_of(npu, (c, f, s))
                for name, v in zip(rec, (npu, c, f, s, d, starts[pk], now)):
                    rec[name].append(v)
                self.order.release((npu, d))
                touched.add(("phase", npu, d))
                for nxt in chains.finished(npu, c, f, s):
                    self.order.ready(npu, self.dim_of(npu, nxt), nxt, now)
            dispatch(now, touched)
        if begun:  # a step that started but whose receives never all came
            (npu, c, f, s), st = min(begun)
            raise DeadlockError(f"NPU {npu} waits forever in collective {c} chunk {f} phase {s} step {st}")
        never = sorted(pk for pk in self.steps if pk not in starts)
        if never:
            npu, c, f, s = never[0]
            raise DeadlockError(f"NPU {npu} never starts collective {c} chunk {f} phase {s}: an earlier phase of its "
                                f"group never completes")
        return _result(self.meta, self.mode, rec, self.ndims, self.per_dim)


def _result(meta, mode, rec, ndims, per_dim_bytes) -> Result:
    phases = {k: np.asarray(v) for k, v in rec.items()}
    total = float(phases["end"].max()) if len(phases["end"]) else 0.0
    busy = np.zeros(ndims)
    for npu in np.unique(phases["npu"]) if len(phases["end"]) else []:
        for d in range(ndims):
            sel = (phases["npu"] == npu) & (phases["dim"] == d)
            busy[d] = max(busy[d], _union_length(phases["start"][sel], phases["end"][sel]))
    ends = [float(phases["end"][phases["coll"] == ci].max()) if np.any(phases["coll"] == ci) else 0.0
            for ci in range(len(meta["collectives"]))]
    return Result(mode, total, ndims, phases, [int(x) for x in per_dim_bytes], busy.tolist(), ends)


def _union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of intervals: how long a dimension had at least one phase in progress."""
    if not len(start):
        return 0.0
    order = np.argsort(start)
    total, cur_s, cur_e = 0.0, start[order[0]], end[order[0]]
    for a, b in zip(start[order][1:].tolist(), end[order][1:].tolist()):
        if a > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return float(total + cur_e - cur_s)
