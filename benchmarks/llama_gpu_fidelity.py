"""Predicted step and memory of torchtitan's Llama 3.1 8B at reduced depth on one GPU against real H200 and H100
steps (benchmarks/data/h200_llama8b_steps.json, h100_llama8b_steps.json; recorded by
benchmarks/data/record_llama_step.py).

The recording ran benchmarks/published/torchtitan_llama3_8b.py as written (selective checkpointing, FSDP2 with
bf16 parameters, clipped AdamW) on a one-rank mesh. Here the same file, its LAYERS set to the recorded depth, is
timed with `--gpu h200` or `--gpu h100` on one GPU of a node (`--cluster hgx-h200:1x1`, docs/clusters.md), FSDP
over a one-rank `dp` axis. Printed per run: the measured and predicted step, the peak of allocated bytes (as
max_memory_allocated) and the reserved bytes' peak, with the errors.

The capture runs scaled_dot_product_attention as the flash kernel (compiler/frontend/gpu_attention.py), as the
published run did; PyTorch 2.11 picks cuDNN's kernel on Hopper instead, which runs attention about 1.8 times
faster and which the file's checkpointing policy does not save (the backward runs the forward again). The `_flash`
runs turned cuDNN's kernel off: they are the like-for-like comparison.

    python benchmarks/llama_gpu_fidelity.py [--gpus h200,h100]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FILE = os.path.join(HERE, "published", "torchtitan_llama3_8b.py")
DATA = {"h200": os.path.join(HERE, "data", "h200_llama8b_steps.json"),
        "h100": os.path.join(HERE, "data", "h100_llama8b_steps.json")}
GIB = 2 ** 30
# The file as one GPU ran it: its module's LAYERS set before the model is built, as record_llama_step.py set it
# (Llama() and parallelize() read it when they run).
WORLD_ONE = '''import sys
sys.path.insert(0, {folder!r})
import {module} as _file
_file.LAYERS = {layers}
from {module} import *          # noqa: F401,F403
'''


def at_depth(folder: str, layers: int) -> str:
    """The one-GPU wrapper of the published file at `layers` layers, written to folder; its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "world1.py")
    with open(path, "w") as f:
        f.write(WORLD_ONE.format(folder=os.path.dirname(FILE), module=os.path.basename(FILE)[:-3], layers=layers))
    return path


def predict(path: str, gpu: str) -> dict:
    argv = [sys.executable, "-m", "astra_compile", path, "--cluster", "hgx-h200:1x1", "--mesh", "dp=1", "--gpu", gpu,
            "--json"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"llama_gpu_fidelity: {' '.join(argv)} exited {done.returncode}: {done.stderr[-400:]}")
    return json.loads(done.stdout)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default=",".join(DATA), help=f"comma-separated recorded GPUs ({', '.join(DATA)})")
    args = parser.parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if not gpus or any(g not in DATA for g in gpus):
        raise SystemExit(f"llama_gpu_fidelity: --gpus {args.gpus!r}: expected some of {', '.join(DATA)}")
    print("| GPU | run | attention kernel | measured step ms | predicted ms | error | peak GiB measured / predicted "
          "| error | reserved GiB measured / predicted | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in gpus:
            with open(DATA[gpu]) as f:
                runs = json.load(f)["runs"]
            for name, run in runs.items():
                report = predict(at_depth(os.path.join(tmp, f"L{run['layers']}"), run["layers"]), gpu)
                step, memory = report["total_time_us"] / 1e3, report["memory"]
                peak, reserved = memory["peak_bytes"] / GIB, memory["reserved_bytes"] / GIB
                measured = run["memory_gib"]
                kernel = "cuDNN" if run.get("cudnn_attention", True) else "flash"
                print(f"| {gpu} | {name} | {kernel} | {run['step_ms']:.1f} | {step:.1f} "
                      f"| {100 * (step / run['step_ms'] - 1):+.1f} % "
                      f"| {measured['step_peak']:.2f} / {peak:.2f} | {100 * (peak / measured['step_peak'] - 1):+.1f} % "
                      f"| {measured['reserved_peak_whole_run']:.2f} / {reserved:.2f} "
                      f"| {100 * (reserved / measured['reserved_peak_whole_run'] - 1):+.1f} % |", flush=True)


if __name__ == "__main__":
    main()
