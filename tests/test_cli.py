"""The command line: reports, JSON, IR and table output, and one-line errors with exit status 2."""
import json
import os
import subprocess

import pytest

from astra_compile.compiler.main import main
from helpers import cli, refused

SWITCH3 = ["--topology", "Switch(8)_Switch(8)_Switch(8)", "--bandwidth", "50,50,50", "--latency", "1,1,1"]
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "all_reduce_3d_switch.mlir")


def test_issue_command_json(capsys):
    code, out, err = cli(capsys, "--collective", "all_reduce", "--size", "1GB", *SWITCH3,
                         "--algorithm", "halving_doubling", "--chunks", "64", "--json",
                         "--scheduler", "baseline", "--intra", "fifo")
    assert code == 0, err
    r = json.loads(out)
    for key in ("total_time_us", "ideal_time_us", "bw_utilization", "per_dim_bytes", "npus"):
        assert key in r
    assert r["npus"] == 512
    assert r["per_dim_bytes"] == [1792 * 2**20, 224 * 2**20, 28 * 2**20]
    assert r["total_time_us"] == pytest.approx(35008.129, rel=0.01)


def test_text_report_mentions_the_figures(capsys):
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "1GB", *SWITCH3, "--chunks", "64",
                       "--scheduler", "baseline", "--intra", "fifo")
    assert code == 0
    assert "total time" in out and "ideal time      13307.292 us" in out and "bw utilization  38.02 %" in out
    assert "1792.00 MB" in out and "halving_doubling" in out   # Switch's default algorithm


def test_default_algorithm_per_block(capsys):
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)_FC(2)_Switch(8)",
                       "--json")
    r = json.loads(out)
    assert [d["algorithms"] for d in r["dims"]] == [["ring"], ["direct"], ["halving_doubling"]]


def test_mlir_input_and_emit(capsys, tmp_path):
    code, out, _ = cli(capsys, EXAMPLE, "--json")
    assert code == 0 and json.loads(out)["npus"] == 512
    target = tmp_path / "out.mlir"
    code, out, _ = cli(capsys, EXAMPLE, "--emit", "mlir", "-o", str(target))
    text = target.read_text()
    assert text.count('"comm.phase"') == 6 and 'algorithm = "halving_doubling"' in text
    # the emitted module is valid input again and gives the same result
    code, out2, _ = cli(capsys, str(target), "--json", "--pass-pipeline", "")
    code, out1, _ = cli(capsys, EXAMPLE, "--json")
    assert json.loads(out2)["total_time_us"] == json.loads(out1)["total_time_us"]


def test_print_ir_after_all(capfd):
    code = main(["--collective", "all_to_all", "--size", "64KB", "--topology", "4x4_torus", "--emit", "mlir",
                 "--print-ir-after-all"])
    err = capfd.readouterr().err  # MLIR's pass manager prints (from C++, to the process's stderr)
    assert code == 0
    headers = [l for l in err.splitlines() if l.startswith("// -----// IR Dump After")]
    # each pass named with its spec: every option resolved, defaults included
    assert headers == [f"// -----// IR Dump After {p.split('{')[0]}: {p} //----- //" for p in
                       ("decompose-all-reduce{all-reduce=hierarchical}", "chunk{chunks=1}", "hierarchical-decompose",
                        "select-algorithm", "optimal-balance{latency=true active=1 time-limit=5.0}",
                        "choose-schedule{latency=true active=1}")]
    from astra_compile.compiler.driver.driver import SCHEDULERS
    from astra_compile.passes import PassManager, parse_pipeline
    from astra_compile.passes.base import ir_dump_header
    assert headers == [ir_dump_header(p) for p in PassManager(parse_pipeline(SCHEDULERS["optimal"])).passes]


def test_tables_for_one_npu(capsys):
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "8KB", "--topology", "Ring(4)",
                       "--emit", "tables", "--npu", "1")
    lines = out.splitlines()
    assert lines[0].startswith("# accelerator 1 of 4")
    assert lines[1].split() == ["step", "op", "flow", "coll", "stage", "dim", "peer", "lane", "hops", "offset",
                                "bytes", "dep"]
    # bidirectional ring on Ring(4): per step one send each way (2 rows) and two receives, 3 RS + 3 AG steps
    assert len(lines) - 2 == 2 * 3 * 4


