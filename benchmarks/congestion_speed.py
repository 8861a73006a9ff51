"""Speed of the congestion-aware runtime (target: at least 1 million link transfers per second).

Part 1, the runtime alone, full execution (every NPU, every message, every link): link transfers per second of wall
time for `congestion.run`, which builds the plan from the tables (messages, routes, injection order) and executes
it. The compiler generates the tables beforehand (`tables s`, not counted). The compiled event core and the Python reference engine run in the same process on the same schedule, so
their ratio is measured in one run.
Part 2, the CLI end to end (start-up, compilation and the report included) with --backend congestion for 1GB
all-reduce in 64 chunks on 16x16_torus and Switch(8)_Switch(8)_Switch(8), in full execution and in the symmetric
one (NPU 0's representative links standing for every link of the network: "modelled" transfers).
Medians of several runs; the machine is shared.

    python benchmarks/congestion_speed.py [--runs 3] [--skip-python]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from helpers import compile_collective  # noqa: E402
from _timing import timed  # noqa: E402  (this folder is on the path when the script runs)

from astra_compile.runtime import congestion  # noqa: E402

ENGINE_CASES = [
    ("Switch(8)_Switch(8)_Switch(8), 512 NPUs, 1GB all-reduce, 8 chunks", "Switch(8)_Switch(8)_Switch(8)", 8, None),
    ("16x16_torus, 256 NPUs, 1GB all-reduce, 4 chunks", "16x16_torus", 4, None),
    ("16x16_torus, 256 NPUs, 1GB all-reduce, 64 chunks", "16x16_torus", 64, None),
    ("8x8_torus, 64 NPUs, 1GB all-reduce, direct, 16 chunks (contended)", "8x8_torus", 16, "direct"),
]
CLI_CASES = [
    ("16x16_torus", ["--topology", "16x16_torus"]),
    ("Switch(8)_Switch(8)_Switch(8)", ["--topology", "Switch(8)_Switch(8)_Switch(8)"]),
]


class ReadTables:
    """A compiled schedule with every NPU's table generated once: times the runtime, not the table generation
    (the `tables s` column), as executing a directory of tables written by `--emit tables` would."""

    def __init__(self, schedule):
        self.meta = schedule.meta
        self.read = {n: schedule.table(n, deps=False) for n in range(schedule.meta.npus)}

    def table(self, npu, deps=False):
        return self.read[npu]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-python", action="store_true", help="time only the compiled core")
    args = ap.parse_args()
    if congestion._linkcore is None:
        sys.exit("the compiled core is not built: pip install . on a machine with a C compiler")
    print("runtime alone, full execution (every NPU and link), tables read beforehand; compiled core and Python "
          "engine in one run")
    print(f"{'case':70s} {'transfers':>10s} {'tables s':>9s} {'core s':>8s} {'transfers/s':>12s} {'python s':>9s} "
          f"{'ratio':>6s}")
    for name, topo, chunks, algo in ENGINE_CASES:
        sched = compile_collective(topo, "all_reduce", 2 ** 30, chunks=chunks, algorithm=algo)
        cached, read = timed(lambda: ReadTables(sched), 1)
        result, med = timed(lambda: congestion.run(cached, mode="full", engine="compiled"), args.runs)
        n = result.link_transfers["simulated"]
        py = ratio = "-"
        if not args.skip_python and n < 500_000:
            presult, pmed = timed(lambda: congestion.run(cached, mode="full", engine="python"), args.runs)
            assert presult.total_ns == result.total_ns
            py, ratio = f"{pmed:.3f}", f"{pmed / med:.1f}x"
        print(f"{name:70s} {n:10d} {read:9.3f} {med:8.3f} {n / med:12.0f} {py:>9s} {ratio:>6s}")
    exe = shutil.which("astra-compile")
    print("\nCLI end to end, 1GB all-reduce in 64 chunks, --backend congestion (start-up and compilation included)")
    print(f"{'topology':32s} {'execution':10s} {'simulated':>10s} {'modelled':>10s} {'median s':>9s} "
          f"{'modelled/s':>11s} {'total us':>11s}")
    for name, extra in CLI_CASES:
        for execution in ("full", "symmetric"):
            argv = [exe, "--collective", "all_reduce", "--size", "1GB", "--chunks", "64", "--backend", "congestion",
                    "--execution", execution, "--json", *extra]
            out, med = timed(lambda: subprocess.run(argv, capture_output=True, text=True, check=True).stdout,
                             args.runs)
            report = json.loads(out)
            transfers = report["link_utilization"]["transfers"]
            print(f"{name:32s} {execution:10s} {transfers['simulated']:10d} {transfers['modelled']:10d} "
                  f"{med:9.3f} {transfers['modelled'] / med:11.0f} {report['total_time_us']:11.3f}")


if __name__ == "__main__":
    main()
