"""`--verify` on 1 GB all-reduces: the symbolic verifier's wall time and peak memory (issue 32 item 6).

Each case runs as a fresh process with and without `--verify` (median wall time of `--runs`, peak resident memory
from the child's rusage), so the difference is what verifying costs. The verifier's memory estimate (the larger of
compiler/driver/resources.py's `verification`, before the rows are read, and `verified_cells`, after) is printed beside
the peak: it is meant to lie above it, within a factor of two or so. The data verifier refused all of these: they
hold 8 GB to 512 GB over their NPUs, past its 50 M bytes.

    python benchmarks/verify_symbolic.py [--runs 3] [--exe astra-compile]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timing  # noqa: E402  (this folder)

CASES = [  # label, command-line arguments after --collective all_reduce --size 1GB
    ("Switch(8) in_switch", ["--topology", "Switch(8)", "--algorithm", "in_switch"]),
    ("8x8_torus default", ["--topology", "8x8_torus"]),
    ("Switch(8)_Switch(8)_Switch(8) 64 chunks", ["--topology", "Switch(8)_Switch(8)_Switch(8)", "--chunks", "64"]),
    ("4x4_torus multitree", ["--topology", "4x4_torus", "--algorithm", "multitree"]),
    ("8x8x8_torus default (512 NPUs)", ["--topology", "8x8x8_torus"]),
]


def run_once(exe: str, argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS bytes) of one run of the CLI."""
    return _timing.peak([exe, "--collective", "all_reduce", "--size", "1GB", *argv, "--max-memory", "1TB"])


def measured(exe: str, argv: list[str], runs: int) -> tuple[float, float]:
    """(median wall seconds, largest peak RSS bytes) over `runs` runs."""
    results = [run_once(exe, argv) for _ in range(runs)]
    return statistics.median(w for w, _ in results), max(p for _, p in results)


def estimate(argv: list[str]) -> tuple[int, int, int]:
    """(the verifier's memory estimate in bytes, its table rows, its cells) for a case, compiled in this process as
    the CLI compiles it."""
    from astra_compile.compiler.driver import driver, resources
    from astra_compile.dialects import comm
    from astra_compile.network.parse import parse_topology
    from astra_compile.network.units import parse_size
    from astra_compile.runtime.verify_symbolic import SymbolicRun
    opts = dict(zip(argv[::2], argv[1::2]))
    topology = parse_topology(opts["--topology"])
    ctx = comm.new_context()
    module = driver.build_module(ctx, topology, "all_reduce", parse_size("1GB"))
    defaults = {"chunks": int(opts.get("--chunks", 1)),
                **({"algorithm": opts["--algorithm"]} if "--algorithm" in opts else {})}
    schedule = driver.compile_schedule(str(module), ctx, topology, None, defaults).schedule
    check = SymbolicRun(schedule)
    before = resources.verification(topology, schedule.plans)
    return max(before.bytes, resources.verified_cells(check).bytes), check.rows, check.cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", default=shutil.which("astra-compile") or "astra-compile")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    mb = 2**20
    print(f"{'1 GB all-reduce':40s} {'rows':>9s} {'cells':>9s} {'wall s':>7s} {'verify s':>8s} {'peak MB':>8s} "
          f"{'w/o MB':>7s} {'est MB':>7s}")
    # measured first: a child forked from this process counts this process's memory in its peak (ru_maxrss)
    results = [(measured(args.exe, argv + ["--verify"], args.runs), measured(args.exe, argv, args.runs))
               for _, argv in CASES]
    for (label, argv), ((wall, peak), (plain_wall, plain_peak)) in zip(CASES, results):
        est, rows, cells = estimate(argv)
        print(f"{label:40s} {rows:9d} {cells:9d} {wall:7.2f} {wall - plain_wall:8.2f} {peak / mb:8.0f} "
              f"{plain_peak / mb:7.0f} {est / mb:7.0f}")


if __name__ == "__main__":
    main()
