"""Causal attention (frontend/op_causal.py): an attention op called with is_causal=True is marked causal by every
frontend (capture, execution trace, Kineto alone, a GPU profile), kept through wl.causal, step tables and Chakra
traces to the engine's ProgramTable.causal, and the --gpu compute model runs CAUSAL_WORK of its counted FLOPs.
The FLOPs themselves, and every figure without --gpu, stay as they were."""
import csv
import glob
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from astra_compile.compiler.api.api import compile as compile_step
from astra_compile.compiler.driver import workload_driver
from astra_compile.compiler.frontend import profile_ops
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.workload import COMPUTE, Op, Workload
from astra_compile.network import devices
from astra_compile.network.compute_model import CAUSAL_WORK, ComputeModel
from astra_compile.network.dtypes import CODE as DTYPE
from astra_compile.network.op_classes import CODE, classify

from helpers import cli, refused

ATTENTION = ("attention", "attention_backward")
PEAKS = (50.0, 100.0, 400.0, 800.0, 800.0, 1600.0)   # TFLOP/s per dtype code
BW = 4000.0                                          # bytes per ns


def attention_model(tmp_path, causal: bool) -> str:
    path = tmp_path / f"attention_{causal}.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = nn.Linear(32, 96)

            def forward(self, x):
                q, k, v = self.qkv(x).view(2, 16, 3, 4, 8).permute(2, 0, 3, 1, 4)
                return F.scaled_dot_product_attention(q, k, v, is_causal={causal}).sum()


        def build_model():
            return Attention()


        def example_inputs():
            return (torch.randn(2, 16, 32),)
        """))
    return str(path)


def attention_ops(ops) -> list[tuple]:
    return [(op.phase, op.causal) for op in ops if op.kind == COMPUTE and classify(op.name) in ATTENTION]


def test_the_capture_marks_a_causal_attention_forward_and_backward_and_only_those(tmp_path):
    causal = capture(load_model_file(attention_model(tmp_path, True)), 2).programs[0]
    assert attention_ops(causal) == [("forward", True), ("backward", True)]
    assert not any(op.causal for op in causal if classify(op.name) not in ATTENTION)
    plain = capture(load_model_file(attention_model(tmp_path, False)), 2).programs[0]
    assert attention_ops(plain) == [("forward", False), ("backward", False)]
    # the FLOPs counted are the unmasked ones either way
    assert [op.flops for op in causal if op.kind == COMPUTE] == [op.flops for op in plain if op.kind == COMPUTE]


PROFILED = """
import sys
import torch
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, profile
q = torch.randn(1, 2, 16, 8, requires_grad=True)
with profile(record_shapes=True, execution_trace_observer=ExecutionTraceObserver().register_callback(sys.argv[1])) as p:
    for causal in (True, False):
        F.scaled_dot_product_attention(q, q, q, is_causal=causal).sum().backward()
