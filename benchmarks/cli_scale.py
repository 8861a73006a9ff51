"""Wall time and peak memory of the astra-compile CLI, start-up included (target: each case under 1 s).

Runs every case several times as a fresh process and prints the median wall time and the peak resident memory
(from the child's rusage). The machine is shared: compare medians, not single runs. With several `--exe` (e.g. an
install of an earlier commit beside this one) the runs of all executables interleave, so they share the machine's
load and their ratio is measured in one run.

    python benchmarks/cli_scale.py [--runs 5] [--exe PATH ...]
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import time

BASELINE = ["--scheduler", "baseline", "--intra", "fifo"]
CASES = [
    ("1GB all-reduce, Switch(8)_Switch(8)_Switch(8), 512 NPUs, 64 chunks, baseline",
     ["--collective", "all_reduce", "--size", "1GB", "--topology", "Switch(8)_Switch(8)_Switch(8)",
      "--bandwidth", "50,50,50", "--latency", "1,1,1", "--chunks", "64", *BASELINE]),
    ("1GB all-reduce, 16x16x16_torus, 4096 NPUs, 64 chunks, baseline",
     ["--collective", "all_reduce", "--size", "1GB", "--topology", "16x16x16_torus", "--chunks", "64", *BASELINE]),
    ("1GB all-reduce, Switch(8)_Switch(8)_Switch(8), 512 NPUs, 64 chunks, themis + scf",
     ["--collective", "all_reduce", "--size", "1GB", "--topology", "Switch(8)_Switch(8)_Switch(8)",
      "--bandwidth", "50,50,50", "--latency", "1,1,1", "--chunks", "64", "--scheduler", "themis"]),
    ("1GB all-reduce, 16x16x16_torus, 4096 NPUs, 64 chunks, themis + scf",
     ["--collective", "all_reduce", "--size", "1GB", "--topology", "16x16x16_torus", "--chunks", "64",
      "--scheduler", "themis"]),
    ("1GB all-reduce, 16x16x16_torus, 4096 NPUs, 64 chunks, defaults (optimal + scf)",
     ["--collective", "all_reduce", "--size", "1GB", "--topology", "16x16x16_torus", "--chunks", "64"]),
]


def run_once(argv: list[str], exe: str, timeout: float | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one run; wall is inf when it was stopped after `timeout` seconds."""
    start = time.perf_counter()
    report = [] if "--emit" in argv else ["--json"]   # a report as JSON; a case that writes files writes them
    proc = subprocess.Popen([exe, *argv, *report], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if timeout is None:
        _, status, usage = os.wait4(proc.pid, 0)  # blocking: the end is seen at once
    else:
        while True:  # polled, so a run past the timeout can be stopped (the child's rusage needs wait4)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                return math.inf, usage.ru_maxrss / 1024
            time.sleep(0.002)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(proc.stderr.read().decode().strip().splitlines()[-1])
    return wall, usage.ru_maxrss / 1024  # MB (Linux reports KB)


def table(cases, runs: int, exes: list[str], timeout: float | None = None, width: int = 80) -> None:
    """Print median wall time and peak memory of each case for each executable, runs interleaved."""
    label = max(len(e) for e in exes) if len(exes) > 1 else 0
    print(f"{'case':{width}s} {'exe':{label}s} {'median wall s':>13s} {'min':>7s} {'max':>7s} {'peak RSS MB':>11s}")
    for name, argv in cases:
        results = {e: [] for e in exes}
        try:
            for _ in range(runs):
                for e in exes:  # interleaved: every executable sees the same load
                    results[e].append(run_once(argv, e, timeout))
        except RuntimeError as failed:  # e.g. refused by the memory estimate: say so and go on
            print(f"{name:{width}s} {failed}")
            continue
        for e in exes:
            walls, mems = zip(*results[e])
            print(f"{name:{width}s} {e if label else '':{label}s} {statistics.median(walls):13.3f} {min(walls):7.3f} "
                  f"{max(walls):7.3f} {max(mems):11.1f}")
        if len(exes) > 1:
            base = statistics.median(w for w, _ in results[exes[0]])
            print(f"{'':{width}s} {'ratio to first':{label}s} " + "  ".join(
                f"{statistics.median(w for w, _ in results[e]) / base:.3f}" for e in exes[1:]))


def arguments(description: str, runs: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--exe", action="append", help="astra-compile executable(s) to time (default: the one on PATH)")
    ap.add_argument("--timeout", type=float, help="stop a run after this many seconds (its time shows as inf)")
    args = ap.parse_args()
    args.exe = args.exe or [shutil.which("astra-compile")]
    if not all(args.exe):
        raise SystemExit("astra-compile is not installed: pip install . first")
    return args


def main() -> None:
    args = arguments(__doc__.splitlines()[0], 5)
    table(CASES, args.runs, args.exe, args.timeout)


if __name__ == "__main__":
    main()
