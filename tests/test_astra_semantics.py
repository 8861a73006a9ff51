"""The astra-sim step semantics end to end: a --system file, or --step-semantics astra-sim, runs
a step as ASTRA-sim's workload layer does (one collective or send in flight per NPU, eager sends), its messages and
sub-world groups as ASTRA-sim's network sees them (network/astra_network.py); without it nothing changes."""
import json
import os

import pytest

import astra_compile
from astra_compile.dialects.comm import new_context
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, RECV, SEND, WAIT, Op, Workload
from astra_compile.network.errors import UserError
from astra_compile.network.parse import parse_topology
from astra_compile.network.units import gbps_to_bytes_per_ns
from astra_compile.compiler.driver.workload_driver import StepSemantics, WorkloadOptions, _time_one, message_time

from helpers import cli

MB = 2 ** 20
ROW0, COL0 = (0, 1, 2, 3), (0, 4, 8, 12)   # 4x4_torus: rank 0's dimension-0 and dimension-1 rings
ASTRA = StepSemantics("astra-sim")


def two_groups():
    """A 2 ns op, then a 64 MB all-reduce on each of rank 0's two rings, issued together, then a wait for each."""
    ops = [Op("aten.add.default", COMPUTE, flops=2000, bytes=0)]
    ops += [Op("c10d.allreduce_", COLLECTIVE, [0], bytes=64 * MB, collective="all_reduce", group=g, group_name=n)
            for g, n in ((ROW0, "a"), (COL0, "b"))]
    ops += [Op("wait", WAIT, [1]), Op("wait", WAIT, [2])]
    return Workload(16, {0: ops}, source="two groups", spmd=True)


def step_us(workload, **kw):
    return astra_compile.compile(workload, "4x4_torus", peak_tflops=1.0, **kw).to_dict()["total_time_us"]


def test_two_groups_collectives_overlap_in_streams_and_follow_each_other_as_astra_sim():
    streams = step_us(two_groups())
    astra = step_us(two_groups(), step_semantics="astra-sim")
    one = (streams - 0.002)   # two dimensions: they share no link and run side by side
    assert astra - 0.002 == pytest.approx(2 * one, rel=1e-9)


def test_a_message_on_a_ring_gets_the_whole_bandwidth_and_no_endpoint_delay_as_astra_sim():
    """MultiDimTopology::send: hops x latency + bytes / bandwidth in the first dimension the NPUs differ in; this
    compiler's two-way ring gives a message one direction (B/2) and the endpoint delay."""
    topo = parse_topology("8x8_torus", "50", "500", None, "10")
    key = ("p2p", 8 * MB, 0, 10)   # (0, 0) -> (2, 1): two hops in dimension 0 first, as ASTRA-sim charges it
    astra = message_time(topo, key, step=ASTRA)
    assert astra.time_ns == pytest.approx(2 * 500 + 8 * MB / gbps_to_bytes_per_ns(50))
    streams = message_time(topo, key)
    assert streams.time_ns == pytest.approx(3 * 500 + 10 + 8 * MB / gbps_to_bytes_per_ns(25))
    assert astra.dim_busy_ns[1] == 0.0 and astra.dim_busy_ns[0] > 0


def test_a_message_takes_the_hops_its_block_routes_it_over():
    """A Mesh has no wrap-around: 3 -> 0 walks back 3 links and 1 -> 0 one (the forward distance mod k, 1 and 3,
    was charged before), each at one link's 25 GB/s (50 over the NPU's two links)."""
    topo = parse_topology("Mesh(4)", "50", "500", None, None)
    for src, hops in ((3, 3), (1, 1)):
        took = message_time(topo, ("p2p", 8 * MB, src, 0), step=ASTRA)
        assert took.time_ns == pytest.approx(hops * 500 + 8 * MB / gbps_to_bytes_per_ns(25))
        assert took.algorithm == f"as ASTRA-sim: dim0 {hops} hop{'s' * (hops != 1)}"


@pytest.mark.parametrize("members, stride, hops", [(2, 4, 4), (4, 2, 2), (4, 1, 1.5)])
def test_a_sub_world_group_runs_one_ring_over_its_members_as_astra_sim(members, stride, hops):
    """Ring(8), 50 GB/s, 500 ns: a ring all-reduce of `members` at the whole 50 GB/s whose step latency is the mean
    of its pairs' hops (stride apart, and the wrap back: (4, 1) has three 1-hop pairs and one 3-hop pair)."""
    topo = parse_topology("8_ring", "50", "500", None, None)
    size = 64 * MB
    key = ("all_reduce", size, (0,), ("part", (0, members, stride)))
    took, _ = _time_one(new_context(), topo, key, WorkloadOptions(scheduler="baseline", step=ASTRA))
    steps = 2 * (members - 1)
    expected = steps * (500 * hops + size / members / gbps_to_bytes_per_ns(50))
    assert took.time_ns == pytest.approx(expected, rel=1e-9)
    assert took.dim_busy_ns[0] > 0 and "ring over the group" in took.algorithm


def messaging():
    """Rank 0 sends 8 MB to rank 1, then all-reduces with rank 2; rank 1 computes 1 ms, then receives."""
    def ar():
        return Op("c10d.allreduce_", COLLECTIVE, [], bytes=64 * MB, collective="all_reduce", group=(0, 2),
                  group_name="a")
    programs = {0: [Op("send", SEND, [], bytes=8 * MB, peer=1), ar()],
                1: [Op("aten.mm", COMPUTE, flops=10 ** 9, bytes=0), Op("recv", RECV, [0], bytes=8 * MB, peer=0)],
                2: [ar()]}
    return Workload(16, programs, source="messaging")


def rows(**kw):
    report = astra_compile.compile(messaging(), "4x4_torus", peak_tflops=1.0, **kw).to_dict()
    return {c["kind"]: c for c in report["collectives"]}


def test_an_eager_send_goes_before_its_receive_is_posted_and_holds_the_npu_meanwhile():
    astra = rows(step_semantics="astra-sim")
    assert astra["send"]["start_us"] == 0
    assert astra["all_reduce"]["start_us"] == pytest.approx(astra["send"]["end_us"])   # one at a time
    streams = rows()
    assert streams["send"]["start_us"] == pytest.approx(1000.0)   # it meets the receive posted after 1 ms
    assert streams["all_reduce"]["start_us"] == 0                 # on its own stream meanwhile


def test_unknown_semantics_is_refused():
    with pytest.raises(UserError, match="--step-semantics must be one of streams, astra-sim"):
        astra_compile.compile(two_groups(), "4x4_torus", step_semantics="ASTRA")


def test_a_system_file_selects_astra_sim_and_the_command_line_wins(capsys, tmp_path):
    step = os.path.join(os.path.dirname(__file__), "ir", "step_two_ranks.mlir")
    sys_file = tmp_path / "sys.json"
    sys_file.write_text(json.dumps({"all-reduce-implementation": ["ring"]}))

    def run(*argv):
        code, out, err = cli(capsys, step, *argv, "--json")
        assert code == 0, err
        return json.loads(out)["total_time_us"]
    with_file = run("--system", sys_file)
    assert with_file == run("--system", sys_file, "--step-semantics", "astra-sim")
    assert run("--system", sys_file, "--step-semantics", "streams") == \
        run("--scheduler", "baseline", "--intra", "fifo", "--algorithm", "ring")   # its all-reduces span one dim
