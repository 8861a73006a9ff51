"""in_switch (algorithms/in_switch.py, added as one file on top of the tables' switch endpoint): in-network reduction
on Switch dimensions, verified on data, timed by hand, refused where it cannot run."""
import json

import numpy as np
import pytest

from astra_compile.compiler.main import main
from astra_compile.runtime import analytical, verifier
from astra_compile.runtime.tables import SEND, SWITCH, Table
from astra_compile.runtime.verifier import VerificationError
from helpers import compile_collective

GIB = 2 ** 30


def report(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_all_reduce_takes_size_over_bandwidth_plus_two_latencies(capsys):
    """Each NPU sends its 1 MiB up once and gets the sum back once, the two streams overlapping in the switch:
    1 MiB / 50 GB/s + 2 x 500 ns, against 2(k-1)/k x 1 MiB / 50 GB/s for halving-doubling on 8 NPUs."""
    r = report(capsys, "--collective", "all_reduce", "--size", "1MiB", "--topology", "8_switch", "--algorithm",
               "in_switch")
    expected = (2 * 500 + 2 ** 20 / (50 * GIB / 1e9)) / 1e3
    assert r["total_time_us"] == pytest.approx(expected, rel=1e-12)
    hd = report(capsys, "--collective", "all_reduce", "--size", "1MiB", "--topology", "8_switch")
    assert hd["total_time_us"] > 1.5 * r["total_time_us"]
    # the ideal counts what a reducing switch needs (each buffer once each way): no beating of the links
    assert not r["exceeds_link_capacity"] and r["bw_utilization"] <= 1


def test_the_tables_talk_to_the_switch():
    sched = compile_collective("Switch(4)", "all_reduce", 4096, algorithm="in_switch")
    t = sched.table(2)
    assert len(t) == 2 and np.all(t["peer"] == SWITCH) and sorted(t["op"].tolist())[0] == SEND
    assert t["bytes"].tolist() == [4096, 4096]  # the whole buffer up, the whole sum down (fused halves)


@pytest.mark.parametrize("topology,algorithm", [("8_switch", "in_switch"), ("Switch(4)_Ring(3)", "in_switch,ring"),
                                                ("Ring(2)_Switch(4)", "direct,in_switch"),
                                                ("Switch(2)_Switch(4)", "in_switch")])
@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_verified_on_data_and_symmetric_equals_full(topology, algorithm, kind, chunks):
    sched = compile_collective(topology, kind, 96 * 1024 + 12, chunks=chunks, algorithm=algorithm)
    verifier.verify(sched)
    if sched.meta.symmetric:
        assert analytical.run(sched, "symmetric").total_ns == analytical.run(sched, "full").total_ns


def test_a_wrong_contribution_is_caught():
    sched = compile_collective("Switch(4)", "all_reduce", 4096, algorithm="in_switch")

    class Broken:
        meta = sched.meta

        def export_meta(self):
            return sched.export_meta()

        def table(self, npu, deps=True):
            t = sched.table(npu)
            if npu != 1:
                return t
            cols = {c: v.copy() for c, v in t.cols.items()}
            up = np.flatnonzero(cols["op"] == SEND)[0]
            cols["bytes"][up] -= 8  # NPU 1 leaves its last 8 bytes out of the sum
            return Table(cols)
    with pytest.raises(VerificationError):
        verifier.verify(Broken())


@pytest.mark.parametrize("argv,match", [
    (["--topology", "8_ring", "--algorithm", "in_switch"], "in_switch runs on Switch dimensions; dimension 0 is a Ring"),
    (["--topology", "8_switch", "--algorithm", "in_switch", "--backend", "congestion"], "does not model a switch"),
])
def test_refused_where_it_cannot_run(capsys, argv, match):
    assert main(["--collective", "all_reduce", "--size", "1MB", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_all_to_all_is_not_served(capsys):
    assert main(["--collective", "all_to_all", "--size", "1MB", "--topology", "8_switch", "--algorithm",
                 "in_switch"]) == 2
    assert "in_switch has no all_to_all schedule" in capsys.readouterr().err
