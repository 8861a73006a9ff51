"""Wall time and peak memory of the astra-compile CLI, start-up included (issue: each case under 1 s).

Runs every case several times as a fresh process and prints the median wall time and the peak resident memory
(from the child's rusage). The machine is shared: compare medians, not single runs.

    python benchmarks/cli_scale.py [--runs 5]
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


def run_once(argv: list[str]) -> tuple[float, float]:
    exe = shutil.which("astra-compile")
    if exe is None:
        raise SystemExit("astra-compile is not installed: pip install . first")
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
    args = ap.parse_args()
    print(f"{'case':80s} {'median wall s':>13s} {'min':>7s} {'max':>7s} {'peak RSS MB':>11s}")
    for name, argv in CASES:
        walls, mems = zip(*(run_once(argv) for _ in range(args.runs)))
        print(f"{name:80s} {statistics.median(walls):13.3f} {min(walls):7.3f} {max(walls):7.3f} "
              f"{max(mems):11.1f}")


if __name__ == "__main__":
    main()