def test_tables_directory_roundtrip(capsys, tmp_path):
    out_dir = tmp_path / "tables"
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "64KB", "--topology", "Ring(2)_Switch(4)",
                       "--chunks", "2", "--emit", "tables", "-o", str(out_dir))
    assert code == 0
    assert sorted(os.listdir(out_dir)) == ["meta.json"] + sorted(f"npu_{i}.csv" for i in range(8))
    code, out, _ = cli(capsys, str(out_dir), "--json")
    from_dir = json.loads(out)["total_time_us"]
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "64KB", "--topology", "Ring(2)_Switch(4)",
                       "--chunks", "2", "--json")
    assert from_dir == pytest.approx(json.loads(out)["total_time_us"], rel=1e-12)
    # the written tables verify on their own
    from astra_compile.runtime.tables import DirSchedule
    from astra_compile.runtime.verifier import verify
    verify(DirSchedule(str(out_dir)))
    code, out, _ = cli(capsys, str(out_dir), "--verify")
    assert code == 0 and "verified: every NPU's buffer" in out
    # a table edited to send the wrong part of its buffer still runs, but --verify catches it: tables given as input
    # are the user's, so that is bad input (exit 2), not a compiler defect
    path = out_dir / "npu_1.csv"
    lines = path.read_text().splitlines()
    head = lines[0].split(",")
    op, offset = head.index("op"), head.index("offset")
    row = next(i for i, line in enumerate(lines[1:], 1)
               if line.split(",")[op] == "0" and int(line.split(",")[offset]) > 0)
    cells = lines[row].split(",")
    cells[offset] = "0"
    lines[row] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    code = main([str(out_dir), "--verify"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"astra-compile: error: {out_dir}: the tables do not implement their collectives")


def test_tables_cut_into_too_many_pieces_to_verify_are_refused(capsys, tmp_path):
    """A send read one byte off its receive's offset shifts every piece by a byte: the cuts that map one range onto
    the other go on down the range, a cut or two a round, until every byte is a piece (64 MB: 16 M pieces and
    millions of rounds, which ran for hours). Refused in one line, naming the directory, in seconds."""
    out_dir = tmp_path / "tables"
    assert cli(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "Ring(4)", "--emit", "tables",
               "-o", str(out_dir))[0] == 0
    path = out_dir / "npu_1.csv"
    lines = path.read_text().splitlines()
    head = lines[0].split(",")
    op, offset = head.index("op"), head.index("offset")
    row = next(i for i, line in enumerate(lines[1:], 1) if line.split(",")[op] == "0")
    cells = lines[row].split(",")
    cells[offset] = str(int(cells[offset]) + 1)
    lines[row] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    code = main([str(out_dir), "--verify"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"astra-compile: error: {out_dir}: buffer all_reduce: its rows move bytes between offsets "
                          "that do not line up")
    assert err.rstrip().endswith("more than 16777216 pieces or 4096 rounds of cuts); too many to verify")


def test_verify_flag(capsys):
    code, out, _ = cli(capsys, "--collective", "all_gather", "--size", "24KB", "--topology", "Ring(3)_FC(2)",
                       "--algorithm", "double_binary_tree", "--chunks", "2", "--verify")
    assert code == 0 and "verified" in out


BAD = [
    (["--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--ports", "2"],
     "--ports applies to --algorithm multitree"),
    (["--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--algorithm", "multitree",
      "--ports", "0"], "--ports must be a positive integer"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Rign(8)"], "unknown topology block"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8"], "Ring(8"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)_Ring(8)", "--bandwidth", "1,2,3"],
     "3"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)", "--bandwidth", "0"], "bandwidth"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)", "--bandwidth", "-5"], "bandwidth"),
    (["--collective", "all_reduce", "--size", "0", "--topology", "Ring(8)"], "size"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)", "--chunks", "0"], "chunks"),
    (["--collective", "all_reduce", "--size", "100B", "--topology", "Ring(8)", "--chunks", "64"], "too small"),
    (["--collective", "all_to_all", "--size", "1000B", "--topology", "Ring(8)", "--chunks", "2"], "multiple of 16"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(6)", "--algorithm", "halving_doubling"],
     "power-of-two"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)", "--algorithm", "magic"],
     "unknown algorithm"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)_Ring(2)", "--algorithm", "ring,ring,ring"],
     "3 algorithms for 2 dimensions"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)", "--pass-pipeline", "nope"],
     "unknown pass"),
    (["--collective", "all_reduce", "--size", "1GB", "--topology", "Ring(8)", "--dims", "0,3"], "dims"),
    (["missing.mlir"], "cannot read"),
    (["--collective", "all_reduce", "--size", "1GB"], "--topology"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("astra-compile: error: ")
    assert needle in err
    assert "Traceback" not in err


def test_bad_mlir_one_line(capsys, tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text('%0 = "comm.all_reduce"() {bytes = 8 : i64} : () -> !comm.token\n')
    code, _, err = cli(capsys, str(src), "--topology", "Ring(4)")
    assert code == 2 and err.count("\n") == 1
    assert f"{src}:1:6: 'comm.all_reduce' op attribute" in err and "is expected but not provided" in err


def test_failed_write_leaves_no_file(capsys, tmp_path):
    out_dir = tmp_path / "tables"
    code, _, err = cli(capsys, "--collective", "all_reduce", "--size", "100B", "--topology", "Ring(8)",
                       "--chunks", "64", "--emit", "tables", "-o", str(out_dir))
    assert code == 2 and not out_dir.exists() and os.listdir(tmp_path) == []


def test_console_script_exit_status():
    # the installed entry point, as a user runs it
    proc = subprocess.run(["astra-compile", "--collective", "all_reduce", "--size", "1GB", "--topology", "x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_default_scheduler_is_optimal_with_scf(capsys):
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "1GB", *SWITCH3, "--chunks", "64", "--json")
    r = json.loads(out)
    assert (r["scheduler"], r["intra"]) == ("optimal", "scf")
    assert r["total_time_us"] <= r["themis_time_us"]       # never worse than Themis
    assert r["gap_to_ideal_pct"] == pytest.approx(100 * (r["total_time_us"] / r["ideal_time_us"] - 1))
    assert r["bw_utilization"] >= 0.975


def test_compare_prints_each_scheduler(capsys):
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "1GB", *SWITCH3, "--chunks", "64", "--compare")
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["scheduler", "intra", "total", "us", "ideal"]
    assert [l.split()[:2] for l in lines[1:]] == [["baseline", "fifo"], ["themis", "scf"], ["optimal", "scf"]]
    base, themis, optimal = (float(l.split()[2]) for l in lines[1:])
    assert base == pytest.approx(35008.129, rel=0.01) and themis < 0.4 * base and optimal <= themis


@pytest.mark.parametrize("name", ["all_reduce_3d_switch.mlir", "themis_4d.mlir", "torus_two_collectives.mlir"])
def test_bundled_examples_compile(capsys, name):
    path = os.path.join(os.path.dirname(__file__), "..", "examples", name)
    code, out, err = cli(capsys, path, "--json", "--scheduler", "themis")
    assert code == 0, err
    r = json.loads(out)
    assert r["total_time_us"] >= r["ideal_time_us"] > 0


def test_list_passes_lists_every_pass_alone(capsys):
    code, out, _ = cli(capsys, "--list-passes")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and "allocate-trees" in names and "choose-schedule" in names and len(names) == 12
    assert "baseline-order" in names
    assert main(["--list-passes", "--chunks", "4"]) == 2  # nothing else goes with it


def test_an_all_to_all_on_a_switch_runs_direct_by_default(capsys):
    """As ASTRA-sim: every member's part goes once over the uplink, where halving-doubling forwards half the buffer
    log2(k) times."""
    code, out, _ = cli(capsys, "--collective", "all_to_all", "--size", "64MB", "--topology", "Switch(8)", "--json")
    direct = json.loads(out)
    code, out, _ = cli(capsys, "--collective", "all_to_all", "--size", "64MB", "--topology", "Switch(8)",
                       "--algorithm", "halving_doubling", "--json")
    hd = json.loads(out)
    assert [d["algorithms"] for d in direct["dims"]] == [["direct"]]
    assert direct["total_time_us"] < hd["total_time_us"] / 2
