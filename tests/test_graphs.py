"""Graph topologies (network/graphs.py): BiGraph, DGX-1 boxes and edge-list files; every algorithm routed over
their shortest paths, verified on data, MultiTree contention-free through switches, timings by hand."""
import re

import numpy as np
import pytest

from astra_compile.compiler.main import main
from astra_compile.dialects import comm
from astra_compile.network.errors import UserError
from astra_compile.runtime import analytical, congestion
from astra_compile.network.links import LinkMap
from astra_compile.runtime.verifier import link_conflicts, verify
from astra_compile.network.parse import parse_topology
from astra_compile.network.topology import Topology
from test_linkcore import assert_same
from test_routed import compile_flat

GIB = 2 ** 30


def test_bigraph_shape_and_paths():
    # the MultiTree evaluation's network: 4 NPUs on each of 8 switches, 4 switches per group
    topo = parse_topology("4x8_bigraph")
    g = topo.graph
    assert topo.npus == 32 and g.nodes == 40 and len(g.src) == 2 * (32 + 4 * 4)
    assert [d.block for d in topo.dims] == ["Graph"]
    links = LinkMap(topo.to_dict())
    # NPUs 0..3 hang on switch 0 of group 0, 4..7 on switch 1 of group 0, 16.. on group 1
    assert links.distance([0, 0, 0], [3, 16, 4]).tolist() == [2, 3, 4]
    start, ids = links.routes([0], [4], [0], [0], [0])
    assert [links.describe(i) for i in ids] == ["npu0->sw0.0", "sw0.0->sw1.0", "sw1.0->sw0.1", "sw0.1->npu4"]


