"""The workload module as input: `--emit mlir -o step.mlir`, then `astra-compile step.mlir` gives the
identical report, for every bundled example and for per-rank programs; a damaged module ends in one line. The
examples' step tables round trip here too (tests/test_step_tables.py has the rest)."""
import json
import os
import re

import pytest

import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, WAIT, Op, Workload
from astra_compile.dialects import comm
from astra_compile.dialects import workload as wl
from astra_compile.network.errors import UserError
from astra_compile.runtime import step_tables

from helpers import refused
from snapshot_grid import MODEL_EXAMPLES

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("example", MODEL_EXAMPLES)
def test_an_example_step_round_trips_through_its_module_and_its_tables(tmp_path, example):
    direct = astra_compile.compile(os.path.join(EXAMPLES, example), "8x8_torus", keep_tables=True)
    path = tmp_path / "step.mlir"
    path.write_text(direct.mlir)
    again = astra_compile.compile(str(path), None)
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(direct.to_dict(), sort_keys=True)
    assert again.format() == direct.format()
    assert again.mlir == direct.mlir   # --emit mlir of the module writes it back unchanged
    step_tables.write(str(tmp_path / "tables"), direct.step_tables("csv"))   # what --emit tables -o writes
    from_tables = astra_compile.compile(str(tmp_path / "tables"), None)
    assert json.dumps(from_tables.to_dict(), sort_keys=True) == json.dumps(direct.to_dict(), sort_keys=True)
    assert from_tables.total_time_us == direct.total_time_us   # to the last digit


def two_ranks() -> Workload:
    def program(extra_flops):
        return [Op("aten.mm.default", COMPUTE, flops=2 ** 30 + extra_flops, bytes=2 ** 20, phase="forward"),
                Op("c10d.broadcast_", COLLECTIVE, [0], bytes=2 ** 16, collective="broadcast", group=(0, 1),
                   group_name="0", root=1, phase="forward"),
                Op("c10d.allreduce_", COLLECTIVE, [1], bytes=2 ** 20, collective="all_reduce", group=(0, 1),
                   group_name="0", phase="backward"),
                Op("wait", WAIT, [2]),
                Op("aten.add.default", COMPUTE, [3], flops=2 ** 20, bytes=2 ** 20, phase="optimizer")]
    return Workload(2, {0: program(0), 1: program(2 ** 32)}, source="two ranks")


@pytest.fixture
def step(tmp_path):
    report = astra_compile.compile(two_ranks(), "Ring(2)")
    path = tmp_path / "step.mlir"
    path.write_text(report.mlir)
    return report, path


def test_per_rank_programs_round_trip(step):
    report, path = step
    for rank in (0, 1):
        again = astra_compile.compile(str(path), None, rank=rank)
        assert again.to_dict() == astra_compile.compile(two_ranks(), "Ring(2)", rank=rank).to_dict()
    assert report.to_dict() == astra_compile.compile(str(path), None).to_dict()


def test_another_topology_of_the_same_shape_times_it_anew(step):
    report, path = step
    fast = astra_compile.compile(str(path), "Ring(2)", bandwidth=[400.0])
    assert fast["topology"] == "Ring(2)" and fast["comm_time_us"] < report["comm_time_us"]
    with pytest.raises(UserError, match=r"lowered for Ring\(2\) \(2 NPUs\); --topology Ring\(4\)"):
        astra_compile.compile(str(path), "Ring(4)")


def damaged(path, pattern, replacement, count=1):
    text = path.read_text()
    new, n = re.subn(pattern, replacement, text, count=count)
    assert n == count, pattern
    bad = path.with_name("bad.mlir")
    bad.write_text(new)
    return bad


