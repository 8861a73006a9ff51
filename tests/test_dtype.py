"""Each compute op carries the dtype it computed in as PyTorch ran it (docs/workloads.md): from the capture
(parameters' dtypes, a CUDA autocast in step_context(), the TF32 settings the file makes), from an execution trace
(test_et_import.py), through the workload module's wl.dtype to the engine's ProgramTable.dtype codes."""
import collections
import textwrap

import pytest
import torch

from astra_compile.compiler.api.api import compile as compile_step
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.workload import COMPUTE, Op, Workload
from astra_compile.network.dtypes import CODE, DTYPES, from_torch
from astra_compile.runtime import workload_engine

GPT = "examples/gpt_tp_dp.py"
MATMULS = ("mm", "addmm", "bmm")


@pytest.fixture
def torch_settings():
    """A model file may set torch's TF32 flags when it loads: put them back after the test."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[1:]


def dtypes_by_op(path, world=16) -> dict[str, set]:
    """aten op name -> the dtypes its recorded compute ops ran in."""
    found = collections.defaultdict(set)
    for op in capture(load_model_file(str(path)), world).programs[0]:
        if op.kind == COMPUTE:
            found[op.name.split(".")[1]].add(op.dtype)
    return found


def gpt_with(tmp_path, extra: str):
    path = tmp_path / "gpt.py"
    with open(GPT) as f:
        path.write_text(f.read() + textwrap.dedent(extra))
    return path


def test_dtype_codes_are_the_tuples_indices_and_torch_names_map_onto_them():
    assert DTYPES == ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8") and CODE["bf16"] == 3
    assert [from_torch(n) for n in ("torch.float32", "bfloat16", "float16", "float64", "float8_e4m3fn", "int64")] \
        == ["fp32", "bf16", "fp16", "fp64", "fp8", "fp32"]
    assert from_torch("float32", tf32=True) == "tf32" and from_torch("bfloat16", tf32=True) == "bf16"


def test_gpt_as_written_runs_its_matmuls_in_fp32(torch_settings):
    found = dtypes_by_op(GPT)
    assert all(found[m] == {"fp32"} for m in MATMULS)
    assert set().union(*found.values()) == {"fp32"}


def test_gpt_allowing_tf32_runs_its_matmuls_in_tf32_and_the_rest_in_fp32(tmp_path, torch_settings):
    found = dtypes_by_op(gpt_with(tmp_path, 'torch.set_float32_matmul_precision("high")\n'))
    assert all(found[m] == {"tf32"} for m in MATMULS)
    assert found["_softmax"] == found["native_layer_norm"] == {"fp32"}


def test_gpt_under_cuda_autocast_runs_matmuls_in_bf16_softmax_and_layer_norm_in_fp32(tmp_path, torch_settings,
                                                                                      recwarn):
    """The capture runs on the host, where torch.autocast("cuda") would disable itself: it takes CUDA's policy."""
    found = dtypes_by_op(gpt_with(tmp_path, """
        def step_context():
            return torch.autocast("cuda", dtype=torch.bfloat16)
        """))
    assert all(found[m] == {"bf16"} for m in MATMULS)
    assert found["_softmax"] == found["native_layer_norm"] == {"fp32"}
    assert found["native_layer_norm_backward"] == {"fp32"} and found["gelu"] == {"bf16"}
    assert not [w for w in recwarn if "Disabling autocast" in str(w.message)]
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::softmax.int", "AutocastCPU")   # undone


