"""Phases over ranks whose messages are routed across dimensions (rank_ring, flat_direct, flat_halving_doubling,
flat_double_binary_tree): routes, data, and the contention they show on both runtimes, computed by hand."""
import numpy as np
import pytest

from astra_compile.compiler.driver import driver
from astra_compile.compiler.main import main
from astra_compile.dialects import comm
from astra_compile.runtime import analytical, congestion
from astra_compile.network.links import LANE_SHORTEST, ROUTED, LinkMap
from astra_compile.runtime.verifier import link_conflicts, verify
from astra_compile.network.parse import parse_topology
from test_linkcore import assert_same

GIB = 2 ** 30


def compile_flat(topology, kind, size, algorithm, bandwidth=None, latency=None, chunks=1):
    topo = parse_topology(topology, bandwidth, latency)
    ctx = comm.new_context()
    source = str(driver.build_module(ctx, topo, kind, size))
    return driver.compile_schedule(source, ctx, topo, "baseline", {"algorithm": algorithm, "chunks": chunks}).schedule


def test_routes_go_dimension_by_dimension():
    links = LinkMap(parse_topology("4x4_torus").to_dict())
    route = lambda src, dst, lane: [links.describe(i) for i in  # noqa: E731
                                    links.routes([src], [dst], [ROUTED], [lane], [0])[1]]
    # (3,0) -> (0,1): forward over dimension 0's wrap-around, then forward along dimension 1
    assert route(3, 4, 0) == ["dim0 npu3->next", "dim1 npu0->next"]
    # backward: three hops back along dimension 0, then three back along dimension 1 (its wrap first)
    assert route(3, 4, 1) == ["dim0 npu3->prev", "dim0 npu2->prev", "dim0 npu1->prev", "dim1 npu0->prev",
                              "dim1 npu12->prev", "dim1 npu8->prev"]
    assert route(3, 4, LANE_SHORTEST) == ["dim0 npu3->next", "dim1 npu0->next"]
    switched = LinkMap(parse_topology("Switch(4)_Mesh(3)").to_dict())
    assert [switched.describe(i) for i in switched.routes([0], [9], [ROUTED], [0], [0])[1]] == [
        "dim0 npu0->switch", "dim0 switch->npu1", "dim1 npu1->next", "dim1 npu5->next"]


def test_rank_ring_on_an_8x8_torus_by_hand():
    # NPU i sends to i+1 and i-1 (rank order). Inside a row that is one link; from a row's end (7,r) to (0,r+1) it
    # is dimension 0's wrap-around link and then one link of dimension 1. No link carries two messages, so both
    # runtimes give 63 steps of (2 hops x latency + (S/64)/2 bytes over a B/2 link): the row ends pace every step.
    size = 64 * 128 * 1024
    sched = compile_flat("8x8_torus", "all_gather", size, "rank_ring", bandwidth="100", latency="500")
    expected = 63 * (2 * 500 + (size / 128) / (50 * GIB / 1e9))
    assert analytical.run(sched).total_ns == pytest.approx(expected, rel=1e-12)
    result = congestion.run(sched, mode="full")
    assert result.total_ns == pytest.approx(expected, rel=1e-12)
    assert link_conflicts(sched) == []
    # every dimension-0 link both ways, and only the 2 x 8 dimension-1 links at row ends: 144 of the 256 links
    assert len(result.links["name"]) == 128 + 16
    verify(compile_flat("8x8_torus", "all_gather", 64 * 1024, "rank_ring"))


@pytest.mark.parametrize("kind,phases", [("reduce_scatter", 1), ("all_reduce", 2)])
@pytest.mark.parametrize("switching,factor", [("cut-through", 12), ("store-and-forward", 13)])
def test_direct_over_a_4x4_torus_by_hand(kind, phases, switching, factor):
    # every NPU sends S/16 to each of its 15 peers at once, dimension 0 first, each Ring leg the shorter way (2
    # apart: forward). Per NPU the forward dimension-0 hops are 4 x (1 + 2) = 12 (peers 1 and 2 columns on, any
    # row), the backward ones 4 (3 columns on); likewise along dimension 1. So every forward link carries 12
    # messages of T = (S/16) / (B/2) and every backward link 4: the forward links pace it at 12 T; storing and
    # forwarding adds one T for the last message's second leg. The analytical model sends all 15 at once: T.
    # An all-reduce's all-gather half sends each NPU's shard the same way: twice all of it.
    size = 16 * GIB // 8
    sched = compile_flat("4x4_torus", kind, size, "flat_direct", bandwidth="2", latency="0")
    t = (size / 16) / (1 * GIB / 1e9)
    assert analytical.run(sched).total_ns == pytest.approx(phases * t)
    result = congestion.run(sched, mode="full", switching=switching)
    assert result.total_ns == pytest.approx(phases * factor * t)
    busy = np.sort(np.round(np.asarray(result.links["busy_ns"]) / t, 9))
    assert busy.tolist() == [4.0 * phases] * 32 + [12.0 * phases] * 32


