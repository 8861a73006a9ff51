"""Bandwidth utilisation of 1GB all-reduce against the chunk count: baseline, Themis and optimal (Themis, ISCA'22).

Networks: the ASTRA-sim tutorial's 3D switch and the Themis paper's four topologies (latencies as listed there;
SW_SW_SW_hetero lists two values for three dimensions: 700, 700, 1700 ns assumed). Prints one table per network; the
last table is the mean.

    python benchmarks/themis_chunks.py [--chunks 4,8,16,32,64,128,256] [--active-chunks 1]
"""
from __future__ import annotations

import argparse
import statistics

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology

NETWORKS = [
    ("tutorial 3D-SW 8x8x8", "Switch(8)_Switch(8)_Switch(8)", "50,50,50", "1,1,1"),
    ("3D-SW_SW_SW_hetero", "Switch_Switch_Switch:16x8x8", "200,100,50", "700,700,1700"),
    ("3D-FC_Ring_SW", "FC_Ring_Switch:8x16x8", "175,100,50", "700,700,1700"),
    ("4D-Ring_SW_SW_SW", "Ring_Switch_Switch_Switch:4x4x8x8", "250,200,100,50", "20,700,700,1700"),
    ("4D-Ring_FC_Ring_SW", "Ring_FC_Ring_Switch:4x8x4x8", "375,175,150,100", "20,700,700,1700"),
]
RUNS = [("baseline", "fifo"), ("themis", "scf"), ("optimal", "scf")]


def utilisation(spec, bw, lat, chunks, scheduler, intra, active) -> float:
    topo = parse_topology(spec, bw, lat)
    ctx = comm.new_context()
    source = str(driver.build_module(ctx, topo, "all_reduce", 2 ** 30))
    run = driver.RunOptions(intra=intra, active_chunks=active)
    return driver.compile_schedule(source, ctx, topo, scheduler, {"chunks": chunks}, run).report.bw_utilization


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", default="4,8,16,32,64,128,256")
    ap.add_argument("--active-chunks", type=int, default=1)
    args = ap.parse_args()
    counts = [int(c) for c in args.chunks.split(",")]
    means = {run: {c: [] for c in counts} for run in RUNS}
    for name, spec, bw, lat in NETWORKS:
        print(f"\n{name}: {spec}, {bw} GB/s, {lat} ns, active chunks {args.active_chunks}")
        print(f"{'chunks':>8s}" + "".join(f"{s + '/' + i:>16s}" for s, i in RUNS))
        for c in counts:
            row = []
            for run in RUNS:
                u = utilisation(spec, bw, lat, c, *run, args.active_chunks)
                row.append(u)
                if name != NETWORKS[0][0]:
                    means[run][c].append(u)
            print(f"{c:8d}" + "".join(f"{100 * u:15.2f}%" for u in row))
    print("\nmean over the Themis paper's four topologies")
    print(f"{'chunks':>8s}" + "".join(f"{s + '/' + i:>16s}" for s, i in RUNS))
    for c in counts:
        print(f"{c:8d}" + "".join(f"{100 * statistics.mean(means[run][c]):15.2f}%" for run in RUNS))


if __name__ == "__main__":
    main()
