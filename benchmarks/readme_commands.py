"""The README's own commands, timed as a new user runs them: each a fresh process, start-up included.

Prints, per command, the median wall time, the median CPU time (user + system of the process and its workers: what
the command costs whatever else the machine runs) and the largest peak resident memory over `--runs` runs. The
README's speed figures come from this table; say where and under what load it was measured.

    python benchmarks/readme_commands.py [--runs 3] [--only model|pipeline|sweep|tour]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
TOUR = ["--collective", "all_reduce", "--size", "1GB", "--topology", "Switch(8)_Switch(8)_Switch(8)",
        "--bandwidth", "50,50,50", "--latency", "1,1,1", "--algorithm", "halving_doubling", "--chunks", "64",
        "--scheduler", "baseline", "--intra", "fifo"]
MODELS = ["mlp_dp.py", "gpt_tp_dp.py", "resnet_dp.py", "moe_ep.py", "llama_fsdp_tp.py"]


def commands(only: str | None) -> list[tuple[str, str, list[str]]]:
    """(group, label, argv after `astra-compile`) of every command timed."""
    out = []
    for name in MODELS:
        out.append(("model", f"{name} --topology 8x8_torus",
                    [os.path.join(EXAMPLES, name), "--topology", "8x8_torus"]))
    out.append(("pipeline", "llama_pp_tp_dp.py --topology 8x8_torus",
                [os.path.join(EXAMPLES, "llama_pp_tp_dp.py"), "--topology", "8x8_torus"]))
    out.append(("sweep", "sweep themis_topologies.yml (60 points)",
                ["sweep", os.path.join(EXAMPLES, "sweeps", "themis_topologies.yml"), "-o", "{tmp}/themis.csv"]))
    out.append(("tour", "the tour: 1GB all-reduce, Switch(8)^3, baseline", TOUR))
    return [c for c in out if only is None or c[0] == only]


def run_once(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one fresh run, from its own rusage (wait4: the process and the workers it
    waited for, nothing of the runs before it)."""
    tmp = tempfile.mkdtemp(prefix="astra-readme-")
    try:
        argv = [a.replace("{tmp}", tmp) for a in argv]
        start = time.perf_counter()
        with open(os.path.join(tmp, "stderr"), "w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "astra_compile", *argv], stdout=subprocess.DEVNULL,
                                    stderr=err, cwd=tmp)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - start
            err.seek(0)
            message = err.read().strip()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        sys.exit(f"astra-compile {' '.join(argv)} failed: {message}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # ru_maxrss in KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=("model", "pipeline", "sweep", "tour"))
    args = ap.parse_args()
    print(f"{'command':48s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s}   ({args.runs} runs, medians; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    for _, label, argv in commands(args.only):
        runs = [run_once(argv) for _ in range(args.runs)]
        print(f"{label:48s} {statistics.median(r[0] for r in runs):8.2f} {statistics.median(r[1] for r in runs):8.2f} "
              f"{max(r[2] for r in runs):8.0f}", flush=True)


if __name__ == "__main__":
    main()
