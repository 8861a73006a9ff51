"""Contention in the step: collectives in flight together share the links they use.

End to end through the compiler: two equal all-reduces issued together on two process groups over the same
topology dimension take twice as long as one; over two different dimensions, as long as one. Per-rank programs
(not SPMD) and the congestion backend follow the same rule. The fair-rate rule itself is checked by hand."""
import pytest
from hypothesis import given, settings, strategies as st

import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, WAIT, Op, Workload
from astra_compile.runtime.link_sharing import fair_rates
from astra_compile.runtime.workload_engine import ProgramTable, Roofline, run_workload

MB = 2 ** 20
ROW0 = (0, 1, 2, 3)        # 4x4_torus: the ranks of rank 0's dimension-0 ring
COL0 = (0, 4, 8, 12)       # and of its dimension-1 ring


def all_reduce(group, name, deps=()):
    return Op("c10d.allreduce_", COLLECTIVE, list(deps), bytes=64 * MB, collective="all_reduce", group=group,
              group_name=name)


def step(groups, spmd=True, ranks=(0,)):
    """A 2 ns op, then one 64 MB all-reduce per (group, name), all issued together, then a wait for each."""
    def program():
        ops = [Op("aten.add.default", COMPUTE, flops=2000, bytes=0)]
        ops += [all_reduce(g, n, [0]) for g, n in groups]
        ops += [Op("wait", WAIT, [1 + k]) for k in range(len(groups))]
        return ops
    return Workload(16, {r: program() for r in ranks}, source="two all-reduces", spmd=spmd)


def time_of(workload, **kw):
    report = astra_compile.compile(workload, "4x4_torus", peak_tflops=1.0, **kw)
    return report.to_dict()["total_time_us"]


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_two_equal_all_reduces_on_one_dimension_take_twice_one_and_on_two_dimensions_one(backend):
    one = time_of(step([(ROW0, "a")]), backend=backend)
    same = time_of(step([(ROW0, "a"), (ROW0, "b")]), backend=backend)
    apart = time_of(step([(ROW0, "a"), (COL0, "b")]), backend=backend)
    compute_us = 0.002
    assert (same - compute_us) == pytest.approx(2 * (one - compute_us), rel=0.01)
    assert apart == pytest.approx(one, rel=0.01)
    assert same > 1.9 * (one - compute_us)   # not merely "within 1 %" of a number close to it


def test_per_rank_programs_share_links_where_their_groups_meet():
    """Ranks 0..3 each run the same two all-reduces on two groups over dimension 0: every rank's links carry both,
    so the step is twice one. The groups {0..3} and {4..7} (different rows of the torus) share no link."""
    row1 = (4, 5, 6, 7)
    one = time_of(Workload(16, {r: step([(ROW0, "a")]).programs[0] for r in ROW0}, source="x"))
    both = time_of(Workload(16, {r: step([(ROW0, "a"), (ROW0, "b")]).programs[0] for r in ROW0}, source="x"))
    assert (both - 0.002) == pytest.approx(2 * (one - 0.002), rel=0.01)
    rows = {r: step([(ROW0, "a")]).programs[0] for r in ROW0} | {r: step([(row1, "a")]).programs[0] for r in row1}
    assert time_of(Workload(16, rows, source="x")) == one


def test_a_collective_alone_keeps_its_compiled_time_to_the_last_digit():
    report = astra_compile.compile(step([(ROW0, "a")]), "4x4_torus", peak_tflops=1.0).to_dict()
    (coll,) = report["collectives"]
    assert coll["end_us"] - coll["start_us"] == coll["time_us"]


def test_fair_rates_by_hand():
    assert fair_rates({"a": {"x": 1.0}, "b": {"x": 1.0}}) == {"a": 0.5, "b": 0.5}
    assert fair_rates({"a": {"x": 1.0}, "b": {"y": 1.0}}) == {"a": 1.0, "b": 1.0}
    # a uses 40 % of x: alone with b (100 % of x) both grow to 1/1.4, x is full
    r = fair_rates({"a": {"x": 0.4}, "b": {"x": 1.0}})
    assert r["a"] == pytest.approx(1 / 1.4) and r["b"] == pytest.approx(1 / 1.4)
    # all grow together: x (load 1 + 1 + 0.5) fills at 0.4 and holds a, b, c there; y then has 1 - 0.8 left for
    # d alone: d = 0.4 + 0.2
    r = fair_rates({"a": {"x": 1.0}, "b": {"x": 1.0}, "c": {"x": 0.5, "y": 1.0}, "d": {"y": 1.0}})
    assert [r[j] for j in "abcd"] == pytest.approx([0.4, 0.4, 0.4, 0.6])
    assert fair_rates({"a": {}, "b": {"x": 0.0}}) == {"a": 1.0, "b": 1.0}


def test_the_same_uses_meet_again_with_other_jobs_and_get_the_same_rates():
    # the rates are kept by the uses in order (a pipeline's micro-batches meet in the same combinations): other
    # jobs with the same uses get them, each its own
    from astra_compile.runtime import link_sharing
    uses = {"c": {"x": 0.5, "y": 1.0}, "a": {"x": 1.0}, "d": {"y": 1.0}}
    first = fair_rates(uses)
    again = fair_rates({job.upper(): use for job, use in uses.items()})
    assert first == {"c": pytest.approx(0.5), "a": pytest.approx(0.75), "d": pytest.approx(0.5)}   # y fills first
    assert again == {job.upper(): rate for job, rate in first.items()}
    assert first == link_sharing._filled(uses)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 6), st.dictionaries(st.integers(0, 3), st.floats(0.0, 1.0), max_size=4),
                       min_size=1, max_size=7))
