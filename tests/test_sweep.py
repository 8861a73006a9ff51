"""`astra-compile sweep`: sweep files expanded and checked before anything runs, points run through the CLI's own
code path, results appended point by point and resumed after kill -9, reuse of captures and compilations, Ray
against the local pool point for point, plots."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import jsonschema
import pandas as pd
import pytest

from astra_compile.network.errors import UserError
from astra_compile.compiler.sweep import spec
from helpers import cli

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
TINY_MODEL = """
import torch
def build_model():
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
def example_inputs():
    return torch.randn(8, 256)
"""
SMALL = {"base": {"collective": "all_reduce", "size": "64MB", "topology": "Switch(4)_Switch(4)", "latency": 1},
         "axes": {"scheduler": ["baseline", "themis", "optimal"], "chunks": [4, 8, 16]}}


def write_sweep(tmp_path, data, name="sweep.yml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))  # JSON is YAML
    return path


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "astra_compile", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def test_axes_expand_in_order_with_ranges_and_zips():
    s = spec.parse({"base": {"collective": "all_reduce"},
                    "axes": {"size": {"from": "64MB", "to": "256MB", "times": 2},
                             "zip": {"topology": ["4x4_torus", "16_ring"], "bandwidth": ["50,50", 100]},
                             "chunks": {"from": 4, "to": 12, "step": 4}}}, "s.yml")
    assert s.axes == ("size", "topology", "bandwidth", "chunks")
    assert len(s.points) == 3 * 2 * 3
    assert [p.axes for p in s.points[:4]] == [
        {"size": "64MB", "topology": "4x4_torus", "bandwidth": "50,50", "chunks": 4},
        {"size": "64MB", "topology": "4x4_torus", "bandwidth": "50,50", "chunks": 8},
        {"size": "64MB", "topology": "4x4_torus", "bandwidth": "50,50", "chunks": 12},
        {"size": "64MB", "topology": "16_ring", "bandwidth": 100, "chunks": 4}]
    assert s.points[-1].axes["size"] == "256MB" and s.points[-1].options["collective"] == "all_reduce"
    assert [p.index for p in s.points] == list(range(18))
    floats = spec.parse({"axes": {"peak-tflops": {"from": 0.5, "to": 1.5, "step": 0.5}}}, "s.yml")
    assert [p.axes["peak-tflops"] for p in floats.points] == [0.5, 1.0, 1.5]


def small_without(key, axes):
    return {"base": {k: v for k, v in SMALL["base"].items() if k != key}, "axes": axes}


BAD = [
    ("axes: [unclosed", "malformed YAML at line 1"),
    ("- a list", "a sweep file is a mapping"),
    (json.dumps({"base": {}, "axes": {"colour": [1]}}), "unknown option 'colour'"),
    (json.dumps({**SMALL, "axes": {"chunks": []}}), "axis 'chunks' is empty"),
    (json.dumps({**SMALL, "axes": {"scheduler": ["baseline", "fastest"]}}), "invalid choice: 'fastest'"),
    (json.dumps({**SMALL, "axes": {"chunks": [4, 0]}}), "point 1 (chunks=0): --chunks must be a positive"),
    (json.dumps(small_without("topology", {"topology": ["4x4_torus", "4x4_blob"]})), "point 1 (topology=4x4_blob)"),
    (json.dumps(small_without("size", {"size": ["1GB", "-1MB"]})), "--size: size must be positive"),
    (json.dumps({**SMALL, "axes": {"emit": ["tables"]}}), "'emit' does not go in a sweep"),
    (json.dumps({**SMALL, "axes": {"zip": {"chunks": [1, 2], "intra": ["fifo"]}}}), "equal lengths"),
    (json.dumps({**SMALL, "axes": {"size": ["1GB"]}}), "'size' is both in base and an axis"),
    (json.dumps({**SMALL, "axes": {"chunks": {"from": 1, "to": 10**9, "step": 1}}}), "more than 100000"),
    (json.dumps({**SMALL, "axes": {"verify": ["yes"]}}), "give true or false"),
    (json.dumps({**SMALL, "extra": 1}), "unknown key 'extra'"),
    (json.dumps(small_without("size", {"chunks": [1]})), "point 0 (chunks=1): --size is required"),
    (json.dumps({**SMALL, "axes": {"switching": ["store-and-forward"]}}), "--switching applies to --backend "
                                                                            "congestion"),
]


@pytest.mark.parametrize("text,match", BAD)
def test_bad_sweep_file_is_refused_before_any_point_runs(tmp_path, capsys, text, match):
    path = write_sweep(tmp_path, text)
    out = tmp_path / "r.csv"
    code, stdout, err = cli(capsys, "sweep", path, "-o", out)
    assert code == 2 and err.count("\n") == 1 and err.startswith("astra-compile: error: "), err
    assert match in err, err
    assert not out.exists()


def test_sweep_options_are_checked(tmp_path, capsys):
    path = write_sweep(tmp_path, SMALL)
    for argv, match in ((["-o", tmp_path / "r.parquet"], "name a .csv file"), ([], "-o results.csv is required"),
                        (["-o", tmp_path / "r.csv", "--workers", "0"], "--workers must be 1..1024"),
                        (["-o", tmp_path / "r.csv", "--x", "chunks"], "--x does not apply to a sweep run")):
        code, _, err = cli(capsys, "sweep", path, *argv)
        assert code == 2 and match in err and err.count("\n") == 1, err
    code, _, err = cli(capsys, "sweep", tmp_path / "missing.yml", "-o", tmp_path / "r.csv")
    assert code == 2 and "cannot read sweep file" in err


def test_each_row_is_the_points_json_report(tmp_path, capsys):
    path = write_sweep(tmp_path, SMALL)
    out = tmp_path / "r.csv"
    code, stdout, err = cli(capsys, "sweep", path, "-o", out, "--workers", "2")
    assert code == 0, err
    assert "9 points, 9 ok, 0 failed" in stdout
    df = pd.read_csv(out).sort_values("point")
    assert list(df.point) == list(range(9)) and set(df.status) == {"ok"}
    # the row of (optimal, 8 chunks) is what the same command line prints with --json
    code, single, _ = cli(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology",
                          "Switch(4)_Switch(4)", "--latency", "1", "--scheduler", "optimal", "--chunks", "8", "--json")
    report = json.loads(single)
    row = df[(df.scheduler == "optimal") & (df.chunks == 8)].iloc[0]
    assert row.total_time_us == report["total_time_us"] and row.bw_utilization == report["bw_utilization"]
    assert json.loads(row.per_dim_bytes) == report["per_dim_bytes"]
    assert row.report_scheduler == "optimal" and row.topology == "Switch(4)_Switch(4)"
    # all points already in the file: nothing runs again
    code, stdout, _ = cli(capsys, "sweep", path, "-o", out)
    assert code == 0 and "(9 already in" in stdout and "ran 0" in stdout
    assert len(rows(out)) == 9


def test_a_point_that_fails_at_run_time_is_recorded_and_the_others_run(tmp_path, capsys):
    data = {"base": {"collective": "all_reduce", "size": "1GB", "topology": "4x4_torus"},
            "axes": {"max-memory": ["1KB", "8GB"]}}
    out = tmp_path / "r.csv"
    code, stdout, err = cli(capsys, "sweep", write_sweep(tmp_path, data), "-o", out, "--workers", "1")
    assert code == 1
    assert "point 0 (max-memory=1KB) failed: this run would need about" in err
    by_point = {r["point"]: r for r in rows(out)}
    assert by_point["0"]["status"] == "error" and "more than 1KB (--max-memory)" in by_point["0"]["error"]
    assert by_point["1"]["status"] == "ok" and float(by_point["1"]["total_time_us"]) > 0
    assert by_point["0"]["total_time_us"] == ""


def test_a_point_that_kills_its_worker_fails_alone(tmp_path, capsys):
    (tmp_path / "crash.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    (tmp_path / "tiny.py").write_text(TINY_MODEL)
    data = {"base": {"topology": "4_ring"}, "axes": {"input": ["tiny.py", "crash.py", "tiny.py"]}}
    out = tmp_path / "r.csv"
    code, _, err = cli(capsys, "sweep", write_sweep(tmp_path, data), "-o", out, "--workers", "2")
    assert code == 1, err
    by_point = {r["point"]: r for r in rows(out)}
    assert sorted(by_point) == ["0", "1", "2"]
    assert by_point["1"]["status"] == "error" and "worker process died" in by_point["1"]["error"]
    assert by_point["0"]["status"] == by_point["2"]["status"] == "ok"
    assert by_point["0"]["total_time_us"] == by_point["2"]["total_time_us"]


def test_kill_9_then_resume_keeps_every_point_exactly_once(tmp_path):
    data = {"base": {"collective": "all_reduce", "topology": "Ring_Switch_Switch_Switch:4x4x8x8",
                     "bandwidth": "250,200,100,50", "latency": "20,700,700,1700", "scheduler": "optimal"},
            "axes": {"size": {"from": "1MB", "to": "1GB", "times": 2}, "chunks": [16, 32, 64]}}
    path = write_sweep(tmp_path, data)
    out = tmp_path / "r.csv"
    proc = subprocess.Popen([sys.executable, "-m", "astra_compile", "sweep", str(path), "-o", str(out),
                             "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and (not out.exists() or len(rows(out)) < 5):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, mid-sweep
    proc.wait()
    before = rows(out)
    assert 5 <= len(before) < 33, len(before)
    with open(out, "a") as f:  # a line cut short as a crash inside a write would leave it
        f.write("999,1MB,16,ok,,0.1,Ring")
    done = run_cli("sweep", path, "-o", out, "--workers", "2")
    assert done.returncode == 0, done.stderr
    after = rows(out)
    assert sorted(int(r["point"]) for r in after) == list(range(33))   # every point, exactly once
    assert after[:len(before)] == before                                 # the first run's lines kept as they were
    assert f"({len(before)} already in" in done.stdout
    fresh = tmp_path / "fresh.csv"
    assert run_cli("sweep", path, "-o", fresh, "--workers", "2").returncode == 0
    key = lambda rs: sorted((r["point"], r["total_time_us"]) for r in rs)   # noqa: E731
    assert key(after) == key(rows(fresh))


def test_ctrl_c_keeps_the_finished_points_and_says_how_to_resume(tmp_path):
    data = {"base": {"collective": "all_reduce", "topology": "Ring_Switch_Switch_Switch:4x4x8x8", "chunks": 64},
            "axes": {"size": {"from": "1MB", "to": "1GB", "times": 2}, "scheduler": ["themis", "optimal"]}}
    out = tmp_path / "r.csv"
    proc = subprocess.Popen([sys.executable, "-m", "astra_compile", "sweep", str(write_sweep(tmp_path, data)),
                             "-o", str(out), "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and (not out.exists() or len(rows(out)) < 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)   # as Ctrl-C does: the sweep and its workers
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    # one line, never a traceback (not even an idle worker's KeyboardInterrupt)
    assert err.count("\n") == 1 and err.endswith("the same command resumes\n"), err
    kept = rows(out)
    assert 2 <= len(kept) < 22 and len({r["point"] for r in kept}) == len(kept)


def test_a_results_file_of_another_sweep_is_never_touched(tmp_path, capsys):
    out = tmp_path / "r.csv"
    out.write_text("a,b\n1,2\n")
    code, _, err = cli(capsys, "sweep", write_sweep(tmp_path, SMALL), "-o", out)
    assert code == 2 and "other columns than this sweep's" in err
    assert out.read_text() == "a,b\n1,2\n"
    other = dict(SMALL, axes={"scheduler": ["themis", "baseline", "optimal"], "chunks": [4, 8, 16]})
    assert cli(capsys, "sweep", write_sweep(tmp_path, SMALL), "-o", tmp_path / "s.csv")[0] == 0
    code, _, err = cli(capsys, "sweep", write_sweep(tmp_path, other, "other.yml"), "-o", tmp_path / "s.csv")
    assert code == 2 and "the sweep file changed" in err


def test_reuse_captures_once_and_compiles_each_distinct_collective_once(tmp_path, capsys):
    (tmp_path / "tiny.py").write_text(TINY_MODEL)
    data = {"base": {"input": "tiny.py", "topology": "2x2_torus", "mesh": "dp=4"},
            "axes": {"peak-tflops": {"from": 10, "to": 200, "step": 10}}}
    path = write_sweep(tmp_path, data)
    code, stdout, err = cli(capsys, "sweep", path, "-o", tmp_path / "a.csv", "--workers", "1")
    assert code == 0, err
    code, single, _ = cli(capsys, tmp_path / "tiny.py", "--topology", "2x2_torus", "--mesh", "dp=4", "--json")
    report = json.loads(single)
    with open(_schema("workload_report.schema.json")) as f:
        jsonschema.validate(report, json.load(f))
    distinct = {(c["kind"], c["bytes"], tuple(c["dims"])) for c in report["collectives"]}
    assert len(distinct) >= 1
    assert f"captured 1 workload(s), compiled {len(distinct)} collective(s)" in stdout, stdout
    code, stdout, _ = cli(capsys, "sweep", path, "-o", tmp_path / "b.csv", "--workers", "1", "--no-cache")
    assert code == 0 and "captured" not in stdout
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    cols = [c for c in a.columns if c != "elapsed_s"]
    assert a.sort_values("point")[cols].reset_index(drop=True).equals(b.sort_values("point")[cols]
                                                                      .reset_index(drop=True))
    # on disk: a later sweep (another process) captures and compiles nothing
    cache = tmp_path / "cache"
    assert cli(capsys, "sweep", path, "-o", tmp_path / "c.csv", "--workers", "1", "--cache", cache)[0] == 0
    code, stdout, _ = cli(capsys, "sweep", path, "-o", tmp_path / "d.csv", "--workers", "1", "--cache", cache)
    assert code == 0 and "captured 0 workload(s), compiled 0 collective(s)" in stdout, stdout


def _schema(name):
    import astra_compile.compiler.report
    return os.path.join(os.path.dirname(astra_compile.compiler.report.__file__), name)


def test_ray_runs_the_same_points_as_the_local_pool(tmp_path, capsys):
    path = write_sweep(tmp_path, SMALL)
    assert cli(capsys, "sweep", path, "-o", tmp_path / "local.csv", "--workers", "2")[0] == 0
    code, stdout, err = cli(capsys, "sweep", path, "-o", tmp_path / "ray.csv", "--workers", "2", "--ray")
    assert code == 0, err
    assert "on Ray (local)" in stdout
    a, b = pd.read_csv(tmp_path / "local.csv"), pd.read_csv(tmp_path / "ray.csv")
    cols = [c for c in a.columns if c != "elapsed_s"]
    assert a.sort_values("point")[cols].reset_index(drop=True).equals(b.sort_values("point")[cols]
                                                                      .reset_index(drop=True))


def test_a_ray_cluster_that_cannot_be_reached_stops_the_sweep_before_any_output(tmp_path, capsys):
    path = write_sweep(tmp_path, SMALL)
    for address, match in (("127.0.0.1:1", "cannot reach a Ray cluster there"), ("nonsense", "expected the "
                                                                                            "cluster's head")):
        code, _, err = cli(capsys, "sweep", path, "-o", tmp_path / "r.csv", "--ray", address)
        assert code == 2 and match in err and err.count("\n") == 1, err
    assert not (tmp_path / "r.csv").exists()


def test_ray_missing_names_the_extra(tmp_path):
    path = write_sweep(tmp_path, SMALL)
    code = ("import sys; sys.modules['ray'] = None\nfrom astra_compile.compiler.main import main\n"
            f"sys.exit(main(['sweep', {str(path)!r}, '-o', {str(tmp_path / 'r.csv')!r}, '--ray']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'astra-compile[ray]'" in done.stderr


def test_plots(tmp_path, capsys):
    path = write_sweep(tmp_path, SMALL)
    out = tmp_path / "r.csv"
    assert cli(capsys, "sweep", path, "-o", out, "--workers", "2")[0] == 0
    for extra in (["--hue", "scheduler"], ["--where", "scheduler=themis"], ["--pareto", "--hue", "scheduler"]):
        png = tmp_path / "p.png"
        code, _, err = cli(capsys, "sweep", "--plot", out, "--x", "chunks", "--y", "total_time_us", *extra, "-o", png)
        assert code == 0, err
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        png.unlink()
    for extra, match in ((["--y", "nope"], "has no column 'nope'"), ([], "also differ in scheduler"),
                         (["--y", "topology"], "not numbers")):
        argv = ["--y", "total_time_us"] + extra if extra[:1] != ["--y"] else extra
        code, _, err = cli(capsys, "sweep", "--plot", out, "--x", "chunks", *argv, "-o", tmp_path / "p.png")
        assert code == 2 and match in err and err.count("\n") == 1, err
    assert not (tmp_path / "p.png").exists()


def test_examples_expand(tmp_path):
    themis = spec.load(os.path.join(EXAMPLES, "sweeps", "themis_topologies.yml"))
    assert len(themis.points) == 60 >= 48
    split = spec.load(os.path.join(EXAMPLES, "sweeps", "bandwidth_split.yml"))
    assert len(split.points) == 9
    assert {tuple(map(float, p.axes["bandwidth"].split(","))) for p in split.points} == \
        {(float(a), 100.0 - a) for a in range(10, 100, 10)}
    with pytest.raises(UserError):
        spec.parse({"axes": {"chunks": {"from": 4, "to": 1, "step": 1}}}, "s.yml")


def test_numpy_floats_are_written_as_numbers():
    # a --gpu report's exposed_comm_time_us and host_wait_us are numpy float64s: a float whose repr is
    # "np.float64(...)", which the results file wrote as such before
    import numpy as np
    from astra_compile.compiler.sweep.results import cell
    assert cell(np.float64(199.25)) == "199.25" and float(cell(np.float64(1 / 3))) == 1 / 3


def test_a_report_field_past_the_csv_default_limit_reads_back(tmp_path):
    # a large step's `collectives` JSON is more than csv's default 128 KiB field limit: resuming and plotting read
    # the file back and failed with "field larger than field limit (131072)"
    from astra_compile.compiler.sweep import plot
    from astra_compile.compiler.sweep.results import STATUS
    big = "x" * 300_000
    path = tmp_path / "r.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", *STATUS, "collectives"])
        w.writerow(["0", "ok", "", "1.0", big])
    rows, _ = plot.read_results(str(path))
    assert rows[0]["collectives"] == big


def test_the_closing_line_counts_only_this_sweeps_points(capsys):
    """A plan runs several sweeps into one results file: points of the others already there, failed ones too, are
    not this sweep's (a plan's round once said "1 points, -1 ok, 2 failed")."""
    from types import SimpleNamespace
    from astra_compile.compiler.sweep.command import run_points
    mine = spec.Sweep("r.csv", {}, ("x",), (spec.Point(0, {}, {"x": 1}), spec.Point(1, {}, {"x": 2})))
    args = SimpleNamespace(sweep="plan.py", output="r.csv", no_cache=True, cache=None, progress="off", ray=None)
    assert run_points(args, mine, None, {0: "ok", 1: "ok", 7: "error", 8: "error"}, None, 1) == 0
    assert "plan.py: 2 points, 2 ok, 0 failed (2 already in r.csv); ran 0" in capsys.readouterr().out
