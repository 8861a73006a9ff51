"""All-reduce time on an 8x8 torus, 100 GB/s per dimension (50 GB/s per link and direction), 64KB to 1GB:
MultiTree against the per-dimension algorithms (ring per dimension = 2D-ring, double binary tree per dimension,
direct) and the topology-unaware ones over all NPUs whose messages are routed dimension by dimension (rank-order
ring, halving-doubling, double binary tree, direct), on the congestion-aware runtime (links are resources) and the
analytical one.

    python benchmarks/multitree_compare.py [--topology 8x8_torus] [--latency 500] [--plot FILE.png]
    python benchmarks/multitree_compare.py --topology 4x8_bigraph --bandwidth 50   (BiGraph, 32 NPUs: 50 GB/s per link)

On a graph topology (4x8_bigraph) the algorithms run over ranks along shortest paths: the per-dimension ring is
"ring (rank order, one way)", `rank_ring` the same ring both ways round; the Hamiltonian ring does not apply.

"ring (Hamiltonian)" is one bidirectional ring over all NPUs along a Hamiltonian cycle of the torus (the MultiTree
paper's "ring" baseline); "2D-ring" runs a ring per dimension.
"""
from __future__ import annotations

import argparse

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.network.errors import UserError
from astra_compile.passes.base import PassError
from astra_compile.runtime import analytical, congestion
from astra_compile.network.parse import parse_topology
from astra_compile.network.units import parse_size

SIZES = ["64KB", "1MB", "16MB", "256MB", "1GB"]
ALGOS = [("multitree", "multitree"), ("ring (Hamiltonian)", "flat_ring"), ("2D-ring", "ring"),
         ("dbt per dim", "double_binary_tree"), ("direct per dim", "direct"),
         # topology-unaware, over all NPUs, messages routed dimension by dimension
         ("rank-order ring (routed)", "rank_ring"), ("halving-doubling (routed)", "flat_halving_doubling"),
         ("dbt (routed)", "flat_double_binary_tree"), ("direct (routed)", "flat_direct")]
# on a graph topology the per-dimension algorithms already run over ranks along shortest paths: only the ring
# (one way round) differs from a routed one
GRAPH_ALGOS = [("multitree", "multitree"), ("ring (rank order, one way)", "ring"),
               ("rank-order ring (both ways)", "rank_ring"), ("halving-doubling (routed)", "flat_halving_doubling"),
               ("HDRM (rank-mapped halving-doubling)", "hdrm"),
               ("dbt (routed)", "flat_double_binary_tree"), ("direct (routed)", "flat_direct")]


def measure(topology: str, bandwidth: str, latency: str, sizes: list[str]) -> dict:
    """{size: {algorithm label: (congestion us, analytical us)}} for all-reduce of each size."""
    topo = parse_topology(topology, bandwidth, latency)
    ctx = comm.new_context()
    out = {}
    for size in sizes:
        source = str(driver.build_module(ctx, topo, "all_reduce", parse_size(size)))
        out[size] = {}
        for name, algo in (GRAPH_ALGOS if topo.graph is not None else ALGOS):
            try:
                sched = driver.compile_schedule(source, ctx, topo, "baseline", {"algorithm": algo}).schedule
            except (UserError, PassError):  # e.g. halving-doubling on a network that is not a power of two
                continue
            out[size][name] = (congestion.run(sched).total_ns / 1e3, analytical.run(sched).total_ns / 1e3)
    return out


def plot(results: dict, title: str, path: str) -> None:
    """Congestion-aware time against size, one line per algorithm, log-log."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = list(results)
    x = [parse_size(s) for s in sizes]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in results[sizes[0]]:
        if any(name not in results[s] for s in sizes):
            continue
        ax.plot(x, [results[s][name][0] for s in sizes], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(x, sizes)
    ax.set_xlabel("all-reduce size")
    ax.set_ylabel("time (us, congestion-aware)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="8x8_torus")
    ap.add_argument("--bandwidth", default="100")
    ap.add_argument("--latency", default="500")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--plot", metavar="FILE.png", help="also draw the congestion-aware times (matplotlib)")
    args = ap.parse_args()
    results = measure(args.topology, args.bandwidth, args.latency, args.sizes.split(","))
    title = f"{parse_topology(args.topology).name}, {args.bandwidth} GB/s per dimension, {args.latency} ns"
    print(f"{title}; all-reduce time in us (congestion-aware / analytical)")
    names = [name for name in next(iter(results.values())) if all(name in times for times in results.values())]
    versus = [n for n in ("ring (Hamiltonian)", "2D-ring", "ring (rank order, one way)", "halving-doubling (routed)",
                          "HDRM (rank-mapped halving-doubling)") if n in names]
    w = max(26, max(len(n) for n in names) + 2)
    print(f"{'size':>8s}" + "".join(f"{name:>{w}s}" for name in names)
          + "".join(f"{'multitree vs ' + n.split(' (')[0]:>30s}" for n in versus))
    for size, times in results.items():
        row = "".join(f"{f'{times[n][0]:12.1f} / {times[n][1]:11.1f}':>{w}s}" for n in names)
        print(f"{size:>8s}{row}" + "".join(f"{times[n][0] / times['multitree'][0]:29.2f}x" for n in versus))
    if args.plot:
        plot(results, title, args.plot)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
