"""Predicted against published step time of the calibration set (../shared/published-runs/README.md).

Each of the ten runs is predicted as a user would ask: the model file in benchmarks/published/, `--cluster
NAME:NODES` and the run's mesh (and `--gpu` where the run's GPU is not the preset's: Megatron's 40 GB A100s),
`--json`, one fresh process each (no --cache: the capture is part of the cost
shown). The table: id, predicted and published step, the error, tokens/s/GPU predicted and published, peak memory
per GPU predicted (the report's `memory` object, where this version has one; "-") and published (where quoted),
and the run's wall time (capture included). Median and max |error| below it.

A1a-c ran on 1, 2 or 4 of a DGX-A100's 8 GPUs: `--cluster dgx-a100:1x1` (1x2, 1x4), part of a node
(docs/clusters.md).

    python benchmarks/fidelity.py [--runs A1a,T1] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED = os.path.join(HERE, "published")
GPT, LLAMA = os.path.join(PUBLISHED, "megatron_gpt.py"), os.path.join(PUBLISHED, "torchtitan_llama3_8b.py")
GIB = 2 ** 30

# id: (model file, environment, cluster, mesh, tokens per GPU per step, published step s, published peak GiB)
# Megatron: step = iteration time; tokens per GPU = global batch x 1024 / GPUs. torchtitan: step = local batch x
# sequence / TPS (the README's way of counting).
RUNS = {
    "A1a": (GPT, {"MEGATRON_SIZE": "1b"}, "dgx-a100:1x1", "dp=1,tp=1", 16 * 1024 / 1, 1.076, None),
    "A1b": (GPT, {"MEGATRON_SIZE": "2b"}, "dgx-a100:1x2", "dp=1,tp=2", 16 * 1024 / 2, 1.026, None),
    "A1c": (GPT, {"MEGATRON_SIZE": "4b"}, "dgx-a100:1x4", "dp=1,tp=4", 16 * 1024 / 4, 1.162, None),
    "A1d": (GPT, {"MEGATRON_SIZE": "8b"}, "dgx-a100:1", "dp=1,tp=8", 16 * 1024 / 8, 1.343, None),
    "B1a": (GPT, {"MEGATRON_SIZE": "1b"}, "dgx-a100:16", "dp=128,tp=1", 2048 * 1024 / 128, 1.153, None),
    "B1b": (GPT, {"MEGATRON_SIZE": "2b"}, "dgx-a100:32", "dp=128,tp=2", 2048 * 1024 / 256, 1.101, None),
    "B1c": (GPT, {"MEGATRON_SIZE": "4b"}, "dgx-a100:64", "dp=128,tp=4", 2048 * 1024 / 512, 1.242, None),
    "B1d": (GPT, {"MEGATRON_SIZE": "8b"}, "dgx-a100:128", "dp=128,tp=8", 2048 * 1024 / 1024, 1.380, None),
    "T1": (LLAMA, {}, "grand-teton:1", "dp=8", 2 * 8192, 2 * 8192 / 5762, 82.4),
    "T2": (LLAMA, {}, "grand-teton:16", "dp=128", 2 * 8192, 2 * 8192 / 5605, 67.0),
}
# The GPU where the cluster preset's is not the run's: Megatron's September 2020 runs predate the 80 GB A100
# (November 2020), so their DGX-A100s carried the 40 GB A100 (1.555 TB/s of HBM2, not 2.039)
GPU = {run: "a100-40gb" for run in RUNS if run[0] in "AB"}


def command(run: str) -> tuple[list, dict]:
    """(argv, environment) of one run's prediction: the model file on its cluster and mesh, --json."""
    path, env, cluster, mesh = RUNS[run][:4]
    argv = [sys.executable, "-m", "astra_compile", path, "--cluster", cluster, "--mesh", mesh, "--json"]
    return argv + (["--gpu", GPU[run]] if run in GPU else []), {**os.environ, **env}


def predict(run: str) -> dict:
    _, _, _, _, tokens, published, published_gib = RUNS[run]
    argv, env = command(run)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"fidelity: {run}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    step = report["total_time_us"] / 1e6
    peak = peak_gib(report.get("memory"))
    return {"id": run, "predicted_s": step, "published_s": published, "error_pct": 100 * (step / published - 1),
            "tps_predicted": tokens / step, "tps_published": tokens / published,
            "memory_gib_predicted": peak, "memory_gib_published": published_gib,
            "compute_s": report["compute_time_us"] / 1e6, "exposed_comm_s": report["exposed_comm_time_us"] / 1e6,
            "wall_s": wall}


def peak_gib(memory) -> float | None:
    """Peak memory per GPU in GiB from the report's `memory` object: the caching allocator's reserved bytes, what
    torchtitan's logs quote as the step's peak (torch.cuda.max_memory_reserved), of the rank that needs the most
    (a pipeline's report is its first stage's; `most` is another stage's where it needs more); None where the
    report has none."""
    if not isinstance(memory, dict) or not isinstance(memory.get("reserved_bytes"), int):
        return None
    memory = memory.get("most") or memory
    return memory["reserved_bytes"] / GIB


def show(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated ids (default: all ten)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        raise SystemExit(f"fidelity: unknown run(s) {', '.join(unknown)}; known: {', '.join(RUNS)}")
    print("| id | predicted s | published s | error | tok/s/GPU predicted | published | compute s | exposed comm s "
          "| memory GiB predicted | published | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for run in runs:
        r = predict(run)
        rows.append(r)
        print(f"| {r['id']} | {r['predicted_s']:.3f} | {r['published_s']:.3f} | {r['error_pct']:+.1f} % "
              f"| {r['tps_predicted']:.0f} | {r['tps_published']:.0f} | {r['compute_s']:.3f} "
              f"| {round(r['exposed_comm_s'], 3) or 0.0:.3f} | {show(r['memory_gib_predicted'], '.1f')} "
              f"| {show(r['memory_gib_published'], '.1f')} | {r['wall_s']:.1f} |", flush=True)
    errors = [abs(r["error_pct"]) for r in rows]
    print(f"\n|error|: median {statistics.median(errors):.1f} %, max {max(errors):.1f} % over {len(rows)} runs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
