"""Process groups inside a dimension: tp=4 or dp=2 on a Switch(8) or FC(8) dimension.

A mesh axis that splits a dimension gives groups of consecutive members (tp=4: 0-3, 4-7) or of every stride-th
one (dp=2: 0 and 4). Their collectives run on the network the group sees (Topology.within): a Switch's members
keep their own uplinks, so 4 of Switch(8) are a Switch(4) of the same links; an FC member's bandwidth B is split
over its 7 links, so 4 of FC(8) use 3 links of B/7. The times below are computed by hand from those links, the
schedules are executed on data. On a Ring, every stride-th member's messages walk `stride` links each, shared by
`stride` groups; a consecutive segment's ring closes back through the segment, two messages per link.
"""
import itertools
import json
import os
import re

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

import astra_compile.compiler.report
from astra_compile.compiler.frontend.workload import COLLECTIVE, WAIT, Op, Workload
from astra_compile.network.errors import UserError
from astra_compile.network.parse import parse_topology
from astra_compile.network.units import gbps_to_bytes_per_ns
from astra_compile.runtime import step_tables
from astra_compile.runtime.verifier import verify
from astra_compile.compiler.core.step_keys import group_span

from helpers import cli, refused

MB = 2 ** 20
S = 64 * MB
BW = gbps_to_bytes_per_ns(50.0)   # the default 50 GB/s per dimension, in bytes per ns
LAT = 500.0


def step(topology, groups, kind="all_reduce", together=False, nbytes=S):
    """One SPMD program: a `kind` of `nbytes` on each group (named g0, g1, ...), one after the other unless
    together."""
    ops = []
    for k, g in enumerate(groups):
        ops.append(Op(f"c{k}", COLLECTIVE, [] if together or not ops else [len(ops) - 1], bytes=nbytes, collective=kind,
                      group=tuple(g), group_name=f"g{k}", root=g[0] if kind == "broadcast" else -1))
        if not together:
            ops.append(Op("wait", WAIT, [len(ops) - 1]))
    n = parse_topology(topology).npus
    return Workload(n, {0: ops}, source="subgroups", spmd=True)


def time_us(topology, group, kind="all_reduce"):
    (c,) = astra_compile.compile(step(topology, [group], kind), topology).collectives
    return c["time_us"], c["algorithm"]


def test_the_span_of_a_group():
    t = parse_topology("Switch(8)_Switch(8)")
    assert group_span(t, range(4)) == ([0], {0: (4, 1)})
    assert group_span(t, range(4, 8)) == ([0], {0: (4, 1)})
    assert group_span(t, [0, 4]) == ([0], {0: (2, 4)})
    assert group_span(t, [1, 5, 9, 13]) == ([0, 1], {0: (2, 4), 1: (2, 1)})
    assert group_span(t, range(8)) == ([0], {})
    for bad, why in (([1, 2], "block of consecutive"), ([0, 2], "every 4-th"), ([0, 1, 2], "every"),
                     ([0, 1, 9], "every combination")):
        with pytest.raises(UserError, match=why):
            group_span(t, bad)


def test_tp4_and_dp2_on_a_switch_match_the_hand_calculation():
    # halving-doubling through the switch: each step's message takes the uplink and the downlink (2 latencies);
    # 4 members: reduce-scatter S/2 + S/4, the all-gather the same
    t, alg = time_us("Switch(8)", [0, 1, 2, 3])
    assert alg == "halving_doubling@0"
    assert t * 1e3 == pytest.approx(2 * (0.75 * S / BW + 2 * 2 * LAT), rel=1e-9)
    t, _ = time_us("Switch(8)", [4, 5, 6, 7])
    assert t * 1e3 == pytest.approx(2 * (0.75 * S / BW + 2 * 2 * LAT), rel=1e-9)
    t, _ = time_us("Switch(8)", [0, 4])      # dp=2: one step of S/2 each way
    assert t * 1e3 == pytest.approx(2 * (0.5 * S / BW + 2 * LAT), rel=1e-9)


def test_tp4_and_dp2_on_a_fully_connected_dimension_use_only_their_links():
    # direct: each member sends S/4 to each of its 3 partners at once, one link of B/7 each; then the all-gather
    t, alg = time_us("FC(8)", [0, 1, 2, 3])
    assert alg == "direct@0"
    assert t * 1e3 == pytest.approx(2 * (S / 4 / (BW / 7) + LAT), rel=1e-9)
    t, _ = time_us("FC(8)", [0, 4])
    assert t * 1e3 == pytest.approx(2 * (S / 2 / (BW / 7) + LAT), rel=1e-9)
    # the whole dimension, for contrast: 7 links at once
    t, _ = time_us("FC(8)", list(range(8)))
    assert t * 1e3 == pytest.approx(2 * (S / 8 / (BW / 7) + LAT), rel=1e-9)


@pytest.mark.parametrize("topology, group", [("Switch(8)", [4, 5, 6, 7]), ("FC(8)", [1, 5]),
                                             ("Switch(4)_FC(4)", [2, 3, 6, 7]), ("FC(8)", [0, 1, 2, 3]),
                                             ("Ring(8)", [4, 5, 6, 7]), ("Ring(8)_Ring(2)", [1, 5, 9, 13])])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "all_to_all", "broadcast"])
def test_the_schedules_are_correct_on_data(topology, group, kind):
    report = astra_compile.compile(step(topology, [group], kind, nbytes=MB), topology, keep_tables=True)
    (schedule,) = report.step_tables("csv").collectives
    verify(schedule)   # raises VerificationError if any NPU ends with wrong data


