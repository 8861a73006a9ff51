"""Outputs that are not plain files: a device, a named pipe or a descriptor is written into and never
renamed over, a symbolic link keeps pointing where it pointed, and a named pipe nobody reads is refused in one
line rather than waited on. Every output option is tried: -o FILE of each --emit, --timeline, --plot,
calibrate -o, sweep --plot -o, and the directory outputs (--emit tables / chakra -o).

The targets are made inside tmp_path (a link to /dev/null, a FIFO), never /dev/null itself: run as root on a
writer that renames, a test would replace the machine's /dev/null."""
import json
import os
import select
import stat
import subprocess
import sys
import threading
import time

import pytest

from helpers import cli, refused

RING4 = ["--collective", "all_reduce", "--size", "1MB", "--topology", "4_ring"]
DATA = os.path.join(os.path.dirname(__file__), "data", "nccl_tests")
RESULTS = "point,chunks,status,error,elapsed_s,total_time_us\n0,4,ok,,0.1,10.0\n1,8,ok,,0.1,8.0\n"

# output option -> (file name it takes, argv writing to TARGET, what the written file starts with)
FILE_OUTPUTS = {
    "--emit mlir -o": ("out.mlir", [*RING4, "--emit", "mlir", "-o", "TARGET"], b"module"),
    "--emit msccl-xml -o": ("out.xml", [*RING4, "--emit", "msccl-xml", "-o", "TARGET"], b"<algo"),
    "--timeline": ("out.json", [*RING4, "--timeline", "TARGET"], b'{"traceEvents"'),
    "--plot": ("out.png", [*RING4, "--backend", "congestion", "--plot", "TARGET"], b"\x89PNG"),
    "calibrate -o": ("net.yml", ["calibrate", os.path.join(DATA, "mi300x_8gpu_all_reduce_perf.log"), "--topology",
                                 "Switch(8)", "--min-size", "1MB", "-o", "TARGET"], b"#"),
    "sweep --plot -o": ("p.png", ["sweep", "--plot", "RESULTS", "--x", "chunks", "--y", "total_time_us", "-o",
                                  "TARGET"], b"\x89PNG"),
}
DIR_OUTPUTS = {
    "--emit tables -o": [*RING4, "--emit", "tables", "-o", "TARGET"],
    "--emit chakra -o": [*RING4, "--emit", "chakra", "-o", "TARGET"],
}


def _argv(argv, target, tmp_path):
    results = tmp_path / "results.csv"
    if not results.exists():
        results.write_text(RESULTS)
    return [str(target) if a == "TARGET" else str(results) if a == "RESULTS" else a for a in argv]


def _reader(fifo):
    """A reader of `fifo` from now on (opened here, so a writer finds it); its thread collects what a writer sends
    until the writer closes. (thread, list of chunks)"""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    got = []

    def read():
        deadline = time.time() + 60
        while time.time() < deadline:
            select.select([fd], [], [], 0.05)
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                got.append(chunk)
            elif got:   # the writer closed
                break
            else:       # no writer yet: a FIFO reads as ended until one opens it
                time.sleep(0.01)
        os.close(fd)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


@pytest.mark.parametrize("option", sorted(FILE_OUTPUTS))
def test_a_link_to_a_device_is_written_through_and_kept(capsys, tmp_path, option):
    name, argv, _ = FILE_OUTPUTS[option]
    link = tmp_path / name
    link.symlink_to(os.devnull)
    code, _, err = cli(capsys, *_argv(argv, link, tmp_path))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == os.devnull   # not replaced by a regular file
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("option", sorted(FILE_OUTPUTS))
def test_a_named_pipe_nobody_reads_is_refused_not_waited_on(capsys, tmp_path, option):
    name, argv, _ = FILE_OUTPUTS[option]
    fifo = tmp_path / name
    os.mkfifo(fifo)
    refused(capsys, *_argv(argv, fifo, tmp_path), match="a named pipe that nobody reads")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == sorted({name, "results.csv"})   # no temporary left beside it


@pytest.mark.parametrize("option", sorted(FILE_OUTPUTS))
def test_a_named_pipe_with_a_reader_gets_the_output(capsys, tmp_path, option):
    name, argv, head = FILE_OUTPUTS[option]
    fifo = tmp_path / name
    os.mkfifo(fifo)
    thread, got = _reader(fifo)
    code, _, err = cli(capsys, *_argv(argv, fifo, tmp_path))
    assert code == 0, err
    thread.join(60)
    assert b"".join(got).startswith(head), b"".join(got)[:40]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("option", sorted(FILE_OUTPUTS))
