"""Speed of the congestion-aware runtime (issue: at least 1 million link transfers per second).

Part 1, the engine alone: every NPU and link simulated (`full` execution), link transfers per second of wall time.
Part 2, the CLI end to end (start-up included) with --backend congestion for 1GB all-reduce in 64 chunks on
16x16_torus and Switch(8)_Switch(8)_Switch(8): the symmetric execution simulates NPU 0's representative links and
stands for every link of the network ("modelled" transfers). Medians of several runs; the machine is shared.

    python benchmarks/congestion_speed.py [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from helpers import compile_collective  # noqa: E402

from astra_compile.runtime import congestion  # noqa: E402

ENGINE_CASES = [
    ("Switch(8)_Switch(8)_Switch(8), 512 NPUs, 1GB all-reduce, 8 chunks", "Switch(8)_Switch(8)_Switch(8)", 8, None),
    ("16x16_torus, 256 NPUs, 1GB all-reduce, 4 chunks", "16x16_torus", 4, None),
    ("8x8_torus, 64 NPUs, 1GB all-reduce, direct, 16 chunks (contended)", "8x8_torus", 16, "direct"),
]
CLI_CASES = [
    ("1GB all-reduce, 16x16_torus, 64 chunks", ["--topology", "16x16_torus"]),
    ("1GB all-reduce, Switch(8)_Switch(8)_Switch(8), 64 chunks", ["--topology", "Switch(8)_Switch(8)_Switch(8)"]),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print("engine, full execution (every NPU and link)")
    print(f"{'case':68s} {'transfers':>10s} {'median s':>9s} {'transfers/s':>12s}")
    for name, topo, chunks, algo in ENGINE_CASES:
        sched = compile_collective(topo, "all_reduce", 2 ** 30, chunks=chunks, algorithm=algo)
        walls, n = [], 0
        for _ in range(args.runs):
            start = time.perf_counter()
            result = congestion.run(sched, mode="full")
            walls.append(time.perf_counter() - start)
            n = result.link_transfers["simulated"]
        med = statistics.median(walls)
        print(f"{name:68s} {n:10d} {med:9.3f} {n / med:12.0f}")
    exe = shutil.which("astra-compile")
    print("\nCLI, --backend congestion (symmetric execution), start-up included")
    print(f"{'case':68s} {'modelled':>10s} {'median s':>9s} {'modelled/s':>12s}")
    for name, extra in CLI_CASES:
        argv = [exe, "--collective", "all_reduce", "--size", "1GB", "--chunks", "64", "--backend", "congestion",
                "--json", *extra]
        walls, modelled = [], 0
        for _ in range(args.runs):
            start = time.perf_counter()
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            walls.append(time.perf_counter() - start)
        sched_npus = compile_collective(extra[1], "all_reduce", 2 ** 30, chunks=64)
        result = congestion.run(sched_npus)
        modelled = result.link_transfers["modelled"]
        med = statistics.median(walls)
        print(f"{name:68s} {modelled:10d} {med:9.3f} {modelled / med:12.0f}")
        del out


if __name__ == "__main__":
    main()
