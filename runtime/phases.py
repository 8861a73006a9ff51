"""What both runtimes share: messages from table rows, phase readiness, the per-dimension admission order, the
event-simulation skeleton (PhaseEngine) and the result record. Imports nothing from the compiler."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from ..network.coords import group_base, strides
from ..network.errors import AstraError
from ..network.links import ROUTED, LinkMap
from ..network.units import gbps_to_bytes_per_ns
from .run_record import INTRA_POLICIES  # noqa: F401 (the option's values, written once with the others)
from .tables import RECV_REDUCE, SEND, Schedule, Table, TableError


class OptionError(AstraError, ValueError):
    """Run options the tables cannot honour (one line; the CLI prints it and exits 2)."""


class DeadlockError(TableError, RuntimeError):
    """The tables cannot run to completion: a receive waits for data that never comes."""


def waits_forever(pk, step: int) -> DeadlockError:
    npu, c, f, s = pk
    return DeadlockError(f"NPU {npu} waits forever in collective {c} chunk {f} phase {s} step {step}")


def never_starts(pk) -> DeadlockError:
    npu, c, f, s = pk
    return DeadlockError(f"NPU {npu} never starts collective {c} chunk {f} phase {s}: an earlier phase of its group "
                         f"never completes")


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
    backend: str = "analytical"
    links: dict = field(default_factory=dict)           # congestion backend: per-link busy time and traffic
    transfers: list = field(default_factory=list)       # congestion backend with a timeline: (link, start, end, ...)
    link_transfers: dict = field(default_factory=dict)  # congestion backend: link transfers simulated / modelled


def messages(t: Table, meta, rotated: bool = False):
    """Aggregate rows into messages: returns dict of arrays keyed like the table plus `cost` (ns): latency per hop
    plus bytes / bandwidth plus the topology's endpoint delay, and `reduced`: the bytes of a receive that are added
    into the buffer (RECV_REDUCE). A routed message (dim -1), and every message on a graph topology, pays the
    latency of each link on its route (network/links.py). Messages come sorted by NPU, collective, chunk, phase,
    step, receives before sends, then peer, then lane; `rotated`: by the peer's distance after the NPU instead of
    the peer (the injection order of the congestion runtime; no transfer may then be with the switch)."""
    if not len(t):
        return {k: np.zeros(0, np.int64) for k in ("npu", "coll", "flow", "stage", "step", "send", "peer", "lane",
                                                   "dim", "bytes", "cost", "link_ns", "hops", "reduced")}
    send = (t["op"] == SEND).astype(np.int64)
    # peer + 1: the keys must be non-negative and a transfer with the switch has peer -1 (tables.SWITCH)
    peer_key = (t["peer"] - t["npu"]) % meta.npus if rotated else t["peer"] + 1
    words = pack_keys([t["npu"], t["coll"], t["flow"], t["stage"], t["step"], send, peer_key, t["lane"]])
    order = np.lexsort(words[::-1]) if len(words) > 1 else np.argsort(words[0], kind="stable")
    first = np.ones(len(order), bool)  # a message starts where any key word changes
    for w in words:
        w = w[order]
        first[1:] = np.logical_and(first[1:], w[1:] == w[:-1], out=first[1:])
    first[1:] = ~first[1:]
    starts = np.flatnonzero(first)
    nbytes = np.add.reduceat(t["bytes"][order], starts)
    reduced = np.add.reduceat(np.where(t["op"][order] == RECV_REDUCE, t["bytes"][order], 0), starts)
    o = order[starts]
    latency = np.asarray(meta.latency_ns, dtype=np.float64)
    dim = t["dim"][o].astype(np.int64)
    lat = latency[np.maximum(dim, 0)] * t["hops"][o]
    graph = meta.topology.get("graph") is not None
    routed = np.flatnonzero((dim == ROUTED) | graph)
    if len(routed):  # the sum of the latencies of the links on the route
        sender = np.where(send[o][routed] == 1, t["npu"][o][routed], t["peer"][o][routed])
        receiver = np.where(send[o][routed] == 1, t["peer"][o][routed], t["npu"][o][routed])
        links = LinkMap(meta.topology)
        start, ids = links.routes(sender, receiver, dim[routed], t["lane"][o][routed], t["hops"][o][routed])
        owner = np.repeat(np.arange(len(routed)), np.diff(start))
        lat[routed] = np.bincount(owner, weights=links.latency(ids), minlength=len(routed))
    link_ns = nbytes / gbps_to_bytes_per_ns(t["gbps"][o])
    cost = lat + link_ns + meta.endpoint_delay_ns   # the endpoints' delay: once per message
    return {"link_ns": link_ns, "hops": t["hops"][o], "npu": t["npu"][o], "coll": t["coll"][o], "flow": t["flow"][o],
            "stage": t["stage"][o], "step": t["step"][o], "send": send[o], "peer": t["peer"][o],
            "lane": t["lane"][o], "dim": t["dim"][o], "bytes": nbytes, "cost": cost, "reduced": reduced}


def pack_keys(keys: list[np.ndarray]) -> list[np.ndarray]:
    """Non-negative integer sort keys (most significant first) packed into as few int64 words as their value ranges
    allow, most significant word first: sorting the words sorts the keys (one argsort instead of an 8-key lexsort)."""
    words, word, used = [], None, 0
    for k in keys:
        k = np.asarray(k, np.int64)
        bits = int(k.max()).bit_length() if len(k) else 0
        if word is None or used + bits > 62:
            if word is not None:
                words.append(word)
            word, used = k.copy(), bits
        else:
            word = (word << bits) | k
            used += bits
    words.append(word if word is not None else np.zeros(0, np.int64))
    return words


def per_dim_bytes(t: Table, meta) -> np.ndarray:
    """Bytes an NPU sends per dimension, the most of any NPU in `t`; a routed message counts on the dimension of
    its first leg."""
    ndims = meta.ndims
    s = np.flatnonzero(t["op"] == SEND)
    dim = t["dim"][s].astype(np.int64)
    routed = dim == ROUTED
    if routed.any():
        owner, (_, _, ldim, _, _) = LinkMap(meta.topology).legs(t["npu"][s][routed], t["peer"][s][routed],
                                                        t["lane"][s][routed])
        first = np.concatenate([[True], owner[1:] != owner[:-1]])
        dim[np.flatnonzero(routed)[owner[first]]] = ldim[first]
    if not len(s):
        return np.zeros(ndims, np.int64)
    npu = t["npu"][s] - t["npu"][s].min()  # a table's NPUs: one, or a batch of consecutive ones
    per_npu = np.bincount(npu * ndims + dim, weights=t["bytes"][s], minlength=(npu.max() + 1) * ndims)
    return per_npu.reshape(-1, ndims).max(axis=0).astype(np.int64)


def table_of(schedule: Schedule, npu: int) -> Table:
    """An NPU's table without the `dep` column's work (the cost models do not read it)."""
    return schedule.table(npu, deps=False)


ROWS_PER_BATCH = 1 << 21  # table rows read at once: enough to amortise the lowering, a bounded peak of memory


def batches(npus, fetch):
    """The tables of `npus` (fetch(npus) -> Table, as tables_of) in batches of about ROWS_PER_BATCH rows, sized by
    the first NPU's table."""
    npus = np.asarray(npus, np.int64)
    if not len(npus):
        return
    first = fetch(npus[:1])
    yield first
    per = max(1, ROWS_PER_BATCH // max(1, len(first)))
    for a in range(1, len(npus), per):
        yield fetch(npus[a:a + per])


def _builds_many(schedule: Schedule) -> bool:
    """Does the schedule build several NPUs' tables in one go (the optional Schedule.tables)?"""
    return callable(getattr(schedule, "tables", None))


def tables_by_npu(schedule: Schedule, npus) -> dict:
    """Each NPU's table without the `dep` column's work, built batch by batch where the schedule can
    (Schedule.tables) and cut at NPU boundaries."""
    npus = sorted(int(n) for n in npus)
    if not _builds_many(schedule):
        return {n: table_of(schedule, n) for n in npus}
    out = {}

    def fetch(batch):   # each batch cut at its NPUs as it is read
        t = schedule.tables(batch)
        out.update(t.split(batch))
        return t
    for _ in batches(npus, fetch):
        pass
    return out


def tables_of(schedule: Schedule, npus, ordered: bool = True) -> Table:
    """The tables of several NPUs joined, each NPU's rows in its table's order (`ordered`; otherwise in any order):
    the lowering builds them in one go (Schedule.tables); another schedule gives them one by one."""
    if _builds_many(schedule):
        return schedule.tables(npus, ordered)
    return Table.concat([table_of(schedule, int(n)) for n in npus])


class GroupOrder:
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
        self.strides = strides(shape)
        self.npus = int(np.prod(shape))
        self.count: dict = {}     # (group, key) -> [members ready, latest ready time]
        self.eligible: dict = {}  # group -> heap of (priority, key)
        self.order: dict = {}     # group -> list of keys
        self.position: dict = {}  # (npu, dim) -> index of its next phase in its group's order
        self.running: dict = {}   # (npu, dim) -> phases in progress
        self.touched: set = set()

    def size(self, dim: int) -> int:
        return self.npus if dim < 0 else self.shape[dim]  # dim -1: a phase over the whole network

    def group(self, npu: int, dim: int):
        if dim < 0:
            return dim, 0
        return dim, group_base(npu, self.shape[dim], self.strides[dim])

    def members(self, group):
        dim, base = group
        if dim < 0:
            return list(range(self.npus))
        return [base + i * self.strides[dim] for i in range(self.shape[dim])]

    def ready(self, npu: int, dim: int, key, now: float) -> None:
        group = self.group(npu, dim)
        c = self.count.setdefault((group, key), [0, 0.0])
        c[0] += 1
        c[1] = max(c[1], now)
        if c[0] == self.size(dim):
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


def successors(meta) -> dict:
    """For each collective: the phases that wait on (coll, flow, last stage) finishing."""
    succ = {}
    for ci, c in enumerate(meta.collectives):
        for d in c.deps:
            succ.setdefault(d, []).append(ci)
    return succ


def dep_flows(meta, producer: int, consumer: int, flow: int):
    """Chunks of `consumer` released when chunk `flow` of `producer` finishes.

    Chunk by chunk only inside one buffer (an all_reduce's all_gather half picks up each chunk its reduce_scatter
    half finished); a collective on another buffer waits for the whole producer (None)."""
    p, c = meta.collectives[producer], meta.collectives[consumer]
    return [flow] if p.buffer == c.buffer and p.chunks == c.chunks else None


class Chains:
    """Readiness of phases: chunk chains inside a collective and per-chunk dependencies between collectives."""

    def __init__(self, meta):
        self.meta = meta
        self.colls = meta.collectives
        self.succ = successors(meta)
        self.waiting = {}   # (npu, coll, flow) -> number of producer chunks still running
        self.done_all = {}  # (npu, coll) -> chunks done

    def initial(self, npu):
        out = []
        for ci, c in enumerate(self.colls):
            for f in range(c.chunks):
                self.waiting[(npu, ci, f)] = len(c.deps)
                if not c.deps:
                    out.append((ci, f, 0))
        return out

    def finished(self, npu, coll, flow, stage):
        """Phases made ready by (coll, flow, stage) finishing on npu."""
        c = self.colls[coll]
        if stage + 1 < len(c.stages):
            return [(coll, flow, stage + 1)]
        out = []
        self.done_all[(npu, coll)] = self.done_all.get((npu, coll), 0) + 1
        for consumer in self.succ.get(coll, []):
            flows = dep_flows(self.meta, coll, consumer, flow)
            if flows is None:
                if self.done_all[(npu, coll)] < c.chunks:
                    continue
                flows = range(self.colls[consumer].chunks)
            for f in flows:
                self.waiting[(npu, consumer, f)] -= 1
                if self.waiting[(npu, consumer, f)] == 0:
                    out.append((consumer, f, 0))
        return out


def phase_dim(meta, key) -> int:
    """Dimension of phase key = (coll, chunk, stage); -1 for a phase over every dimension (graph algorithms)."""
    return meta.collectives[key[0]].chunk_dims[key[1]][key[2]]


def priority_key(intra: str, size: float, ready_ns: float, coll: int, flow: int, stage: int):
    """Service order of ready phases on a dimension: first-in first-out, or smallest chunk first (SCF: the phase
    with the smallest region, ties first-in first-out)."""
    if intra == "scf":
        return (size, ready_ns, flow, coll, stage)
    return (ready_ns, flow, coll, stage)


def phase_sizes(t: Table) -> dict:
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


def make_result(meta, mode, rec, ndims, per_dim_bytes) -> Result:
    phases = {k: np.asarray(v) for k, v in rec.items()}
    total = float(phases["end"].max()) if len(phases["end"]) else 0.0
    busy = np.zeros(ndims)
    for d in range(ndims):  # a phase over every dimension (dim -1) keeps them all busy
        sel = np.flatnonzero((phases["dim"] == d) | (phases["dim"] == -1))
        npu = phases["npu"][sel]
        order = np.argsort(npu, kind="stable")   # each NPU's phases together, in record order
        sel, npu = sel[order], npu[order]
        cuts = np.flatnonzero(npu[1:] != npu[:-1]) + 1
        for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(sel)]]).tolist()):
            if b > a:
                busy[d] = max(busy[d], union_length(phases["start"][sel[a:b]], phases["end"][sel[a:b]]))
    ends = [float(phases["end"][phases["coll"] == ci].max()) if np.any(phases["coll"] == ci) else 0.0
            for ci in range(len(meta.collectives))]
    return Result(mode, total, ndims, phases, [int(x) for x in per_dim_bytes], busy.tolist(), ends)


