"""Each compute op carries its tensor arguments' shapes (network/op_classes.format_shapes) from every frontend that
knows them, through the workload module's wl.shapes, step tables and Chakra traces, to the engine's tables: each
compute row's op class (ProgramTable.op_class) and the GEMM it runs (ProgramTable.gemm: batch, m, n, k)."""
import csv
import glob
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from astra_compile.compiler.api.api import compile as compile_step
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.workload import COMPUTE, Op, Workload
from astra_compile.network.op_classes import CODE, MAX_SHAPES_TEXT, format_shapes, is_shapes, parse_shapes
from astra_compile.runtime import workload_engine

from helpers import cli, refused

HERE = os.path.dirname(__file__)
GPU_1RANK = os.path.join(HERE, "data", "gpu_1rank")
STEP = os.path.join(HERE, "ir", "step_shapes.mlir")   # tests/ir/step_two_ranks.mlir with wl.shapes (and a bf16 mm)


def compute_rows(table) -> list[tuple]:
    """(op class code, (batch, m, n, k)) of each compute row."""
    return [(int(table.op_class[i]), tuple(int(x) for x in table.gemm[i]))
            for i in np.flatnonzero(table.kind == workload_engine.COMPUTE)]


def test_cut_shapes_text_reads_as_far_as_it_is_whole():
    """A foreach op or a cat over hundreds of tensors is cut at MAX_SHAPES_TEXT: inside a tensor list, the list keeps
    its whole tensors; after it, the argument the cut went through is dropped."""
    text = format_shapes([[(64,)] * 2000, (3,)])
    assert len(text) == MAX_SHAPES_TEXT and text.endswith("...")
    read = parse_shapes(text)
    assert len(read) == 1 and set(read[0]) == {(64,)} and 1300 < len(read[0]) < 1400
    assert parse_shapes(format_shapes([(4096, 4096)] * 1000))[-1] == (4096, 4096)
    assert is_shapes(text) and not is_shapes(text + "1") and not is_shapes("64x") and not is_shapes(7)


SIZES = st.lists(st.integers(0, 2**40), max_size=4).map(tuple)
# a tensor list: a few tensors repeated up to 1500 times (a foreach op over a model's parameters), so that texts
# longer than MAX_SHAPES_TEXT, cut inside a list or after it, come up often
TENSOR_LIST = st.builds(lambda ts, times: ts * times, st.lists(SIZES, max_size=3), st.integers(0, 1500))


@given(st.lists(st.one_of(SIZES, TENSOR_LIST), max_size=8))
@settings(max_examples=200, deadline=None)
def test_any_arguments_format_to_text_that_reads_back(args):
    """Whole texts read back as written; cut ones as a prefix of the arguments, the last perhaps shortened."""
    text = format_shapes(args)
    assert is_shapes(text)
    read = parse_shapes(text)
    if not text.endswith("..."):
        assert read == args
    else:
        assert read[:-1] == args[:len(read) - 1] if read else True
        if read and isinstance(read[-1], list):
            assert read[-1] == args[len(read) - 1][:len(read[-1])]


def test_the_mlp_capture_gives_its_addmm_shapes_and_the_table_a_matmul_of_64_by_4096_by_4096(engine_tables):
    ops = [op for op in capture(load_model_file("examples/mlp_dp.py"), 8).programs[0] if op.kind == COMPUTE]
    addmm = [op for op in ops if op.name == "aten.addmm.default"]
    assert len(addmm) == 8 and {op.shapes for op in addmm} == {"4096,64x4096,4096x4096"}   # bias, x, W^T
    assert {op.shapes for op in ops if op.name == "aten.mm.default"} == {"64x4096,4096x4096", "4096x64,64x4096"}
    assert {op.shapes for op in ops if op.name == "aten.ones_like.default"} == {"s"}   # the loss: a 0-dim tensor
    compile_step("examples/mlp_dp.py", "Ring(8)")
    (table,) = engine_tables[0]
    found = compute_rows(table)
    assert found[0] == (CODE["matmul"], (1, 64, 4096, 4096))      # layer 1's addmm
    assert found[1] == (CODE["elementwise"], (0, 0, 0, 0))        # its gelu
    matmuls = [g for c, g in found if c == CODE["matmul"]]
    assert len(matmuls) == 8 + 2 * 8 - 1   # addmm forward, mm backward (input and weight gradient; none for x)
    assert set(matmuls) == {(1, 64, 4096, 4096), (1, 4096, 4096, 64)}
    assert {c for c, _ in found} >= {CODE["matmul"], CODE["elementwise"]}
    assert not table.op_class[table.kind != workload_engine.COMPUTE].any()   # other rows: 0


