"""The resource estimate (compiler/driver/resources.py) against the measured peak memory of the same runs.

For each collective: the estimate the CLI makes before the passes, the largest of the estimates it makes before the
lowering and the runtime, and the peak resident memory of the run (a fresh process, its rusage). For each training
step read from Chakra traces (the cases the trace-step costs were sized on): the largest estimate made while the
files are read and the one made before the step is lowered, and the run's peak. The estimate is meant to lie within
a factor of two of the peak and above it for the large runs that matter.

    python benchmarks/resources.py [--exe astra-compile] [--no-traces]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from astra_compile import algorithms

from astra_compile.compiler.driver import driver, resources
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology
from astra_compile.network.units import parse_size
from astra_compile.compiler.lowering.plans import plans_from_module
from astra_compile.compiler.frontend import chakra

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chakra_traces import chain, microbenchmark  # noqa: E402
import _timing  # noqa: E402

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
TRACE_CASES = [  # label, write the traces into a directory, topology
    ("2-rank chain of 50k nodes, an all-reduce every 100", lambda d: chain(d, 2, 50_000), "Ring(2)"),
    ("2-rank chain of 200k nodes, an all-reduce every 100", lambda d: chain(d, 2, 200_000), "Ring(2)"),
    ("Chakra microbenchmark, 1 MiB all-reduce, 1024 ranks", lambda d: microbenchmark(d, 1024, 1 << 20), "32x32_torus"),
    ("Chakra microbenchmark, 1 MiB all-reduce, 4096 ranks", lambda d: microbenchmark(d, 4096, 1 << 20),
     "16x16x16_torus"),
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


def trace_estimates(directory: str, topo_text: str) -> tuple[int, int]:
    """(the largest estimate made while the files are read, the one before the step is lowered), as the CLI makes
    them: the reader run here with the estimates noted as they are asked for."""
    noted = {"trace_nodes": [], "step_programs": []}
    originals = {name: getattr(chakra, name) for name in noted}  # the reader's own names (frontend/trace_memory.py)

    def noting(name):
        def estimate(*args, **kwargs):
            made = originals[name](*args, **kwargs)
            noted[name].append(made.bytes)
            return made
        return estimate
    topology = parse_topology(topo_text)
    try:
        for name in noted:
            setattr(chakra, name, noting(name))
        chakra.load(chakra.trace_files(directory), topology.npus, topology, max_memory=2**50)
    finally:
        for name, fn in originals.items():
            setattr(chakra, name, fn)
    return max(noted["trace_nodes"]), max(noted["step_programs"])


def measure(exe: str, topo_text, size, chunks, algorithm, scheduler, execution, backend) -> tuple[float, float]:
    argv = [exe, "--collective", "all_reduce", "--size", size, "--topology", topo_text, "--chunks", str(chunks),
            "--scheduler", scheduler, "--execution", execution, "--backend", backend, "--max-memory", "1TB"] + \
        (["--algorithm", algorithm] if algorithm else [])
    return _timing.peak(argv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", default=shutil.which("astra-compile") or "astra-compile")
    ap.add_argument("--no-traces", action="store_true", help="collectives only")
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
    if not args.no_traces:
        traces(args.exe)


def traces(exe: str) -> None:
    mb = 2**20
    print(f"\n{'training step from Chakra traces':84s} {'read MB':>10s} {'step MB':>9s} {'peak MB':>8s} {'ratio':>6s} "
          f"{'wall s':>7s}")
    with tempfile.TemporaryDirectory() as workdir:
        dirs = [write(os.path.join(workdir, str(i))) for i, (_, write, _) in enumerate(TRACE_CASES)]
        # measured first, as above
        measured = [_timing.peak([exe, d, "--topology", topo, "--max-memory", "1TB"])
                    for d, (_, _, topo) in zip(dirs, TRACE_CASES)]
        for d, (label, _, topo), (wall, most) in zip(dirs, TRACE_CASES, measured):
            read, step = trace_estimates(d, topo)
            print(f"{label:84s} {read / mb:10.0f} {step / mb:9.0f} {most / mb:8.0f} {max(read, step) / most:6.2f} "
                  f"{wall:7.2f}")


if __name__ == "__main__":
    main()
