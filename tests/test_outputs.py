"""Outputs that are not plain files (issue 31): a device, a named pipe or a descriptor is written into and never
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
        done = subprocess.run([sys.executable, "-m", "astra_compile.cli", *RING4, "--timeline", "/dev/stdout"],
                              stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "stdout.txt").read_text()
    trace, end = json.JSONDecoder().raw_decode(text)
    assert trace["traceEvents"]
    assert "total time" in text[end:] and "traceEvents" not in text[end:]
