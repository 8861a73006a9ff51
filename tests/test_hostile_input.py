"""Hostile and wrong input: the user's files are never lost, wrong input never gets exit 0, forced options the
schedule cannot honour and options that do not apply are refused, and answers beyond physics say so.

Each refusal is exit status 2 and exactly one line on stderr."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from astra_compile.compiler.main import main
from helpers import cli, refused

RING4 = ["--collective", "all_reduce", "--size", "1MB", "--topology", "4_ring"]
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


# ---- data loss: -o never removes what it did not write ------------------------------------------------------------

def test_output_into_a_directory_with_a_users_file_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.txt").write_text("four years of work")
    refused(capsys, *RING4, "--emit", "tables", "-o", out, match="thesis.txt")
    refused(capsys, *RING4, "--emit", "tables", "-o", out, "--force", match="thesis.txt")  # not even forced
    assert sorted(os.listdir(out)) == ["thesis.txt"] and (out / "thesis.txt").read_text() == "four years of work"


def test_output_into_the_current_directory_is_refused(capsys, tmp_path, monkeypatch):
    (tmp_path / "thesis.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    refused(capsys, *RING4, "--emit", "tables", "-o", ".", match="current directory")
    refused(capsys, *RING4, "--emit", "tables", "-o", "..", match="current directory")
    assert sorted(os.listdir(tmp_path)) == ["thesis.txt"]


def test_output_into_home_is_refused(capsys, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export PS1=$")
    monkeypatch.setenv("HOME", str(home))
    refused(capsys, *RING4, "--emit", "tables", "-o", os.path.expanduser("~"), match=".bashrc")
    assert sorted(os.listdir(home)) == [".bashrc"] and (home / ".bashrc").read_text() == "export PS1=$"


def test_an_earlier_table_directory_is_replaced_only_with_force(capsys, tmp_path):
    out = tmp_path / "tables"
    assert cli(capsys, *RING4, "--emit", "tables", "-o", out)[0] == 0
    before = (out / "meta.json").read_text()
    refused(capsys, *RING4[:-1], "8_ring", "--emit", "tables", "-o", out, match="--force")
    assert (out / "meta.json").read_text() == before
    assert cli(capsys, *RING4[:-1], "8_ring", "--emit", "tables", "-o", out, "--force")[0] == 0
    assert json.loads((out / "meta.json").read_text())["npus"] == 8
    assert sorted(os.listdir(out)) == ["meta.json"] + sorted(f"npu_{i}.csv" for i in range(8))
    assert not [n for n in os.listdir(tmp_path) if n != "tables"]  # no temporary left behind


def test_an_empty_directory_is_filled(capsys, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert cli(capsys, *RING4, "--emit", "tables", "-o", out)[0] == 0
    assert len(os.listdir(out)) == 5


def test_mlir_output_onto_a_directory_is_refused(capsys, tmp_path):
    refused(capsys, *RING4, "--emit", "mlir", "-o", tmp_path, match="is a directory")


def _complete(out) -> bool:
    meta = json.loads((out / "meta.json").read_text())
    return sorted(os.listdir(out)) == sorted(["meta.json"] + [f"npu_{i}.csv" for i in range(meta["npus"])])


def test_an_interrupted_write_keeps_the_old_tables(capsys, tmp_path, monkeypatch):
    out = tmp_path / "tables"
    assert cli(capsys, *RING4, "--emit", "tables", "-o", out)[0] == 0
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}
    from astra_compile.runtime.tables import Table
    written = []

    def interrupted(self, path):  # Ctrl-C after the fifth table
        if len(written) == 5:
            raise KeyboardInterrupt
        written.append(path)
        open(path, "w").close()
    monkeypatch.setattr(Table, "to_csv", interrupted)
    assert main([*RING4[:-1], "4x4_torus", "--emit", "tables", "-o", str(out), "--force"]) == 130   # interrupted
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before
    assert os.listdir(tmp_path) == ["tables"]  # the temporary directory is gone


def test_killed_output_leaves_the_old_tables_or_none(tmp_path):
    """SIGKILL at several moments of a `-o --force` over an earlier output: every time, the directory is either the
    old output, complete, or the new one, complete (or, between the two renames, absent)."""
    out = tmp_path / "tables"
    base = [sys.executable, "-m", "astra_compile", "--collective", "all_reduce", "--size", "64MB",
            "--chunks", "4", "--emit", "tables", "-o", str(out), "--scheduler", "baseline"]
    subprocess.run(base + ["--topology", "4_ring"], check=True, capture_output=True)
    seen = set()
    for delay in (0.3, 0.8, 1.3, 1.8, 2.5, 3.5):
        p = subprocess.Popen(base + ["--topology", "16x16_torus", "--force"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if out.exists():
            assert _complete(out)
            npus = json.loads((out / "meta.json").read_text())["npus"]
            assert npus in (4, 256)
            seen.add(npus)
            if npus == 256:  # put the old output back for the next round
                subprocess.run(base + ["--topology", "4_ring", "--force"], check=True, capture_output=True)
        else:
            seen.add(None)
            subprocess.run(base + ["--topology", "4_ring"], check=True, capture_output=True)
    assert 4 in seen  # at least one kill landed mid-write and left the old output whole


# ---- wrong input never answers with exit 0 --------------------------------------------------------------------

MODULE_HEAD = ('module attributes {comm.topology = {name = "Ring(4)", dims = [{block = "Ring", size = 4, '
               'bandwidth_gbps = 50.0, latency_ns = 500.0, links = 1}]}} {\n')


def _op(result: str, operand: str, name: str) -> str:
    args, types = (f"({operand})", "(!comm.token)") if operand else ("()", "()")
    return (f'  {result} = "comm.all_reduce"{args} {{bytes = 1024 : i64, dims = array<i64: 0>, name = "{name}"}} : '
            f'{types} -> !comm.token\n')


@pytest.mark.parametrize("body,match", [
    (_op("%0", "%1", "a") + _op("%1", "%0", "b"), "comes after it"),
    (_op("%0", "%0", "a"), "depends on itself"),
    (_op("%0", "%1", "a") + _op("%1", "", "b"), "comes after it"),  # a forward use would drop the dependency
])
def test_dependency_cycles_are_refused(capsys, tmp_path, body, match):
    path = tmp_path / "m.mlir"
    path.write_text(MODULE_HEAD + body + "}\n")
    refused(capsys, path, match=match)


@pytest.fixture
def tables(capsys, tmp_path):
    out = tmp_path / "t"
    assert cli(capsys, *RING4, "--chunks", "2", "--emit", "tables", "-o", out)[0] == 0
    return out


def _edit_csv(path, row: int, column: str, value: str) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[row + 1].split(",")
    cells[header.index(column)] = value
    lines[row + 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def test_a_missing_table_is_refused(capsys, tables):
    os.unlink(tables / "npu_2.csv")
    refused(capsys, tables, match="npu_2.csv is missing")


@pytest.mark.parametrize("column,value,match", [
    ("bytes", "-5", "bytes"), ("bytes", "0", "bytes"), ("gbps", "0", "gbps"), ("gbps", "-50", "gbps"),
    ("gbps", "nan", "gbps"), ("gbps", "inf", "gbps"), ("gbps", "1e-310", "not a link bandwidth"), ("peer", "7", "peer"), ("op", "9", "op"),
    ("coll", "70000", "coll"), ("step", "1.5", "step"), ("offset", "99999999", "offset"),
])
def test_a_bad_row_is_refused(capsys, tables, column, value, match):
    _edit_csv(tables / "npu_1.csv", 0, column, value)
    err = refused(capsys, tables, match=match)
    assert "npu_1.csv" in err


@pytest.mark.parametrize("edit,match", [
    (lambda m: [], "must be an object"),
    (lambda m: {k: v for k, v in m.items() if k != "collectives"}, "collectives"),
    (lambda m: dict(m, npus=0), "npus"),
    (lambda m: dict(m, npus=10 ** 12), "npus"),
    (lambda m: dict(m, latency_ns=[]), "latency_ns"),
    (lambda m: dict(m, version=99), "version 99"),
    (lambda m: dict(m, symmetric="yes"), "symmetric"),
    # found by the fuzz harness: wrong types deep inside, integers past 64 bits
    (lambda m: dict(m, collectives=[dict(m["collectives"][0], buffer=[1])] + m["collectives"][1:]), "buffer"),
    (lambda m: dict(m, collectives=[dict(c, chunk_dims=[["x"] * len(r) for r in c["chunk_dims"]])
                                    for c in m["collectives"]]), "chunk_dims[0][0]"),
    (lambda m: dict(m, shards={"0": [[[2 ** 64 + 1, 0]]]}), "shards[0]"),
    (lambda m: dict(m, shards={"zero": []}), "shards has key 'zero'"),
    (lambda m: dict(m, latency_ns=[1e308] * len(m["latency_ns"])), "latency_ns[0] must be at most"),
])
def test_a_damaged_meta_json_is_refused(capsys, tables, edit, match):
    meta = json.loads((tables / "meta.json").read_text())
    (tables / "meta.json").write_text(json.dumps(edit(meta)))
    refused(capsys, tables, match=match)


def test_an_edited_table_loses_the_symmetric_shortcut(capsys, tables):
    code, out, _ = cli(capsys, tables, "--json")
    assert code == 0 and json.loads(out)["execution"] == "symmetric"
    _edit_csv(tables / "npu_3.csv", 0, "hops", "3")  # still a valid table, but not NPU 0's relabelled
    code, out, _ = cli(capsys, tables, "--json")
    assert code == 0 and json.loads(out)["execution"] == "full"
    refused(capsys, tables, "--execution", "symmetric", match="--execution full")


@pytest.mark.parametrize("name,text,match", [
    ("dup.yml", "topology: [Ring]\nnpus_count: [4]\nnpus_count: [8]\n", "given twice"),
    ("dup.json", '{"topologies-per-dim": ["Ring"], "units-count": [4], "units-count": [8]}', "given twice"),
    ("inf.edges", "0 1 inf\n", "bandwidth must be between"),
    ("lat.edges", "0 1 50 1e400\n", "latency must be between"),
    ("zeros.edges", "0 1\n1 00\n", "leading zeros"),
    ("arabic.edges", "0 1\n1 \u0662\n", "ASCII digits"),
    ("super.edges", "0 1\n1 \u00b2\n", "ASCII digits"),
])
def test_bad_network_files_are_refused(capsys, tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", path, match=match)


@pytest.mark.parametrize("name", ["net.yml", "net.json", "net.edges", "m.mlir"])
def test_binary_files_are_named_as_such(capsys, tmp_path, name):
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * 4)
    args = (path,) if name.endswith(".mlir") else ("--collective", "all_reduce", "--size", "1MB", "--topology", path)
    refused(capsys, *args, match="binary")


@pytest.mark.parametrize("flag,value", [("--peak-tflops", "nan"), ("--peak-tflops", "inf"), ("--mem-bw", "nan"),
                                        ("--mem-bw", "-inf"),
                                        ("--peak-tflops", "1e-310")])   # positive, but every op would take forever
def test_roofline_must_be_finite(capsys, flag, value):
    refused(capsys, os.path.join(EXAMPLES, "mlp_dp.py"), "--topology", "4_ring", flag, value, match=flag)


def test_a_model_file_that_never_finishes_is_stopped(capsys, tmp_path):
    path = tmp_path / "deep.py"
    path.write_text("from torch import nn\n"
                    "def build_model():\n"
                    "    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(2 ** 31)])\n"
                    "def example_inputs():\n"
                    "    import torch\n"
                    "    return torch.randn(2, 8)\n")
    refused(capsys, path, "--topology", "4_ring", "--capture-limit", "2", match="more than 2 s of CPU")


def test_a_model_file_that_exits_is_refused(capsys, tmp_path):
    path = tmp_path / "script.py"
    path.write_text("import sys\nsys.exit(0)\n")
    refused(capsys, path, "--topology", "4_ring", match="sys.exit(0)")


# ---- forced options the schedule cannot honour ------------------------------------------------------------------

@pytest.mark.parametrize("topology,algorithm", [("4_ring", "double_binary_tree"), ("3x3_mesh", "multitree"),
                                                ("2x4_torus", "rank_ring"), ("4_ring", "halving_doubling")])
@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_forced_symmetric_execution_on_an_asymmetric_schedule_is_refused(capsys, topology, algorithm, backend):
    if algorithm == "halving_doubling" and backend == "analytical":
        pytest.skip("halving-doubling on a Ring is symmetric for the analytical model (not for the links)")
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", topology, "--algorithm", algorithm,
            "--execution", "symmetric", "--backend", backend, match="--execution full")


# ---- options that do not apply -----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,match", [
    (["--timeline", "t.json", "--compare"], "--timeline"),
    (["--timeline", "t.json", "--emit", "tables", "--npu", "0"], "--timeline"),
    (["--plot", "p.png", "--emit", "mlir"], "--plot"),
    (["--verify", "--compare"], "--verify"),
    (["--switching", "store-and-forward"], "--backend congestion"),
    (["-o", "x"], "-o/--output"),
    (["--npu", "0"], "--emit tables"),
    (["--table-format", "json", "--emit", "tables", "--npu", "0"], "--table-format"),
    (["--force", "--emit", "mlir"], "--force"),
    (["--mesh", "dp=4"], "--mesh"),
])
def test_options_that_do_not_apply_are_refused(capsys, tmp_path, monkeypatch, extra, match):
    monkeypatch.chdir(tmp_path)
    refused(capsys, *RING4, *extra, match=match)
    assert not os.listdir(tmp_path)  # nothing written


@pytest.mark.parametrize("extra", [["--collective", "all_reduce"], ["--topology", "8_ring"], ["--chunks", "4"],
                                   ["--algorithm", "direct"], ["--scheduler", "themis"]])
def test_a_table_directory_takes_only_runtime_options(capsys, tables, extra):
    refused(capsys, tables, *extra, match="table directory")


def test_verify_with_emitted_output_is_honoured(capsys, tmp_path):
    code, out, err = cli(capsys, *RING4, "--emit", "mlir", "--verify")
    assert code == 0 and out.startswith("module") and "verified" in err
    code, out, err = cli(capsys, *RING4, "--emit", "tables", "-o", tmp_path / "t", "--verify")
    assert code == 0 and "verified" in err and (tmp_path / "t" / "meta.json").exists()


def test_timeline_of_a_table_directory_is_written(capsys, tables, tmp_path):
    code, _, _ = cli(capsys, tables, "--timeline", tmp_path / "trace.json")
    assert code == 0 and json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


@pytest.mark.parametrize("argv,match", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--emit", "bar"], "argument --emit: invalid choice: 'bar'"),
    (["--size", "-1MB"], "size must be positive, got '-1MB'"),  # not "expected one argument"
])
def test_usage_errors_are_one_line(capsys, argv, match):
    try:
        code = main(["--collective", "all_reduce", "--topology", "4_ring"] +
                    (argv if argv[0] == "--size" else ["--size", "1MB"] + argv))
    except SystemExit as e:  # argparse's own errors leave through sys.exit
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and match in err, err


# ---- answers beyond physics say so -------------------------------------------------------------------------------

@pytest.mark.parametrize("topology,algorithm", [("8_switch", "direct"), ("8_ring", "direct"), ("8x8_mesh", "direct"),
                                                ("8_switch", "flat_direct")])
def test_a_time_that_beats_the_links_says_so(capsys, topology, algorithm):
    argv = ["--collective", "all_reduce", "--size", "64MB", "--topology", topology, "--algorithm", algorithm]
    code, out, _ = cli(capsys, *argv, "--json")
    r = json.loads(out)
    assert code == 0 and r["exceeds_link_capacity"] and r["total_time_us"] < r["capacity_bound_us"]
    code, out, _ = cli(capsys, *argv)
    assert "beats the link-capacity bound" in out and "--backend congestion" in out
    code, out, _ = cli(capsys, *argv, "--backend", "congestion", "--json")
    r = json.loads(out)
    assert code == 0 and not r["exceeds_link_capacity"] and r["bw_utilization"] <= 1


@pytest.mark.parametrize("topology,algorithm", [("8_switch", "halving_doubling"), ("8x8_torus", "ring"),
                                                ("4x4_torus", "multitree"), ("Ring(4)_FC(4)", None)])
def test_no_note_where_the_links_carry_the_time(capsys, topology, algorithm):
    argv = ["--collective", "all_reduce", "--size", "64MB", "--topology", topology, "--json"]
    code, out, _ = cli(capsys, *argv, *(["--algorithm", algorithm] if algorithm else []))
    r = json.loads(out)
    assert code == 0 and not r["exceeds_link_capacity"] and r["bw_utilization"] <= 1


def test_compare_names_the_schedulers_that_beat_the_links(capsys):
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "8_switch",
                       "--algorithm", "direct", "--compare")
    assert code == 0 and out.count("beats the link-capacity bound") == 3


# ---- typed IR: undeclared attributes, wrong kinds, numbers past int64 ------------------------------------------

EXAMPLE_MODULE = os.path.join(EXAMPLES, "all_reduce_3d_switch.mlir")


@pytest.mark.parametrize("old,new,match", [
    ("chunks = 64 : i64", "chunk = 64 : i64", "undeclared attribute 'chunk'"),
    ("chunks = 64 : i64", 'chunks = "64"', "'chunks' must be an integer"),
    ("dims = array<i64: 0, 1, 2>", "dims = array<f64: 0.0, 1.0, 2.0>", "'dims' must be an array<i64>"),
    ("bytes = 1073741824 : i64", "bytes = 99999999999999999999 : i128", "does not fit in int64"),
    ("bytes = 1073741824 : i64", "bytes = 9223372036854775807 : i64", "exceeds the largest collective"),
    ("chunks = 64 : i64", "chunks = 2000000 : i64", "exceeds 1048576"),
    ("comm.topology = {", "comm.linx = 3, comm.topology = {", "'comm.linx'"),
    ("comm.topology = {", 'comm.shape = array<i64: 8>, comm.topology = {', "one attribute, comm.topology"),
    ('latency_ns = 1.0, links = 1}', 'latency_ns = -1.0, links = 1}', "latency must be >= 0"),
])
def test_a_module_with_wrong_attributes_is_refused(capsys, tmp_path, old, new, match):
    with open(EXAMPLE_MODULE) as f:
        text = f.read()
    assert old in text
    path = tmp_path / "m.mlir"
    path.write_text(text.replace(old, new, 1))
    refused(capsys, path, match=match)


def test_a_module_compiles_for_another_topology(capsys):
    code, out, _ = cli(capsys, EXAMPLE_MODULE, "--topology", "8x8x8_torus", "--json")
    assert code == 0 and json.loads(out)["topology"] == "Ring(8)_Ring(8)_Ring(8)"


def test_a_size_past_the_limit_is_refused(capsys):
    refused(capsys, "--collective", "all_reduce", "--size", "2TB", "--topology", "4_ring", match="largest collective")


@pytest.mark.parametrize("flag,value,match", [
    ("--bandwidth", "1e-310", "bandwidth must be between"), ("--bandwidth", "1e308", "bandwidth must be between"),
    ("--latency", "1e308", "latency must be between"), ("--links", "100000", "links must be between"),
    ("--size", str(2 ** 64), "largest collective"), ("--dims", str(2 ** 64), "--dims"),
    ("--ports", str(2 ** 64), "--ports"), ("--chunks", str(2 ** 40), "--chunks"),
])
def test_numbers_at_the_edges_are_refused(capsys, flag, value, match):
    extra = ["--algorithm", "multitree"] if flag == "--ports" else []
    argv = ["--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", *extra]
    if flag == "--size":
        argv = argv[:2] + argv[4:]
    refused(capsys, *argv, flag, value, match=match)


@pytest.mark.parametrize("value", ["0\n", "4x4\ntorus", "a\rb\x1b[2J"])
def test_a_value_with_control_characters_stays_one_line(capsys, value):
    err = refused(capsys, "--collective", "all_reduce", "--size", value, "--topology", "4x4_torus")
    assert "\\n" in err or "\\r" in err


@pytest.mark.parametrize("target,match", [("x" * 300, "File name too long"), ("nul\0l", "not a file name")])
@pytest.mark.parametrize("emit", ["tables", "mlir"])
def test_an_output_name_that_cannot_be_written_is_one_line(capsys, tmp_path, monkeypatch, target, match, emit):
    monkeypatch.chdir(tmp_path)
    refused(capsys, *RING4, "--emit", emit, "-o", target, match=match)
    assert os.listdir(tmp_path) == []


def test_the_cpu_limit_never_stops_a_module_half_imported(tmp_path, monkeypatch):
    """The limit's handler defers while an import runs (a module stopped midway stays half made in sys.modules
    and breaks every later capture in the process); elsewhere it stops the code."""
    import sys
    from astra_compile.compiler.frontend.cpu_limit import inside_import
    (tmp_path / "importing_probe.py").write_text("import sys\nFRAME = sys._getframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importing_probe
    try:
        assert inside_import(importing_probe.FRAME)
        assert not inside_import(sys._getframe())
    finally:
        sys.modules.pop("importing_probe", None)


def test_a_model_file_whose_top_level_never_finishes_is_stopped(capsys, tmp_path):
    path = tmp_path / "spin.py"
    path.write_text("while True:\n    pass\n")
    refused(capsys, path, "--topology", "4_ring", "--capture-limit", "1", match="more than 1 s of CPU")


def test_chunks_on_a_module_whose_collectives_have_their_counts_is_refused(capsys, tmp_path):
    """The chunk pass fills only collectives without a count: --chunks on a module that --emit mlir wrote (every
    collective decomposed, its chunks recorded) changed nothing and exited 0."""
    module = tmp_path / "m.mlir"
    assert cli(capsys, *RING4, "--chunks", "4", "--emit", "mlir", "-o", module)[0] == 0
    refused(capsys, module, "--chunks", "8", match="--chunks 8: every collective of")
    code, out, err = cli(capsys, module, "--json")
    assert code == 0 and json.loads(out)["collectives"][0]["chunks"] == 4, err
    fresh = tmp_path / "fresh.mlir"  # a hand-written collective without a count still takes --chunks
    fresh.write_text('module attributes {comm.topology = {name = "Ring(4)", dims = [{block = "Ring", size = 4, '
                     'bandwidth_gbps = 50.0, latency_ns = 500.0, links = 1}]}} {\n'
                     '  %0 = "comm.all_reduce"() {bytes = 1048576 : i64, dims = array<i64: 0>, name = "g"} : '
                     '() -> !comm.token\n}\n')
    code, out, err = cli(capsys, fresh, "--chunks", "8", "--json")
    assert code == 0 and json.loads(out)["collectives"][0]["chunks"] == 8, err
