"""Speed at scale of whole-network algorithms, the congestion model and the optimal scheduler: wall time
and peak memory of each case below, as fresh CLI processes, medians of several runs.

With several `--exe` (an install of an earlier commit beside this one) the runs interleave and the ratio is
measured in one run. Cases slower than `--timeout` show as inf.

    python benchmarks/scale.py [--runs 3] [--timeout 300] [--exe PATH ...]
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from cli_scale import arguments, table

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
ALL_REDUCE = ["--collective", "all_reduce", "--size", "1GB"]
CACHE = tempfile.mkdtemp(prefix="astra-scale-cache-")
atexit.register(shutil.rmtree, CACHE, True)
CASES = [
    ("MultiTree 1GB all-reduce, 16x16 torus (256 NPUs)",
     [*ALL_REDUCE, "--topology", "16x16_torus", "--algorithm", "multitree"]),
    ("MultiTree 1GB all-reduce, 32x32 torus (1024 NPUs)",
     [*ALL_REDUCE, "--topology", "32x32_torus", "--algorithm", "multitree"]),
    ("congestion, 1GB all-reduce, Switch(8)^3 (512 NPUs), 64 chunks, full execution",
     [*ALL_REDUCE, "--topology", "Switch(8)_Switch(8)_Switch(8)", "--chunks", "64", "--backend", "congestion",
      "--execution", "full"]),
    ("congestion, 1GB all-reduce, 16x16x16 torus (4096 NPUs), 64 chunks, full execution",
     [*ALL_REDUCE, "--topology", "16x16x16_torus", "--chunks", "64", "--backend", "congestion",
      "--execution", "full"]),
    ("optimal scheduler, 1GB all-reduce, 16x16x16x16 torus (65,536 NPUs)",
     [*ALL_REDUCE, "--topology", "16x16x16x16_torus", "--scheduler", "optimal"]),
    ("themis scheduler, 1GB all-reduce, 16x16x16x16 torus (65,536 NPUs)",
     [*ALL_REDUCE, "--topology", "16x16x16x16_torus", "--scheduler", "themis"]),
    # every NPU's table, written NPU after NPU (Schedule.table's read-ahead)
    ("--emit tables, 1GB all-reduce, Switch(8)^3 (512 tables), 8 chunks",
     [*ALL_REDUCE, "--topology", "Switch(8)_Switch(8)_Switch(8)", "--chunks", "8", "--emit", "tables", "-o",
      os.path.join(CACHE, "tables"), "--force"]),
    ("training step: examples/gpt_tp_dp.py on 8x8_torus",
     [os.path.join(EXAMPLES, "gpt_tp_dp.py"), "--topology", "8x8_torus"]),
    # the first run fills the cache: the median of three or more runs is a run that reuses it
    ("training step: examples/gpt_tp_dp.py on 8x8_torus, --cache (median: a reusing run)",
     [os.path.join(EXAMPLES, "gpt_tp_dp.py"), "--topology", "8x8_torus", "--cache", CACHE]),
]


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0], 3)
    table(CASES, args.runs, args.exe, args.timeout, width=84)
