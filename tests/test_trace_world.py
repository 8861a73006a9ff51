"""A trace recorded on fewer GPUs than the topology has NPUs (the usual profile: one GPU, NCCL world size 1) runs
as recorded on the first NPUs, or with --mesh dp=N as data-parallel training over every NPU, and says which
(frontend/trace_world.py). The data: a real one-H200 DDP step of examples/mlp_dp.py, execution trace + profiler."""
import json
import os

import pytest

import astra_compile
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.workload import COLLECTIVE, Op, Workload
from astra_compile.compiler.frontend.trace_world import on_topology
from astra_compile.network.errors import UserError

from helpers import cli, refused

DATA = os.path.join(os.path.dirname(__file__), "data", "gpu_1rank")
TRACES = [os.path.join(DATA, "mlp_et_rank0.json"), os.path.join(DATA, "mlp_kineto_rank0.json")]
BUCKET = (4096 * 4096 + 4096) * 4                     # a DDP bucket: one 4096x4096 layer and its bias, fp32
MEASURED_US = 5121.618                                  # the profiler's device time of the step's operator calls


def json_report(capsys, *argv):
    code, out, err = cli(capsys, *TRACES, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_one_gpu_trace_runs_on_a_larger_topology_as_recorded(capsys):
    r = json_report(capsys, "--topology", "8x8_torus")    # the trace records world size 1, not 64
    assert r["placement"].startswith("recorded on 1 rank: runs on NPU 0 of 64 as recorded")
    assert r["collectives"] == [] and r["measured_ops"] == 200
    assert r["compute_time_us"] == pytest.approx(MEASURED_US, abs=1e-3) == r["total_time_us"]
    code, out, _ = cli(capsys, *TRACES, "--topology", "8x8_torus")
    assert code == 0 and "placement       recorded on 1 rank: runs on NPU 0 of 64" in out


def test_mesh_dp_retargets_the_default_group_to_every_npu(capsys):
    r = json_report(capsys, "--topology", "8x8_torus", "--mesh", "dp=64")
    assert r["mesh"] == "dp=64" and r["placement"].startswith("recorded on 1 rank: its default group re-targeted "
                                                              "to dp=64")
    calls = r["collectives"]
    assert len(calls) == 8 and {(c["kind"], c["group"], c["group_size"], tuple(c["dims"])) for c in calls} == \
        {("all_reduce", "dp", 64, (0, 1))}
    assert {c["bytes"] for c in calls} == {BUCKET}                            # 16781312 fp32 elements each
    assert r["compute_time_us"] == pytest.approx(MEASURED_US, abs=1e-3)        # the measured compute, unchanged
    alone = astra_compile.compile(Workload(64, {0: [Op("b", COLLECTIVE, bytes=BUCKET, collective="all_reduce",
                                                      group=tuple(range(64)), group_name="dp")]}, spmd=True),
                                  "8x8_torus").total_time_us
    assert calls[0]["time_us"] == pytest.approx(alone, rel=1e-12)
    assert r["total_time_us"] > MEASURED_US + 8 * alone * 0.9                   # the buckets mostly exposed


@pytest.mark.parametrize("mesh, message", [
    ("dp=8,tp=8", "--mesh dp=8,tp=8 for a trace: it takes one axis, dp=64"),
    ("dp=32", "--mesh dp=32 for a trace: it takes one axis, dp=64"),
])
def test_a_trace_takes_one_mesh_axis_over_every_npu(capsys, mesh, message):
    refused(capsys, *TRACES, "--topology", "8x8_torus", "--mesh", mesh, match=message)


def test_only_group_size_free_collectives_on_the_default_group_are_retargeted():
    def step(*ops):
        return Workload(2, {0: list(ops)}, source="t.json", spmd=True)
    world = dict(group=(0, 1), group_name="0")
    done = on_topology(step(Op("b", COLLECTIVE, bytes=64, collective="broadcast", root=1, **world)), 8, {"dp": 8})
    assert [(op.group, op.root) for op in done.programs[0]] == [(tuple(range(8)), 1)] and done.world_size == 8
    for op, problem in [(Op("g", COLLECTIVE, bytes=64, collective="all_gather", **world), "bytes depend"),
                        (Op("p", COLLECTIVE, bytes=64, collective="all_reduce", group=(0,), group_name="1"),
                         "not the default group")]:
        with pytest.raises(UserError, match=problem):
            on_topology(step(op), 8, {"dp": 8})
    two = Workload(2, {0: [], 1: []}, source="t0.json, t1.json")
    with pytest.raises(UserError, match="re-targets one trace standing for every rank"):
        on_topology(two, 8, {"dp": 8})
    assert on_topology(two, 2, None) is two                                     # its own world: as recorded


def test_on_its_own_world_a_trace_is_as_recorded():
    w = load_traces(TRACES, 1)
    assert w.placement == "" and w.world_size == 1 and w.mesh == {}
    assert {op.group for op in w.collectives(0)} == {(0,)} and len(w.collectives(0)) == 8
