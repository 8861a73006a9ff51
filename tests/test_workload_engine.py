"""Workload engine: stream semantics and cross-rank matching, checked against hand-computed schedules."""
import numpy as np
import pytest

from astra_compile.runtime.workload_engine import (COLLECTIVE, COMPUTE, WAIT, ProgramTable, Roofline,
                                                   WorkloadError, run_workload)

# 1 TFLOPS and a memory bandwidth so high that a compute op's time in ns is its FLOPs / 1000
ROOF = Roofline(peak_tflops=1.0, mem_gbps=1e12)


def program(rows, rank=0):
    """rows: (kind, ns, deps, stream, sync, group_size); compute ns become FLOPs at 1 TFLOPS."""
    kind = np.array([r[0] for r in rows], np.int8)
    ns = np.array([r[1] for r in rows], float)
    deps = [r[2] for r in rows]
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in deps])])
    return ProgramTable(rank, kind, np.where(kind == COMPUTE, ns * 1e3, 0.0), np.zeros(len(rows)),
                        np.where(kind == COLLECTIVE, ns, 0.0), np.array([r[3] for r in rows], np.int32),
                        np.array([r[4] for r in rows], np.int64), np.array([r[5] for r in rows], np.int64),
                        ptr.astype(np.int64), np.array([d for ds in deps for d in ds], np.int64))


def test_collective_overlaps_independent_compute_and_a_wait_exposes_the_rest():
    # forward 100 ns; gradient all-reduce 250 ns after it; 120 ns of independent compute; a wait; 10 ns update
    rows = [(COMPUTE, 100, [], 0, -1, 1), (COLLECTIVE, 250, [0], 1, 0, 8), (COMPUTE, 120, [], 0, -1, 1),
            (WAIT, 0, [1], 0, -1, 1), (COMPUTE, 10, [3], 0, -1, 1)]
    r = run_workload([program(rows)], ROOF, spmd=True).ranks[0]
    assert list(r.start_ns) == [0, 100, 100, 350, 350]
    assert r.total_ns == 360 and r.compute_ns == pytest.approx(230) and r.comm_ns == 250
    assert r.exposed_comm_ns == pytest.approx(130)   # 350 - 220: the all-reduce outlives the compute by 130 ns


def test_a_collective_waits_for_compute_issued_before_it():
    # the collective depends on nothing but is issued after a 50 ns op: the communication stream waits for it
    rows = [(COMPUTE, 50, [], 0, -1, 1), (COLLECTIVE, 30, [], 1, 0, 4)]
    r = run_workload([program(rows)], ROOF, spmd=True).ranks[0]
    assert list(r.start_ns) == [0, 50] and r.total_ns == 80


def test_collectives_on_one_stream_run_in_issue_order_and_two_streams_overlap():
    rows = [(COLLECTIVE, 40, [], 1, 0, 4), (COLLECTIVE, 40, [], 1, 1, 4), (COLLECTIVE, 40, [], 2, 2, 4)]
    r = run_workload([program(rows)], ROOF, spmd=True).ranks[0]
    assert list(r.start_ns) == [0, 40, 0] and r.total_ns == 80


def test_ranks_start_a_collective_together():
    # rank 1 computes 70 ns longer before the shared all-reduce: both start it at 100
    a = program([(COMPUTE, 30, [], 0, -1, 1), (COLLECTIVE, 20, [0], 1, 0, 2)], rank=0)
    b = program([(COMPUTE, 100, [], 0, -1, 1), (COLLECTIVE, 20, [0], 1, 0, 2)], rank=1)
    res = run_workload([a, b], ROOF)
    assert res.ranks[0].start_ns[1] == res.ranks[1].start_ns[1] == 100
    assert res.total_ns == 120 and res.ranks[0].exposed_comm_ns == pytest.approx(90)


def test_mismatched_collectives_are_reported_not_hung():
    a = program([(COLLECTIVE, 20, [], 1, 0, 2)], rank=0)
    b = program([(COMPUTE, 5, [], 0, -1, 1)], rank=1)
    with pytest.raises(WorkloadError, match="rank 0 waits forever"):
        run_workload([a, b], ROOF)


def test_roofline_takes_the_slower_of_flops_and_bytes():
    roof = Roofline(peak_tflops=2.0, mem_gbps=1.0)
    t = roof.time_ns(np.array([4e3, 0.0]), np.array([0.0, 2 ** 30]))
    assert t[0] == 2.0 and t[1] == pytest.approx(1e9)
