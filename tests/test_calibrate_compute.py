"""`astra-compile calibrate-compute` (compiler/cli/calibrate_compute.py) and its profile reader
(compiler/frontend/profile_ops.py): a fit recovers the constants a synthetic profile was made with, the real H200
profile of the MLP reads as recorded, and bad input is one line with exit 2."""
import json
import os

import jsonschema
import numpy as np
import pytest

from astra_compile.compiler.cli import calibrate_compute as cc
from astra_compile.compiler.frontend import profile_ops
from astra_compile.compiler.main import main
from astra_compile.network import devices
from astra_compile.network.compute_model import ComputeModel
from astra_compile.network.op_classes import classify

HERE = os.path.dirname(os.path.abspath(__file__))
MLP = os.path.join(HERE, "data", "gpu_1rank", "mlp_kineto_rank0.json")
SCHEMA = os.path.join(HERE, "..", "network", "device.schema.json")
TRUE = {"matmul.fp32": 0.6, "matmul.k_overhead": 20.0, "elementwise": 0.7, "launch_us": 3.0, "broadcast.bf16": 0.3}


def _op(name, ts, ext, dims, types, concrete=None, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 5.0,
            "args": {"External id": ext, "Input Dims": dims, "Input type": types,
                     "Concrete Inputs": concrete or [""] * len(dims)}}


def _kernel(ext, ts, dur, name="some_kernel"):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"External id": ext}}


