"""Fit one GPU's matmul fraction of peak to published step times of the calibration set (benchmarks/fidelity.py).

The A100 presets had no compute constants of their own: they took the H200's, fitted to small H200 steps, and
Megatron-LM's 2020 runs on A100s came out 24-49 % slow, the matmuls alone at 0.48 of the 312 TFLOP/s peak where
the whole published iteration runs at 0.48 (its own TFLOP/s count). This script fits what differs: the fraction of
its tensor-core peak a GPU's large matmuls reach (`matmul.DTYPE` of its preset, docs/compute.md). Everything
else (memory-bound classes, host, network) stays as predicted.

Each run is predicted once with `--timeline` (fidelity.py's command), its step split into the matmul kernels' time
M (rank 0's compute track, op class matmul) and the rest R = step - M. A large matmul's time is inversely
proportional to the fraction, so the fraction f scales M by f_now / f: the least-squares factor over the runs,
a = sum(M (P - R)) / sum(M^2) with P the published step, gives f = f_now / a. Not every matmul moves with it (one
whose bytes take longer than its FLOPs does not), so the fit is run again with the fitted value in the preset until
a is 1 to within 1 % (0.5379 -> 0.92 -> 0.97 for the A100s, a = 0.991 then; 0.8615 since Megatron's fused softmax and
the GEMM tails, a = 1.008; a = 1.011 since the file's in-place cross-entropy, left there: a refit moves A1a-d by
0.5 to 0.7 %). The runs left out of the fit (B1a-d: the same models over 128
DGX nodes) are the check on something it was not fitted to: `python benchmarks/fidelity.py`.

    python benchmarks/fit_matmul.py [--runs A1a,A1b,A1c,A1d] [--dtype fp16]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from astra_compile.network import clusters, devices
from astra_compile.network.op_classes import classify

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fidelity   # noqa: E402  (the calibration set's runs, one table)


def split(run: str, folder: str) -> tuple[float, float]:
    """(matmul us, step us) of one run's prediction."""
    timeline = os.path.join(folder, f"{run}.json")
    argv, env = fidelity.command(run)
    done = subprocess.run(argv + ["--timeline", timeline], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"fit_matmul: {run}: exited {done.returncode}: {done.stderr.strip()[-400:]}")
    with open(timeline) as f:
        events = json.load(f)["traceEvents"]
    matmul = sum(e["dur"] for e in events if e.get("cat") == "compute" and e.get("pid") == 0
                 and e.get("args", {}).get("phase") != "optimizer" and classify(e["name"]) == "matmul")
    return matmul, json.loads(done.stdout)["total_time_us"]


def factor(rows: list) -> float:
    """The least-squares a of published = a x matmul + rest over rows (run, matmul, rest, published)."""
    return sum(m * (p - r) for _, m, r, p in rows) / sum(m * m for _, m, r, p in rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="A1a,A1b,A1c,A1d", help="comma-separated calibration runs (one GPU)")
    parser.add_argument("--dtype", default="fp16", help="the runs' matmul dtype (the fitted key: matmul.DTYPE)")
    args = parser.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs or any(r not in fidelity.RUNS for r in runs):
        raise SystemExit(f"fit_matmul: --runs {args.runs!r}: expected ids of {', '.join(fidelity.RUNS)}")
    # the run's GPU: fidelity's --gpu where it gives one, else its cluster preset's
    gpus = {fidelity.GPU.get(r) or clusters.presets()[fidelity.RUNS[r][2].split(":")[0]].gpu for r in runs}
    if len(gpus) != 1:
        raise SystemExit(f"fit_matmul: --runs {args.runs!r} ran on {', '.join(sorted(gpus))}: one GPU at a time")
    (gpu,) = gpus
    key = f"matmul.{args.dtype}"
    now = devices.presets()[gpu].compute_model().value(key)
    print("| run | matmul ms | rest ms | predicted ms | published ms | error | with the fit ms | error |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for run in runs:
            matmul, step = split(run, folder)
            rows.append((run, matmul / 1e3, (step - matmul) / 1e3, fidelity.RUNS[run][5] * 1e3))
    a = factor(rows)
    for run, m, r, p in rows:
        fitted = a * m + r
        print(f"| {run} | {m:.1f} | {r:.1f} | {m + r:.1f} | {p:.1f} | {100 * ((m + r) / p - 1):+.1f} % "
              f"| {fitted:.1f} | {100 * (fitted / p - 1):+.1f} % |")
    print(f"\n{gpu} {key}: {now:.4f} now; fitted {now / a:.4f} (matmul time x {a:.3f})")


if __name__ == "__main__":
    main()