p.export_chrome_trace(sys.argv[2])
"""


def test_execution_and_kineto_traces_mark_the_causal_calls(tmp_path):
    """A CPU run's execution trace (is_causal by its op_schema) and its Kineto trace alone ("Concrete Inputs",
    the schema looked up by name) both give the causal call's forward and backward, not the other's."""
    et, kineto = str(tmp_path / "et.json"), str(tmp_path / "kineto.json")
    subprocess.run([sys.executable, "-c", PROFILED, et, kineto], check=True, capture_output=True, timeout=300)
    want = [("forward", True), ("backward", True), ("forward", False), ("backward", False)]
    for paths in ([et], [kineto], [et, kineto]):
        ops = load_traces(paths).programs[0]
        assert [c for _, c in attention_ops(ops)] == [c for _, c in want], paths
    data = json.load(open(kineto))
    for e in data["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"].pop("Concrete Inputs", None)
    (tmp_path / "bare.json").write_text(json.dumps(data))
    assert not any(op.causal for op in load_traces([str(tmp_path / "bare.json")]).programs[0])   # not recorded


def test_the_model_runs_half_the_flops_of_causal_attention_rows_only():
    model = ComputeModel((("attention", 0.5), ("attention_backward", 0.4), ("matmul", 0.8), ("launch_us", 0.0)))
    cls = np.array([CODE["attention"], CODE["attention"], CODE["attention_backward"], CODE["matmul"]])
    dtype = np.full(4, DTYPE["bf16"])
    flops, nbytes = np.full(4, 8e12), np.zeros(4)
    causal = np.array([True, False, True, True])
    t = model.kernel_ns(PEAKS, BW, cls, dtype, flops, nbytes, None, causal)
    assert CAUSAL_WORK == 0.5
    assert t[0] == pytest.approx(8e12 * 0.5 / (800e3 * 0.5))     # causal: half the counted FLOPs
    assert t[1] == pytest.approx(8e12 / (800e3 * 0.5))           # not causal: all of them
    assert t[2] == pytest.approx(8e12 * 0.5 / (800e3 * 0.4))     # the backward too
    assert t[3] == pytest.approx(8e12 / (800e3 * 0.8))           # a matmul is never halved
    assert list(model.kernel_ns(PEAKS, BW, cls, dtype, flops, nbytes)) == \
        list(model.kernel_ns(PEAKS, BW, cls, dtype, flops, nbytes, None, np.zeros(4, bool)))
    # bytes bound it still: a causal op that is memory-bound takes its bytes' time
    slow = model.kernel_ns(PEAKS, BW, cls[:1], dtype[:1], np.array([1e6]), np.array([1e9]), None, causal[:1])
    assert slow[0] == pytest.approx(1e9 / (BW * model.value("elementwise")))


def causal_step() -> Workload:
    ops = [Op("aten._scaled_dot_product_flash_attention.default", COMPUTE, flops=10**12, bytes=8, causal=True,
              shapes="1x2x2048x128,1x2x2048x128,1x2x2048x128"),
           Op("aten.add.Tensor", COMPUTE, [0], bytes=8),
           Op("aten._scaled_dot_product_flash_attention.default", COMPUTE, [1], flops=10**12, bytes=8)]
    return Workload(2, {0: ops}, "causal test", spmd=True)


def causal_rows(table) -> list:
    return [] if table.causal is None else [bool(table.causal[i])
                                            for i in np.flatnonzero(table.kind == workload_driver.engine.COMPUTE)]


def test_causal_survives_the_module_step_tables_and_chakra_and_only_the_gpu_model_uses_it(tmp_path, capsys,
                                                                                         engine_tables):
    report = compile_step(causal_step(), "Ring(2)")
    assert report.mlir.count("wl.causal = true") == 1
    assert causal_rows(engine_tables[-1][0]) == [True, False, False]
    step = tmp_path / "step.mlir"
    step.write_text(report.mlir)
    out = tmp_path / "tables"
    assert cli(capsys, str(step), "--emit", "tables", "-o", str(out))[0] == 0
    cells = list(csv.reader(open(out / "program_0.csv")))
    assert cells[0][-4:] == ["deps", "dtype", "shapes", "causal"] and [r[-1] for r in cells[1:]] == ["1", "", ""]
    engine_tables.clear()
    code, plain, err = cli(capsys, str(out))
    assert code == 0, err
    assert causal_rows(engine_tables[0][0]) == [True, False, False]
    # without --gpu the figure is the counted FLOPs' at peak: as if no row were causal
    uncausal = compile_step(Workload(2, {0: [Op(**{**o.__dict__, "causal": False}) for o in causal_step().programs[0]]},
                                     "causal test", spmd=True), "Ring(2)")
    assert report.total_time_us == uncausal.total_time_us
    runs = {}
    (tmp_path / "plain.mlir").write_text(report.mlir.replace(", wl.causal = true", ""))
    for name, source in (("tables", out), ("module", step), ("plain", tmp_path / "plain.mlir")):
        code, text, err = cli(capsys, str(source), "--gpu", "h200")
        assert code == 0, err
        runs[name] = float(next(line.split()[1] for line in text.splitlines() if line.startswith("compute ")))
    # the causal op runs the blocks of 128 x 128 on and below the diagonal of its 2048 x 2048 scores, 136 of 256
    # (fp32: the memory-efficient kernel, no fixed cost per row): the rest of its 10^12 FLOPs' time is saved
    h200 = devices.presets()["h200"]
    rate = h200.peak_tflops[DTYPE["fp32"]] * 1e6 * ComputeModel(h200.efficiency).value("attention.fp32")   # FLOP/us
    assert runs["tables"] == runs["module"]
    assert runs["plain"] - runs["module"] == pytest.approx((1 - 136 / 256) * 1e12 / rate, abs=2e-3)
    # a malformed cell and a non-bool attribute are refused in one line
    program = out / "program_0.csv"
    program.write_text(program.read_text().replace(",1\n", ",yes\n", 1))
    refused(capsys, str(out), match="program_0.csv: row 0: causal: 'yes'")
    (tmp_path / "bad.mlir").write_text(report.mlir.replace("wl.causal = true", 'wl.causal = "yes"'))
    refused(capsys, str(tmp_path / "bad.mlir"), match="wl.causal must be true or false, got 'yes'")


def test_chakra_traces_keep_causal_and_refuse_a_non_bool(tmp_path, capsys):
    from astra_compile.compiler.frontend import chakra
    compile_step(causal_step(), "Ring(2)").chakra(str(tmp_path / "t"))
    files = sorted(glob.glob(str(tmp_path / "t" / "*.et")))
    assert [op.causal for op in chakra.load(files).programs[0] if op.kind == COMPUTE] == [True, False, False]
    assert b"astra_causal" in open(files[0], "rb").read()


def test_a_cached_workload_keeps_causal_and_refuses_a_non_bool():
    w = causal_step()
    assert [op.causal for op in Workload.from_json(w.to_json()).programs[0]] == [True, False, False]
    data = w.to_json()
    data["programs"][0][1][0]["causal"] = "yes"
    with pytest.raises(ValueError, match="causal = 'yes'"):
        Workload.from_json(data)


def test_a_gpu_profile_reads_is_causal_from_concrete_inputs(tmp_path):
    def call(ext, causal):
        dims = [[1, 2, 2048, 128]] * 3 + [[], [], []]
        return [{"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention", "pid": 1, "tid": 1,
                 "ts": ext * 100, "dur": 5.0,
                 "args": {"External id": ext, "Input Dims": dims, "Input type": ["float"] * 3 + ["Scalar", "Bool", "Bool"],
                          "Concrete Inputs": ["", "", "", "0.", causal, "False"]}},
                {"ph": "X", "cat": "kernel", "name": "flash_fwd", "pid": 0, "tid": 7, "ts": ext * 100 + 1, "dur": 50.0,
                 "args": {"External id": ext}}]
    data = {"traceEvents": call(1, "True") + call(2, "False") + call(3, "True"),
            "deviceProperties": [{"name": "NVIDIA H200", "numSms": 132}]}
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(data))
    calls = profile_ops.read_profile(str(path)).calls
    assert [c.causal for c in calls] == [True, False, True]
    assert sorted((g.causal, g.calls) for g in profile_ops.group(calls)) == [(False, 1), (True, 2)]


def test_the_llama_example_runs_its_attention_causally_under_the_gpu_model(capsys, engine_tables):
    code, out, err = cli(capsys, "examples/llama_fsdp_tp.py", "--topology", "8x8_torus", "--gpu", "h200")
    assert code == 0, err
    table = engine_tables[-1][0]
    attention = np.isin(table.op_class, [CODE[c] for c in ATTENTION]) & (table.kind == workload_driver.engine.COMPUTE)
    assert attention.sum() == 8 and table.causal is not None   # 4 layers' SDPA forward and backward
    assert list(np.flatnonzero(table.causal)) == list(np.flatnonzero(attention))
