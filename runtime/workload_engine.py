"""Workload engine: execute each rank's step program with one compute stream and one stream per process group.

Input is one `ProgramTable` per rank: numpy columns, one row per op in issue order, with dependencies as a CSR
list of earlier rows. Compute rows carry FLOPs and bytes and take their time from the roofline, or a profiler's
measured time when they have one; collective rows
carry the time their schedule tables took in a network runtime (analytical or congestion); memory rows (loads and
stores) the time of the memory model (network/memory.py) of their location.

Stream semantics are CUDA's as PyTorch uses them:
- the compute stream runs its ops in issue order;
- a collective runs on its process group's communication stream, in issue order there, and (as
  ProcessGroupNCCL makes the communication stream wait on the compute stream when a collective is issued)
  starts only after every compute op issued before it has finished;
- a wait row (wait_tensor, work.wait) blocks the compute stream until its collective is done;
- a load or store runs on its memory (one for local memory, one for the remote pool), which serves one at a time,
  first ready first served: it starts when its data dependencies are done and the memory is free, so a prefetch
  overlaps the compute before it and a store waiting for its data does not hold up a later load.
Across ranks a collective starts when every member of its group has reached it (rows with the same `sync` id).
An SPMD program (one rank standing for all) needs no matching: every rank reaches every collective together.
A point-to-point message (P2P rows: a send and its receive, on a stream per pair of ranks) starts when both ends
have reached it, in SPMD programs too: a pipeline's stages are programs of their own that message each other.

Those are the "streams" step semantics, this tool's own and the default. The "astra-sim" semantics follow
ASTRA-sim's workload layer (read in its source: workload/HardwareResource.cc, workload/Workload.cc) on top of the
same order between rows (which `--emit chakra` writes into the traces as dependencies, so ASTRA-sim sees it too):
- an NPU has one collective or send in flight at a time (HardwareResource::occupy asserts none is; a receive does
  not count): a ready one waits for the one in flight, and when it ends the ready ones go in row order (issue order:
  Workload::issue_dep_free_nodes walks the dependency-free nodes by id);
- a send is eager: it goes as soon as its sender issues it and ends on arrival, and its receive ends when both the
  receive is posted and the message has arrived.

Collectives in flight at the same time share the links they use (runtime/link_sharing.py): a collective or
message row's `use` gives the fraction of its time it occupies each link (an NPU and a link class: a dimension's
slot), and concurrent ones on the same link progress at max-min fair rates. The engine is therefore event-driven: a row starts when its
predecessors (its data dependencies, the previous row of its stream, and for a collective the compute issued
before it) have ended, and a collective's end is known only when the rates of everything in flight beside it are.
"""
from __future__ import annotations

import collections
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ..network.errors import AstraError
from .link_sharing import fair_rates
from .run_record import ASTRA_SIM, SEMANTICS, STREAMS  # noqa: F401 (the step semantics, module docstring)

from ..network.compute_model import ComputeModel
from ..network.dtypes import DTYPES, FP32, NO_DTYPE
from ..network.units import gbps_to_bytes_per_ns

COMPUTE, COLLECTIVE, WAIT, P2P, MEMORY = 0, 1, 2, 3, 4
COMMUNICATION = (COLLECTIVE, P2P)
LOCAL_STREAM, REMOTE_STREAM = -2, -3   # a memory row's stream: its memory, one transfer at a time (compute: -1)
# the step-time breakdown of ASTRA-sim 2.0 (Fig. 4): each instant goes to the first of these that is busy, else idle
BREAKDOWN = ("compute", "exposed_local_memory", "exposed_remote_memory", "exposed_comm", "idle")


class WorkloadError(AstraError):
    """The programs cannot run: ranks wait on collectives their partners never issue."""


