"""The resource estimate (compiler/driver/resources.py) against the measured peak memory of the same runs.

For each case: the estimate the CLI makes before the passes, the largest of the estimates it makes before the
lowering and the runtime, and the peak resident memory of the run (a fresh process, its rusage). The estimate is
meant to lie within a factor of two of the peak and above it for the large runs that matter.

    python benchmarks/resources.py [--exe astra-compile]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time

from astra_compile import algorithms

from astra_compile.compiler.driver import driver, resources
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology
from astra_compile.network.units import parse_size
from astra_compile.compiler.lowering.plans import plans_from_module

CASES = [  # topology, size, chunks, algorithm, scheduler, execution, backend
    ("4x4_torus", "1GB", 1000, None, "baseline", "auto", "analytical"),
    ("4x4_torus", "1GB", 4000, None, "baseline", "auto", "analytical"),
    ("4x4_torus", "1GiB", 4096, None, "baseline", "auto", "analytical"),
    ("256_ring", "1GB", 1, None, "baseline", "auto", "analytical"),
    ("1024_ring", "1GB", 1, None, "baseline", "auto", "analytical"),
    ("8x8_torus", "1GB", 1, "multitree", "baseline", "auto", "analytical"),
    ("8x8x8_torus", "1GB", 1, "multitree", "baseline", "auto", "analytical"),
    ("64x64x64_torus", "1GB", 1, None, "baseline", "auto", "analytical"),
    ("32_dgx1", "1GB", 1, None, "baseline", "auto", "analytical"),
    ("16x16_torus", "1GB", 8, "rank_ring", "baseline", "auto", "analytical"),
    ("Switch(8)_Switch(8)_Switch(8)", "1GB", 64, None, "baseline", "full", "analytical"),
    ("Switch(8)_Switch(8)_Switch(8)", "1GB", 64, None, "baseline", "full", "congestion"),
    ("8x8x8_torus", "1GB", 64, None, "baseline", "full", "congestion"),
    ("16x16x16_torus", "1GB", 64, None, "baseline", "full", "congestion"),
]


def estimates(topo_text: str, size: str, chunks: int, algorithm: str | None, scheduler: str, execution: str,
              backend: str):
    topology = parse_topology(topo_text)
    ctx = comm.new_context()
    module = driver.build_module(ctx, topology, "all_reduce", parse_size(size))
    defaults = {"chunks": chunks, **({"algorithm": algorithm} if algorithm else {})}
    before = resources.request(topology, module, algorithm, chunks, execution, backend)
    pipeline = driver.SCHEDULERS[scheduler]
    if algorithm and algorithms.get(algorithm).scope != algorithms.DIMENSION:  # as driver.compile_schedule
        alg = algorithms.get(algorithm)
        pipeline = driver.FLAT_PIPELINE.format(alg.phase_name) + (f",{alg.planned_by}" if alg.planned_by else "")
    driver.run_passes(module, topology, pipeline, defaults)
    plans = plans_from_module(module)
    lowering = resources.templates(topology, plans)
    schedule = driver.Schedule(topology, plans)
    symmetric = execution == "symmetric" or (execution == "auto" and schedule.meta.symmetric)
    runtime = resources.tables(topology, plans, symmetric, backend)
    return before.bytes, max(lowering.bytes, runtime.bytes)


def measure(exe: str, topo_text, size, chunks, algorithm, scheduler, execution, backend) -> tuple[float, float]:
    argv = [exe, "--collective", "all_reduce", "--size", size, "--topology", topo_text, "--chunks", str(chunks),
            "--scheduler", scheduler, "--execution", execution, "--backend", backend, "--max-memory", "1TB"] + \
        (["--algorithm", algorithm] if algorithm else [])
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode()}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", default=shutil.which("astra-compile") or "astra-compile")
    args = ap.parse_args()
    mb = 2**20
    print(f"{'case':84s} {'before MB':>10s} {'after MB':>9s} {'peak MB':>8s} {'ratio':>6s} {'wall s':>7s}")
    # measured first: a child forked from this process counts this process's memory in its peak (ru_maxrss)
    measured = [measure(args.exe, *case) for case in CASES]
    for case, (wall, peak) in zip(CASES, measured):
        before, after = estimates(*case)
        label = f"{case[0]} {case[1]} chunks={case[2]} {case[3] or 'default'} {case[4]} {case[5]} {case[6]}"
        print(f"{label:84s} {before / mb:10.0f} {after / mb:9.0f} {peak / mb:8.0f} {max(before, after) / peak:6.2f} "
              f"{wall:7.2f}")


if __name__ == "__main__":
    main()
