"""Congestion-aware runtime: the published figure, contention-free schedules equal to the analytical model,
contention computed by hand, the symmetric shortcut against every link, timelines."""
import json

import pytest

from astra_compile.compiler.main import main
from astra_compile.runtime import analytical, congestion
from helpers import compile_collective

GIB = 2 ** 30


def test_seed000_direct_all_reduce_congestion():
    # 1GB direct all-reduce on Switch(64), 50 GB/s, 500 ns, 4 chunks: published 40008.217 us (ASTRA-sim's
    # congestion-aware backend forwards store-and-forward); analytical 633.217 us
    sched = compile_collective("Switch(64)", "all_reduce", GIB, chunks=4, algorithm="direct", bandwidth="50",
                               latency="500")
    saf = congestion.run(sched, switching="store-and-forward")
    assert saf.total_ns / 1e3 == pytest.approx(40008.217, rel=0.01)
    # cut-through: the last message of a phase no longer waits a whole message time at the switch
    assert congestion.run(sched).total_ns / 1e3 == pytest.approx(8 * (63 * 4 * 2 ** 20 / (50 * GIB / 1e9) / 1e3)
                                                                 + 8 * 1.0, rel=1e-9)
    assert analytical.run(sched).total_ns / 1e3 == pytest.approx(633.217, rel=0.01)


@pytest.mark.parametrize("topology,algorithm", [
    ("Ring(8)", None), ("Switch(8)", None), ("FC(8)", None),            # 1-D: ring, halving-doubling, direct
    ("Switch(8)_Switch(8)_Switch(8)", None), ("Ring(4)_FC(4)_Switch(4)", None), ("4x4x4_torus", None),  # 3-D
    ("FC(8)", "ring"),                                                   # one FC link per step: no contention
])
@pytest.mark.parametrize("scheduler_orders", [False, True])
def test_contention_free_schedules_match_analytical(topology, algorithm, scheduler_orders):
    sched = compile_collective(topology, "all_reduce", 3 * 2 ** 26, chunks=8, algorithm=algorithm, latency="100")
    a = analytical.run(sched).total_ns
    c = congestion.run(sched, mode="full").total_ns
    assert c == pytest.approx(a, rel=0.005)


def test_direct_on_a_ring_by_hand():
    # Ring(4), latency 0: every NPU sends S/4 to m+1, m+2 (two hops forward) and m-1, in that order. Its forward
    # link carries, one after another, its message to m+1, its message to m+2 and the second hop of m-1's message
    # to m+1 (joining when its head arrives, after the link's own two): 3 transfers of T = (S/4) / (B/2).
    # The analytical model sends all three at once: T.
    sched = compile_collective("Ring(4)", "reduce_scatter", 8 * GIB, algorithm="direct", bandwidth="2", latency="0")
    t = (2 * GIB) / (1 * GIB / 1e9)
    assert analytical.run(sched).total_ns == pytest.approx(t)
    assert congestion.run(sched, mode="full").total_ns == pytest.approx(3 * t)


@pytest.mark.parametrize("switching,factor", [("cut-through", 3), ("store-and-forward", 4)])
def test_direct_on_a_switch_by_hand(switching, factor):
    # Switch(4), latency 0: 3 messages of T share each uplink; cut-through delivers the last as it leaves the
    # uplink, store-and-forward one T later from the switch
    sched = compile_collective("Switch(4)", "reduce_scatter", 8 * GIB, algorithm="direct", bandwidth="2",
                               latency="0")
    t = (2 * GIB) / (2 * GIB / 1e9)
    assert congestion.run(sched, switching=switching, mode="full").total_ns == pytest.approx(factor * t)


@pytest.mark.parametrize("topology,kind,algorithm", [
    ("4x4_torus", "all_reduce", "direct"), ("8x8_torus", "all_reduce", "direct"),
    ("Switch(8)_FC(4)", "all_to_all", None), ("Ring(6)_Switch(4)", "all_gather", "ring"),
    ("Switch(16)", "all_reduce", "direct"),
])
@pytest.mark.parametrize("switching", ["cut-through", "store-and-forward"])
def test_symmetric_matches_every_link(topology, kind, algorithm, switching):
    sched = compile_collective(topology, kind, 9 * 2 ** 26, chunks=3, algorithm=algorithm, latency="300")
    assert congestion.symmetric_ok(sched.meta)
    sym = congestion.run(sched, switching=switching, mode="symmetric")
    full = congestion.run(sched, switching=switching, mode="full")
    assert sym.total_ns == pytest.approx(full.total_ns, rel=1e-12)


def test_halving_doubling_across_a_ring_needs_full_execution():
    sched = compile_collective("Ring(8)", "all_reduce", 2 ** 20, algorithm="halving_doubling")
    assert not congestion.symmetric_ok(sched.meta)
    assert congestion.run(sched).mode == "full"
    # XOR partners 4 apart share ring links with each other: slower than the analytical model
    assert congestion.run(sched).total_ns > 1.2 * analytical.run(sched).total_ns