def union_length(start: np.ndarray, end: np.ndarray) -> float:
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


class PhaseEngine:
    """The event-simulation skeleton both runtimes share.

    It keeps the clock and the event queue, admits up to `active` phases per (NPU, dimension) in the order the
    dimension's group shares (GroupOrder), releases each chunk's next phase when one finishes (Chains), records
    every phase and reports deadlocks. A runtime says how the steps of a phase run: `start_phase(pk, now)` when a
    phase is admitted, `on_event(kind, data, now)` for its own events, `serve(now)` once per instant after
    admission, and calls `step_finished(pk, step, now)` when a step completes. All events of one instant are
    handled before anything is admitted or served, so simultaneous events cannot overtake one another."""

    def __init__(self, meta, tables: dict, intra: str, active: int, symmetric: bool):
        self.meta, self.active, self.symmetric = meta, active, symmetric
        self.mode = "symmetric" if symmetric else "full"
        self.ndims = meta.ndims
        self.npus = meta.npus
        self.simulated = list(tables)
        shape = meta.shape
        sizes = {n: phase_sizes(t) for n, t in tables.items()}
        self.order = GroupOrder([1] * len(shape) if symmetric else shape,
                                lambda npu, now, key: priority_key(intra, sizes[npu].get(key, 0), now, *key))
        self.per_dim = np.max([per_dim_bytes(t, meta) for t in tables.values()], axis=0)
        self.steps: dict = {}     # (npu, coll, flow, stage) -> per-step records of the runtime
        self.begun: dict = {}     # (pk, step) started and not yet finished
        self.events: list = []
        self.seq = 0
        self.starts: dict = {}
        self.rec = {k: [] for k in ("npu", "coll", "flow", "stage", "dim", "start", "end")}
        self.chains = Chains(meta)

    def push(self, time: float, kind: str, data) -> None:
        heapq.heappush(self.events, (time, self.seq, kind, data))
        self.seq += 1

    def dim_of(self, key) -> int:
        return phase_dim(self.meta, key)

    def nsteps(self, pk) -> int:
        return len(self.steps.get(pk, ()))

    def start_phase(self, pk, now: float) -> None:
        raise NotImplementedError

    def on_event(self, kind: str, data, now: float) -> None:
        raise NotImplementedError

    def serve(self, now: float) -> None:
        """After the instant's events and admissions: start what the runtime's resources can take now."""

    def step_finished(self, pk, step: int, now: float) -> None:
        if step + 1 < self.nsteps(pk):
            self.start_step(pk, step + 1, now)
        else:
            self.push(now, "phase_done", pk)

    def start_step(self, pk, step: int, now: float) -> None:
        raise NotImplementedError

    def _finish_phase(self, pk, now: float, servers: set) -> None:
        npu, c, f, s = pk
        d = self.dim_of((c, f, s))
        for name, v in zip(self.rec, (npu, c, f, s, d, self.starts[pk], now)):
            self.rec[name].append(v)
        self.order.release((npu, d))
        servers.add((npu, d))
        for nxt in self.chains.finished(npu, c, f, s):
            self.order.ready(npu, self.dim_of(nxt), nxt, now)

    def _admit(self, now: float, servers) -> None:
        for server in sorted(servers):
            while self.order.active(server) < self.active:
                key = self.order.dispatch(server)
                if key is None:
                    break
                pk = (server[0],) + key
                self.starts[pk] = now
                if self.nsteps(pk):
                    self.start_phase(pk, now)
                else:
                    self.push(now, "phase_done", pk)

    def simulate(self) -> Result:
        self.execute()
        return make_result(self.meta, self.mode, self.rec, self.ndims, self.per_dim)

    def execute(self) -> None:
        """Run every event; afterwards self.rec holds every phase's record in the order the phases finished."""
        for npu in self.simulated:
            for key in self.chains.initial(npu):
                self.order.ready(npu, self.dim_of(key), key, 0.0)
        self._admit(0.0, self.order.flush())
        self.serve(0.0)
        while self.events:
            now = self.events[0][0]
            servers: set = set()
            while self.events and self.events[0][0] == now:
                _, _, kind, data = heapq.heappop(self.events)
                if kind == "phase_done":
                    self._finish_phase(data, now, servers)
                else:
                    self.on_event(kind, data, now)
            self._admit(now, servers | self.order.flush())
            self.serve(now)
        if self.begun:  # a step that started but whose receives never all came
            raise waits_forever(*min(self.begun))
        never = sorted(pk for pk in self.steps if pk not in self.starts)
        if never:
            raise never_starts(never[0])