@pytest.mark.parametrize("topology,algorithm,kind", [
    ("4x4_torus", "rank_ring", "all_reduce"), ("3x4_mesh", "rank_ring", "all_gather"),
    ("4x4_torus", "flat_direct", "all_reduce"), ("Switch(4)_Ring(4)", "flat_halving_doubling", "all_reduce"),
    ("FC(4)_Ring(3)", "flat_double_binary_tree", "reduce_scatter"), ("Switch(2)_Mesh(3)", "flat_direct", "all_gather"),
])
def test_routed_schedules_verify_and_both_engines_agree(topology, algorithm, kind):
    topo = parse_topology(topology)
    sched = compile_flat(topology, kind, topo.npus * 4096 + 12, algorithm, chunks=2)
    verify(sched)
    assert not sched.meta.symmetric
    result = assert_same(sched, mode="full", timeline=True)
    # contention only ever slows a schedule down
    assert result.total_ns >= analytical.run(sched).total_ns * (1 - 1e-12)


def test_routed_rows_name_their_route():
    # Ring(4) at 100 GB/s (50 per link and direction) then FC(3) at 30 GB/s (15 per link): a message crossing both
    # streams at the slower link's rate and counts every link
    sched = compile_flat("Ring(4)_FC(3)", "all_gather", 12 * 4096, "flat_direct", bandwidth="100,30")
    t = sched.table(0)
    assert set(t["dim"].tolist()) == {ROUTED}
    sends = t["op"] == 0
    to = {int(p): (int(h), float(g)) for p, h, g in zip(t["peer"][sends], t["hops"][sends], t["gbps"][sends])}
    assert to[1] == (1, 50.0)       # one Ring link
    assert to[2] == (2, 50.0)       # two apart: forward, the shorter way on a tie
    assert to[4] == (1, 15.0)       # one FC link
    assert to[6] == (3, 15.0)       # two Ring links then one FC link


@pytest.mark.parametrize("argv,message", [
    (["--topology", "3x4_torus", "--algorithm", "flat_halving_doubling"], "the network has 12 NPUs"),
    (["--topology", "4x4_torus", "--algorithm", "rank_ring,ring"], "rank_ring schedules the whole network at once"),
])
def test_routed_errors_are_one_line(capsys, argv, message):
    code = main(["--collective", "all_reduce", "--size", "1MB", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_rank_ring_on_the_cli(capsys):
    code = main(["--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--algorithm", "rank_ring",
                 "--backend", "congestion", "--verify"])
    out = capsys.readouterr().out
    assert code == 0 and "rank_ring over the whole network (routed)" in out


from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def routed_cases(draw):
    dims = draw(st.lists(st.tuples(st.sampled_from(["Ring", "FC", "Switch", "Mesh"]), st.sampled_from([2, 3, 4])),
                         min_size=1, max_size=3))
    npus = int(np.prod([k for _, k in dims]))
    algos = ["rank_ring", "flat_direct", "flat_double_binary_tree"] + (
        ["flat_halving_doubling"] if npus & (npus - 1) == 0 else [])
    return ("_".join(f"{b}({k})" for b, k in dims), draw(st.sampled_from(algos)),
            draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"])), draw(st.integers(1, 2)),
            npus * draw(st.integers(8, 64)) + draw(st.integers(0, 7)), draw(st.sampled_from(congestion.SWITCHING)))


@settings(max_examples=40, deadline=None, database=None)
@given(routed_cases())
def test_routed_schedules_on_random_networks(case):
    topology, algorithm, kind, chunks, size, switching = case
    sched = compile_flat(topology, kind, size, algorithm, bandwidth="50", latency="100", chunks=chunks)
    verify(sched)
    result = assert_same(sched, mode="full", switching=switching)
    assert result.total_ns >= analytical.run(sched).total_ns * (1 - 1e-12)