def test_fair_rates_never_overfill_a_resource_and_leave_none_idle_that_could_grow(uses):
    rates = fair_rates(uses)
    assert set(rates) == set(uses) and all(0 < r <= 1 for r in rates.values())
    load = {}
    for j, use in uses.items():
        for res, u in use.items():
            load[res] = load.get(res, 0.0) + rates[j] * u
    assert all(v <= 1 + 1e-9 for v in load.values())
    for j, use in uses.items():   # a job below rate 1 is held by a full resource it uses
        if rates[j] < 1 - 1e-9:
            assert any(u > 1e-12 and load[res] >= 1 - 1e-9 for res, u in use.items())


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 6), st.dictionaries(st.integers(0, 8), st.sampled_from(
    [0.0, 1e-13, 0.25, 1 / 3, 0.7, 1.0, 1.0000001, 1.5]), max_size=3), min_size=1, max_size=5))
def test_collectives_sharing_no_resource_take_the_shortcut_to_the_same_rates(uses):
    """fair_rates answers "all at rate 1" without the filling where no resource has two users and no user needs
    more than all of it; its rates are the filling's to the last bit either way, and the shortcut is taken."""
    from astra_compile.runtime.link_sharing import _filled, _unshared
    assert fair_rates(uses) == _filled(uses)
    users = {}
    for use in uses.values():
        for res, u in use.items():
            if u > 1e-12:
                users.setdefault(res, []).append(u)
    assert _unshared(uses) == all(len(us) == 1 and us[0] <= 1.0 for us in users.values())


def test_the_engine_stretches_only_what_overlaps():
    # two 100 ns collectives, each on dimension 0 for all its time; the second starts 50 ns later: they share
    # 50..150 at half rate each, so the first ends at 150 and the second at 200
    import numpy as np
    kinds = np.array([COLLECTIVE_CODE, 0, COLLECTIVE_CODE], np.int8)
    table = ProgramTable(0, kinds, np.array([0.0, 50e3, 0.0]), np.zeros(3), np.array([100.0, 0.0, 100.0]),
                         np.array([1, 0, 2], np.int32), np.array([0, -1, 1]), np.array([4, 1, 4]),
                         np.array([0, 0, 0, 1]), np.array([1]), None, [{(-1, 0): 1.0}, None, {(-1, 0): 1.0}])
    r = run_workload([table], Roofline(peak_tflops=1.0, mem_gbps=1e12), spmd=True).ranks[0]
    assert list(r.start_ns) == [0.0, 0.0, 50.0]
    assert list(r.end_ns) == [150.0, 50.0, 200.0]
    assert r.comm_ns == 300.0


COLLECTIVE_CODE = 1


def exchange(pairs, backend, world=8):
    """Each (src, dst): src sends 64 MB to dst, every message posted at time 0 (per-rank programs on Ring(8))."""
    from astra_compile.compiler.frontend.workload import RECV, SEND
    programs = {r: [Op("aten.add.default", COMPUTE, flops=0, bytes=0)] for r in range(world)}
    for s, d in pairs:
        programs[s].append(Op("send", SEND, [0], bytes=64 * MB, peer=d))
        programs[d].append(Op("recv", RECV, [0], bytes=64 * MB, peer=s))
    return astra_compile.compile(Workload(world, programs, source="messages"), f"Ring({world})",
                                 backend=backend).to_dict()["total_time_us"]


def test_over_real_links_messages_share_the_links_of_their_routes_and_nothing_else():
    """The congestion backend shares physical links (full duplex): 0->1 and 1->0 together take as long as one,
    0->2 and 1->3 (both through the link 1->2) twice as long. The analytical backend shares per dimension at the
    messages' ends, as docs/cost-model.md states: the first pair shares, the second does not."""
    one = exchange([(0, 1)], "congestion")
    assert exchange([(0, 1), (1, 0)], "congestion") == one
    two_hops = exchange([(0, 2)], "congestion")
    # sharing the link, each streams its bytes at half rate; the hops' latency (500 ns each) overlaps the other's
    stream = two_hops - 2 * 0.5
    assert exchange([(0, 2), (1, 3)], "congestion") == pytest.approx(2 * stream, rel=1e-9)
    assert exchange([(0, 2), (4, 6)], "congestion") == two_hops      # disjoint routes
    assert exchange([(0, 1), (1, 0)], "analytical") == pytest.approx(2 * (one - 0.5), rel=1e-9)
    assert exchange([(0, 2), (1, 3)], "analytical") == two_hops


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_a_message_on_a_collectives_links_shares_them(backend):
    """A 64 MB message 0 -> 1 during a 64 MB all-reduce on rank 0's dimension-0 ring of 4x4_torus: both are slowed,
    on either backend (the ring uses both directions of every link of its row)."""
    from astra_compile.compiler.frontend.workload import RECV, SEND

    def program(rank):
        ops = [Op("aten.add.default", COMPUTE, flops=0, bytes=0), all_reduce(ROW0, "a", [0])]
        if rank == 0:
            ops.append(Op("send", SEND, [0], bytes=64 * MB, peer=1))
        if rank == 1:
            ops.append(Op("recv", RECV, [0], bytes=64 * MB, peer=0))
        return ops + [Op("wait", WAIT, [1])]

    alone = time_of(Workload(16, {r: program(r)[:2] + program(r)[-1:] for r in ROW0}, source="x"),
                    backend=backend)
    both = time_of(Workload(16, {r: program(r) for r in ROW0}, source="x"), backend=backend)
    assert both > alone * 1.1
