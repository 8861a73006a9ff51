"""Views (issue 33): the kernel-less ops the host dispatches (views, aliases) are counted by the capture on the
next compute op (`Op.views`), kept through wl.views, step tables and Chakra traces to the engine's
ProgramTable.views, and the --gpu compute model adds view_us of host time for each to that op's issue. Every
figure without --gpu stays as it was."""
import csv
import glob
import textwrap

import numpy as np
import pytest

from astra_compile.compiler.api.api import compile as compile_step
from astra_compile.compiler.driver import workload_driver
from astra_compile.compiler.frontend import chakra
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.workload import COMPUTE, Op, Workload
from astra_compile.network.compute_model import DEFAULTS, ComputeModel
from astra_compile.network.op_classes import CODE
from astra_compile.runtime.workload_engine import Roofline

from helpers import cli, refused

ENGINE_COMPUTE = workload_driver.engine.COMPUTE


def test_the_capture_counts_the_views_before_each_compute_op(tmp_path):
    path = tmp_path / "reshapes.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Reshapes(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(8, 16, bias=False)

            def forward(self, x):
                y = self.lin(x)                          # t(weight): a view, then mm
                y = y.view(2, 2, 16).transpose(1, 2)     # two views
                return (y * 2).sum()                     # mul after them, then sum


        def build_model():
            return Reshapes()


        def example_inputs():
            return (torch.randn(4, 8),)
        """))
    ops = capture(load_model_file(str(path)), 1).programs[0]
    forward = [(op.name, op.views) for op in ops if op.phase == "forward"]
    assert forward[:3] == [("aten.mm.default", 1), ("aten.mul.Tensor", 2), ("aten.sum.default", 0)]
    assert all(op.kind == COMPUTE or op.views == 0 for op in ops)
    assert sum(op.views for op in ops) > 3   # the backward's transposes and expands too


def views_step() -> Workload:
    ops = [Op("aten.add.Tensor", COMPUTE, bytes=8, views=5),
           Op("aten.mul.Tensor", COMPUTE, [0], bytes=8),
           Op("aten.add.Tensor", COMPUTE, [1], bytes=8, views=2)]
    return Workload(2, {0: ops}, "views test", spmd=True)


def views_rows(table) -> list:
    return [] if table.views is None else [int(table.views[i]) for i in np.flatnonzero(table.kind == ENGINE_COMPUTE)]


def test_the_engine_issues_each_op_after_its_views():
    model = ComputeModel((("host_us", 20.0), ("cast.host_us", 2.0), ("view_us", 3.0)))
    roof = Roofline(peak_tflops=10.0, mem_gbps=100.0, model=model)
    kind = np.array([ENGINE_COMPUTE, ENGINE_COMPUTE, workload_driver.engine.COLLECTIVE, ENGINE_COMPUTE])
    cls = np.array([CODE["elementwise"], CODE["cast"], 0, CODE["matmul"]])
    views = np.array([0, 4, 0, 1], np.int32)
    assert list(roof.issued_ns(kind, cls, views)) == [20e3, 20e3 + 2e3 + 12e3, 34e3, 34e3 + 20e3 + 3e3]
    assert list(roof.issued_ns(kind, cls)) == [20e3, 22e3, 22e3, 42e3]   # none: as before
    assert ComputeModel().value("view_us") == DEFAULTS["view_us"] > 0   # the h200 preset's (network/gpus.json)


def test_views_survive_the_module_step_tables_and_chakra_and_only_the_gpu_model_uses_them(tmp_path, capsys,
                                                                                          engine_tables):
    report = compile_step(views_step(), "Ring(2)")
    assert report.mlir.count("wl.views = 5 : i64") == 1 and report.mlir.count("wl.views") == 2
    assert views_rows(engine_tables[-1][0]) == [5, 0, 2]
    step = tmp_path / "step.mlir"
    step.write_text(report.mlir)
    out = tmp_path / "tables"
    assert cli(capsys, str(step), "--emit", "tables", "-o", str(out))[0] == 0
    cells = list(csv.reader(open(out / "program_0.csv")))
    assert cells[0][-2:] == ["causal", "views"] and [r[-1] for r in cells[1:]] == ["5", "", "2"]
    engine_tables.clear()
    assert cli(capsys, str(out))[0] == 0
    assert views_rows(engine_tables[0][0]) == [5, 0, 2]
    # without --gpu the figure is the one without views
    none = compile_step(Workload(2, {0: [Op(**{**o.__dict__, "views": 0}) for o in views_step().programs[0]]},
                                 "views test", spmd=True), "Ring(2)")
    assert report.total_time_us == none.total_time_us and "wl.views" not in none.mlir
    # --gpu: three tiny ops, host-bound, so the step is 7 views x view_us (the h200 preset's) longer
    (tmp_path / "plain.mlir").write_text(none.mlir)
    steps = {}
    for name, source in (("tables", out), ("module", step), ("plain", tmp_path / "plain.mlir")):
        code, text, err = cli(capsys, str(source), "--gpu", "h200")
        assert code == 0, err
        steps[name] = float(next(line.split()[2] for line in text.splitlines() if line.startswith("step time")))
    assert steps["tables"] == steps["module"]
    assert steps["module"] - steps["plain"] == pytest.approx(7 * DEFAULTS["view_us"], abs=2e-3)


@pytest.mark.parametrize("cell", ["-1", "x", "1.5", "2147483648", "007"])
def test_a_malformed_views_cell_is_refused_in_one_line(tmp_path, capsys, cell):
    out = tmp_path / "tables"
    step = tmp_path / "step.mlir"
    step.write_text(compile_step(views_step(), "Ring(2)").mlir)
    assert cli(capsys, str(step), "--emit", "tables", "-o", str(out))[0] == 0
    program = out / "program_0.csv"
    program.write_text(program.read_text().replace(",5\n", f",{cell}\n", 1))
    refused(capsys, str(out), match=f"program_0.csv: row 0: views: '{cell}'")


@pytest.mark.parametrize("value", ["-1 : i64", "2147483648 : i64", '"3"', "true"])
def test_a_module_with_bad_views_is_refused_in_one_line(tmp_path, capsys, value):
    mlir = compile_step(views_step(), "Ring(2)").mlir
    (tmp_path / "bad.mlir").write_text(mlir.replace("wl.views = 5 : i64", f"wl.views = {value}"))
    refused(capsys, str(tmp_path / "bad.mlir"), match="wl.views must be a whole number 0..2147483647, got")


def test_chakra_traces_keep_views(tmp_path):
    compile_step(views_step(), "Ring(2)").chakra(str(tmp_path / "t"))
    files = sorted(glob.glob(str(tmp_path / "t" / "*.et")))
    assert [op.views for op in chakra.load(files).programs[0] if op.kind == COMPUTE] == [5, 0, 2]
    assert b"astra_views" in open(files[0], "rb").read()


def test_a_cached_workload_keeps_views_and_refuses_a_bad_count():
    w = views_step()
    assert [op.views for op in Workload.from_json(w.to_json()).programs[0]] == [5, 0, 2]
    for bad in (-1, "3", True, 2**31):
        data = w.to_json()
        data["programs"][0][1][0]["views"] = bad
        with pytest.raises(ValueError, match="views = "):
            Workload.from_json(data)


def test_the_llama_example_dispatches_views_before_many_ops(capsys, engine_tables):
    code, out, err = cli(capsys, "examples/llama_fsdp_tp.py", "--topology", "8x8_torus", "--gpu", "h200")
    assert code == 0, err
    table = engine_tables[-1][0]
    views = table.views[table.kind == ENGINE_COMPUTE]
    # rotary embeddings, head reshapes, repeat_interleave and the backward's transposes: 768 views before 252 of
    # its 563 compute ops when this test was written
    assert (views > 0).sum() >= 200 and views.sum() >= 600
