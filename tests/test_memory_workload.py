"""Loads and stores in a training step: the wl.load / wl.store ops, their streams in the workload
engine, ASTRA-sim 2.0's step-time breakdown, ZeRO-Infinity offload of FSDP states (and in-switch collectives), the
step-table and Chakra round trips, and the refusals."""
import json

import pytest

from astra_compile.compiler.api.api import compile as compile_step
from astra_compile.compiler.frontend.offload import offload
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, LOAD, STORE, WAIT, Op, Workload
from astra_compile.network.errors import UserError
from astra_compile.network.memory_pool import HierMem, ZeroInfinity
from astra_compile.network.units import GIB
from helpers import cli, refused

# 2 nodes x 2 GPUs, every bandwidth 1 GiB/s, 256 MiB chunks: a 1 GiB remote load by every GPU takes 2.75 s
# (tests/test_memory.py works it out by hand)
POOL = HierMem(nodes=2, gpus_per_node=2, in_node_gbps=1, out_node_switches=2, remote_groups=2, remote_group_gbps=1,
               gpu_side_out_gbps=1, mem_side_out_gbps=1, chunk_bytes=GIB // 4)
LOAD_NS = 2.75e9
TFLOP_PER_MS = 234e9   # FLOPs that take 1 ms at the default 234 TFLOPS


def spmd(ops, world=4) -> Workload:
    return Workload(world, {0: ops}, "memory test", spmd=True)


def test_a_prefetch_overlaps_the_compute_before_its_use():
    ops = [Op("load weights", LOAD, [], bytes=GIB, location="remote"),
           Op("mm", COMPUTE, [], flops=int(1000 * TFLOP_PER_MS)),          # 1 s, independent of the load
           Op("use", COMPUTE, [0], flops=int(TFLOP_PER_MS))]              # 1 ms, needs the weights
    r = compile_step(spmd(ops), "Ring(4)", pool=POOL).to_dict()
    assert r["remote_memory_time_us"] == pytest.approx(LOAD_NS / 1e3)
    assert r["total_time_us"] == pytest.approx((LOAD_NS + 1e6) / 1e3)   # the load, then the 1 ms use
    b = r["breakdown_us"]
    assert b["compute"] == pytest.approx(1001e3)
    assert b["exposed_remote_memory"] == pytest.approx((LOAD_NS - 1e9) / 1e3)   # 1 s of it hidden under the mm
    assert b["exposed_local_memory"] == b["exposed_comm"] == b["idle"] == 0.0
    assert sum(b.values()) == pytest.approx(r["total_time_us"])


def test_a_local_load_takes_latency_plus_size_over_the_memory_bandwidth():
    ops = [Op("load", LOAD, [], bytes=3 * GIB, location="local"), Op("use", COMPUTE, [0], flops=0)]
    r = compile_step(spmd(ops), "Ring(4)", mem_bw_gbps=1500.0, mem_latency_ns=250.0).to_dict()
    assert r["memory_summary"][0]["time_us"] == pytest.approx((250.0 + 3 * 1e9 / 1500.0) / 1e3, rel=1e-12)
    assert r["breakdown_us"]["exposed_local_memory"] == pytest.approx(r["total_time_us"])


def test_a_memory_serves_the_first_ready_and_a_waiting_store_does_not_hold_up_a_later_load():
    ops = [Op("mm", COMPUTE, [], flops=int(1000 * TFLOP_PER_MS)),
           Op("store result", STORE, [0], bytes=GIB, location="remote"),   # ready at 1 s
           Op("load next", LOAD, [], bytes=GIB, location="remote")]        # issued later, ready at once
    r = compile_step(spmd(ops), "Ring(4)", pool=POOL)
    timeline = {e["name"]: e for e in r.timeline()["traceEvents"] if e.get("cat") == "memory"}
    assert timeline["load load next"]["ts"] == 0.0
    # the store waits for the mm and then for the pool: it starts when the load is done (2.75 s)
    assert timeline["store store result"]["ts"] == pytest.approx(LOAD_NS / 1e3)
    assert r.total_time_us == pytest.approx(2 * LOAD_NS / 1e3)


def test_one_memory_serves_one_transfer_at_a_time_and_the_breakdown_counts_communication():
    ops = [Op("mm", COMPUTE, [], flops=int(TFLOP_PER_MS)),
           Op("ar", COLLECTIVE, [0], bytes=64 << 20, collective="all_reduce", group=(0, 1, 2, 3), group_name="dp"),
           Op("wait", WAIT, [1]),
           Op("store a", STORE, [], bytes=GIB, location="remote"),
           Op("store b", STORE, [], bytes=GIB, location="remote")]   # waits for store a on the pool's stream
    report = compile_step(spmd(ops), "Ring(4)", pool=POOL)
    r = report.to_dict()
    assert r["memory_summary"] == [{"kind": "store", "location": "remote", "in_switch": 1, "bytes": GIB,
                                    "time_us": pytest.approx(LOAD_NS / 1e3), "count": 2,
                                    "total_us": pytest.approx(2 * LOAD_NS / 1e3)}]
    assert r["total_time_us"] == pytest.approx(2 * LOAD_NS / 1e3)
    b = r["breakdown_us"]
    assert b["compute"] == pytest.approx(1e3) and b["exposed_comm"] == 0.0   # the all-reduce runs under the stores
    assert sum(b.values()) == pytest.approx(r["total_time_us"])
    trace = report.timeline()
    assert sum(e.get("cat") == "memory" for e in trace["traceEvents"]) == 2


def fsdp_step(world=4) -> Workload:
    g = tuple(range(world))
    ag = dict(kind=COLLECTIVE, collective="all_gather", group=g, group_name="dp")
    rs = dict(kind=COLLECTIVE, collective="reduce_scatter", group=g, group_name="dp")
    ops = [Op("ag0", deps=[], bytes=400 << 20, phase="forward", **ag),
           Op("w0", WAIT, [0], phase="forward"),
           Op("fwd", COMPUTE, [1], flops=int(10 * TFLOP_PER_MS), phase="forward"),
           Op("ag1", deps=[2], bytes=400 << 20, phase="backward", **ag),
           Op("w1", WAIT, [3], phase="backward"),
           Op("bwd", COMPUTE, [4], flops=int(20 * TFLOP_PER_MS), phase="backward"),
           Op("rs", deps=[5], bytes=400 << 20, phase="backward", **rs),
           Op("w2", WAIT, [6], phase="backward"),
           Op("adam", COMPUTE, [7], flops=int(TFLOP_PER_MS), phase="optimizer")]
    return spmd(ops, world)


def test_offload_moves_each_state_where_the_step_needs_it():
    shard = (400 << 20) // 4
    out = offload(fsdp_step(), ("params", "grads", "optimizer")).programs[0]
    moves = [(op.kind, op.name, op.bytes, op.phase) for op in out if op.kind in (LOAD, STORE)]
    assert moves == [(LOAD, "load params shard", shard, "forward"), (LOAD, "load params shard", shard, "backward"),
                     (STORE, "store grads shard", shard, "backward"),
                     (LOAD, "load params", shard, "optimizer"), (LOAD, "load grads", shard, "optimizer"),
                     (LOAD, "load optimizer states", 2 * shard, "optimizer"),
                     (STORE, "store params", shard, "optimizer"), (STORE, "store optimizer states", 2 * shard,
                                                                   "optimizer")]
    for i, op in enumerate(out):   # dependencies point backwards, and each all-gather waits for its shard's load
        assert all(d < i for d in op.deps)
        if op.kind == COLLECTIVE and op.collective == "all_gather":
            assert out[i - 1].name == "load params shard" and i - 1 in op.deps
    assert all(op.location == "remote" for op in out if op.kind in (LOAD, STORE))


def test_in_switch_offload_lets_the_pool_do_the_fsdp_collectives():
    out = offload(fsdp_step(), ("params", "grads"), in_switch=True).programs[0]
    assert not any(op.kind == COLLECTIVE for op in out)
    switched = [(op.kind, op.bytes, op.in_switch) for op in out if op.in_switch]
    assert switched == [(LOAD, 400 << 20, 4), (LOAD, 400 << 20, 4), (STORE, 400 << 20, 4)]
    waits = [op for op in out if op.kind == WAIT]
    assert all(out[op.deps[0]].kind in (LOAD, STORE) for op in waits)   # the waits now wait for the pool
    plain = compile_step(fsdp_step(), "Ring(4)", pool=POOL, offload="params,grads")
    fused = compile_step(fsdp_step(), "Ring(4)", pool=POOL, offload="params,grads", in_switch=True)
    assert fused.to_dict()["collective_summary"] == [] and plain.to_dict()["collective_summary"]


def test_offload_needs_fsdp_and_in_switch_needs_switches():
    dp = spmd([Op("ar", COLLECTIVE, [], bytes=1 << 20, collective="all_reduce", group=(0, 1, 2, 3), phase="backward",
                  group_name="dp")])
    with pytest.raises(UserError, match="no FSDP gradient reduce-scatter"):
        offload(dp, ("grads",))
    zi = ZeroInfinity(nodes=1, gpus_per_node=4, pcie_gbps=32, memory_gbps=100, memory="cpu", chunk_bytes=1 << 20)
    with pytest.raises(UserError, match="in-switch"):
        compile_step(fsdp_step(), "Ring(4)", pool=zi, offload="params", in_switch=True)
    with pytest.raises(UserError, match="4 GPUs but Ring\\(8\\) has 8 NPUs"):
        compile_step(fsdp_step(8), "Ring(8)", pool=POOL, offload="params")
    with pytest.raises(UserError, match="unknown state 'weights'"):
        compile_step(fsdp_step(), "Ring(4)", pool=POOL, offload="weights")


STEP_MLIR = """module attributes {comm.topology = {dims = [{bandwidth_gbps = 5.0e+01 : f64, block = "Ring", latency_ns = 5.0e+02 : f64, links = 1 : i64, size = 4 : i64}], name = "Ring(4)"}, wl.mesh = "", wl.source = "memory ops", wl.spmd = true, wl.world_size = 4 : i64} {
  module attributes {wl.groups = {}, wl.rank = 0 : i64} {
    %0 = "wl.load"() {bytes = 1073741824 : i64, location = "remote", name = "weights"} : () -> !comm.token
    %1 = "wl.compute"(%0) {bytes = 0 : i64, flops = 234000000000 : i64, name = "mm"} : (!comm.token) -> !comm.token
    %2 = "wl.store"(%1) {bytes = 1048576 : i64, location = "LOCATION", name = "out"EXTRA} : (!comm.token) -> !comm.token
  }
}
"""


def write_pool_file(tmp_path) -> str:
    path = tmp_path / "pool.yaml"
    path.write_text("nodes: 2\ngpus_per_node: 2\nin_node_gbps: 1\nout_node_switches: 2\nremote_groups: 2\n"
                    "remote_group_gbps: 1\ngpu_side_out_gbps: 1\nmem_side_out_gbps: 1\nchunk: 256MB\n")
    return str(path)


def step_file(tmp_path, location="local", extra="") -> str:
    path = tmp_path / "step.mlir"
    path.write_text(STEP_MLIR.replace("LOCATION", location).replace("EXTRA", extra))
    return str(path)


def test_a_workload_module_with_memory_ops_runs_and_round_trips(capsys, tmp_path):
    pool = write_pool_file(tmp_path)
    code, out, err = cli(capsys, step_file(tmp_path), "--pool", pool, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["remote_memory_time_us"] == pytest.approx(LOAD_NS / 1e3)
    tables = tmp_path / "tables"
    code, out, err = cli(capsys, step_file(tmp_path), "--pool", pool, "--emit", "tables", "-o", str(tables))
    assert code == 0, err
    code, out, err = cli(capsys, str(tables), "--pool", pool, "--json")
    assert code == 0, err
    assert json.loads(out)["total_time_us"] == r["total_time_us"]
    assert "load,weights" in (tables / "program_0.csv").read_text()


@pytest.mark.parametrize("argv, match", [
    ([], "has no memory pool: give --pool"),
    (["--in-switch"], "--in-switch applies to runs with --pool"),
    (["--offload", "params"], "--offload applies to runs with --pool"),
    (["--mem-latency", "-1"], "latency must be"),
])
def test_memory_options_are_refused_in_one_line(capsys, tmp_path, argv, match):
    refused(capsys, step_file(tmp_path), *argv, match=match)


@pytest.mark.parametrize("location, extra, match", [
    ("disk", "", "location must be one of local, remote"),
    ("local", ", wl.in_switch = 4 : i64", "wl.in_switch"),
    ("remote", ", wl.in_switch = true", "wl.in_switch"),
])
def test_a_bad_memory_op_is_refused(capsys, tmp_path, location, extra, match):
    refused(capsys, step_file(tmp_path, location, extra), "--pool", write_pool_file(tmp_path), match=match)


def test_a_pool_that_is_not_the_topologys_size_is_refused(capsys, tmp_path):
    pool = write_pool_file(tmp_path)
    with open(pool, "a") as f:
        f.write("gpus_per_node: 4\n")
    refused(capsys, step_file(tmp_path), "--pool", pool, match="key 'gpus_per_node' is given twice")
    with open(pool, "w") as f:
        f.write(open(write_pool_file(tmp_path)).read().replace("gpus_per_node: 2", "gpus_per_node: 4"))
    refused(capsys, step_file(tmp_path), "--pool", pool, match="= 8 GPUs but Ring(4) has 4 NPUs")


def test_host_device_copies_of_an_execution_trace_become_loads_and_stores(tmp_path):
    """A hand-made trace (a CPU-only recording has no cudaMemcpy): a .to("cuda") of 4 MB before a matmul and a
    copy_ of its result back to the host become a remote load and store; a copy on the host stays compute."""
    from astra_compile.compiler.api.api import load_workload
    from test_et_import import node
    h, d, r, hr = [10, 11, 0, 1 << 20, 4, "cpu"], [12, 13, 0, 1 << 20, 4, "cuda:0"], [14, 15, 0, 1 << 20, 4, "cuda:0"], \
        [16, 17, 0, 1 << 20, 4, "cpu"]
    f = "Tensor(float)"
    nodes = [
        node(1, "[pytorch|profiler|execution_trace|thread]", 1),
        node(2, "aten::_to_copy", 1, [h], [f], [d], [f], "aten::_to_copy(Tensor self, *, ScalarType? dtype=None, "
             "Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, "
             "MemoryFormat? memory_format=None) -> Tensor"),
        node(3, "aten::relu", 1, [d], [f], [r], [f], "aten::relu(Tensor self) -> Tensor"),
        node(4, "aten::copy_", 1, [hr, r], [f, f], [hr], [f],
             "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)"),
        node(5, "aten::copy_", 1, [h, hr], [f, f], [h], [f],
             "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)"),
    ]
    p = tmp_path / "copies.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    ops = load_workload(str(p), 4, None, None).programs[0]
    assert [(op.kind, op.bytes, op.location) for op in ops] == [
        (LOAD, 4 << 20, "remote"), (COMPUTE, 8 << 20, ""), (STORE, 4 << 20, "remote"), (COMPUTE, 12 << 20, "")]
    assert ops[1].deps == [0] and ops[2].deps == [1] and ops[3].deps == [2]


OFFLOADED_MODEL = '''
import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard


def build_model():
    return nn.Sequential(*[nn.Linear(512, 512) for _ in range(3)])


def example_inputs():
    return torch.randn(32, 512)


def mesh_axes(world):
    return {"fsdp": world}


def parallelize(model, mesh):
    for layer in model:
        fully_shard(layer, mesh=mesh["fsdp"], offload_policy=CPUOffloadPolicy())
    return fully_shard(model, mesh=mesh["fsdp"], offload_policy=CPUOffloadPolicy())
'''


def test_fsdp2_cpu_offload_becomes_host_copies(capsys, tmp_path):
    model = tmp_path / "offloaded.py"
    model.write_text(OFFLOADED_MODEL)
    refused(capsys, str(model), "--topology", "Ring(4)", match="CPUOffloadPolicy")
    host = tmp_path / "host.yaml"
    host.write_text("design: zero-infinity\nnodes: 1\ngpus_per_node: 4\npcie_gbps: 25\nmemory: cpu\n"
                    "memory_gbps: 100\nchunk: 1MB\n")
    code, out, err = cli(capsys, str(model), "--topology", "Ring(4)", "--pool", str(host), "--json")
    assert code == 0, err
    r = json.loads(out)
    shard = 512 * 512 * 4 // 4 + 512 * 4 // 4   # a layer's weight and bias, a quarter each
    moves = {(m["kind"], m["bytes"]): m["count"] for m in r["memory_summary"]}
    # each layer's shard comes in before its forward and its backward all-gather, its gradient goes out after the
    # reduce-scatter; the optimizer runs on the host, where the states are: it moves nothing
    assert moves == {("load", shard): 6, ("store", shard): 3}
    assert r["breakdown_us"]["exposed_remote_memory"] > 0


ACTIVATIONS_TO_HOST = '''
import torch
from torch import nn


def build_model():
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))


def example_inputs():
    return torch.randn(64, 256)


def step_context():
    return torch.autograd.graph.save_on_cpu(pin_memory=True)
'''


def test_activations_saved_on_the_host_are_stored_and_loaded_back(capsys, tmp_path):
    model = tmp_path / "saved.py"
    model.write_text(ACTIVATIONS_TO_HOST)
    host = tmp_path / "host.yaml"
    host.write_text("design: zero-infinity\nnodes: 1\ngpus_per_node: 2\npcie_gbps: 25\nmemory: cpu\n"
                    "memory_gbps: 100\nchunk: 1MB\n")
    code, out, err = cli(capsys, str(model), "--topology", "Ring(2)", "--pool", str(host), "--emit", "mlir")
    assert code == 0, err
    stores = [line for line in out.splitlines() if '"wl.store"' in line]
    loads = [line for line in out.splitlines() if '"wl.load"' in line]
    # what autograd keeps for backward (the first Linear's input and weight, the ReLU's output, the second Linear's
    # input and weight) goes out in the forward pass and comes back in the backward pass
    assert len(stores) == len(loads) >= 3
    assert all('wl.phase = "forward"' in s for s in stores) and all('wl.phase = "backward"' in s for s in loads)
    code, out, err = cli(capsys, str(model), "--topology", "Ring(2)", "--json")
    assert code == 2 and "no memory pool" in err   # the host memory must be described


def test_a_sweep_over_pools_plots_each_points_breakdown(capsys, tmp_path):
    step_file(tmp_path)
    slow = write_pool_file(tmp_path)
    fast = tmp_path / "fast.yaml"
    fast.write_text(open(slow).read().replace("remote_group_gbps: 1", "remote_group_gbps: 4"))
    sweep = tmp_path / "pools.yml"
    sweep.write_text(json.dumps({"base": {"input": "step.mlir"}, "axes": {"pool": ["pool.yaml", "fast.yaml"]}}))
    out = tmp_path / "pools.csv"
    code, _, err = cli(capsys, "sweep", str(sweep), "-o", str(out))
    assert code == 0, err
    import csv
    with open(out) as f:
        got = {r["pool"]: json.loads(r["breakdown_us"]) for r in csv.DictReader(f)}
    assert got["fast.yaml"]["exposed_remote_memory"] < got["pool.yaml"]["exposed_remote_memory"]
    png = tmp_path / "fig4.png"
    code, _, err = cli(capsys, "sweep", "--plot", str(out), "--x", "pool", "--y", "breakdown_us", "-o", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = cli(capsys, "sweep", "--plot", str(out), "--x", "pool", "--y", "breakdown_us", "--pareto", "-o",
                       str(png))
    assert code == 2 and "--pareto" in err


def test_loads_and_stores_round_trip_through_chakra(capsys, tmp_path):
    """MEM_LOAD / MEM_STORE nodes with tensor_loc (and astra_in_switch) out and back: the same step, to the digit."""
    from astra_compile.compiler.frontend import chakra
    from astra_compile.compiler.interop import chakra_write
    from astra_compile.network.parse import parse_topology
    ops = [Op("mm", COMPUTE, [], flops=int(1000 * TFLOP_PER_MS)),
           Op("store result", STORE, [0], bytes=GIB, location="remote"),
           Op("load next", LOAD, [], bytes=GIB, location="remote", in_switch=4),
           Op("scratch", LOAD, [0], bytes=1 << 20, location="local")]
    w = spmd(ops)
    before = compile_step(w, "Ring(4)", pool=POOL).to_dict()
    out = tmp_path / "et"
    chakra_write.write(w, parse_topology("Ring(4)"), str(out))
    again = compile_step(chakra.load([str(p) for p in sorted(out.glob("*.et"))], 4), "Ring(4)", pool=POOL).to_dict()
    assert again["total_time_us"] == before["total_time_us"]
    assert again["memory_summary"] == before["memory_summary"]


def test_a_model_files_offload_places_fsdp_states_in_the_pool(capsys, tmp_path):
    model = tmp_path / "sharded.py"
    model.write_text(OFFLOADED_MODEL.replace(", offload_policy=CPUOffloadPolicy()", "")
                     + '\nOFFLOAD = "params,optimizer"\n')
    host = tmp_path / "pool.yaml"
    host.write_text("nodes: 2\ngpus_per_node: 2\nin_node_gbps: 100\nout_node_switches: 2\nremote_groups: 4\n"
                    "remote_group_gbps: 50\ngpu_side_out_gbps: 100\nmem_side_out_gbps: 100\nchunk: 1MB\n")
    code, out, err = cli(capsys, str(model), "--topology", "Ring(4)", "--pool", str(host), "--json")
    assert code == 0, err
    counts = {k: sum(m["count"] for m in json.loads(out)["memory_summary"] if m["kind"] == k) for k in ("load", "store")}
    # a shard before each of the 6 all-gathers, then params and states before Adam; params and states after it
    assert counts == {"load": 8, "store": 2}
    code, out, err = cli(capsys, str(model), "--topology", "Ring(4)", "--pool", str(host), "--offload", "grads",
                         "--in-switch", "--json")
    assert code == 0, err   # --offload replaces the file's OFFLOAD
    r = json.loads(out)
    assert {m["kind"] for m in r["memory_summary"] if m["in_switch"] > 1} == {"store"}
    model.write_text(model.read_text().replace('"params,optimizer"', '"weights"'))
    refused(capsys, str(model), "--topology", "Ring(4)", "--pool", str(host), match="OFFLOAD: unknown state")