def test_bf16_parameters_compute_in_bf16_and_convolutions_in_tf32_unless_cudnn_forbids(tmp_path, torch_settings):
    path = tmp_path / "small.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Both(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(64, 64, dtype=torch.bfloat16)
                self.conv = nn.Conv2d(3, 8, 3)

            def forward(self, x, image):
                return self.linear(x).float().sum() + self.conv(image).sum()


        def build_model():
            return Both()


        def example_inputs():
            return torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(2, 3, 16, 16)
        """))
    found = dtypes_by_op(path, 2)
    assert found["addmm"] == found["mm"] == {"bf16"}
    assert found["convolution"] == found["convolution_backward"] == {"tf32"}   # cudnn.allow_tf32: on by default
    path.write_text(path.read_text() + "torch.backends.cudnn.allow_tf32 = False\n")
    assert dtypes_by_op(path, 2)["convolution"] == {"fp32"}


def test_the_dtype_reaches_the_engine_through_the_module_and_back(monkeypatch, tmp_path):
    seen = []
    time_ns = workload_engine.Roofline.time_ns

    def spy(self, flops, nbytes, dtype=None, *model):
        seen.append(dtype.tolist())
        return time_ns(self, flops, nbytes, dtype, *model)
    monkeypatch.setattr(workload_engine.Roofline, "time_ns", spy)
    ops = [Op("aten.mm.default", COMPUTE, flops=10**9, dtype="bf16"), Op("aten.add.Tensor", COMPUTE, [0], bytes=8),
           Op("aten.mm.default", COMPUTE, [1], flops=10**9, dtype="tf32")]
    report = compile_step(Workload(4, {0: ops}, "dtype test", spmd=True), "Ring(4)")
    assert seen == [[CODE["bf16"], CODE["fp32"], CODE["tf32"]]]
    text = report.mlir
    assert text.count('wl.dtype = "bf16"') == 1 and text.count('wl.dtype = "tf32"') == 1   # fp32 left out
    step = tmp_path / "step.mlir"
    step.write_text(text)
    again = compile_step(str(step), None)
    assert seen[1] == seen[0] and again.total_time_us == report.total_time_us   # the roofline ignores it as yet


def test_a_module_with_an_unknown_dtype_is_refused_in_one_line(tmp_path, capsys):
    from helpers import refused
    ops = [Op("aten.mm.default", COMPUTE, flops=10**9, dtype="bf16")]
    step = tmp_path / "step.mlir"
    step.write_text(compile_step(Workload(4, {0: ops}, "dtype test", spmd=True), "Ring(4)").mlir
                    .replace('"bf16"', '"int4"'))
    refused(capsys, str(step), match="wl.dtype must be one of fp64, fp32, tf32, bf16, fp16, fp8, got")


def test_a_cached_workload_keeps_its_dtypes_and_refuses_an_unknown_one():
    w = Workload(4, {0: [Op("aten.mm.default", COMPUTE, flops=1, dtype="fp16")]}, "x", spmd=True)
    assert Workload.from_json(w.to_json()).programs[0][0].dtype == "fp16"
    data = w.to_json()
    data["programs"][0][1][0]["dtype"] = "int4"
    with pytest.raises(ValueError, match="dtype 'int4'"):
        Workload.from_json(data)


def test_step_tables_keep_the_dtype_and_fp32_programs_keep_their_columns(tmp_path, capsys, monkeypatch):
    from helpers import cli, refused
    ops = [Op("aten.mm.default", COMPUTE, flops=10**9, dtype="bf16"), Op("aten.add.Tensor", COMPUTE, [0], bytes=8)]
    step = tmp_path / "step.mlir"
    step.write_text(compile_step(Workload(4, {0: ops}, "dtype test", spmd=True), "Ring(4)").mlir)
    tables = tmp_path / "tables"
    code, _, err = cli(capsys, str(step), "--emit", "tables", "-o", str(tables))
    assert code == 0, err
    program = tables / "program_0.csv"
    lines = program.read_text().splitlines()
    assert lines[0].endswith(",deps,dtype") and lines[1].endswith(",bf16") and lines[2].endswith(",")
    seen = []
    time_ns = workload_engine.Roofline.time_ns
    monkeypatch.setattr(workload_engine.Roofline, "time_ns",
                        lambda self, f, b, dtype=None, *model:
                        seen.append(dtype.tolist()) or time_ns(self, f, b, dtype, *model))
    compile_step(str(tables), None)
    assert seen == [[CODE["bf16"], CODE["fp32"]]]
    program.write_text(program.read_text().replace(",bf16", ",int4"))
    refused(capsys, str(tables), match="program_0.csv: row 0: dtype: 'int4'")
    fp32 = tmp_path / "fp32"
    step.write_text(step.read_text().replace(', wl.dtype = "bf16"', ""))
    code, _, err = cli(capsys, str(step), "--emit", "tables", "-o", str(fp32))
    assert code == 0, err
    assert (fp32 / "program_0.csv").read_text().splitlines()[0].endswith(",in_switch,deps")   # as before


def test_the_report_gives_flops_per_dtype_where_some_are_not_fp32(tmp_path):
    import json
    import jsonschema
    schema = json.load(open("compiler/report/workload_report.schema.json"))
    mixed = [Op("aten.mm.default", COMPUTE, flops=3 * 10**12, dtype="bf16"),
             Op("aten._softmax.default", COMPUTE, [0], flops=2 * 10**9), Op("aten.mm.default", COMPUTE, [1], flops=7)]
    r = compile_step(Workload(4, {0: mixed}, "dtype test", spmd=True), "Ring(4)")
    assert r.to_dict()["flops_by_dtype"] == {"fp32": 2 * 10**9 + 7, "bf16": 3 * 10**12}
    jsonschema.validate(r.to_dict(), schema)
    assert "per rank; fp32 2.000 GFLOP; bf16 3.000 TFLOP)" in r.format().splitlines()[0]
    plain = compile_step(Workload(4, {0: [Op("aten.mm.default", COMPUTE, flops=7)]}, "dtype test", spmd=True),
                         "Ring(4)")
    assert "flops_by_dtype" not in plain.to_dict() and plain.format().splitlines()[0].endswith("7 FLOP per rank)")


def test_chakra_traces_keep_the_dtype(tmp_path):
    import glob
    from astra_compile.compiler.frontend import chakra
    ops = [Op("aten.mm.default", COMPUTE, flops=10**9, dtype="fp8"), Op("aten.add.Tensor", COMPUTE, [0], bytes=8)]
    compile_step(Workload(2, {0: ops}, "dtype test", spmd=True), "Ring(2)").chakra(str(tmp_path / "t"))
    read = chakra.load(sorted(glob.glob(str(tmp_path / "t" / "*.et"))))
    assert [op.dtype for op in read.programs[0] if op.kind == COMPUTE] == ["fp8", "fp32"]


def test_fp32_attention_stays_fp32_where_matmuls_run_tf32():
    from astra_compile.compiler.frontend.op_dtype import compute_dtype
    allowed = (True, True)   # matmul and cuDNN TF32 both on
    assert compute_dtype("aten.mm.default", ["float32", "float32"], ["float32"], allowed) == "tf32"
    # the memory-efficient kernel computes fp32 in fp32 whatever the setting (the flash kernel takes no fp32)
    for name in ("aten._scaled_dot_product_efficient_attention.default", "aten::_efficient_attention_backward",
                 "aten.scaled_dot_product_attention.default"):
        assert compute_dtype(name, ["float32"] * 3, ["float32"], allowed) == "fp32", name
    assert compute_dtype("aten._scaled_dot_product_flash_attention.default", ["bfloat16"] * 3, ["bfloat16"],
                         allowed) == "bf16"
