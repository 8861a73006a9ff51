"""Shared by the benchmark scripts: the median wall time of several runs (the machine is shared and noisy), and the
wall time and peak memory of a command run as a fresh process."""
from __future__ import annotations

import os
import statistics
import subprocess
import time


def timed(fn, runs: int):
    """(fn's last result, median wall seconds over `runs` calls)."""
    walls, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - start)
    return out, statistics.median(walls)


def peak(argv: list) -> tuple[float, float]:
    """(wall seconds, peak resident bytes) of the command run as a fresh process (its rusage)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode()}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024