def test_cli_timeline_and_plot(tmp_path, capsys):
    trace, plot = tmp_path / "t.json", tmp_path / "u.png"
    code = main(["--collective", "all_reduce", "--size", "4MB", "--topology", "Switch(4)_Ring(2)", "--chunks", "2",
                 "--backend", "congestion", "--timeline", str(trace), "--plot", str(plot), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "congestion" and report["execution"] == "full"
    events = json.loads(trace.read_text())["traceEvents"]
    npu_tracks = {e["tid"] for e in events if e["ph"] == "M" and e["pid"] == 0 and e["name"] == "thread_name"}
    link_tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["pid"] == 1 and e["name"] == "thread_name"}
    assert npu_tracks == set(range(8))
    assert {"dim0 npu0->switch", "dim0 switch->npu0", "dim1 npu0->next"} <= link_tracks
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(report["total_time_us"], rel=1e-9)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Switch(4): 2 groups x (4 up + 4 down); Ring(2): 8 NPUs x 2 lanes to their one neighbour
    assert report["link_utilization"]["links"] == 2 * 8 + 8 * 2


def test_bad_backend_combination_is_one_line(capsys):
    code = main(["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(8)", "--algorithm",
                 "halving_doubling", "--backend", "congestion", "--execution", "symmetric"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--execution full" in err


from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def symmetric_cases(draw):
    dims = draw(st.lists(st.tuples(st.sampled_from(["Ring", "FC", "Switch"]), st.sampled_from([2, 3, 4])),
                         min_size=1, max_size=2))
    algos = []
    for block, k in dims:
        choices = ["ring", "direct"] + (["halving_doubling"] if k & (k - 1) == 0 and (block != "Ring" or k == 2)
                                         else [])
        algos.append(draw(st.sampled_from(choices)))
    kind = draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]))
    chunks = draw(st.integers(1, 3))
    spec = "_".join(f"{b}({k})" for b, k in dims)
    npus = 1
    for _, k in dims:
        npus *= k
    size = chunks * npus * 2 * 3 * 4 * draw(st.integers(1, 64))   # every split even
    return spec, kind, chunks, ",".join(algos), size, draw(st.sampled_from(["cut-through", "store-and-forward"]))


@settings(max_examples=40, deadline=None, database=None)
@given(symmetric_cases())
def test_representative_links_stand_for_every_link(case):
    spec, kind, chunks, algos, size, switching = case
    sched = compile_collective(spec, kind, size, chunks=chunks, algorithm=algos, bandwidth="40", latency="250")
    if not congestion.symmetric_ok(sched.meta):
        return
    sym = congestion.run(sched, switching=switching, mode="symmetric")
    full = congestion.run(sched, switching=switching, mode="full")
    assert sym.total_ns == pytest.approx(full.total_ns, rel=1e-9)


@pytest.mark.parametrize("backend", ["congestion", "analytical"])
def test_optimal_times_its_candidates_symmetric_and_runs_the_kept_one_in_full(backend, monkeypatch):
    """With --execution full, choose-schedule's two candidates are timed on NPU 0 alone where that provably stands
    for every NPU; the kept schedule alone runs in full, and its recorded time is full execution's."""
    from astra_compile.compiler.driver import driver
    from astra_compile.dialects import comm
    from astra_compile.network.parse import parse_topology
    modes = []
    execute = driver.execute
    monkeypatch.setattr(driver, "execute", lambda s, run: modes.append(run.execution) or execute(s, run))
    topo = parse_topology("Switch(4)_Switch(4)")
    ctx = comm.new_context()
    module = driver.build_module(ctx, topo, "all_reduce", 3 * 2 ** 26)
    run = driver.RunOptions(backend=backend, execution="full")
    c = driver.compile_schedule(str(module), ctx, topo, "optimal", {"chunks": 8}, run)
    # one candidate run each (one when both orders agree), then the kept one again in full
    assert modes[-1] == "full" and set(modes[:-1]) == {"symmetric"} and c.result.mode == "full"
    choice = comm.schedule_choice(c.module)
    kept = choice["cp_sat_time_ns"] if choice["schedule"] == "cp-sat" else choice["themis_time_ns"]
    assert kept == pytest.approx(c.result.total_ns, rel=1e-9)
    # a schedule with no such symmetry (a mesh's line ends) is timed in full throughout
    modes.clear()
    topo = parse_topology("Mesh(4)_Switch(4)")
    module = driver.build_module(ctx, topo, "all_reduce", 3 * 2 ** 26)
    driver.compile_schedule(str(module), ctx, topo, "optimal", {"chunks": 8}, run)
    assert set(modes) == {"full"}