def test_a_link_to_a_file_replaces_the_file_and_keeps_the_link(capsys, tmp_path, option):
    name, argv, head = FILE_OUTPUTS[option]
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / name
    real.write_text("old")
    link = tmp_path / name
    link.symlink_to(os.path.join("real", name))   # relative: taken from the link's folder
    code, _, err = cli(capsys, *_argv(argv, link, tmp_path))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", name)
    assert real.read_bytes().startswith(head)
    assert os.listdir(tmp_path / "real") == [name]   # written beside the file, renamed over it


@pytest.mark.parametrize("option", sorted(DIR_OUTPUTS))
def test_a_directory_output_refuses_devices_and_pipes_and_follows_a_link(capsys, tmp_path, option):
    argv = DIR_OUTPUTS[option]
    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (link, fifo, "/dev/stdout"):
        refused(capsys, *_argv(argv, target, tmp_path), match="not a directory")
    assert os.readlink(link) == os.devnull and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    (tmp_path / "real").mkdir()
    out = tmp_path / "out"
    out.symlink_to("real")
    code, _, err = cli(capsys, *_argv(argv, out, tmp_path))
    assert code == 0, err
    assert out.is_symlink() and os.readlink(out) == "real" and os.listdir(tmp_path / "real")


def test_dev_stdout_is_written_in_order_with_the_report(tmp_path):
    """--timeline /dev/stdout with stdout redirected to a file: the trace, then the report, both whole (the trace
    written through the process's own descriptor, not renamed over the shell's file nor written at offset 0)."""
    with open(tmp_path / "stdout.txt", "w") as out:
        done = subprocess.run([sys.executable, "-m", "astra_compile", *RING4, "--timeline", "/dev/stdout"],
                              stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "stdout.txt").read_text()
    trace, end = json.JSONDecoder().raw_decode(text)
    assert trace["traceEvents"]
    assert "total time" in text[end:] and "traceEvents" not in text[end:]


# ---- the sweep's results file -----------------------------------------------------------------------------------

SWEEP = {"base": {"collective": "all_reduce", "size": "64MB", "topology": "Switch(4)_Switch(4)", "latency": 1},
         "axes": {"scheduler": ["baseline", "themis"], "chunks": [4, 8]}}


def _sweep_file(tmp_path, data=None):
    path = tmp_path / "sweep.yml"
    path.write_text(json.dumps(data or SWEEP))   # JSON is YAML
    return path


def _lines(path):
    with open(path) as f:
        return f.read().splitlines()