def test_resnet_convolutions_run_their_implicit_gemm(engine_tables):
    """cuDNN's implicit GEMM: m = N*Hout*Wout, n = output channels, k = input channels * kernel area."""
    compile_step("examples/resnet_dp.py", "Ring(8)")
    (table,) = engine_tables[0]
    found = compute_rows(table)
    convs = [g for c, g in found if c == CODE["conv"]]
    assert convs[0] == (1, 32 * 112 * 112, 64, 3 * 7 * 7)          # the stem: 224x224, 7x7 stride 2
    assert (1, 32 * 56 * 56, 64, 64 * 3 * 3) in convs              # layer 1's 3x3
    assert (1, 32 * 7 * 7, 512, 512 * 3 * 3) in convs              # layer 4's 3x3
    backward = [g for c, g in found if c == CODE["conv_backward"]]
    assert backward[0] == (1, 32 * 7 * 7, 512, 512 * 3 * 3) and len(backward) == len(convs)
    assert CODE["batch_norm"] in {c for c, _ in found} and CODE["norm"] not in {c for c, _ in found}


def test_an_execution_trace_gives_the_shapes_of_its_matmuls():
    """A real H200 step of examples/mlp_dp.py, execution trace + profiler: the ET records aten::linear (whose
    GEMM is input (..., k) by weight (n, k)) and the backward mm calls."""
    from astra_compile.network.op_classes import gemm_dims
    w = load_traces([os.path.join(GPU_1RANK, "mlp_et_rank0.json"), os.path.join(GPU_1RANK, "mlp_kineto_rank0.json")])
    ops = [op for op in w.programs[0] if op.kind == COMPUTE]
    mm = [op.shapes for op in ops if op.name == "aten.mm.default"]
    assert len(mm) == 15 and set(mm) == {"64x4096,4096x4096", "4096x64,64x4096"}
    linear = [op for op in ops if op.name == "aten.linear.default"]
    assert len(linear) == 8 and {op.shapes for op in linear} == {"64x4096,4096x4096,4096"}
    assert gemm_dims(linear[0].name, parse_shapes(linear[0].shapes), linear[0].flops) == (1, 64, 4096, 4096)
    foreach = next(op for op in ops if op.name == "aten._foreach_mul_.Scalar")
    assert parse_shapes(foreach.shapes)[0][:2] == [(4096, 4096), (4096,)]   # a list of the 16 parameters
    assert sum(1 for op in ops if op.shapes) >= len(ops) - 1


def test_the_module_keeps_wl_shapes_and_a_module_read_back_gives_the_same_tables(engine_tables, tmp_path):
    ops = [Op("aten.addmm.default", COMPUTE, flops=2 * 64 * 4096 * 1024, shapes="1024,64x4096,4096x1024"),
           Op("aten.gelu.default", COMPUTE, [0], bytes=8, shapes="64x1024"),
           Op("aten.mm.default", COMPUTE, [1], flops=10**9)]   # shapes not known: no attribute
    report = compile_step(Workload(4, {0: ops}, "shapes test", spmd=True), "Ring(4)")
    text = report.mlir
    assert text.count('wl.shapes = "1024,64x4096,4096x1024"') == 1 and text.count("wl.shapes") == 2
    step = tmp_path / "step.mlir"
    step.write_text(text)
    again = compile_step(str(step), None)
    first, second = compute_rows(engine_tables[0][0]), compute_rows(engine_tables[1][0])
    assert first == second == [(CODE["matmul"], (1, 64, 1024, 4096)), (CODE["elementwise"], (0, 0, 0, 0)),
                               (CODE["matmul"], (0, 0, 0, 0))]
    assert again.total_time_us == report.total_time_us   # the compute model does not use them as yet


