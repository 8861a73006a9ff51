"""All-reduce time on an 8x8 torus, 100 GB/s per dimension (50 GB/s per link and direction), 64KB to 1GB:
MultiTree against the per-dimension algorithms (ring per dimension = 2D-ring, double binary tree per dimension,
direct), on the congestion-aware runtime (links are resources) and the analytical one.

    python benchmarks/multitree_compare.py [--topology 8x8_torus] [--latency 500]

"ring (Hamiltonian)" is one bidirectional ring over all NPUs along a Hamiltonian cycle of the torus (the seed's
"ring" baseline); "2D-ring" runs a ring per dimension.
"""
from __future__ import annotations

import argparse

from astra_compile import driver
from astra_compile.dialects import comm
from astra_compile.runtime import analytical, congestion
from astra_compile.topology import parse_topology

SIZES = ["64KB", "1MB", "16MB", "256MB", "1GB"]
ALGOS = [("multitree", "multitree"), ("ring (Hamiltonian)", "flat_ring"), ("2D-ring", "ring"),
         ("dbt per dim", "double_binary_tree"), ("direct per dim", "direct")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="8x8_torus")
    ap.add_argument("--bandwidth", default="100")
    ap.add_argument("--latency", default="500")
    args = ap.parse_args()
    from astra_compile.units import parse_size
    topo = parse_topology(args.topology, args.bandwidth, args.latency)
    ctx = comm.new_context()
    print(f"{topo.name}, {args.bandwidth} GB/s per dimension, {args.latency} ns; all-reduce time in us "
          f"(congestion-aware / analytical)")
    print(f"{'size':>8s}" + "".join(f"{name:>26s}" for name, _ in ALGOS) + f"{'vs ring':>10s}{'vs 2D-ring':>12s}")
    for size in SIZES:
        source = str(driver.build_module(ctx, topo, "all_reduce", parse_size(size)))
        row, times = [], {}
        for name, algo in ALGOS:
            sched = driver.compile_schedule(source, ctx, topo, "baseline", {"algorithm": algo}).schedule
            c = congestion.run(sched).total_ns / 1e3
            a = analytical.run(sched).total_ns / 1e3
            times[name] = c
            row.append(f"{c:12.1f} / {a:11.1f}")
        print(f"{size:>8s}" + "".join(f"{v:>26s}" for v in row)
              + f"{times['ring (Hamiltonian)'] / times['multitree']:9.2f}x"
              + f"{times['2D-ring'] / times['multitree']:11.2f}x")


if __name__ == "__main__":
    main()