def test_groups_on_one_physical_dimension_share_its_links():
    """tp (0-3) and dp (0, 4) both use the Switch(8) uplinks of their members: issued together they share them."""
    alone = astra_compile.compile(step("Switch(8)", [[0, 1, 2, 3]]), "Switch(8)").total_time_us
    both = astra_compile.compile(step("Switch(8)", [[0, 1, 2, 3], [0, 4]], together=True), "Switch(8)")
    assert both.total_time_us > alone * 1.2
    apart = astra_compile.compile(step("Switch(8)_Switch(2)", [[0, 1, 2, 3], [0, 8]], together=True),
                                  "Switch(8)_Switch(2)")
    assert apart.total_time_us == pytest.approx(alone)


def test_tp4_and_dp2_on_a_ring_match_the_hand_calculation():
    """tp=4 (0-3) on Ring(8): the bidirectional ring's halves go round the segment, each closing back through it
    (3 links), so every link carries one message of each direction's ring: S/8 per message at B/2 per link shared
    by two -> S/8 / (B/4) a step, 3 latencies (the wrap). 3 reduce-scatter + 3 all-gather steps."""
    t, alg = time_us("Ring(8)", [0, 1, 2, 3])
    assert alg == "ring@0"
    assert t * 1e3 == pytest.approx(6 * (S / 8 / (BW / 4) + 3 * LAT), rel=1e-9)
    # dp=2 (0, 4): each half walks 4 links, every link carries 4 groups' halves: S/4 per message at B/2 / 4
    t, _ = time_us("Ring(8)", [0, 4])
    assert t * 1e3 == pytest.approx(2 * (S / 4 / (BW / 8) + 4 * LAT), rel=1e-9)


def test_a_block_without_groups_inside_is_refused_in_one_line(capsys, tmp_path):
    with pytest.raises(UserError, match=r"groups inside a Mesh dimension are not modelled"):
        astra_compile.compile(step("Mesh(8)", [[0, 1, 2, 3]]), "Mesh(8)")
    refused(capsys, os.path.join(os.path.dirname(__file__), "..", "examples", "gpt_tp_dp.py"), "--topology",
            "Mesh(8)_Mesh(8)", "--mesh", "dp=16,tp=4", match="groups inside a Mesh dimension")


def test_step_module_and_step_tables_round_trip(tmp_path, capsys):
    topology = "Switch(8)_Switch(2)"
    direct = astra_compile.compile(step(topology, [[4, 5, 6, 7], [1, 9], [3, 7, 11, 15]], kind="broadcast"),
                                   topology, keep_tables=True)
    assert 'wl.part = array<i64: 4>' in direct.mlir and 'wl.stride = array<i64: 4, 1>' in direct.mlir
    assert [c.get("part") for c in direct.collectives] == [[[0, 4, 1]], None, [[0, 2, 4]]]
    here = os.path.dirname(astra_compile.compiler.report.__file__)
    with open(os.path.join(here, "workload_report.schema.json")) as f:
        jsonschema.validate(direct.to_dict(), json.load(f))
    assert re.search(r"broadcast\s+g0\s+4\s+0:4\s", direct.format())     # the dims column: dimension:members
    (tmp_path / "s.mlir").write_text(direct.mlir)
    assert astra_compile.compile(str(tmp_path / "s.mlir"), None).to_dict() == direct.to_dict()
    step_tables.write(str(tmp_path / "d"), direct.step_tables("csv"))
    assert astra_compile.compile(str(tmp_path / "d"), None).to_dict() == direct.to_dict()
    meta = json.load(open(tmp_path / "d" / "meta.json"))
    assert [c["part"] for c in meta["collectives"]] == [[[0, 4, 1]], [], [[0, 2, 4]]]
    code, out, _ = cli(capsys, str(tmp_path / "d"), "--emit", "tables", "--npu", "7")
    assert code == 0 and "(NPU 3 of the 8-NPU network its group sees)" in out
    # a module whose wl.part no longer matches its group is refused
    (tmp_path / "bad.mlir").write_text(re.sub(r"wl\.part = array<i64: 4>", "wl.part = array<i64: 2>", direct.mlir,
                                              count=1))
    refused(capsys, str(tmp_path / "bad.mlir"), match="wl.part [2] but group")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["Ring", "Switch", "FC"]), min_size=1, max_size=2),
       st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=2), st.data())
def test_any_mesh_split_compiles_to_a_schedule_correct_on_data(blocks, sizes, data):
    """A random 1-2 dimension topology of Ring/Switch/FC, a random mesh axis splitting it (members along each
    dimension: a power-of-two divisor, consecutive or strided, at a random offset): group_span accepts exactly the
    groups it should, and the collective's schedule on the network the group sees is right on data."""
    dims = [f"{b}({n})" for b, n in zip(blocks, sizes)]
    topology = "_".join(dims)
    topo = parse_topology(topology)
    members = []
    for n in topo.shape:
        k = data.draw(st.sampled_from([m for m in (1, 2, 4, 8) if m <= n]))
        strided = data.draw(st.booleans()) and k not in (1, n)
        offset = data.draw(st.integers(0, (n // k) - 1))
        members.append([offset + j * (n // k) for j in range(k)] if strided else
                       [offset * k + j for j in range(k)])
    group = sorted(sum(c * s for c, s in zip(at, topo.strides()))
                   for at in itertools.product(*members))
    if len(group) < 2:
        return
    dims_, parts = group_span(topo, group)
    assert [d for d, m in enumerate(members) if len(m) > 1] == dims_
    assert all(parts.get(d, (topo.shape[d], 1))[0] == len(members[d]) for d in dims_)
    kind = data.draw(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast"]))
    report = astra_compile.compile(step(topology, [group], kind, nbytes=MB), topology, keep_tables=True)
    (schedule,) = report.step_tables("csv").collectives
    verify(schedule)
    assert report.total_time_us > 0
