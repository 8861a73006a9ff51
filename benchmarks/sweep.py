"""Sweeps: points per second with 1 and 2 local workers and on a local Ray instance, and what reuse saves.

1. examples/sweeps/themis_topologies.yml (60 points) run as `astra-compile sweep` with --workers 1, --workers 2
   and --ray --workers 2; the three results files must agree point for point (every column but elapsed_s).
2. A 20-point sweep over --peak-tflops on a model file (default examples/gpt_tp_dp.py on 8x8_torus), with reuse
   (the default: the model captured once, each distinct collective compiled once per worker), with --no-cache,
   and with a --cache directory filled by an earlier run of the same sweep.

Each configuration runs `--runs` times as a fresh command (start-up included); the table shows the median wall
time. Runs of the configurations being compared interleave, so their ratio is measured under the same load.

    python benchmarks/sweep.py [--runs 3] [--model examples/gpt_tp_dp.py] [--skip-ray] [--only themis|reuse]
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THEMIS = os.path.join(HERE, "..", "examples", "sweeps", "themis_topologies.yml")


def run(sweep: str, out: str, extra: list[str]) -> float:
    if os.path.exists(out):
        os.unlink(out)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "astra_compile", "sweep", sweep, "-o", out, *extra],
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep failed ({' '.join(extra)}): {done.stderr.strip() or done.stdout.strip()}")
    return took


def points(path: str) -> dict:
    with open(path, newline="") as f:
        return {r["point"]: {k: v for k, v in r.items() if k != "elapsed_s"} for r in csv.DictReader(f)}


def compare(configs: dict[str, list[str]], sweep: str, runs: int, tmp: str) -> tuple[dict, dict]:
    walls = {name: [] for name in configs}
    files = {}
    for _ in range(runs):
        for name, extra in configs.items():
            files[name] = os.path.join(tmp, name.replace(" ", "_") + ".csv")
            walls[name].append(run(sweep, files[name], extra))
    return {k: statistics.median(v) for k, v in walls.items()}, {k: points(f) for k, f in files.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "examples", "gpt_tp_dp.py"))
    ap.add_argument("--topology", default="8x8_torus")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--only", choices=("themis", "reuse"), help="run one of the two benchmarks")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only != "reuse":
            themis(args, tmp)
        if args.only != "themis":
            reuse(args, tmp)


def themis(args, tmp: str) -> None:
    configs = {"1 worker": ["--workers", "1"], "2 workers": ["--workers", "2"]}
    if not args.skip_ray:
        configs["Ray, 2 CPUs"] = ["--ray", "--workers", "2"]
    walls, results = compare(configs, THEMIS, args.runs, tmp)
    n = len(next(iter(results.values())))
    same = all(r == results["1 worker"] for r in results.values())
    print(f"\n{os.path.basename(THEMIS)}: {n} points, median of {args.runs} runs (start-up included)")
    print(f"{'configuration':<16s}{'wall s':>10s}{'points/s':>10s}{'speed-up':>10s}")
    for name, wall in walls.items():
        print(f"{name:<16s}{wall:10.2f}{n / wall:10.2f}{walls['1 worker'] / wall:10.2f}")
    print(f"results equal point for point in all configurations: {same}")


def reuse(args, tmp: str) -> None:
    sweep = os.path.join(tmp, "peak.yml")
    with open(sweep, "w") as f:
        f.write(f"base: {{input: {os.path.abspath(args.model)}, topology: {args.topology}}}\n"
                "axes:\n  peak-tflops: {from: 50, to: 1000, step: 50}\n")
    cache = os.path.join(tmp, "cache")
    run(sweep, os.path.join(tmp, "fill.csv"), ["--workers", "1", "--cache", cache])  # fills the disk cache
    configs = {"reuse": ["--workers", "1"], "no reuse": ["--workers", "1", "--no-cache"],
               "reuse, warm --cache": ["--workers", "1", "--cache", cache]}
    walls, results = compare(configs, sweep, args.runs, tmp)
    print(f"\n20 points over --peak-tflops, {os.path.basename(args.model)} on {args.topology}, 1 worker, "
          f"median of {args.runs} runs")
    print(f"{'configuration':<20s}{'wall s':>10s}")
    for name, wall in walls.items():
        print(f"{name:<20s}{wall:10.2f}")
    print(f"speed-up from reuse: {walls['no reuse'] / walls['reuse']:.2f}x in memory, "
          f"{walls['no reuse'] / walls['reuse, warm --cache']:.2f}x from a warm disk cache; results equal: "
          f"{all(r == results['no reuse'] for r in results.values())}")


if __name__ == "__main__":
    main()
