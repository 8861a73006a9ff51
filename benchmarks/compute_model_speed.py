"""What the --gpu compute model costs end to end: the gpt example with and without `--gpu h200`, each a fresh
process, runs alternating (the machine is shared and noisy: medians, and their ratio measured in one run).

    python benchmarks/compute_model_speed.py [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from _timing import peak

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt_tp_dp.py")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    base = [sys.executable, "-m", "astra_compile", EXAMPLE, "--topology", "8x8_torus"]
    runs = {"roofline (no --gpu)": [], "--gpu h200": []}
    for _ in range(args.runs):
        for name, extra in (("roofline (no --gpu)", []), ("--gpu h200", ["--gpu", "h200"])):
            runs[name].append(peak(base + extra))
    print(f"{'run':<22} {'median s':>9} {'peak MB':>8}")
    for name, got in runs.items():
        print(f"{name:<22} {statistics.median(w for w, _ in got):9.2f} {max(m for _, m in got) / 1e6:8.0f}")
    plain, model = (statistics.median(w for w, _ in got) for got in runs.values())
    print(f"\n--gpu h200 / roofline: {model / plain:.3f} (median of {args.runs} alternating runs each)")


if __name__ == "__main__":
    main()