@pytest.mark.parametrize("content", [b"my notes\nsecond line, no newline at the end",
                                     b"a,b\n1,2",
                                     b"point,size\n0,1MB",
                                     b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary\n\x00 without an ending newline"])
@pytest.mark.parametrize("through_link", [False, True])
def test_a_users_own_file_as_sweep_output_is_refused_untouched(capsys, tmp_path, content, through_link):
    mine = tmp_path / "data.csv"
    mine.write_bytes(content)
    out = mine
    if through_link:
        out = tmp_path / "link.csv"
        out.symlink_to("data.csv")
    refused(capsys, "sweep", _sweep_file(tmp_path), "-o", out, "--workers", "1")
    assert mine.read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == sorted(["data.csv", "sweep.yml"] + ["link.csv"] * through_link)


def test_an_empty_file_is_taken_as_a_new_results_file(capsys, tmp_path):
    """What a sweep killed between making the file and writing its header leaves; an empty file holds nothing to
    lose."""
    out = tmp_path / "r.csv"
    out.write_bytes(b"")
    code, _, err = cli(capsys, "sweep", _sweep_file(tmp_path), "-o", out, "--workers", "1")
    assert code == 0, err
    assert len(_lines(out)) == 5 and _lines(out)[0].startswith("point,scheduler,chunks,status")


def test_a_sweep_output_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path):
    """A FIFO as the results file is refused, never opened for reading (which waits for a writer that never comes)."""
    fifo = tmp_path / "r.csv"
    os.mkfifo(fifo)
    null = tmp_path / "null.csv"
    null.symlink_to(os.devnull)
    for out in (fifo, null):
        done = subprocess.run([sys.executable, "-m", "astra_compile", "sweep", str(_sweep_file(tmp_path)), "-o",
                               str(out), "--workers", "1"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "not a regular file" in done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.readlink(null) == os.devnull


def test_a_second_sweep_on_the_same_output_is_refused_while_the_first_runs(capsys, tmp_path):
    path = _sweep_file(tmp_path, dict(SWEEP, axes={"scheduler": ["baseline", "themis"], "chunks": [4, 8, 16, 32]}))
    out = tmp_path / "r.csv"
    first = subprocess.Popen([sys.executable, "-m", "astra_compile", "sweep", str(path), "-o", str(out),
                              "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (out.exists() and out.read_text().endswith("\n")):
        time.sleep(0.02)
    assert first.poll() is None, "the first sweep ended before the second could try"
    refused(capsys, "sweep", path, "-o", out, "--workers", "1", match="another sweep is writing to it")
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    points = [line.split(",")[0] for line in _lines(out)[1:]]
    assert sorted(points, key=int) == [str(i) for i in range(8)]   # every point once: none twice
    # once the first has ended, the same command resumes (nothing left to run)
    code, text, err = cli(capsys, "sweep", path, "-o", out, "--workers", "1")
    assert code == 0 and "(8 already in" in text, err


@pytest.mark.parametrize("error", ["ENOSPC", "EROFS"])
def test_a_full_or_read_only_disk_ends_the_sweep_in_one_line_keeping_the_points(capsys, tmp_path, monkeypatch, error):
    import errno
    out = tmp_path / "r.csv"
    real_write = os.write

    def failing(fd, data):   # point 1's line: half of it reaches the disk, then the disk fails
        if bytes(data[:2]) == b"1,":
            real_write(fd, bytes(data[:len(data) // 2]))
            raise OSError(getattr(errno, error), os.strerror(getattr(errno, error)))
        return real_write(fd, data)
    monkeypatch.setattr(os, "write", failing)
    data = dict(SWEEP, axes={"chunks": [4, 8, 16]})
    err = refused(capsys, "sweep", _sweep_file(tmp_path, data), "-o", out, "--workers", "1",
                  match=os.strerror(getattr(errno, error)))
    assert "1 point(s) already in it are kept" in err
    lines = _lines(out)
    assert len(lines) == 2 and lines[1].startswith("0,") and out.read_text().endswith("\n")   # the cut line gone


def test_a_results_file_that_cannot_be_made_is_one_line(capsys, tmp_path, monkeypatch):
    import errno
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if os.path.dirname(os.fspath(path)) == str(tmp_path) and "r.csv" in os.path.basename(os.fspath(path)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", read_only)
    refused(capsys, "sweep", _sweep_file(tmp_path), "-o", tmp_path / "r.csv", "--workers", "1",
            match="Read-only file system")
    assert sorted(os.listdir(tmp_path)) == ["sweep.yml"]


# ---- the --cache directory ----------------------------------------------------------------------------------------

MODEL = """
import torch
def build_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
def example_inputs():
    return torch.randn(8, 64)
"""


@pytest.mark.parametrize("where", ["cache", "cache/workload", "cache/collective"])
def test_a_file_where_the_cache_wants_a_folder_is_one_line(capsys, tmp_path, where):
    (tmp_path / "model.py").write_text(MODEL)
    if where != "cache":
        (tmp_path / "cache").mkdir()
    path = tmp_path / where
    path.write_text("not a folder")
    refused(capsys, tmp_path / "model.py", "--topology", "4_ring", "--cache", tmp_path / "cache",
            match="is not a directory" if where != "cache" else "not a directory")
    refused(capsys, "sweep", _sweep_file(tmp_path), "-o", tmp_path / "r.csv", "--cache", tmp_path / "cache",
            match="not a directory")   # before any point runs: no results file
    assert not (tmp_path / "r.csv").exists() and path.read_text() == "not a folder"


def _forge(cache, kind, edit):
    """Edit every cached value of `kind` and give it a matching digest, as someone who read reuse.py could."""
    import hashlib
    for name in os.listdir(cache / kind):
        data = json.loads((cache / kind / name).read_text())
        edit(data["value"])
        data["digest"] = hashlib.sha256(json.dumps(data["value"], sort_keys=True).encode()).hexdigest()
        (cache / kind / name).write_text(json.dumps(data))


def _negative_time(v):
    v["time_ns"] = -5e9


def _nan_busy(v):
    v["dim_busy_ns"] = [float("nan")]


def _negative_flops(v):
    for op in v["programs"][0][1]:
        op["flops"] = -op["flops"] - 10**12


def _later_dependency(v):
    ops = v["programs"][0][1]
    ops[0]["deps"] = [len(ops) - 1]


@pytest.mark.parametrize("kind,edit", [("collective", _negative_time), ("collective", _nan_busy),
                                       ("workload", _negative_flops), ("workload", _later_dependency)])
def test_a_forged_cache_entry_is_made_again_not_used(capsys, tmp_path, kind, edit):
    (tmp_path / "model.py").write_text(MODEL)
    argv = [tmp_path / "model.py", "--topology", "4_ring", "--cache", tmp_path / "cache", "--json"]
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    honest = json.loads(out)
    _forge(tmp_path / "cache", kind, edit)
    forged = {n: (tmp_path / "cache" / kind / n).read_text() for n in os.listdir(tmp_path / "cache" / kind)}
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    assert json.loads(out) == honest   # the forged value ignored, made again
    assert all((tmp_path / "cache" / kind / n).read_text() != text for n, text in forged.items())   # and replaced
    code, out, err = cli(capsys, *argv)
    assert code == 0 and json.loads(out) == honest, err