@pytest.mark.parametrize("spec", ["4x7_bigraph", "0x8_bigraph", "4x0_bigraph"])
def test_bad_bigraph_shapes(spec, capsys):
    with pytest.raises(UserError, match="MxN_bigraph needs"):
        parse_topology(spec)
    assert main(["--collective", "all_reduce", "--size", "1MB", "--topology", spec]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_dgx1_and_boxes():
    one = parse_topology("dgx1")
    assert one.npus == 8 and one.graph.nodes == 8 and len(one.graph.src) == 2 * (2 * 6 + 4)
    links = LinkMap(one.to_dict())
    assert links.distance([0, 0, 0], [3, 4, 5]).tolist() == [1, 1, 2]
    two = parse_topology("2_dgx1", bandwidth="25")
    assert two.npus == 16 and two.graph.nodes == 17
    # 4 NVLinks and one link to the switch between the boxes, 25 GB/s each
    assert two.dims[0].bandwidth_gbps == 125.0


def test_edge_list_file(tmp_path):
    f = tmp_path / "ring_and_switch.edges"
    f.write_text("# a 4-NPU ring with a switch in the middle\n0 1\n1 2\n2 3 25\n3 0 50 100\n0 hub\n2 hub\n")
    topo = parse_topology(str(f), bandwidth="50", latency="200")
    g = topo.graph
    assert topo.npus == 4 and g.names[4:] == ("hub",) and len(g.src) == 12
    assert sorted(set(g.gbps.tolist())) == [25.0, 50.0] and sorted(set(g.latency_ns.tolist())) == [100.0, 200.0]
    assert Topology.from_dict(topo.to_dict()).graph.to_dict() == g.to_dict()


@pytest.mark.parametrize("text,message", [
    ("0 1\n2 3\n", "NPU 2 cannot be reached"),
    ("0 2\n", "numbered 0..1 without gaps"),
    ("0 1 fast\n", "must be numbers"),
    ("0\n", "expected 'a b [GB/s] [ns]'"),
    ("0 1 0\n", "bandwidth must be between"),
])
def test_bad_edge_lists_are_one_line(tmp_path, capsys, text, message):
    f = tmp_path / "bad.edges"
    f.write_text(text)
    with pytest.raises(UserError, match=re.escape(message)):
        parse_topology(str(f))
    code = main(["--collective", "all_reduce", "--size", "1MB", "--topology", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err


def test_links_count_does_not_apply_to_graphs():
    with pytest.raises(UserError, match="a graph topology lists its links"):
        parse_topology("4x8_bigraph", links="2")


def test_module_keeps_the_graph():
    topo = parse_topology("2x4_bigraph", "100", "300")
    ctx = comm.new_context()
    from astra_compile.compiler.driver import driver
    module = driver.build_module(ctx, topo, "all_reduce", 4096)
    again = comm.parse_module(str(module), ctx)
    assert Topology.from_dict(comm.get_topology(again)).graph.to_dict() == topo.graph.to_dict()


ALGORITHMS = [None, "direct", "halving_doubling", "double_binary_tree", "rank_ring", "flat_direct",
              "flat_halving_doubling", "multitree"]


@pytest.mark.parametrize("topology", ["2x4_bigraph", "dgx1", "2_dgx1"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_runs_on_graphs(topology, algorithm):
    npus = parse_topology(topology).npus
    sched = compile_flat(topology, "all_reduce", npus * 512 + 24, algorithm or "ring", chunks=2)
    verify(sched)
    result = assert_same(sched, mode="full")
    assert result.total_ns >= analytical.run(sched).total_ns * (1 - 1e-12)
    if algorithm == "multitree":
        # tree edges cross switches: each step's edges hold disjoint paths, down the trees and back up
        assert link_conflicts(sched) == []


def test_ring_on_a_bigraph_by_hand():
    # 2x4_bigraph: NPUs 0,1 | 2,3 on group 0's switches, 4,5 | 6,7 on group 1's. The rank-order ring's hops take
    # 2 links (same switch), 4 (1->2, 5->6: same group, another switch) or 3 (3->4, 7->0). No link carries two
    # messages, so each of the 2 x 7 steps of the all-reduce lasts 4 latencies + (S/8) / B.
    size = 8 * 4096
    sched = compile_flat("2x4_bigraph", "all_reduce", size, "ring", bandwidth="100", latency="500")
    expected = 14 * (4 * 500 + (size / 8) / (100 * GIB / 1e9))
    assert analytical.run(sched).total_ns == pytest.approx(expected, rel=1e-12)
    assert congestion.run(sched, mode="full").total_ns == pytest.approx(expected, rel=1e-12)
    assert link_conflicts(sched) == []


def test_direct_on_a_bigraph_by_hand():
    # 2x2_bigraph: NPUs 0,1 on switch A, 2,3 on switch B, one link each way between A and B; latency 0, one
    # reduce-scatter step, messages of T = (S/4) / B. Every NPU sends 3 (peer after itself first): its uplink and its
    # downlink carry 3 T, but A->B carries the 4 messages from 0 and 1 to 2 and 3, back to back from t = 0 (NPU 1
    # sends to 2 first), so the last arrives at 4 T; B->A likewise. The analytical model: T.
    size = 4 * GIB // 4
    sched = compile_flat("2x2_bigraph", "reduce_scatter", size, "direct", bandwidth="1", latency="0")
    t = (size / 4) / (GIB / 1e9)
    assert analytical.run(sched).total_ns == pytest.approx(t)
    result = congestion.run(sched, mode="full")
    assert result.total_ns == pytest.approx(4 * t)
    busy = dict(zip(result.links["name"], np.asarray(result.links["busy_ns"]) / t))
    assert busy["sw0.0->sw1.0"] == pytest.approx(4) and busy["sw1.0->sw0.0"] == pytest.approx(4)
    assert all(busy[f"npu{n}->{s}"] == pytest.approx(3) for n, s in [(0, "sw0.0"), (3, "sw1.0")])


def test_graph_only_errors_are_one_line(capsys):
    for argv, message in [(["--algorithm", "flat_ring"], "use rank_ring"),
                          (["--algorithm", "multitree_optimal"], "use multitree")]:
        code = main(["--collective", "all_reduce", "--size", "1MB", "--topology", "dgx1", *argv])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err


def test_cli_on_a_bigraph(capsys):
    code = main(["--collective", "all_reduce", "--size", "1MB", "--topology", "2x4_bigraph", "--algorithm",
                 "multitree", "--backend", "congestion", "--verify"])
    out = capsys.readouterr().out
    assert code == 0 and "2x4_bigraph" in out and "Graph" in out


def test_multitree_meets_the_port_bound_on_the_evaluated_bigraph():
    # 4x8_bigraph: every NPU has one link, so it takes one tree edge per step: at least 31 steps for 32 trees.
    # MultiTree meets that bound (the trees over the pairs at most 3 links apart) and stays contention-free, so
    # the congestion-aware runtime gives the analytical time
    sched = compile_flat("4x8_bigraph", "all_reduce", 32 * 4096, "multitree", bandwidth="50", latency="500")
    trees = sched.trees()
    assert trees.steps == 31
    pairs = LinkMap(sched.topology.to_dict())
    child = np.nonzero(trees.parent >= 0)
    assert pairs.distance(trees.parent[child], child[1]).max() == 3
    verify(sched)
    assert link_conflicts(sched) == []
    assert congestion.run(sched, mode="full").total_ns == pytest.approx(analytical.run(sched).total_ns, rel=1e-12)


@pytest.mark.parametrize("per_switch,switches", [(1, 2), (2, 4), (4, 8), (2, 8), (4, 16), (8, 16), (1, 8)])
def test_hdrm_mapping_sends_each_switch_to_distinct_switches(per_switch, switches):
    from astra_compile.algorithms.hdrm import rank_map
    pi = rank_map(per_switch, switches)
    npus = per_switch * switches
    assert sorted(pi.tolist()) == list(range(npus))
    for bit in range(npus.bit_length() - 1):  # every halving-doubling step: partners differ in one rank bit
        partner = pi[np.arange(npus) ^ (1 << bit)]
        switch, other = pi // per_switch, partner // per_switch
        assert np.all(switch // (switches // 2) != other // (switches // 2))   # always across the groups
        assert len(set(zip(switch.tolist(), other.tolist()))) == npus          # each switch pair carries one


def test_hdrm_is_contention_free_where_halving_doubling_is_not():
    size = 32 * 4096
    plain = compile_flat("4x8_bigraph", "all_reduce", size, "halving_doubling", bandwidth="50", latency="500")
    mapped = compile_flat("4x8_bigraph", "all_reduce", size, "hdrm", bandwidth="50", latency="500")
    verify(mapped)
    assert link_conflicts(mapped) == [] and link_conflicts(plain) != []
    ideal = analytical.run(mapped).total_ns
    assert ideal == pytest.approx(analytical.run(plain).total_ns, rel=1e-12)
    assert assert_same(mapped, mode="full").total_ns == pytest.approx(ideal, rel=1e-12)
    assert congestion.run(plain, mode="full").total_ns > 1.5 * ideal


def test_hdrm_by_hand():
    # 2x4_bigraph, 8 NPUs: 3 halving steps and 3 doubling steps, every partner across the groups (3 links) and no
    # link shared, so each step takes 3 latencies + its message (S/2, S/4, S/8) / B
    size = 8 * 4096
    sched = compile_flat("2x4_bigraph", "all_reduce", size, "hdrm", bandwidth="100", latency="500")
    b = 100 * GIB / 1e9
    expected = 2 * (3 * 3 * 500 + (size / 2 + size / 4 + size / 8) / b)
    assert analytical.run(sched).total_ns == pytest.approx(expected, rel=1e-12)
    assert congestion.run(sched, mode="full").total_ns == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("argv,message", [
    (["--collective", "reduce_scatter", "--topology", "4x8_bigraph"], "schedules all-reduce only"),
    (["--collective", "all_reduce", "--topology", "8x8_torus"], "hdrm needs an MxN_bigraph"),
    (["--collective", "all_reduce", "--topology", "8x4_bigraph"], "M <= N/2"),
])
def test_hdrm_errors_are_one_line(capsys, argv, message):
    code = main([*argv, "--size", "1MB", "--algorithm", "hdrm"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_multitree_scrambles_ties_where_npu_order_falls_short():
    # 4 DGX-1 boxes: equally near pairs in NPU order take 10 steps (every tree crowds onto the same low-numbered
    # NPUs); the scrambled tie order at the best cap takes 9, still contention-free and a correct all-reduce
    from astra_compile.algorithms.multitree import path_trees, step_lower_bound
    sched = compile_flat("4_dgx1", "all_reduce", 32 * 4096, "multitree", bandwidth="50", latency="500")
    trees = sched.trees()
    lg = sched.topology.links()
    assert trees.steps == 9 and trees.steps >= step_lower_bound(32, lg.src, lg.dst)
    assert path_trees(sched.topology).steps == 9
    verify(sched)
    assert link_conflicts(sched) == []
    assert congestion.run(sched, mode="full").total_ns == pytest.approx(analytical.run(sched).total_ns, rel=1e-12)
