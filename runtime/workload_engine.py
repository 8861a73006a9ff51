"""Workload engine: execute each rank's step program with one compute stream and one stream per process group.

Input is one `ProgramTable` per rank: numpy columns, one row per op in issue order, with dependencies as a CSR
list of earlier rows. Compute rows carry FLOPs and bytes and take their time from the roofline, or a profiler's
measured time when they have one; collective rows
carry the time their schedule tables took in a network runtime (analytical or congestion).

Stream semantics are CUDA's as PyTorch uses them:
- the compute stream runs its ops in issue order;
- a collective runs on its process group's communication stream, in issue order there, and (as
  ProcessGroupNCCL makes the communication stream wait on the compute stream when a collective is issued)
  starts only after every compute op issued before it has finished;
- a wait row (wait_tensor, work.wait) blocks the compute stream until its collective is done.
Across ranks a collective starts when every member of its group has reached it (rows with the same `sync` id).
An SPMD program (one rank standing for all) needs no matching: every rank reaches every collective together.

Concurrent collectives on different streams do not slow each other down here; docs/workloads.md says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..network.units import gbps_to_bytes_per_ns

COMPUTE, COLLECTIVE, WAIT = 0, 1, 2


class WorkloadError(Exception):
    """The programs cannot run: ranks wait on collectives their partners never issue."""


@dataclass
class Roofline:
    """Compute time of an op: the larger of its FLOPs at peak rate and its bytes at memory bandwidth."""
    peak_tflops: float = 234.0   # seed 002's A100 figure
    mem_gbps: float = 1896.0     # A100-80GB HBM2e, 2039 GB/s decimal = 1896 GB/s in 2^30 units

    def time_ns(self, flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        return np.maximum(flops / (self.peak_tflops * 1e3), nbytes / gbps_to_bytes_per_ns(self.mem_gbps))


@dataclass
class ProgramTable:
    rank: int
    kind: np.ndarray          # COMPUTE | COLLECTIVE | WAIT
    flops: np.ndarray         # compute rows
    nbytes: np.ndarray        # compute rows: bytes read + written
    duration_ns: np.ndarray   # collective rows: time of the collective's schedule
    stream: np.ndarray        # collective rows: communication stream (one per process group), else 0
    sync: np.ndarray          # collective rows: id shared by the same collective on every member rank
    group_size: np.ndarray    # collective rows: ranks that must reach it
    dep_ptr: np.ndarray       # deps of row i: dep_idx[dep_ptr[i]:dep_ptr[i + 1]]
    dep_idx: np.ndarray
    measured_ns: np.ndarray | None = None   # compute rows: a profiler's measured time (NaN: use the roofline)


@dataclass
class RankTimes:
    start_ns: np.ndarray
    end_ns: np.ndarray
    total_ns: float
    compute_ns: float         # busy time of the compute stream
    comm_ns: float            # sum of collective durations
    exposed_comm_ns: float    # step time the compute stream spends waiting: total - compute
    measured_ns: float = 0.0  # the part of compute_ns a profiler measured (the rest is the roofline's)
    measured_ops: int = 0


@dataclass
class WorkloadResult:
    ranks: dict[int, RankTimes] = field(default_factory=dict)

    @property
    def total_ns(self) -> float:
        return max(r.total_ns for r in self.ranks.values())


class _Rank:
    def __init__(self, table: ProgramTable, roofline: Roofline):
        self.t = table
        n = len(table.kind)
        compute = roofline.time_ns(table.flops, table.nbytes)
        self.measured = np.zeros(n, bool) if table.measured_ns is None else \
            (table.kind == COMPUTE) & ~np.isnan(table.measured_ns)
        if self.measured.any():
            compute = np.where(self.measured, table.measured_ns, compute)
        self.dur = np.where(table.kind == COMPUTE, compute, np.where(table.kind == COLLECTIVE, table.duration_ns, 0.0))
        self.start, self.end = np.zeros(n), np.zeros(n)
        self.pos, self.compute_free, self.stream_free = 0, 0.0, {}

    def ready(self, i: int) -> float:
        deps = self.t.dep_idx[self.t.dep_ptr[i]:self.t.dep_ptr[i + 1]]
        return float(self.end[deps].max()) if len(deps) else 0.0


def run_workload(tables: list[ProgramTable], roofline: Roofline, spmd: bool = False) -> WorkloadResult:
    ranks = [_Rank(t, roofline) for t in tables]
    arrived: dict[int, dict[int, float]] = {}   # sync id -> rank -> time the rank could start it
    started: dict[int, float] = {}              # sync id -> start time agreed by all members
    while True:
        progress = False
        for r in ranks:
            progress |= _advance(r, spmd, arrived, started)
        if all(r.pos == len(r.t.kind) for r in ranks):
            break
        if not progress:
            stuck = [r for r in ranks if r.pos < len(r.t.kind)]
            r = stuck[0]
            raise WorkloadError(f"rank {r.t.rank} waits forever at op {r.pos}: a collective on a group of "
                                f"{int(r.t.group_size[r.pos])} ranks that only {len(arrived.get(int(r.t.sync[r.pos]), {}))}"
                                " of them issue (the traces do not match)")
    out = WorkloadResult()
    for r in ranks:
        kind = r.t.kind
        total = float(r.end.max()) if len(kind) else 0.0
        compute = float(r.dur[kind == COMPUTE].sum())
        out.ranks[r.t.rank] = RankTimes(r.start, r.end, total, compute, float(r.dur[kind == COLLECTIVE].sum()),
                                        max(0.0, total - compute), float(r.dur[r.measured].sum()),
                                        int(r.measured.sum()))
    return out


def _advance(r: _Rank, spmd: bool, arrived, started) -> bool:
    """Run rank r's ops in issue order until it blocks on a collective its partners have not reached."""
    t, moved = r.t, False
    while r.pos < len(t.kind):
        i = r.pos
        ready = r.ready(i)
        if t.kind[i] == COLLECTIVE:
            s = int(t.stream[i])
            ready = max(ready, r.stream_free.get(s, 0.0), r.compute_free)
            if not spmd and t.group_size[i] > 1:
                sync = int(t.sync[i])
                if sync not in started:
                    members = arrived.setdefault(sync, {})
                    members[t.rank] = ready
                    if len(members) < t.group_size[i]:
                        return moved
                    started[sync] = max(members.values())
                ready = started[sync]
            r.start[i], r.end[i] = ready, ready + r.dur[i]
            r.stream_free[s] = r.end[i]
        else:  # compute and wait rows hold the compute stream in issue order
            r.start[i] = max(ready, r.compute_free)
            r.end[i] = r.start[i] + r.dur[i]
            r.compute_free = r.end[i]
        r.pos += 1
        moved = True
    return moved
