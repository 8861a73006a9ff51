"""`astra-compile model.py --topology ...`: the four examples, the workload MLIR, the API and bad input."""
import json
import os
import subprocess
import sys

import pytest

import astra_compile
from astra_compile.compiler.core import reuse
from astra_compile.dialects import workload as wl
from astra_compile.network.errors import UserError
from astra_compile.network.parse import parse_topology
from astra_compile.compiler.core.step_keys import group_dims

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def example(name):
    return os.path.join(EXAMPLES, name)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "astra_compile", *args], capture_output=True, text=True)


def check_step(report):
    assert report.total_time_us > 0 and report.compute_time_us > 0
    assert report.exposed_comm_time_us == pytest.approx(report.total_time_us - report.compute_time_us)
    assert 0 <= report.exposed_comm_time_us <= report["comm_time_us"] + 1e-6
    for c in report.collectives:   # never faster than alone; longer only when it shared links with another
        assert c["start_us"] + c["time_us"] <= c["end_us"] * (1 + 1e-12) and c["end_us"] <= report.total_time_us
    in_step = sum(c["end_us"] - c["start_us"] for c in report.collectives)
    assert in_step == pytest.approx(report["comm_time_us"])


def kinds(report, kind, group):
    return [c for c in report.collectives if c["kind"] == kind and c["group"] == group]


def test_mlp_data_parallel_example():
    r = astra_compile.compile(example("mlp_dp.py"), "8x8_torus")
    check_step(r)
    ars = kinds(r, "all_reduce", "dp")
    assert sum(c["bytes"] for c in ars) == 8 * (4096 * 4096 + 4096) * 4       # every parameter, once
    assert all(c["group_size"] == 64 and c["dims"] == [0, 1] for c in ars)


def test_gpt_tensor_and_data_parallel_example():
    r = astra_compile.compile(example("gpt_tp_dp.py"), "8x8_torus")
    check_step(r)
    tp = kinds(r, "all_reduce", "tp")
    assert len(tp) == 4 * 8 and {c["bytes"] for c in tp} == {4 * 1024 * 2048 * 4}   # 2 fwd + 2 bwd per layer
    assert all(c["dims"] == [0] for c in tp) and all(c["dims"] == [1] for c in kinds(r, "all_reduce", "dp"))
    # the step by part: 2 TP all-reduces per layer in forward, 2 in backward with every DDP bucket; the parts'
    # compute adds up to the step's, and each part starts when the one before it did or later
    parts = {p["phase"]: p for p in r["phases"]}
    assert list(parts) == ["forward", "backward", "optimizer"]
    dp = len(kinds(r, "all_reduce", "dp"))
    assert [parts[p]["collectives"] for p in parts] == [2 * 8, 2 * 8 + dp, 0]
    assert sum(p["compute_us"] for p in parts.values()) == pytest.approx(r.compute_time_us)
    assert sum(p["flops"] for p in parts.values()) == r["flops"]
    assert parts["forward"]["start_us"] == 0 and parts["forward"]["end_us"] <= parts["backward"]["end_us"]
    assert parts["backward"]["start_us"] <= parts["optimizer"]["start_us"] < r.total_time_us
    assert parts["optimizer"]["end_us"] == pytest.approx(r.total_time_us)
    assert "optimizer" in r.format().split("collective ")[0]


def test_resnet_data_parallel_example():
    r = astra_compile.compile(example("resnet_dp.py"), "8x8_torus")
    check_step(r)
    assert r["flops"] > 1e11 and kinds(r, "all_reduce", "dp")


def test_moe_expert_parallel_example_uses_all_to_all():
    r = astra_compile.compile(example("moe_ep.py"), "8x8_torus")
    check_step(r)
    a2a = kinds(r, "all_to_all", "ep")
    assert len(a2a) == 4 * 4 and all(c["dims"] == [0] for c in a2a)    # dispatch + combine, fwd + bwd, 4 layers
    assert {c["bytes"] for c in a2a} == {4096 * 1024 * 4}


