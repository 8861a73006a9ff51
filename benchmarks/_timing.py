"""Shared by the benchmark scripts: the median wall time of several runs (the machine is shared and noisy)."""
from __future__ import annotations

import statistics
import time


def timed(fn, runs: int):
    """(fn's last result, median wall seconds over `runs` calls)."""
    walls, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - start)
    return out, statistics.median(walls)
