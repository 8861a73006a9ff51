"""Capture whose cost does not grow with the run (issue 34, item 3): a 175B GPT on TP 8 x PP 16 x DP 8 (1024 ranks)
over 192 micro-batches, and Llama 3 405B on TP 8 x PP 16 x DP 128 (16,384 ranks) over 16, each a fresh
`astra-compile` process, first run, no cache: the median wall time and peak resident memory of `--runs` runs
(targets: under 60 s and 4 GB; under 120 s and 8 GB).

`--fidelity`: the same GPT with fewer layers and micro-batches (sizes below), captured in this process twice,
once with the micro-batches replayed (compiler/frontend/chunk_replay.py) and once with every one dispatched:
their step times, which must agree (the workloads are the same op for op), and each capture's time.

    python benchmarks/capture_scale.py [--runs 3] [--timeout 900] [--only gpt|llama] [--fidelity] [--exe EXE ...]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time

from cli_scale import table

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")   # the model files (not scripts: test_benchmarks runs each script here)
CASES = [
    ("gpt", "GPT 175B, TP 8 x PP 16 x DP 8 (1024 ranks), 1F1B, 192 micro-batches",
     ["gpt175b_pp.py", "--topology", "Switch(8)_Switch(8)_Switch(16)"]),
    ("llama", "Llama 3 405B, TP 8 x PP 16 x DP 128 (16,384 ranks), 1F1B, 16 micro-batches",
     ["llama405b_pp.py", "--topology", "Switch(8)_Switch(128)_Switch(16)"]),
]
# the fidelity check's GPT: 32 layers over 16 stages, 24 micro-batches (a capture that dispatches all still runs)
FIDELITY = {"LAYERS": 32, "MICROBATCHES": 24}


def sized(path: str, directory: str, sizes: dict) -> str:
    """A copy of a benchmark model file with some of its constants replaced."""
    text = open(path, encoding="utf-8").read()
    for name, value in sizes.items():
        text, n = re.subn(rf"^([A-Z_, ]*\b{name}\b[A-Z_, ]*= )(.*)$", lambda m: _replace(m, name, value), text, count=1,
                          flags=re.M)
        if not n:
            raise SystemExit(f"{path}: no {name} to replace")
    out = os.path.join(directory, os.path.basename(path))
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return out


def _replace(m, name, value) -> str:
    """`A, B, C = 1, 2, 3` with B's value replaced."""
    names = [n.strip() for n in m.group(0).split("=", 1)[0].split(",")]
    values = [v.strip() for v in m.group(2).split("#", 1)[0].split(",")]
    values[names.index(name)] = str(value)
    return f"{', '.join(names)} = {', '.join(values)}"


def fidelity(directory: str) -> None:
    import astra_compile
    from astra_compile.compiler.frontend import capture as capture_module
    path = sized(os.path.join(MODELS, "gpt175b_pp.py"), directory, FIDELITY)
    real = capture_module._capture_rank
    print(f"GPT 175B shape with {FIDELITY['LAYERS']} layers, {FIDELITY['MICROBATCHES']} micro-batches, 1024 ranks:")
    step = {}
    for replay in (True, False):
        capture_module._capture_rank = lambda *a, replay_=replay, replay=True, **k: real(*a, replay=replay_, **k)
        start = time.perf_counter()
        report = astra_compile.compile(path, "Switch(8)_Switch(8)_Switch(16)")
        step[replay] = report.total_time_us
        print(f"  {'replayed' if replay else 'every micro-batch dispatched':30s} step {report.total_time_us:.3f} us, "
              f"{time.perf_counter() - start:.1f} s")
    capture_module._capture_rank = real
    print(f"  relative difference {abs(step[True] - step[False]) / step[False]:.2e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--only", choices=[c[0] for c in CASES])
    parser.add_argument("--exe", action="append", help="astra-compile executable(s), runs interleaved (default: the "
                        "one on PATH)")
    parser.add_argument("--fidelity", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="astra-capture-scale-") as tmp:
        if args.fidelity:
            fidelity(tmp)
        else:
            cases = [(name, [os.path.join(MODELS, argv[0]), *argv[1:], "--capture-limit", "3600"])
                     for key, name, argv in CASES if args.only in (None, key)]
            table(cases, args.runs, args.exe or [shutil.which("astra-compile") or "astra-compile"], args.timeout,
                  width=84)
