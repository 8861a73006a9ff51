"""The Hypercube block (network/blocks/hypercube.py), added as one file: routes, a hand-computed time, every
algorithm verified on data, and the symmetric shortcut where (and only where) the schedule is symmetric."""
import json
import subprocess

import numpy as np
import pytest

from astra_compile.compiler.main import main
from astra_compile.network.links import LinkMap
from astra_compile.network.parse import parse_topology
from helpers import compile_collective
from astra_compile.runtime import analytical, congestion

GIB = 2 ** 30


def report(capsys, *argv):
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_e_cube_routes_cross_the_lowest_differing_bit_first():
    topo = parse_topology("Hypercube(8)")
    links = LinkMap(topo.to_dict())
    start, ids = links.routes([0, 5], [7, 4], [0, 0], [0, 0], [3, 1])
    assert np.diff(start).tolist() == [3, 1]
    assert [links.describe(i) for i in ids] == ["dim0 npu0->npu1", "dim0 npu1->npu3", "dim0 npu3->npu7",
                                                "dim0 npu5->npu4"]
    assert topo.dims[0].hops(0, 7) == 3 and topo.dims[0].hops(2, 6) == 1
    assert topo.dims[0].link_gbps() == pytest.approx(50 / 3)  # three links share the NPU's 50 GB/s


def test_halving_doubling_by_hand(capsys):
    """1MiB all-reduce on Hypercube(8), 50 GB/s over 3 links, 500 ns: each half is 3 one-hop steps moving 1/2, 1/4
    and 1/8 of the buffer over one link of 50/3 GB/s."""
    r = report(capsys, "--collective", "all_reduce", "--size", "1MiB", "--topology", "Hypercube(8)")
    half = 3 * 500 + (7 / 8 * 2 ** 20) / (50 / 3 * GIB / 1e9)
    assert r["total_time_us"] == pytest.approx(2 * half / 1e3, rel=1e-12)
    assert r["dims"][0]["algorithms"] == ["halving_doubling"] and r["execution"] == "symmetric"


@pytest.mark.parametrize("topology", ["Hypercube(8)", "HC(4)_Ring(3)", "FC(2)_Hypercube(4)"])
@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"])
@pytest.mark.parametrize("algorithm", ["ring", "direct", "halving_doubling", "double_binary_tree", "multitree",
                                       "rank_ring", "flat_direct"])
def test_every_algorithm_verifies_on_data(capsys, topology, kind, algorithm):
    code = main(["--collective", kind, "--size", "96KB", "--topology", topology, "--algorithm", algorithm,
                 "--chunks", "2", "--verify", "--json"])
    out, err = capsys.readouterr()
    if code == 2:  # an algorithm without a schedule for this case says so in one line
        assert err.count("\n") == 1 and ("no all_to_all" in err or "power-of-two" in err or "graph algorithm" in err)
        return
    assert code == 0 and json.loads(out)["verified"]


@pytest.mark.parametrize("algorithm", ["halving_doubling", "direct"])
def test_symmetric_schedules_agree_with_full_execution(algorithm):
    sched = compile_collective("Hypercube(8)_Ring(2)", "all_reduce", 2 ** 20, chunks=4,
                               algorithm=f"{algorithm},ring")
    assert sched.meta.symmetric
    assert analytical.run(sched, "symmetric").total_ns == analytical.run(sched, "full").total_ns
    sym = congestion.run(sched, mode="symmetric")
    assert sym.total_ns == congestion.run(sched, mode="full").total_ns


def test_a_ring_on_a_hypercube_is_not_called_symmetric():
    sched = compile_collective("Hypercube(8)", "all_reduce", 2 ** 20, algorithm="ring")
    assert not sched.meta.symmetric  # c -> c+1 is one link from even c, up to three from odd c


def test_sizes_that_are_not_powers_of_two_are_refused():
    out = subprocess.run(["astra-compile", "--collective", "all_reduce", "--size", "1MB", "--topology", "HC(6)"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "a Hypercube has 2^n members, got 6" in out.stderr
