"""Step tables: `--emit tables -o DIR` of a training step, and `astra-compile DIR` re-executing it.

The bundled examples round trip in tests/test_step_module.py; here: per-rank programs (traces), both backends, the
CLI, what a directory holds, `--npu K`, meta.json against its schema, and damaged directories refused in one line.
"""
import csv
import json
import os
import shutil

import jsonschema
import pytest

import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, WAIT, Op, Workload
from astra_compile.runtime import step_tables
from astra_compile.runtime.tables import DirSchedule

from helpers import cli, refused
from test_step_module import two_ranks


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The two-rank step (per-rank programs, a broadcast and an all-reduce) written as step tables."""
    d = str(tmp_path_factory.mktemp("step") / "tables")
    report = astra_compile.compile(two_ranks(), "Ring(2)", keep_tables=True)
    step_tables.write(d, report.step_tables("csv"))
    return report, d


def copy(written, tmp_path) -> str:
    d = str(tmp_path / "t")
    shutil.copytree(written[1], d)
    return d


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_per_rank_programs_round_trip_on_both_backends(tmp_path, backend):
    direct = astra_compile.compile(two_ranks(), "Ring(2)", backend=backend, keep_tables=True)
    step_tables.write(str(tmp_path / "d"), direct.step_tables("json"))
    again = astra_compile.compile(str(tmp_path / "d"), None, backend=backend)
    assert again.to_dict() == direct.to_dict()
    for rank in (0, 1):
        assert astra_compile.compile(str(tmp_path / "d"), None, backend=backend, rank=rank).to_dict() == \
            astra_compile.compile(two_ranks(), "Ring(2)", backend=backend, rank=rank).to_dict()


def test_what_the_directory_holds(written):
    report, d = written
    meta = json.load(open(os.path.join(d, "meta.json")))
    with open(step_tables.SCHEMA_FILE) as f:
        jsonschema.validate(meta, json.load(f))
    assert sorted(os.listdir(d)) == ["collective_0", "collective_1", "meta.json", "program_0.csv", "program_1.csv"]
    assert [c["kind"] for c in meta["collectives"]] == ["broadcast", "all_reduce"]
    assert meta["collectives"][0]["root"] == 1 and meta["collectives"][1]["root"] == -1
    assert [p["ranks"] for p in meta["programs"]] == [[0], [1]]   # the two ranks' compute differs
    rows = list(csv.DictReader(open(os.path.join(d, "program_0.csv"))))
    assert [r["kind"] for r in rows] == ["compute", "broadcast", "all_reduce", "wait", "compute"]
    assert [r["deps"] for r in rows] == ["", "0", "1", "2", "3"]
    assert [r["stream"] for r in rows] == ["0", "1", "1", "0", "0"]
    assert rows[0]["flops"] == str(2 ** 30) and rows[2]["collective"] == "1" and rows[2]["group"] == "0"
    # each collective directory is an ordinary table directory: it runs alone, to the time the step used
    alone = astra_compile.compile(two_ranks(), "Ring(2)").to_dict()["collectives"]
    for c, coll in zip((0, 1), alone):
        schedule = DirSchedule(os.path.join(d, f"collective_{c}"))
        assert schedule.meta.npus == 2
        code_out = json.loads(cli_json(os.path.join(d, f"collective_{c}")))
        assert code_out["total_time_us"] == coll["time_us"]


def cli_json(path: str) -> str:
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "astra_compile", path, "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_identical_programs_share_one_file(tmp_path):
    w = two_ranks()
    w.programs[1] = w.programs[0]
    report = astra_compile.compile(w, "Ring(2)", keep_tables=True)
    step = report.step_tables("csv")
    assert [p.ranks for p in step.programs] == [[0, 1]]
    step_tables.write(str(tmp_path / "d"), step)
    assert astra_compile.compile(str(tmp_path / "d"), None).to_dict() == report.to_dict()


def test_the_cli_writes_prints_and_reruns_a_step(tmp_path, capsys):
    step = tmp_path / "step.mlir"
    step.write_text(astra_compile.compile(two_ranks(), "Ring(2)").mlir)
    code, out, _ = cli(capsys, str(step), "--emit", "tables", "-o", str(tmp_path / "d"))
    assert code == 0 and "step time" in out
    code, direct, _ = cli(capsys, str(step), "--json")
    code2, again, _ = cli(capsys, str(tmp_path / "d"), "--json")
    assert code == code2 == 0 and json.loads(direct) == json.loads(again)
    code, out, _ = cli(capsys, str(tmp_path / "d"), "--emit", "tables", "--npu", "1")
    assert code == 0 and "# accelerator 1 of 2: program_1.csv, 5 rows" in out
    assert "# collective 0: broadcast of 65536 B" in out and "# collective 1: all_reduce of 1048576 B" in out
    code, out, _ = cli(capsys, str(step), "--emit", "tables", "--npu", "0", "--json")
    printed = json.loads(out)
    assert code == 0 and printed["program"] == "program_0.csv" and len(printed["rows"]) == 5
    assert set(printed["collectives"]) == {"0", "1"} and printed["collectives"]["1"]["npu"][0] == 0
    # again into the same directory: only with --force
    refused(capsys, str(step), "--emit", "tables", "-o", str(tmp_path / "d"), match="--force")
    assert cli(capsys, str(step), "--emit", "tables", "-o", str(tmp_path / "d"), "--force")[0] == 0


def test_options_that_do_not_apply_to_a_step_directory_are_refused(written, capsys):
    d = written[1]
    refused(capsys, d, "--topology", "Ring(2)", match="--topology does not apply")
    refused(capsys, d, "--scheduler", "themis", match="--scheduler does not apply")
    refused(capsys, d, "--emit", "mlir", match="not its workload module")
    refused(capsys, d, "--emit", "tables", match="--npu K")
    refused(capsys, d, "--emit", "tables", "--npu", "2", match="--npu 2 outside 0..1")


def edit_csv(path, row, column, value):
    rows = list(csv.reader(open(path)))
    rows[row + 1][rows[0].index(column)] = value
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def edit_meta(d, change):
    path = os.path.join(d, "meta.json")
    meta = json.load(open(path))
    change(meta)
    json.dump(meta, open(path, "w"))


@pytest.mark.parametrize("damage, match", [
    (lambda d: os.remove(os.path.join(d, "program_1.csv")), "program_1.csv: No such file"),
    (lambda d: edit_meta(d, lambda m: m["programs"].pop()), "rank 1 has no program"),
    (lambda d: edit_csv(os.path.join(d, "program_0.csv"), 3, "deps", "7"),
     "program_0.csv: row 3: deps: row 7 is not an earlier row"),
    (lambda d: edit_csv(os.path.join(d, "program_0.csv"), 2, "stream", "2"), "row 2: stream: 2 but group '0'"),
    (lambda d: edit_csv(os.path.join(d, "program_0.csv"), 2, "collective", "0"), "row 2: kind: all_reduce but"),
    (lambda d: edit_csv(os.path.join(d, "program_1.csv"), 0, "flops", "x"), "row 0: flops: 'x' is not a whole"),
    (lambda d: edit_csv(os.path.join(d, "program_1.csv"), 1, "group", "tp"), "group: 'tp' is not a group"),
    (lambda d: edit_meta(d, lambda m: m.update(version=1)), "version: 1"),
    (lambda d: edit_meta(d, lambda m: m.update(extra=1)), "unknown key extra"),
    (lambda d: edit_meta(d, lambda m: m["collectives"][1].update(dims=[1])), "dims: [1] but Ring(2) has 1"),
    (lambda d: edit_meta(d, lambda m: m["collectives"][1].update(kind="all_gather")), "kind: all_reduce but"),
    (lambda d: shutil.rmtree(os.path.join(d, "collective_1")), "collective_1 is missing"),
    (lambda d: os.remove(os.path.join(d, "collective_0", "npu_1.csv")), "npu_1"),
    (lambda d: edit_meta(d, lambda m: m.update(spmd=True, programs=[{**m["programs"][1], "ranks": [1]}])),
     "an SPMD step of one program has rank 0's"),
    (lambda d: edit_meta(d, lambda m: m.update(spmd=True, programs=[{**m["programs"][0], "ranks": [0]},
                                                                    {**m["programs"][1], "ranks": []}])),
     "programs[1].ranks: [] is not a list"),
])
def test_a_damaged_directory_is_refused_in_one_line(written, tmp_path, capsys, damage, match):
    d = copy(written, tmp_path)
    damage(d)
    refused(capsys, d, match=match)


def test_a_deeply_nested_meta_json_is_refused_not_a_traceback(tmp_path, capsys):
    """Deciding whether a directory holds a step reads its meta.json: JSON nested past Python's recursion limit is
    bad input like any other (it was a RecursionError traceback)."""
    (tmp_path / "meta.json").write_text("[" * 100000 + "]" * 100000)
    refused(capsys, str(tmp_path), match="meta.json is not JSON")


def spmd_step(world: int, group: tuple) -> Workload:
    """One program for `world` ranks: compute, an all-reduce on `group` (rank 0's group), a wait."""
    ops = [Op("aten.mm.default", COMPUTE, flops=2 ** 30, bytes=2 ** 20, phase="forward"),
           Op("c10d.allreduce_", COLLECTIVE, [0], bytes=2 ** 22, collective="all_reduce", group=group,
              group_name="dp", phase="backward"),
           Op("wait", WAIT, [1])]
    return Workload(world, {0: ops}, source="spmd", spmd=True)


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_past_64_npus_a_symmetric_schedule_stores_npu_0s_table_alone(tmp_path, capsys, backend):
    """4096 NPUs must stay small: a schedule both backends run from NPU 0 (symmetric) keeps only npu_0's table once
    the network has more than step_tables.ALL_TABLES_UP_TO NPUs; the step re-executes to the last digit."""
    workload = spmd_step(128, tuple(range(0, 128, 8)))     # dimension 1 of Ring(8)_Ring(16)
    direct = astra_compile.compile(workload, "Ring(8)_Ring(16)", backend=backend, keep_tables=True)
    d = tmp_path / "d"
    step_tables.write(str(d), direct.step_tables("csv"))
    assert sorted(os.listdir(d / "collective_0")) == ["meta.json", "npu_0.csv"]
    meta = json.load(open(d / "collective_0" / "meta.json"))
    assert meta["representative"] is True and meta["symmetric"] is True
    with open(os.path.join(os.path.dirname(step_tables.__file__), "meta.schema.json")) as f:
        jsonschema.validate(meta, json.load(f))
    again = astra_compile.compile(str(d), None, backend=backend)
    assert again.to_dict() == direct.to_dict()
    code, out, err = cli(capsys, str(d), "--emit", "tables", "--npu", "0")
    assert code == 0 and "# collective 0: all_reduce" in out
    refused(capsys, str(d), "--emit", "tables", "--npu", "5", match="holds NPU 0's table only")


def test_up_to_64_npus_and_for_asymmetric_schedules_every_table_is_written(tmp_path):
    small = astra_compile.compile(spmd_step(64, tuple(range(0, 64, 8))), "Ring(8)_Ring(8)", keep_tables=True)
    step_tables.write(str(tmp_path / "s"), small.step_tables("csv"))
    assert len(os.listdir(tmp_path / "s" / "collective_0")) == 65
    # halving-doubling across a Ring of 16: no relabelling maps one NPU's links onto another's (congestion.py)
    hd = astra_compile.compile(spmd_step(128, tuple(range(0, 128, 8))), "Ring(8)_Ring(16)", keep_tables=True,
                               algorithm="halving_doubling")
    step_tables.write(str(tmp_path / "h"), hd.step_tables("csv"))
    assert len(os.listdir(tmp_path / "h" / "collective_0")) == 129
    assert "representative" not in json.load(open(tmp_path / "h" / "collective_0" / "meta.json"))


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update(symmetric=False), "representative must be false, or true with symmetric true"),
    (lambda m: m.update(representative=1), "representative must be false"),
])
def test_a_representative_claim_without_symmetry_is_refused(tmp_path, capsys, edit, match):
    d = tmp_path / "d"
    direct = astra_compile.compile(spmd_step(128, tuple(range(0, 128, 8))), "Ring(8)_Ring(16)", keep_tables=True)
    step_tables.write(str(d), direct.step_tables("csv"))
    path = d / "collective_0" / "meta.json"
    meta = json.load(open(path))
    edit(meta)
    path.write_text(json.dumps(meta))
    refused(capsys, str(d), match=match)