@dataclass
class Roofline:
    """Compute time of an op: the larger of its FLOPs at peak rate and its bytes at memory bandwidth. Without
    `dtype_tflops` one peak serves every dtype (the defaults, or --peak-tflops); a --gpu device gives a peak per
    dtype (network/dtypes.py codes), its fp32 entry being `peak_tflops`, and its compute model (`model`,
    network/compute_model.py): each op's time by its op class and GEMM shape, and the host's time to issue it."""
    peak_tflops: float = 234.0   # ASTRA-sim 2.0's A100 figure
    mem_gbps: float = 1896.0     # A100-80GB HBM2e, 2039 GB/s decimal = 1896 GB/s in 2^30 units
    dtype_tflops: tuple | None = None   # TFLOP/s per dtype code (None: peak_tflops for all)
    model: ComputeModel | None = None   # a --gpu device's efficiency model (None: the plain roofline)

    def time_ns(self, flops: np.ndarray, nbytes: np.ndarray, dtype: np.ndarray | None = None,
                op_class: np.ndarray | None = None, gemm: np.ndarray | None = None,
                causal: np.ndarray | None = None) -> np.ndarray:
        """`dtype`: each row's dtype code (NO_DTYPE: fp32, PyTorch's default), or None: every row at peak_tflops.
        With a model and `op_class` (network/op_classes codes; `gemm`: (n, 4) GEMM dimensions or None; `causal`:
        attention rows that masked causally, or None) the model's kernel time; the plain roofline ignores `causal`
        (the FLOPs it times are the counted ones)."""
        peaks = self.dtype_tflops if self.dtype_tflops is not None else (self.peak_tflops,) * len(DTYPES)
        if self.model is not None and op_class is not None:
            codes = np.full(np.shape(flops), FP32) if dtype is None else np.asarray(dtype)
            kernel = self.model.kernel_ns(peaks, gbps_to_bytes_per_ns(self.mem_gbps), op_class, codes, flops,
                                          nbytes, gemm, causal)
            return np.where(launches(flops, nbytes), kernel, 0.0)
        peak = self.peak_tflops
        if dtype is not None and self.dtype_tflops is not None:
            codes = np.asarray(dtype)
            peak = np.asarray(self.dtype_tflops, dtype=float)[np.where(codes == NO_DTYPE, FP32, codes)]
        return np.maximum(flops / (peak * 1e3), nbytes / gbps_to_bytes_per_ns(self.mem_gbps))

    def issued_ns(self, kind: np.ndarray, op_class: np.ndarray | None, views: np.ndarray | None = None,
                  flops: np.ndarray | None = None, nbytes: np.ndarray | None = None) -> np.ndarray | None:
        """When the host has issued each row: the host issues compute ops one after another, each taking its
        class's host time and that of the `views` dispatched before it (network/compute_model.py; None: none);
        a compute row that launches nothing (`launches`: an execution trace's view) costs one view's time.
        None without a model or op classes: rows are ready when their inputs are."""
        if self.model is None or op_class is None:
            return None
        host = self.model.host_ns(op_class, views)
        if flops is not None and nbytes is not None:
            host = np.where(launches(flops, nbytes), host, self.model.value("view_us") * 1e3)
        return np.cumsum(np.where(kind == COMPUTE, host, 0.0))


