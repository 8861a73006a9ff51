"""Analytical runtime: hand-computed timelines, and the symmetric shortcut against full per-NPU execution."""
import numpy as np
import pytest

from astra_compile.runtime import analytical
from astra_compile.runtime.phases import OptionError
from helpers import compile_collective

GIB = 2 ** 30


def test_ring_reduce_scatter_closed_form():
    # Ring(4), B = 2 GiB/s: each neighbour link carries B/2; the bidirectional ring sends 1 GiB each way per step
    sched = compile_collective("Ring(4)", "reduce_scatter", 8 * GIB, bandwidth="2", latency="100")
    r = analytical.run(sched)
    assert r.total_ns == pytest.approx(3e9 + 3 * 100, rel=1e-12)
    assert r.per_dim_bytes == [6 * GIB]


def test_halving_doubling_on_switch_closed_form():
    # log2(4) = 2 steps send 4 then 2 GiB at 2 GiB/s; every step crosses the switch (2 hops of 50 ns)
    sched = compile_collective("Switch(4)", "reduce_scatter", 8 * GIB, bandwidth="2", latency="50")
    assert analytical.run(sched).total_ns == pytest.approx(3e9 + 2 * 2 * 50, rel=1e-12)


def test_fifo_pipeline_by_hand():
    # FC(2)_FC(2), 4 and 1 GiB/s, no latency, 4 GiB all-reduce in 2 chunks, direct:
    # per chunk RS d0 0.25 s, RS d1 0.5 s, AG d1 0.5 s, AG d0 0.25 s
    sched = compile_collective("FC(2)_FC(2)", "all_reduce", 4 * GIB, chunks=2, bandwidth="4,1", latency="0")
    r = analytical.run(sched)
    assert r.total_ns == pytest.approx(2.5e9, rel=1e-12)
    p = r.phases
    got = {(int(c), int(f), int(s)): (p["start"][i] / 1e9, p["end"][i] / 1e9)
           for i, (c, f, s) in enumerate(zip(p["coll"], p["flow"], p["stage"]))}
    expected = {  # (collective 0 = RS, 1 = AG; chunk; stage) -> (start, end) in seconds
        (0, 0, 0): (0, .25), (0, 1, 0): (.25, .5),       # dim 0 reduce-scatter, both chunks back to back
        (0, 0, 1): (.25, .75), (0, 1, 1): (.75, 1.25),   # dim 1: chunk 1's RS queued first (ready at .5)
        (1, 0, 0): (1.25, 1.75), (1, 1, 0): (1.75, 2.25),  # then the all-gathers in arrival order
        (1, 0, 1): (1.75, 2.0), (1, 1, 1): (2.25, 2.5),  # dim 0 all-gather
    }
    assert set(got) == set(expected)
    for key, (start, end) in expected.items():
        assert got[key] == pytest.approx((start, end), abs=1e-12), key


@pytest.mark.parametrize("topology,kind,algorithm,chunks", [
    ("Ring(4)_FC(2)_Switch(8)", "all_reduce", None, 4),
    ("4x4x4_torus", "all_reduce", "direct", 3),
    ("Switch(8)_Switch(8)", "all_to_all", "halving_doubling", 2),
    ("Ring(5)_FC(3)", "all_gather", "ring", 5),
    ("Ring(3)_Switch(4)", "reduce_scatter", "direct,halving_doubling", 2),
])
def test_symmetric_agrees_with_full_execution(topology, kind, algorithm, chunks):
    # a size every chunk, block and unit divides: then every NPU's table is an exact relabelling of NPU 0's
    sched = compile_collective(topology, kind, 2 ** 20 * 75, chunks=chunks, algorithm=algorithm, latency="700")
    assert sched.meta.symmetric
    sym, full = analytical.run(sched, "symmetric"), analytical.run(sched, "full")
    assert sym.total_ns == pytest.approx(full.total_ns, rel=1e-9)
    assert sym.per_dim_bytes == full.per_dim_bytes
    # every NPU's phase timeline equals NPU 0's
    f = full.phases
    for npu in np.unique(f["npu"]):
        sel = f["npu"] == npu
        assert sorted(f["end"][sel]) == pytest.approx(sorted(sym.phases["end"]), rel=1e-12)


def test_trees_run_in_full_mode_and_cost_more_than_ring_here():
    tree = compile_collective("Ring(8)", "all_reduce", 2 ** 24, chunks=4, algorithm="double_binary_tree")
    ring = compile_collective("Ring(8)", "all_reduce", 2 ** 24, chunks=4)
    assert not tree.meta.symmetric
    assert analytical.run(tree).mode == "full"
    assert analytical.run(tree).total_ns > analytical.run(ring).total_ns


def test_uneven_split_is_not_called_symmetric():
    # 1000 bytes in 3 chunks: NPUs move blocks that differ by a byte, so the shortcut would be approximate
    sched = compile_collective("Ring(4)", "all_reduce", 1000, chunks=3)
    assert not sched.meta.symmetric
    assert analytical.run(sched).mode == "full"
    with pytest.raises(OptionError, match="--execution full"):  # forcing the shortcut is refused, not obeyed
        analytical.run(sched, "symmetric")


def test_trees_with_several_chunks_do_not_deadlock():
    # tree members finish phases at different times; all members of a group must still serve the dimension's
    # phases in one order or they wait on each other forever
    sched = compile_collective("Ring(4)_Switch(5)", "all_reduce", 3000, chunks=3, algorithm="ring,double_binary_tree")
    result = analytical.run(sched, "full")
    assert result.total_ns > 0 and len(result.phases["end"]) == 20 * 3 * 4
