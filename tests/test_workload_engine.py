"""Workload engine: stream semantics and cross-rank matching, checked against hand-computed schedules."""
import numpy as np
import pytest

from astra_compile.runtime.workload_engine import (COLLECTIVE, COMPUTE, P2P, WAIT, ProgramTable, Roofline,
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


# ---- the astra-sim step semantics (ASTRA-sim's workload layer: HardwareResource.cc, Workload.cc) --------------

def messaging(rows, rank=0):
    """program() with P2P rows: (P2P, ns, deps, stream, sync, group_size, sends)."""
    table = program([r[:6] for r in rows], rank)
    table.duration_ns = np.array([r[1] if r[0] in (COLLECTIVE, P2P) else 0.0 for r in rows])
    table.sends = np.array([bool(r[6]) if len(r) > 6 else False for r in rows])
    return table


def test_astra_sim_runs_one_collective_at_a_time_per_npu_in_issue_order():
    # three collectives of three process groups, all ready at 0: streams overlap them, ASTRA-sim issues them one by
    # one, by row
    rows = [(COLLECTIVE, 40, [], 1, 0, 4), (COLLECTIVE, 10, [], 2, 1, 4), (COLLECTIVE, 10, [], 3, 2, 4)]
    streams = run_workload([program(rows)], ROOF, spmd=True).ranks[0]
    astra = run_workload([program(rows)], ROOF, spmd=True, semantics="astra-sim").ranks[0]
    assert list(streams.start_ns) == [0, 0, 0] and streams.total_ns == 40
    assert list(astra.start_ns) == [0, 40, 50] and astra.total_ns == 60


def test_astra_sim_holds_a_collective_ready_later_until_the_npu_is_free():
    # row 2 waits 50 ns for its data while row 0 holds the NPU until 100: it starts then, not at 50 (streams)
    rows = [(COLLECTIVE, 100, [], 2, 1, 4), (COMPUTE, 50, [], 0, -1, 1), (COLLECTIVE, 30, [1], 1, 0, 4)]
    streams = run_workload([program(rows)], ROOF, spmd=True).ranks[0]
    astra = run_workload([program(rows)], ROOF, spmd=True, semantics="astra-sim").ranks[0]
    assert list(streams.start_ns) == [0, 0, 50] and streams.total_ns == 100
    assert list(astra.start_ns) == [0, 0, 100] and astra.total_ns == 130


def test_astra_sim_sends_are_eager_and_receives_hold_nothing():
    # rank 1 posts its receive after 300 ns of compute. Streams: the send meets it then (300-400) and rank 0's
    # other collective runs beside it. ASTRA-sim: the send goes at 0 and arrives at 100, the collective follows it
    # (one at a time), the receive ends as it is posted
    a = messaging([(P2P, 100, [], 1, 0, 2, True), (COLLECTIVE, 50, [], 2, 1, 1)], rank=0)
    b = messaging([(COMPUTE, 300, [], 0, -1, 1), (P2P, 100, [0], 1, 0, 2, False)], rank=1)
    streams = run_workload([a, b], ROOF)
    assert list(streams.ranks[0].start_ns) == [300, 0] and streams.total_ns == 400
    astra = run_workload([a, b], ROOF, semantics="astra-sim")
    assert list(astra.ranks[0].start_ns) == [0, 100] and list(astra.ranks[0].end_ns) == [100, 150]
    assert astra.ranks[1].end_ns[1] == 300 and astra.total_ns == 300
    # posted before the message arrives, the receive ends on arrival; a receive never blocks a send behind it
    c = messaging([(COMPUTE, 20, [], 0, -1, 1), (P2P, 100, [0], 1, 0, 2, True)], rank=0)
    d = messaging([(P2P, 100, [], 1, 0, 2, False), (P2P, 70, [], 2, 1, 2, True)], rank=1)
    e = messaging([(P2P, 70, [], 1, 1, 2, False)], rank=2)
    astra = run_workload([c, d, e], ROOF, semantics="astra-sim")
    assert astra.ranks[1].end_ns[0] == 120 and list(astra.ranks[1].start_ns) == [0, 0]
    assert astra.ranks[2].end_ns[0] == 70


def test_astra_sim_reports_a_receive_never_sent():
    a = messaging([(COMPUTE, 5, [], 0, -1, 1)], rank=0)
    b = messaging([(P2P, 100, [], 1, 0, 2, False)], rank=1)
    with pytest.raises(WorkloadError, match="rank 1 waits forever at op 0: a receive whose message is never sent"):
        run_workload([a, b], ROOF, semantics="astra-sim")


def test_the_collective_that_ends_first_is_found_once_per_change_not_at_every_row_end(monkeypatch):
    """A 10 us all-reduce under 1000 compute ops of 10 ns: the engine looks for the collective that ends first
    when one starts, ends or changes rate, not again at each of the 1000 compute ends (which took most of a 175B
    GPT's timing); the step is as before."""
    from astra_compile.runtime import workload_engine
    calls = []
    finish = workload_engine._Job.finish
    monkeypatch.setattr(workload_engine._Job, "finish", lambda job: calls.append(job) or finish(job))
    rows = [(COLLECTIVE, 10_000, [], 1, 0, 8)] + [(COMPUTE, 10, [k] if k else [], 0, -1, 1) for k in range(1000)]
    r = run_workload([program(rows)], ROOF, spmd=True).ranks[0]
    assert r.total_ns == 10_000 and r.start_ns[-1] == pytest.approx(9_990)
    assert len(calls) <= 3