def synthetic(times=None, gpu="NVIDIA H200") -> dict:
    """Matmuls of 5 shapes, adds of 4 and bf16 adds of a broadcast row of 2, one call each, 10 us apart; kernel
    times `times` (default 1 us)."""
    events, ext = [], 0
    shapes = [((m, k), (k, n)) for m, k, n in [(4096, 4096, 4096), (1024, 2048, 512), (64, 4096, 4096),
                                               (8192, 1024, 8192), (256, 256, 256)]]
    for a, b in shapes:
        ext += 1
        events.append(_op("aten::mm", ext * 10, ext, [list(a), list(b)], ["float", "float"]))
    for n in (1 << 16, 1 << 20, 1 << 24, 1 << 26):
        ext += 1
        events.append(_op("aten::add", ext * 10, ext, [[n], [n], []], ["float", "float", "Scalar"], ["", "", "1"]))
    for n in (1 << 24, 1 << 26):
        ext += 1
        events.append(_op("aten::add", ext * 10, ext, [[n // 4096, 4096], [4096], []],
                          ["c10::BFloat16", "c10::BFloat16", "Scalar"], ["", "", "1"]))
    for i in range(1, ext + 1):
        events.append(_kernel(i, i * 10 + 1, times[i - 1] / 1e3 if times is not None else 1.0))
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": gpu, "numSms": 132}], "traceEvents": events}


def write(tmp_path, data, name="prof.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.fixture
def true_profile(tmp_path):
    """A synthetic profile whose kernel times are the compute model's with TRUE on the h200 preset."""
    first = profile_ops.read_profile(write(tmp_path, synthetic()))
    groups = profile_ops.group(first.calls)
    order = {(g.name, g.shapes): g for g in groups}
    table = cc._Table([order[(c.name, c.shapes)] for c in first.calls], devices.presets()["h200"])
    times = table.predict(ComputeModel(tuple(sorted(TRUE.items())), 132))
    return write(tmp_path, synthetic(list(times)))


def test_the_fit_recovers_the_constants_a_profile_was_made_with(true_profile, tmp_path, capsys):
    out = str(tmp_path / "fitted.yaml")
    assert main(["calibrate-compute", true_profile, "--gpu-name", "h200", "-o", out]) == 0
    text = capsys.readouterr().out
    device = devices.load(out)
    eff = dict(device.efficiency)
    for key, value in TRUE.items():
        assert eff[key] == pytest.approx(value, rel=0.02), key
    assert device.multiprocessors == 132
    assert device.peak_tflops == devices.presets()["h200"].peak_tflops
    assert eff["host_us"] == pytest.approx(10.0)   # the calls start 10 us apart
    assert "total" in text and "matmul.fp32" in text and "fitted (5 group(s))" in text
    assert "broadcast.bf16" in text and "fitted (2 group(s))" in text   # the broadcast adds: their own class
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert abs(float(total.split()[-1])) < 0.5          # error % of the whole
    import yaml
    jsonschema.validate(yaml.safe_load(open(out)), json.load(open(SCHEMA)))
    # the written device evaluated on the same profile: the same table, every class within 1 %
    assert main(["calibrate-compute", true_profile, "--gpu", out]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(("matmul", "element"))]
    assert len(rows) == 2 and all(abs(float(r[-1])) < 1.0 for r in rows[:2])


def test_a_constant_with_too_few_ops_keeps_its_default(true_profile, tmp_path, capsys):
    data = json.load(open(true_profile))
    # one layer norm (large enough for its bytes to tell a bandwidth): too few to fit `norm`
    data["traceEvents"] += [_op("aten::native_layer_norm", 200, 99, [[8192, 4096], [], [4096], [4096], []],
                                ["float", "ScalarList", "float", "float", "Scalar"], ["", "[4096]", "", "", "1e-05"]),
                            _kernel(99, 201, 300.0)]
    out = str(tmp_path / "fitted.json")
    assert main(["calibrate-compute", write(tmp_path, data, "p2.json"), "--gpu-name", "H200", "-o", out]) == 0
    text = capsys.readouterr().out
    # the preset's own stays
    assert dict(devices.load(out).efficiency)["norm"] == dict(devices.presets()["h200"].efficiency)["norm"]
    assert "default (1 group(s) of ops; 2 needed)" in text


def test_tiny_memory_bound_ops_do_not_tell_a_bandwidth(true_profile, tmp_path, capsys):
    data = json.load(open(true_profile))
    # three 1 MB layer norms: 0.2 us of bytes each at 4.8 TB/s, their time is their launch
    for k, rows in enumerate((64, 48, 32)):
        data["traceEvents"] += [_op("aten::native_layer_norm", 300 + 10 * k, 200 + k, [[rows, 4096], [], [4096],
                                                                                         [4096], []],
                                    ["float", "ScalarList", "float", "float", "Scalar"], ["", "[4096]", "", "", "1e-05"]),
                                _kernel(200 + k, 301 + 10 * k, 40.0)]
    out = str(tmp_path / "fitted.json")
    assert main(["calibrate-compute", write(tmp_path, data, "p3.json"), "--gpu-name", "H200", "-o", out]) == 0
    assert "  norm " not in capsys.readouterr().out
    assert dict(devices.load(out).efficiency)["norm"] == dict(devices.presets()["h200"].efficiency)["norm"]


def test_the_real_mlp_profile_reads_as_recorded():
    p = profile_ops.read_profile(MLP)
    assert p.gpu == "NVIDIA H200" and p.multiprocessors == 132
    assert len(p.calls) == 58                          # 16 matmuls + 15 mm ... every compute call that launched
    assert sum(c.kernel_ns for c in p.calls) / 1e6 == pytest.approx(4.587, abs=1e-3)
    assert p.comm_ns / 1e6 == pytest.approx(0.535, abs=1e-3)   # DDP's bucket copies left out
    addmm = next(c for c in p.calls if c.name == "aten::addmm")
    assert (addmm.shapes, addmm.dtype, addmm.flops) == ("4096,64x4096,4096x4096", "fp32", 2 * 64 * 4096 * 4096)
    assert addmm.nbytes == 4 * (4096 + 2 * 64 * 4096 + 4096 * 4096)   # bias, input, weight read, output written
    assert p.host_ns / 1e3 == pytest.approx(35.84, abs=0.01)
    assert not p.foreach_guessed


def test_foreach_lists_without_sizes_are_the_parameters(tmp_path):
    events = [_op("torch::autograd::AccumulateGrad", 0, 1, [[64, 32]], ["float"]),
              _op("torch::autograd::AccumulateGrad", 10, 2, [[32]], ["float"]),
              _op("aten::_foreach_mul_", 20, 3, [[], []], ["TensorList", "Scalar"], ["", "0.9"]),
              _kernel(3, 21, 2.0)]
    data = {"deviceProperties": [{"name": "NVIDIA H200", "numSms": 132}], "traceEvents": events}
    p = profile_ops.read_profile(write(tmp_path, data))
    (call,) = p.calls
    assert p.foreach_guessed and call.shapes == "[]"   # as recorded: the key of --op-times
    assert call.nbytes == 2 * 4 * (64 * 32 + 32)   # the list read and written back (in place, returns nothing)


def test_communication_is_left_out_and_tf32_told_by_the_kernel(tmp_path):
    events = [_op("c10d::allreduce_", 0, 1, [[[64]]], ["TensorList"]), _kernel(1, 1, 50.0, "ncclDevKernel_AllReduce"),
              _op("torch::distributed::reducer::mul_out", 100, 2, [[64]], ["float"]),
              _op("aten::mul", 101, 3, [[64], []], ["float", "Scalar"], ["", "0.5"]), _kernel(3, 102, 4.0),
              _op("aten::mm", 200, 4, [[128, 128], [128, 128]], ["float", "float"]),
              _kernel(4, 201, 6.0, "cutlass_80_tensorop_s1688gemm_128x128")]
    events[2]["dur"] = 20.0   # the reducer's range holds the mul
    data = {"deviceProperties": [{"name": "NVIDIA H200", "numSms": 132}], "traceEvents": events}
    p = profile_ops.read_profile(write(tmp_path, data))
    assert [(c.name, c.dtype) for c in p.calls] == [("aten::mm", "tf32")]
    assert p.comm_ns == pytest.approx(54e3)


def test_a_layer_norm_counts_its_weight_bias_and_outputs(tmp_path):
    """native_layer_norm's weight and bias are `Tensor?` in its schema: the call runs on meta tensors with them,
    so its bytes are the input, weight and bias read and the output, mean and rstd written, as the capture counts
    them (the H200 GPT profile's fp32 [4, 1024, 2048] layer norms: 67,158,016 bytes, not the 33,570,816 of the
    inputs alone), and a cuDNN batch norm is a class of its own."""
    events = [_op("aten::native_layer_norm", 0, 1, [[4, 1024, 2048], [], [2048], [2048], []],
                  ["float", "ScalarList", "float", "float", "Scalar"], ["", "[2048]", "", "", "1e-05"]),
              _kernel(1, 1, 28.3)]
    data = {"deviceProperties": [{"name": "NVIDIA H200", "numSms": 132}], "traceEvents": events}
    (call,) = profile_ops.read_profile(write(tmp_path, data)).calls
    out = 4 * 1024 * 2048 * 4 + 2 * 4 * 1024 * 4
    assert call.nbytes == 4 * 1024 * 2048 * 4 + 2 * 2048 * 4 + out
    from astra_compile.network.op_classes import classify
    assert classify(call.name) == "norm" and classify("aten::cudnn_batch_norm") == "batch_norm"


@pytest.mark.parametrize("make, args, expected", [
    (lambda: "{not json", [], "not JSON"),
    (lambda: {"nodes": []}, [], "not a torch.profiler (Kineto) trace"),
    (lambda: {k: v for k, v in synthetic().items() if k != "deviceProperties"}, [], "no deviceProperties"),
    (lambda: {**synthetic(), "traceEvents": [e for e in synthetic()["traceEvents"] if e["cat"] != "kernel"]}, [],
     "holds no GPU kernels"),
    (lambda: {**synthetic(), "traceEvents": [{**e, "args": {"External id": e["args"]["External id"]}}
                                              for e in synthetic()["traceEvents"]]}, [], "record_shapes=True"),
    (lambda: synthetic(gpu="NVIDIA A100-SXM4-80GB"), [], "recorded on 'NVIDIA A100-SXM4-80GB', not on --gpu-name"),
    (synthetic, ["--base", "h900"], "--base 'h900': unknown GPU"),
    (synthetic, ["-o", "/no/such/folder/x.yaml"], "/no/such/folder does not exist"),
    (synthetic, ["-o", "fit.txt"], "a device file is .yaml, .yml or .json"),
])
def test_bad_input_is_one_line(make, args, expected, tmp_path, capsys):
    path = write(tmp_path, make())
    assert main(["calibrate-compute", path, "--gpu-name", "h200", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("astra-compile: error: ") and expected in err, err


def test_a_gpu_name_that_is_no_preset_needs_base(tmp_path, capsys):
    path = write(tmp_path, synthetic(gpu="NVIDIA GH200 480GB"))
    assert main(["calibrate-compute", path, "--gpu-name", "gh200"]) == 2
    assert "--gpu-name 'gh200' is no preset: give --base" in capsys.readouterr().err
    assert main(["calibrate-compute", path, "--gpu-name", "gh200", "--base", "h200"]) == 0


def test_a_profile_past_the_size_limit_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(profile_ops, "MAX_PROFILE_BYTES", 100)
    assert main(["calibrate-compute", write(tmp_path, synthetic()), "--gpu-name", "h200"]) == 2
    assert "is read whole, at most 100 bytes" in capsys.readouterr().err


def test_the_fit_weighs_groups_by_their_time_share(true_profile):
    p = profile_ops.read_profile(true_profile)
    table = cc._Table(profile_ops.group(p.calls), devices.presets()["h200"])
    assert np.isclose(table.total.sum(), sum(c.kernel_ns for c in p.calls))
    free, counts = cc.free_keys(table)
    assert free == ["matmul.fp32", "matmul.k_overhead", "elementwise", "broadcast.bf16", "launch_us"]
    assert counts["launch_us"] == 11


# ------------------------------------------------------------------------------------------------- --op-times

ET = os.path.join(HERE, "data", "gpu_1rank", "mlp_et_rank0.json")


def _report(argv, capsys) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_op_times_gives_a_trace_the_profile_s_measured_times(capsys):
    plain = _report([ET, "--topology", "Switch(2)"], capsys)
    timed = _report([ET, "--topology", "Switch(2)", "--op-times", MLP], capsys)
    assert plain["measured_ops"] == 0
    # the execution trace's outermost calls (aten::linear, the optimizer's foreach ops, ...) found in the profile,
    # by their shapes (the foreach lists, recorded without sizes, by their work): every kernel of the profile
    assert timed["measured_ops"] == 58
    assert timed["measured_compute_us"] == pytest.approx(4587.4, abs=0.1)
    assert timed["compute_time_us"] > timed["measured_compute_us"]


def test_op_times_matches_by_name_dtype_flops_and_bytes_and_leaves_the_workload_alone(tmp_path):
    from astra_compile.compiler.frontend.op_times import with_op_times
    from astra_compile.compiler.frontend.workload import COMPUTE, Op, Workload
    flops, nbytes = 2 * 4096 * 4096 * 4096, 4 * 3 * 4096 * 4096
    ops = [Op("aten.mm.default", COMPUTE, flops=flops, bytes=nbytes),          # the profile's first matmul
           Op("aten.mm.default", COMPUTE, flops=flops + 2, bytes=nbytes),      # no such call
           Op("aten.mm.default", COMPUTE, flops=flops, bytes=nbytes, measured_ns=5.0)]   # measured already
    workload = Workload(1, {0: ops})
    profile = write(tmp_path, synthetic(times=[1e6 + i for i in range(11)]))
    timed = with_op_times(workload, profile)
    assert [op.measured_ns for op in timed.programs[0]] == [1e6, -1.0, 5.0]
    assert ops[0].measured_ns == -1.0


def test_op_times_outside_a_training_step_is_one_line(capsys):
    assert main(["--collective", "all_reduce", "--size", "1MB", "--topology", "Switch(2)", "--op-times", MLP]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--op-times" in err


def test_op_times_of_a_bad_profile_is_one_line(tmp_path, capsys):
    bad = write(tmp_path, {"traceEvents": []})
    assert main([ET, "--topology", "Switch(2)", "--op-times", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no deviceProperties" in err


def test_the_attention_kernels_own_ops_count_as_the_attention_they_run(tmp_path):
    """A profile records the ops that launch scaled_dot_product_attention's kernels: cuDNN's (PyTorch 2.11's bf16
    choice on an H200; [batch, heads, sequence, dim], no meta kernel) and flash's ([batch, sequence, heads, dim]).
    Each is an attention op of the SDPA FLOPs it runs, causal as recorded (the H200's and the H100's Llama 3 8B
    layer at S=8192, 32 heads of 128: 2.2 TFLOP forward, 5.5 backward). Before, cuDNN's read as elementwise and
    both as no FLOPs: no fit could tell an attention fraction from them."""
    bhsd, bshd = [2, 32, 8192, 128], [2, 8192, 32, 128]
    scalars = ["Scalar"] * 6
    events = [_op("aten::_cudnn_attention_forward", 0, 1, [bhsd] * 3 + [[]] * 10,
                  ["c10::BFloat16"] * 3 + ["", "", ""] + scalars + [""],
                  ["", "", "", "", "", "", "8192", "8192", "True", "0.", "True", "False", ""]),
              _kernel(1, 1, 1852.1),
              _op("aten::_cudnn_attention_backward", 10, 2, [bhsd] * 5 + [[2, 32, 8192, 1]] + [[]] * 10,
                  ["c10::BFloat16"] * 5 + ["float", "long int", "long int", "", "", ""] + ["Scalar"] * 4 + [""],
                  [""] * 11 + ["8192", "8192", "0.", "True", ""]),
              _kernel(2, 11, 5594.5),
              _op("aten::_flash_attention_forward", 20, 3, [bshd] * 3 + [[]] * 7,
                  ["c10::BFloat16"] * 3 + ["", ""] + ["Scalar"] * 5,
                  ["", "", "", "", "", "8192", "8192", "0.", "True", "False"]),
              _kernel(3, 21, 3240.2)]
    data = {"deviceProperties": [{"name": "NVIDIA H200", "numSms": 132}], "traceEvents": events}
    calls = profile_ops.read_profile(write(tmp_path, data)).calls
    got = [(c.name.split("::")[1], classify(c.name), c.flops, c.causal, c.dtype) for c in calls]
    forward = 4 * 2 * 32 * 8192 ** 2 * 128          # two products of 2 b h s^2 d; the backward's 2.5 times it
    assert got == [("_cudnn_attention_forward", "attention", forward, True, "bf16"),
                   ("_cudnn_attention_backward", "attention_backward", forward * 5 // 2, True, "bf16"),
                   ("_flash_attention_forward", "attention", forward, True, "bf16")]


def test_cudnn_s_convolution_and_batch_norm_ops_count_as_the_aten_ops_they_run(tmp_path):
    """A profile of an fp32 CNN records cudnn_convolution, cudnn_batch_norm and its backward launching the
    kernels; none has a meta kernel, so each is counted as the aten op it implements, which the capture records:
    ResNet-18's first layer ([32, 3, 224, 224] by [64, 3, 7, 7], stride 2, padding 3: 7.55 GFLOP) and its batch
    norm (input and output, 205,522,432 bytes; backward 308,283,136), as an H200's profile recorded them
    (benchmarks/data/h200_resnet_dp_fp32_kineto.json.gz). Before, the convolution counted no FLOPs and the batch
    norms their inputs alone: a fit read their time as launches."""
    x, bn = [32, 64, 112, 112], [64]
    events = [_op("aten::cudnn_convolution", 0, 1, [[32, 3, 224, 224], [64, 3, 7, 7]] + [[]] * 7,
                  ["float", "float"] + ["ScalarList"] * 3 + ["Scalar"] * 4,
                  ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "False"]), _kernel(1, 1, 373.0),
              _op("aten::cudnn_batch_norm", 10, 2, [x, bn, bn, bn, bn, [], [], []], ["float"] * 5 + ["Scalar"] * 3,
                  ["", "", "", "", "", "True", "0.1", "1e-05"]), _kernel(2, 11, 300.0),
              _op("aten::cudnn_batch_norm_backward", 20, 3, [x, x, bn, bn, bn, bn, bn, [], [0]],
                  ["float"] * 7 + ["Scalar", "unsigned char"], [""] * 7 + ["1e-05", ""]), _kernel(3, 21, 500.0)]
    data = {"deviceProperties": [{"name": "NVIDIA H200", "numSms": 132}], "traceEvents": events}
    calls = profile_ops.read_profile(write(tmp_path, data)).calls
    assert [(classify(c.name), c.flops, c.nbytes) for c in calls] == [
        ("conv", 2 * 32 * 112 * 112 * 64 * 3 * 7 * 7, (32 * 3 * 224 * 224 + 64 * 3 * 7 * 7 + 32 * 64 * 112 * 112) * 4),
        ("batch_norm", 0, 205522432), ("batch_norm", 0, 308283136)]
