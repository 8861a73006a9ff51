"""Wall time and peak memory of the astra-compile CLI, start-up included (issue: each case under 1 s).

Runs every case several times as a fresh process and prints the median wall time and the peak resident memory
(from the child's rusage). The machine is shared: compare medians, not single runs. With several `--exe` (e.g. an
install of an earlier commit beside this one) the runs of all executables interleave, so they share the machine's
load and their ratio is measured in one run.

    python benchmarks/cli_scale.py [--runs 5] [--exe PATH ...]
"""
from __future__ import annotations

import argparse
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


def run_once(argv: list[str], exe: str) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([exe, *argv, "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"astra-compile {' '.join(argv)} failed: {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024  # MB (Linux reports KB)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--exe", action="append", help="astra-compile executable(s) to time (default: the one on PATH)")
    args = ap.parse_args()
    exes = args.exe or [shutil.which("astra-compile")]
    if not all(exes):
        raise SystemExit("astra-compile is not installed: pip install . first")
    label = max(len(e) for e in exes) if len(exes) > 1 else 0
    print(f"{'case':80s} {'exe':{label}s} {'median wall s':>13s} {'min':>7s} {'max':>7s} {'peak RSS MB':>11s}")
    for name, argv in CASES:
        runs = {e: [] for e in exes}
        for _ in range(args.runs):
            for e in exes:  # interleaved: every executable sees the same load
                runs[e].append(run_once(argv, e))
        for e in exes:
            walls, mems = zip(*runs[e])
            print(f"{name:80s} {e if label else '':{label}s} {statistics.median(walls):13.3f} {min(walls):7.3f} "
                  f"{max(walls):7.3f} {max(mems):11.1f}")
        if len(exes) > 1:
            base = statistics.median(w for w, _ in runs[exes[0]])
            print(f"{'':80s} {'ratio to first':{label}s} " + "  ".join(
                f"{statistics.median(w for w, _ in runs[e]) / base:.3f}" for e in exes[1:]))


if __name__ == "__main__":
    main()
