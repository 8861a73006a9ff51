"""A 7B-parameter Llama shape (32 layers, hidden 4096, 32 heads, SwiGLU 11008, vocabulary 32000, sequence 2048)
with FSDP2 on dp=8 x tensor parallelism on tp=8, captured, compiled and timed on 8x8_torus (target: under 60 s and
under 4 GB peak memory on a 2-core machine).

The model is examples/llama_fsdp_tp.py with the 7B sizes; each run is a fresh `astra-compile` process, and the
table gives the median wall time and the peak resident memory of the child (rusage). The machine is shared:
compare medians. `--pipeline`: examples/llama_pp_tp_dp.py with the 7B sizes instead (pp=4 x dp=2 x tp=8, 1F1B
over 8 micro-batches of one sequence each; four stages captured).

    python benchmarks/llama7b.py [--runs 3] [--exe PATH] [--pipeline]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = "VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ, BATCH = 32000, 4096, 32, 32, 11008, 32, 2048, {batch}"
CASES = {False: ("llama_fsdp_tp.py", 1, "Llama 7B shape, FSDP2 dp=8 x TP tp=8 + SP, 8x8_torus"),
         True: ("llama_pp_tp_dp.py", 8, "Llama 7B shape, PP 4 (1F1B, 8 mb) x DP 2 x TP 8, 8x8_torus")}


def model_file(directory: str, pipeline: bool = False) -> str:
    example, batch, _ = CASES[pipeline]
    with open(os.path.join(HERE, "..", "examples", example), encoding="utf-8") as f:
        source = f.read()
    source, n = re.subn(r"^VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ, BATCH = .*$", SIZES.format(batch=batch),
                        source, flags=re.M)
    if n != 1:
        raise SystemExit(f"examples/{example} no longer has its sizes on one line: update this benchmark")
    path = os.path.join(directory, "llama_7b.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return path


def run_once(exe: str, path: str) -> tuple[float, float, str]:
    """(wall s, peak RSS GB of the children so far, the report's step-time line)."""
    start = time.perf_counter()
    p = subprocess.run([exe, path, "--topology", "8x8_torus"], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        raise SystemExit(f"astra-compile failed: {p.stderr.strip()}")
    out = p.stdout
    # the largest resident set of any child so far (kB on Linux): every run is the same program
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    step = next((line for line in out.splitlines() if line.startswith("step time")), "?")
    return wall, peak, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--exe", default=shutil.which("astra-compile") or "astra-compile")
    ap.add_argument("--pipeline", action="store_true", help="the pipeline-parallel example with the 7B sizes")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = model_file(d, a.pipeline)
        results = [run_once(a.exe, path) for _ in range(a.runs)]
    walls = [r[0] for r in results]
    print(f"{'case':58s} {'median s':>9s} {'min s':>7s} {'peak GB':>8s}  report")
    print(f"{CASES[a.pipeline][2]:58s} {statistics.median(walls):9.2f} "
          f"{min(walls):7.2f} {max(r[1] for r in results):8.2f}  {results[-1][2]}")


if __name__ == "__main__":
    main()