@pytest.mark.parametrize("pattern,replacement,message", [
    (r'wl.group = "0"', 'wl.group = "dp"', "wl.group 'dp' is not one of the program's wl.groups"),
    (r"wl.rank = 1 : i64", "wl.rank = 0 : i64", "wl.rank must be a distinct rank in 0..1, got 0"),
    (r"root = 1 : i64", "root = 5 : i64", "root 5 outside 0..1"),
    (r"wl.world_size = 2 : i64", "wl.world_size = 3 : i64", "wl.world_size 3 but Ring(2) has 2 NPUs"),
    (r", wl.world_size = 2 : i64", "", "wl.world_size must be a positive integer, got None"),
    (r'"wl.compute"', '"wl.wait"', "undeclared attribute"),
    (r'dims = array<i64: 0>', 'dims = array<i64: 0, 0>', "repeat a dimension"),
    # a rank program is a graph region: MLIR lets an op use a value defined after it (fuzz found the crash)
    (r'"wl.compute"\(%3\)', '"wl.compute"(%4)', "uses a value no earlier op of the program defines"),
])
def test_a_damaged_module_is_refused_in_one_line(capsys, step, pattern, replacement, message):
    bad = damaged(step[1], pattern, replacement)
    err = refused(capsys, bad, match=message)
    assert str(bad) in err


def test_a_workload_module_takes_no_capture_options(capsys, step):
    refused(capsys, step[1], "--mesh", "dp=2", match="already captured and lowered")
    refused(capsys, step[1], "--bandwidth", "10", match="need --topology")


def records(text: str) -> dict:
    """The `module @c<k>` records of a step's --emit mlir, read back with MLIR: name -> their attributes."""
    module = wl.parse_module(text, wl.new_context())
    return {comm.from_attr(op.attributes["sym_name"]): comm.attrs(op)
            for op in (o.operation for o in module.body.operations) if wl.is_schedule_record(op)}


def test_every_collective_names_its_compiled_module_in_the_step():
    """--emit mlir of a step nests each distinct collective's module after the comm passes (`module @c<k>`), and
    every use names it in wl.schedule: the step's IR tells which algorithm and schedule each collective got."""
    report = astra_compile.compile(two_ranks(), "Ring(2)")
    text = report.mlir
    uses = re.findall(r'"comm\.(\w+)".*?wl\.schedule = "(c\d+)"', text)
    assert uses == [("broadcast", "c0"), ("all_reduce", "c1")] * 2   # both ranks' programs, one record each
    held = records(text)
    assert {k: r["wl.algorithm"] for k, r in held.items()} == {"c0": report.collectives[0]["algorithm"],
                                                               "c1": report.collectives[1]["algorithm"]}
    record = text[text.index("module @c1"):]
    assert '"comm.phase"' in record and 'kind = "reduce_scatter"' in record and 'kind = "all_gather"' in record
    assert [held[k]["wl.time_ns"] / 1e3 for k in ("c0", "c1")] == [c["time_us"] for c in report.collectives]
    assert all(r["comm.scheduler"] == "optimal" and "wl.fallback" not in r for r in held.values())


def tiny_step() -> Workload:
    """A 4-byte all-reduce over 16 ranks: too small to split, it falls back (wl.fallback)."""
    return Workload(16, {0: [Op("c10d.allreduce_", COLLECTIVE, bytes=4, collective="all_reduce",
                                group=tuple(range(16)), group_name="world")]}, source="loss", spmd=True)


def test_a_small_collective_records_how_it_fell_back():
    report = astra_compile.compile(tiny_step(), "4x4_torus")
    (name, record), = records(report.mlir).items()
    assert name == "c0" and record["wl.algorithm"] == report.collectives[0]["algorithm"]
    assert re.fullmatch(r"padded from 4 B to \d+ B \(too small to split over 16 NPUs\)", record["wl.fallback"])


def test_the_step_ir_is_mlirs_own_print():
    """The compiled collectives are cloned into the step's module as operations, their figures and the run's
    options set as attributes, and the module printed once by MLIR: the text is MLIR's own print of itself (no
    record spliced in as text, whose attributes MLIR would print in another order)."""
    for text in (astra_compile.compile(two_ranks(), "Ring(2)", peak_tflops=10.0, chunks=2).mlir,
                 astra_compile.compile(tiny_step(), "4x4_torus", mem_bw_gbps=100.0).mlir):
        assert "module @c0" in text and "wl.run" in text.split("\n", 1)[0]
        assert str(wl.parse_module(text, wl.new_context())) == text