def launches(flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Does a compute row launch a kernel? Not one of no FLOPs and no bytes: a view or an allocation, which the
    capture leaves out but an execution trace records as an op (the compute model times it 0, its host a view's)."""
    return (np.asarray(flops) > 0) | (np.asarray(nbytes) > 0)


@dataclass
class ProgramTable:
    rank: int
    kind: np.ndarray          # COMPUTE | COLLECTIVE | WAIT | P2P | MEMORY
    flops: np.ndarray         # compute rows
    nbytes: np.ndarray        # compute rows: bytes read + written
    duration_ns: np.ndarray   # collective rows: time of the collective's schedule; P2P rows: the message's; MEMORY
    #                           rows: the load's or store's
    stream: np.ndarray        # collective rows: communication stream (one per process group; P2P: per pair);
    #                           MEMORY rows: LOCAL_STREAM or REMOTE_STREAM; else 0
    sync: np.ndarray          # collective and P2P rows: id shared by the same collective on every member rank
    group_size: np.ndarray    # collective and P2P rows: ranks that must reach it
    dep_ptr: np.ndarray       # deps of row i: dep_idx[dep_ptr[i]:dep_ptr[i + 1]]
    dep_idx: np.ndarray
    measured_ns: np.ndarray | None = None   # compute rows: a profiler's measured time (NaN: use the roofline)
    # per row: {(owner, link class): fraction of its time it occupies that link}, owner -1 = the row's own rank
    # (a collective's links on each member), else a global NPU (a message's route); None or {}: it shares nothing
    use: list | None = None
    sends: np.ndarray | None = None   # P2P rows: True at the sending end (the astra-sim semantics' eager sends)
    dtype: np.ndarray | None = None   # compute rows: the network/dtypes code of the dtype it ran in (None: fp32)
    # compute rows: the network/op_classes.CODE of the op's class (other rows 0; None: not known)
    op_class: np.ndarray | None = None
    # compute rows: (batch, m, n, k) of the GEMM a matmul or convolution runs (op_classes.gemm_dims), an (n, 4)
    # int64 array; zeros where it is none or its shapes are not known (None: not known for any row)
    gemm: np.ndarray | None = None
    # compute rows: True where an attention op masked causally (network/compute_model.attention_factor; None: none)
    causal: np.ndarray | None = None
    # compute rows: the kernel-less ops (views) the host dispatched before each, int32 (network/compute_model.py
    # view_us; None: no row has any)
    views: np.ndarray | None = None


@dataclass
class RankTimes:
    start_ns: np.ndarray
    end_ns: np.ndarray
    total_ns: float
    compute_ns: float         # busy time of the compute stream
    comm_ns: float            # sum of collective durations
    exposed_comm_ns: float    # step time the compute stream spends waiting for other than the host:
    #                           total - compute - host_wait
    measured_ns: float = 0.0  # the part of compute_ns a profiler measured (the rest is the roofline's)
    measured_ops: int = 0
    local_memory_ns: float = 0.0    # sum of local loads' and stores' times
    remote_memory_ns: float = 0.0   # sum of remote loads' and stores' times
    breakdown_ns: dict = field(default_factory=dict)   # BREAKDOWN -> ns; they add up to total_ns
    host_wait_ns: float = 0.0       # compute stream idle, its next op ready but not yet issued by the host
    host_issue_ns: float = 0.0      # when the host has issued the step's last compute op (0: no compute model)


@dataclass
class WorkloadResult:
    ranks: dict[int, RankTimes] = field(default_factory=dict)

    @property
    def total_ns(self) -> float:
        return max(r.total_ns for r in self.ranks.values())


class _Rank:
    """One program: row durations and the predecessor graph the stream semantics give."""

    def __init__(self, index: int, table: ProgramTable, roofline: Roofline):
        self.index, self.t = index, table
        n = len(table.kind)
        compute = roofline.time_ns(table.flops, table.nbytes, table.dtype, table.op_class, table.gemm, table.causal)
        # an eager host issues the compute ops one after another: op i's kernel starts no earlier than the host has
        # issued ops 0..i (None without a compute model)
        self.issued = roofline.issued_ns(table.kind, table.op_class, table.views, table.flops, table.nbytes)
        self.host_wait = 0.0   # time the compute stream sat idle, its next op ready but not yet issued
        self.measured = np.zeros(n, bool) if table.measured_ns is None else \
            (table.kind == COMPUTE) & ~np.isnan(table.measured_ns)
        if self.measured.any():
            compute = np.where(self.measured, table.measured_ns, compute)
        moves = np.isin(table.kind, COMMUNICATION + (MEMORY,))
        self.dur = np.where(table.kind == COMPUTE, compute, np.where(moves, table.duration_ns, 0.0))
        self.start, self.end = np.full(n, np.nan), np.full(n, np.nan)
        self.took = self.dur.copy()               # a collective's time in the step: longer when it was slowed
        # the simulation reads these once per row and per successor (a million rows for a 175B GPT's pipeline):
        # Python lists, an element of which is read several times faster than a numpy array's
        self.waiting = [0] * n                    # predecessors not yet ended
        self.kind = table.kind.tolist()
        self.durs = self.dur.tolist()
        self.issued_at = None if self.issued is None else self.issued.tolist()
        self.comm_ready: list = []                # astra-sim semantics: collectives and sends ready, by row
        self.comm_busy = -1                       # the one in flight (-1: none)
        self.succ: list[list[int]] = [[] for _ in range(n)]
        kind, ptr, idx = self.kind, table.dep_ptr.tolist(), table.dep_idx.tolist()
        streams = table.stream.tolist()
        last_on: dict = {}   # stream -> its latest row; the compute stream is -1
        for i in range(n):
            preds = set(idx[ptr[i]:ptr[i + 1]])
            if kind[i] == MEMORY:   # no stream order: it queues at its memory (_Simulation.memory)
                on = None
            else:
                on = streams[i] if kind[i] in COMMUNICATION else -1
            if on in last_on:
                preds.add(last_on[on])
            if kind[i] in COMMUNICATION and -1 in last_on:   # the communication stream waits for the compute
                preds.add(last_on[-1])                        # issued before
            if on is not None:
                last_on[on] = i
            self.waiting[i] = len(preds)
            for p in preds:
                self.succ[p].append(i)


@dataclass(eq=False)
class _Job:
    """One collective in flight: its rows on every member rank, the alone-time left and the current rate."""
    rows: list
    left: float
    since: float
    use: dict
    rate: float = 1.0
    slowed: bool = False

    def finish(self) -> float:
        return self.since + max(self.left, 0.0) / self.rate


class _Simulation:
    def __init__(self, ranks: list[_Rank], spmd: bool, semantics: str = STREAMS):
        self.ranks, self.spmd = ranks, spmd
        self.astra = semantics == ASTRA_SIM
        self.events: list = []     # (time, seq, rank index, row): the row ends
        self.seq = 0
        self.arrived: dict = {}    # sync id -> [(rank index, row)] of members that reached the collective
        self.active: list[_Job] = []
        # the job of `active` that ends first and when (None: to be found again): its rows and rates change only
        # when a job starts, ends or is reshared, and min() over every job at each of a step's million row ends
        # took most of the engine's time
        self._soonest: tuple | None = None
        self.memory: dict = {}     # (rank index, memory stream) -> rows ready and waiting for it; absent: free
        self.posted: dict = {}     # astra-sim: sync id -> the receive posted before its message arrived
        self.delivered: dict = {}  # astra-sim: sync id -> when a message arrived before its receive was posted
        self.receivers: dict = {}  # astra-sim: sync id -> (rank index, row) of a message's receiving end
        if self.astra:
            for r in ranks:
                if r.t.sends is None:
                    continue
                for i in np.flatnonzero((r.t.kind == P2P) & ~r.t.sends & (r.t.group_size > 1)).tolist():
                    self.receivers[int(r.t.sync[i])] = (r.index, i)

    def run(self) -> None:
        for r in self.ranks:
            for i in [i for i, w in enumerate(r.waiting) if w == 0]:
                self._release(r, i, 0.0)
            self._issue(r, 0.0)
        while self.events or self.active:
            if self._soonest is None and self.active:
                job = min(self.active, key=_Job.finish)
                self._soonest = job, job.finish()
            job, ends = self._soonest if self.active else (None, math.inf)
            t_next = self.events[0][0] if self.events else math.inf
            if job is not None and ends <= t_next:
                now = ends
                self.active.remove(job)
                self._soonest = None
                for k, i in job.rows:
                    if job.slowed:
                        self.ranks[k].took[i] = now - self.ranks[k].start[i]
                    self._ended(self.ranks[k], i, now)
                self._reshare(now)
                continue
            now, _, k, i = heapq.heappop(self.events)
            self._ended(self.ranks[k], i, now)

    def _release(self, r: _Rank, i: int, now: float) -> None:
        """Row i of r has every predecessor done at `now`."""
        t, kind = r.t, r.kind[i]
        if kind == MEMORY:
            key = (r.index, int(t.stream[i]))
            if key in self.memory:
                self.memory[key].append(i)
                return
            self.memory[key] = collections.deque()
        if kind != COLLECTIVE and kind != P2P:   # not COMMUNICATION
            start = now if r.issued_at is None or kind != COMPUTE else max(now, r.issued_at[i])
            r.host_wait += start - now
            r.start[i] = start
            self.seq += 1   # _push, inline
            heapq.heappush(self.events, (start + r.durs[i], self.seq, r.index, i))
            return
        if self.astra and (t.kind[i] == COLLECTIVE or self._sends(r, i)):
            heapq.heappush(r.comm_ready, i)   # issued by _issue once the NPU has none in flight
            return
        if self.astra and t.kind[i] == P2P and t.group_size[i] > 1 and t.sends is not None:
            self._post(r, i, now)
            return
        self._arrive(r, i, now)

    def _sends(self, r: _Rank, i: int) -> bool:
        return r.t.kind[i] == P2P and r.t.sends is not None and bool(r.t.sends[i])

    def _issue(self, r: _Rank, now: float) -> None:
        """astra-sim semantics: with no collective or send in flight on r, the first ready one (by row) goes."""
        if r.comm_busy < 0 and r.comm_ready:
            i = heapq.heappop(r.comm_ready)
            r.comm_busy = i
            if self._sends(r, i) and r.t.group_size[i] > 1:   # eager: it goes alone, its receive posted or not
                self._start([(r.index, i)], now, self._message_use(r, i))
            else:
                self._arrive(r, i, now)

    def _message_use(self, r: _Rank, i: int) -> dict:
        """The links an eager send occupies: its own end's and its receiver's (as the pair's rows would)."""
        use = {}
        sync = int(r.t.sync[i])
        for k, j in ((r.index, i),) + ((self.receivers[sync],) if sync in self.receivers else ()):
            t = self.ranks[k].t
            if t.use is not None and t.use[j]:
                use.update({(k if o < 0 else o, c): u for (o, c), u in t.use[j].items()})
        return use

    def _post(self, r: _Rank, i: int, now: float) -> None:
        """astra-sim semantics: a receive is posted; it ends when its message has arrived too."""
        sync = int(r.t.sync[i])
        r.start[i] = now
        if sync in self.delivered:
            end = max(now, self.delivered.pop(sync))
            r.took[i] = end - now
            self._push(end, r.index, i)
        else:
            self.posted[sync] = (r.index, i)

    def _delivered(self, r: _Rank, i: int, now: float) -> None:
        """astra-sim semantics: a send ended (its message arrived): its receive, if posted, ends now."""
        sync = int(r.t.sync[i])
        if sync in self.posted:   # its time in the step: while both the receive and the message were under way
            k, j = self.posted.pop(sync)
            self.ranks[k].took[j] = now - max(self.ranks[k].start[j], r.start[i])
            self._push(now, k, j)
        else:
            self.delivered[sync] = now

    def _arrive(self, r: _Rank, i: int, now: float) -> None:
        """A collective or message row is reached: it starts when every member of its group has reached it."""
        t = r.t
        if (self.spmd and t.kind[i] == COLLECTIVE) or t.group_size[i] <= 1:
            self._start([(r.index, i)], now)
            return
        members = self.arrived.setdefault(int(t.sync[i]), [])
        members.append((r.index, i))
        if len(members) == t.group_size[i]:
            del self.arrived[int(t.sync[i])]
            self._start(members, now)

    def _start(self, rows: list, now: float, use: dict | None = None) -> None:
        for k, i in rows:
            self.ranks[k].start[i] = now
        if use is None:
            use = {}
            for k, i in rows:
                r = self.ranks[k]
                if r.t.use is not None and r.t.use[i]:
                    use.update({(k if o < 0 else o, c): u for (o, c), u in r.t.use[i].items()})
        alone = max(float(self.ranks[k].dur[i]) for k, i in rows)
        if alone <= 0.0:
            for k, i in rows:
                self._push(now, k, i)
            return
        self.active.append(_Job(rows, alone, now, use))
        self._soonest = None
        if use:
            self._reshare(now)

    def _reshare(self, now: float) -> None:
        """New rates for the collectives in flight; a collective whose rate changes is settled up to `now`."""
        rates = fair_rates({job: job.use for job in self.active})
        self._soonest = None
        for job in self.active:
            rate = rates[job]
            if rate != job.rate:
                job.left -= job.rate * (now - job.since)
                job.since, job.rate = now, rate
                job.slowed = True

    def _ended(self, r: _Rank, i: int, now: float) -> None:
        r.end[i] = now
        if self.astra and i == r.comm_busy:   # the NPU's collective or send is done: the next may go (below)
            r.comm_busy = -1
            if self._sends(r, i) and r.t.group_size[i] > 1:
                self._delivered(r, i, now)
        if r.kind[i] == MEMORY:   # the memory takes the next row waiting for it
            key = (r.index, int(r.t.stream[i]))
            if self.memory[key]:
                j = self.memory[key].popleft()
                r.start[j] = now
                self._push(now + r.durs[j], r.index, j)
            else:
                del self.memory[key]
        waiting = r.waiting
        for j in r.succ[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                self._release(r, j, now)
        if self.astra:   # after every row the end made ready: the first of them by row may take the NPU
            self._issue(r, now)

    def _push(self, when: float, k: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, k, i))

    def stuck(self) -> WorkloadError | None:
        for k, i in self.posted.values():
            return WorkloadError(f"rank {self.ranks[k].t.rank} waits forever at op {i}: a receive whose message is "
                                 "never sent")
        for members in self.arrived.values():
            k, i = min(members)
            r = self.ranks[k]
            if r.t.kind[i] == P2P:
                return WorkloadError(f"rank {r.t.rank} waits forever at op {i}: a message whose other end is never "
                                     "reached (the sends and receives wait on each other in a cycle)")
            return WorkloadError(f"rank {r.t.rank} waits forever at op {i}: a collective on a group of "
                                 f"{int(r.t.group_size[i])} ranks that only {len(members)} of them issue (the traces "
                                 "do not match)")
        for r in self.ranks:
            if np.isnan(r.end).any():
                i = int(np.flatnonzero(np.isnan(r.end))[0])
                return WorkloadError(f"rank {r.t.rank} never runs op {i}: it depends on a later op")
        return None


def run_workload(tables: list[ProgramTable], roofline: Roofline, spmd: bool = False,
                 semantics: str = STREAMS) -> WorkloadResult:
    if semantics not in SEMANTICS:
        raise ValueError(f"unknown step semantics {semantics!r}")
    ranks = [_Rank(k, t, roofline) for k, t in enumerate(tables)]
    sim = _Simulation(ranks, spmd, semantics)
    sim.run()
    error = sim.stuck()
    if error is not None:
        raise error
    out = WorkloadResult()
    step = max((float(r.end.max()) for r in ranks if len(r.t.kind)), default=0.0)
    for r in ranks:
        kind = r.t.kind
        total = float(r.end.max()) if len(kind) else 0.0
        compute = float(r.dur[kind == COMPUTE].sum())
        local, remote = (kind == MEMORY) & (r.t.stream == LOCAL_STREAM), (kind == MEMORY) & (r.t.stream == REMOTE_STREAM)
        out.ranks[r.t.rank] = RankTimes(r.start, r.end, total, compute, float(r.took[np.isin(kind, COMMUNICATION)].sum()),
                                        max(0.0, total - compute - r.host_wait), float(r.dur[r.measured].sum()),
                                        int(r.measured.sum()), float(r.dur[local].sum()), float(r.dur[remote].sum()),
                                        breakdown(r.start, r.end, [kind == COMPUTE, local, remote,
                                                                   np.isin(kind, COMMUNICATION)], step),
                                        r.host_wait, float(r.issued[-1]) if r.issued is not None and len(kind) else 0.0)
    return out


def breakdown(start: np.ndarray, end: np.ndarray, masks: list, total: float) -> dict:
    """ASTRA-sim 2.0's step-time breakdown of one rank over [0, total] (the step's time): each instant goes to the first
    of compute, local memory, remote memory, communication whose rows (masks, in BREAKDOWN order) are running
    then; what no row covers is idle. The parts add up to `total`."""
    bounds = np.unique(np.concatenate([[0.0, total]] + [np.concatenate([start[m], end[m]]) for m in masks]))
    seg = np.diff(bounds)
    left = np.ones(len(seg), bool)
    out = {}
    for name, m in zip(BREAKDOWN, masks):
        depth = np.zeros(len(bounds) + 1)
        np.add.at(depth, np.searchsorted(bounds, start[m]), 1)
        np.add.at(depth, np.searchsorted(bounds, end[m]), -1)
        busy = np.cumsum(depth)[:len(seg)] > 0
        out[name] = float(seg[busy & left].sum())
        left &= ~busy
    out["idle"] = max(0.0, total - sum(out.values()))
    return out