@pytest.mark.parametrize("bad", ["64x", "[64;4096", "64,x", "a" * 10, "1" + "x1" * MAX_SHAPES_TEXT])
def test_a_module_with_malformed_shapes_is_refused_in_one_line(tmp_path, capsys, bad):
    step = tmp_path / "step.mlir"
    with open(STEP) as f:
        step.write_text(f.read().replace('"512x1024,1024x1024"', json.dumps(bad)))
    refused(capsys, str(step), match="wl.compute 'aten.mm.default': wl.shapes must be tensor sizes")


def test_step_tables_keep_the_shapes_and_programs_without_them_keep_their_columns(engine_tables, tmp_path, capsys):
    out = tmp_path / "tables"
    code, _, err = cli(capsys, STEP, "--emit", "tables", "-o", str(out))
    assert code == 0, err
    cells = list(csv.reader(open(out / "program_0.csv")))
    assert cells[0][-3:] == ["deps", "dtype", "shapes"] and cells[1][-2:] == ["", "512x1024,1024x1024"]
    assert cells[4][1] == "wait" and cells[4][-2:] == ["", ""]   # row 3
    assert list(csv.reader(open(out / "program_1.csv")))[1][-2:] == ["bf16", "2560x1024,1024x1024"]
    engine_tables.clear()
    code, _, err = cli(capsys, str(out))
    assert code == 0, err
    by_rank = {t.rank: compute_rows(t) for t in engine_tables[0]}
    assert by_rank == {0: [(CODE["matmul"], (1, 512, 1024, 1024)), (CODE["elementwise"], (0, 0, 0, 0))],
                       1: [(CODE["matmul"], (1, 2560, 1024, 1024)), (CODE["elementwise"], (0, 0, 0, 0))]}
    program = out / "program_0.csv"
    program.write_text(program.read_text().replace("512x1024,1024x1024", "512x1024;1024x1024]"))
    refused(capsys, str(out), match="program_0.csv: row 0: shapes: '512x1024;1024x1024]'")
    plain = tmp_path / "plain"
    code, _, err = cli(capsys, os.path.join(HERE, "ir", "step_two_ranks.mlir"), "--emit", "tables", "-o", str(plain))
    assert code == 0, err
    assert (plain / "program_0.csv").read_text().splitlines()[0].endswith(",in_switch,deps")   # as before


def test_a_shapes_cell_on_a_row_that_is_not_compute_is_refused(tmp_path, capsys):
    out = tmp_path / "tables"
    assert cli(capsys, STEP, "--emit", "tables", "-o", str(out))[0] == 0
    program = out / "program_0.csv"
    cells = list(csv.reader(open(program)))
    cells[4][-1] = "4x4"   # row 3, the wait's (empty) shapes cell
    with open(program, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(cells)
    refused(capsys, str(out), match="program_0.csv: row 3: shapes: '4x4'")


def test_chakra_traces_keep_the_shapes_and_refuse_malformed_ones(tmp_path, capsys):
    from astra_compile.compiler.frontend import chakra
    ops = [Op("aten.mm.default", COMPUTE, flops=10**9, shapes="64x4096,4096x4096"),
           Op("aten.add.Tensor", COMPUTE, [0], bytes=8)]
    compile_step(Workload(2, {0: ops}, "shapes test", spmd=True), "Ring(2)").chakra(str(tmp_path / "t"))
    files = sorted(glob.glob(str(tmp_path / "t" / "*.et")))
    read = chakra.load(files)
    assert [op.shapes for op in read.programs[0] if op.kind == COMPUTE] == ["64x4096,4096x4096", ""]
    data = open(files[0], "rb").read()
    assert b"astra_shapes" in data
    open(files[0], "wb").write(data.replace(b"64x4096,4096x4096", b"64x4096,4096x409]"))
    refused(capsys, str(tmp_path / "t"), "--topology", "Ring(2)", match="astra_shapes '64x4096,4096x409]'")


def test_a_cached_workload_keeps_its_shapes_and_refuses_malformed_ones():
    w = Workload(4, {0: [Op("aten.mm.default", COMPUTE, flops=1, shapes="2x3,3x4")]}, "x", spmd=True)
    assert Workload.from_json(w.to_json()).programs[0][0].shapes == "2x3,3x4"
    data = w.to_json()
    data["programs"][0][1][0]["shapes"] = "2x3,3x"
    with pytest.raises(ValueError, match="shapes = '2x3,3x'"):
        Workload.from_json(data)