def test_a_step_prints_and_parses_no_ir_until_its_module_is_read(monkeypatch):
    """The IR is the working structure: timing a step builds each collective's comm module, compiles it in place
    and keeps it, with no module printed or parsed on the way; reading `report.mlir` prints the step once."""
    from torch_mlir import ir
    seen = {"parse": 0, "print": 0}
    parse, show = ir.Module.parse, ir.Operation.__str__

    def counted_parse(text, *args, **kwargs):
        seen["parse"] += "irdl.dialect" not in text   # a context loading the dialects' definitions is no IR
        return parse(text, *args, **kwargs)

    def counted_print(op):
        seen["print"] += op.name == "builtin.module"   # (a schedule's content key prints its ops, not the module)
        return show(op)
    monkeypatch.setattr(ir.Module, "parse", staticmethod(counted_parse))
    monkeypatch.setattr(ir.Operation, "__str__", counted_print)
    report = astra_compile.compile(two_ranks(), "Ring(2)", peak_tflops=10.0)
    assert seen == {"parse": 0, "print": 0}
    text = report.mlir
    assert seen == {"parse": 0, "print": 1} and text.count("module @c") == 2
    assert report.mlir is text and seen["print"] == 1   # printed once


def test_a_cached_collective_is_nested_from_its_text(tmp_path):
    """With --cache, a later run takes each collective's compiled module from the cache file (text), parses it
    into its step's context and nests it: the step's IR is the one a run without a cache prints."""
    from astra_compile.compiler.core import reuse
    want = astra_compile.compile(two_ranks(), "Ring(2)").mlir
    for run in range(2):
        with reuse.using(reuse.open_dir(str(tmp_path / "cache"))) as shared:
            assert astra_compile.compile(two_ranks(), "Ring(2)").mlir == want
        assert (shared.made["collective"], shared.hits) == ((2, 0) if run == 0 else (0, 2))


def test_emitting_leaves_the_lowered_step_as_it_was():
    """The points of a sweep share one lowered module: --emit mlir nests the records in a copy of it."""
    from astra_compile.compiler.driver.workload_driver import WorkloadOptions, emitted, lower, run
    from astra_compile.network.parse import parse_topology
    topology = parse_topology("Ring(2)")
    lowered = lower(two_ranks(), topology)
    before = str(lowered.module)
    _, times = run(lowered, topology, WorkloadOptions())
    first = emitted(lowered, times, {"chunks": 2})
    assert str(lowered.module) == before and "module @c" not in before
    assert emitted(lowered, times, {"chunks": 2}) == first and first.count("module @c") == 2


def test_a_module_written_again_keeps_one_run_record(tmp_path):
    """A module that records its run options (wl.run), run and written again with --emit mlir, records them once:
    it is read and run once more (the text splice this replaced appended a second wl.run, a duplicate key that
    MLIR refuses)."""
    first = tmp_path / "first.mlir"
    first.write_text(astra_compile.compile(two_ranks(), "Ring(2)", chunks=2, peak_tflops=10.0).mlir)
    again = astra_compile.compile(str(first), None)
    assert again.mlir == first.read_text() and again.mlir.split("\n", 1)[0].count("wl.run =") == 1
    second = tmp_path / "second.mlir"
    second.write_text(again.mlir)
    assert astra_compile.compile(str(second), None).total_time_us == again.total_time_us


def test_a_module_run_at_the_defaults_records_no_run_options(tmp_path):
    """A module that records wl.run, run with every option at its default (use_recorded=False), writes a module
    without the record: its step was timed at the defaults, and running the written module times it so again."""
    path = tmp_path / "m.mlir"
    path.write_text(astra_compile.compile(two_ranks(), "Ring(2)", peak_tflops=10.0).mlir)
    plain = astra_compile.compile(str(path), None, use_recorded=False)
    assert "wl.run" not in plain.mlir and plain.mlir == astra_compile.compile(two_ranks(), "Ring(2)").mlir
    (tmp_path / "again.mlir").write_text(plain.mlir)
    assert astra_compile.compile(str(tmp_path / "again.mlir"), None).total_time_us == plain.total_time_us