def test_cli_json_report_and_workload_mlir(tmp_path):
    out = cli(example("mlp_dp.py"), "--topology", "4x4_torus", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    for key in ("total_time_us", "compute_time_us", "exposed_comm_time_us", "collectives"):
        assert key in d
    assert {"kind", "bytes", "group_size", "time_us"} <= set(d["collectives"][0])
    mlir = tmp_path / "step.mlir"
    out = cli(example("mlp_dp.py"), "--topology", "4x4_torus", "--emit", "mlir", "-o", str(mlir))
    assert out.returncode == 0, out.stderr
    ctx = wl.new_context()
    module = wl.parse_module(mlir.read_text(), ctx)
    progs = wl.programs(module)
    assert len(progs) == 1 and progs[0].rank == 0
    ops = progs[0].ops
    assert sum(op.kind == "all_reduce" for op in ops) == len(d["collectives"])
    assert all(dep < i for i, op in enumerate(ops) for dep in op.deps)
    assert sum(op.attrs.get("flops", 0) for op in ops) == d["flops"]


@pytest.mark.parametrize("args, message", [
    (["--mesh", "dp=3"], "mesh dp=3 has 3 ranks but the topology has 16 NPUs"),
    (["--mesh", "dp=2,tp=8"], "no TP_PLAN"),
    (["--emit", "tables"], "--emit tables needs --npu K (print one accelerator's step table) or -o DIR"),
    (["--npu", "3"], "--npu applies to --emit tables"),
    (["--collective", "all_reduce"], "--collective does not apply to a training step run"),
])
def test_cli_bad_workload_options_exit_2(args, message):
    out = cli(example("mlp_dp.py"), "--topology", "4x4_torus", *args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_group_dims_maps_mesh_axes_to_dimensions():
    topo = parse_topology("8x8_torus")
    assert group_dims(topo, range(8)) == [0]
    assert group_dims(topo, range(0, 64, 8)) == [1]
    assert group_dims(topo, range(64)) == [0, 1]
    assert group_dims(topo, range(8, 16)) == [0]
    assert group_dims(topo, range(16)) == [0, 1]        # half of dimension 1 (tests/test_subgroups.py)
    with pytest.raises(UserError, match="does not map onto"):
        group_dims(topo, [0, 1, 2, 8, 9, 10])           # 3 of 8 consecutive
    with pytest.raises(UserError, match="every combination"):
        group_dims(topo, [0, 1, 9])


def test_a_reused_workload_is_lowered_once_per_topology(tmp_path, monkeypatch):
    """In a sweep over the roofline, every point shares one capture and one lowered module per topology."""
    from astra_compile.compiler.api import api
    from astra_compile.compiler.core import reuse
    lowered = []
    real = api.lower
    monkeypatch.setattr(api, "lower", lambda w, t: lowered.append(t.name) or real(w, t))
    model = example("mlp_dp.py")
    with reuse.using(reuse.Reuse()):
        slow, fast = (astra_compile.compile(model, "2x2_torus", peak_tflops=p) for p in (10.0, 1000.0))
        other = astra_compile.compile(model, "4_ring", peak_tflops=10.0)
    assert lowered == ["Ring(2)_Ring(2)", "Ring(4)"]
    body = [r.mlir.split("\n", 1)[1] for r in (slow, fast, other)]   # the module's ops, after its attributes
    assert body[0] == body[1] != body[2]
    # each module records the roofline its step was timed with (wl.run), so that it runs again as it did
    assert "wl.run = {peak_tflops = 1.000000e+01 : f64}" in slow.mlir
    assert "wl.run = {peak_tflops = 1.000000e+03 : f64}" in fast.mlir
    assert slow.compute_time_us > fast.compute_time_us
    plain = astra_compile.compile(model, "2x2_torus", peak_tflops=1000.0)   # no reuse: lowered anew, same report
    assert lowered[-1] == "Ring(2)_Ring(2)" and plain.to_dict() == fast.to_dict()


def test_cache_dir_reuses_the_capture_and_the_collectives(tmp_path):
    model = tmp_path / "tiny.py"
    model.write_text("import torch\ndef build_model():\n    return torch.nn.Linear(128, 128)\n"
                     "def example_inputs():\n    return torch.randn(4, 128)\n")
    cache = tmp_path / "cache"
    first = cli(str(model), "--topology", "2x2_torus", "--cache", str(cache), "--json")
    assert first.returncode == 0, first.stderr
    stored = sorted(p.relative_to(cache).parts[0] for p in cache.rglob("*.json"))
    assert stored.count("workload") == 1 and stored.count("collective") >= 1
    second = cli(str(model), "--topology", "2x2_torus", "--cache", str(cache), "--json")
    plain = cli(str(model), "--topology", "2x2_torus", "--json")
    assert json.loads(first.stdout) == json.loads(second.stdout) == json.loads(plain.stdout)
    # a capture reused from the cache: its file says what it holds, and a torn file is a miss, not an error
    (workload,) = (cache / "workload").glob("*.json")
    assert json.loads(workload.read_text())["format"] == "astra-compile-reuse"
    workload.write_text('{"format": "astra-compile-reuse", "version": 1, "value": {"world_')
    torn = cli(str(model), "--topology", "2x2_torus", "--cache", str(cache), "--json")
    assert torn.returncode == 0 and json.loads(torn.stdout) == json.loads(plain.stdout)
    assert json.loads(workload.read_text())["version"] == reuse.VERSION   # written again whole
    # a value edited into something of the wrong shape (valid JSON) no longer matches its digest: recomputed
    data = json.loads(workload.read_text())
    data["value"]["programs"][0][1][0]["flops"] = "many"
    workload.write_text(json.dumps(data))
    edited = cli(str(model), "--topology", "2x2_torus", "--cache", str(cache), "--json")
    assert edited.returncode == 0 and json.loads(edited.stdout) == json.loads(plain.stdout), edited.stderr
    workload.write_text("[" * 100000 + "]" * 100000)   # nested past the JSON reader's recursion
    deep = cli(str(model), "--topology", "2x2_torus", "--cache", str(cache), "--json")
    assert deep.returncode == 0 and json.loads(deep.stdout) == json.loads(plain.stdout), deep.stderr
    model.write_text(model.read_text().replace("128", "256"))
    changed = cli(str(model), "--topology", "2x2_torus", "--cache", str(cache), "--json")
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["flops"] > json.loads(plain.stdout)["flops"]   # new content: captured anew
    bad = cli(str(model), "--topology", "2x2_torus", "--cache", str(model))
    assert bad.returncode == 2 and "not a directory" in bad.stderr


STAT_MODEL = '''
import torch
import torch.distributed as dist


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(256, 256)

    def forward(self, x):
        y = self.lin(x)
        stat = y.detach().float().pow(2).mean().reshape(1)
        dist.all_reduce(stat)          # one float: what training code logs every step
        return y


def build_model():
    return Net()


def example_inputs():
    return torch.randn(8, 256)
'''


@pytest.mark.parametrize("topology,steps,per_step_ns", [("8x8_torus", 2 * (7 + 7), 500), ("64_switch", 2 * 6, 1000)])
def test_a_four_byte_all_reduce_runs_padded_and_says_so(tmp_path, topology, steps, per_step_ns):
    model = tmp_path / "stat.py"
    model.write_text(STAT_MODEL)
    done = cli(str(model), "--topology", topology, "--chunks", "4", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (tiny,) = [c for c in report["collectives"] if c["bytes"] == 4]
    assert tiny["fallback"].startswith("in 1 chunk, padded from 4 B to ") and "over 64 NPUs" in tiny["fallback"]
    # latency-bound: every step of the ring (torus: 7 per dimension, there and back) or of halving-doubling
    # (switch: 6 each way, two links a hop) pays its latency; the padded bytes add almost nothing
    assert steps * per_step_ns <= tiny["time_us"] * 1e3 <= steps * per_step_ns * 1.01
    assert "note: all_reduce of 4B on dp ran in 1 chunk, padded" in cli(str(model), "--topology", topology,
                                                                        "--chunks", "4").stdout
    big = [c for c in report["collectives"] if c["bytes"] > 4]
    assert big and all("fallback" not in c for c in big)


def test_a_capture_needs_no_grad_mode_from_its_caller_and_leaves_it_as_it_was():
    """A profiling flow may call compile() under torch.no_grad() (or after an earlier capture was stopped midway by
    its CPU limit, whose exception can land inside torch): the capture's training step still has autograd."""
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        report = astra_compile.compile(example("mlp_dp.py"), "4x4_torus")
        assert not torch.is_grad_enabled()
    assert report.total_time_us > 0 and torch.is_grad_enabled()
