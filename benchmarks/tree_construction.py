"""MultiTree tree construction time (target: 16x16 torus under 1 s, 32x32 torus under 5 s).

For each network: steps, the lower bound (link count and in-degree), and the median wall time of the translated
construction (tori: one tree moved to every root) and of the greedy turns (every network), as the compiler picks
between them; through switches (bigraphs, Switch dimensions), the greedy over routed NPU-to-NPU paths, the only
method there and the reason for its NPU limit (multitree.PATH_TREES_MAX_NPUS). Medians of several runs; the machine
is shared.

    python benchmarks/tree_construction.py [--runs 3] [--networks 8x8_torus,16x16_torus,32x32_torus,...]
"""
from __future__ import annotations

import argparse

from astra_compile.algorithms.multitree import build_trees, path_trees, routed, step_lower_bound
from astra_compile.algorithms.translated_trees import translated_trees
from astra_compile.network.parse import parse_topology

from _timing import timed  # this folder is on the path when the script runs

NETWORKS = ("8x8_torus,16x16_torus,32x32_torus,4x4x4_torus,8x8x8_torus,8x8_mesh,16x16_mesh,32x32_mesh,"
            "4x8_bigraph,8x16_bigraph,Switch(8)_Switch(16)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--networks", default=NETWORKS)
    args = ap.parse_args()
    print(f"{'network':>20s} {'NPUs':>6s} {'bound':>6s} {'translated':>11s} {'median s':>9s} {'greedy':>7s} "
          f"{'median s':>9s}")
    for name in args.networks.split(","):
        topo = parse_topology(name)
        if routed(topo):   # no link-count bound nor translation through switches: the path greedy alone
            trees, wall = timed(lambda: path_trees(topo), args.runs)
            print(f"{name:>20s} {topo.npus:6d} {'-':>6s} {'-':>11s} {'-':>9s} {trees.steps:7d} {wall:9.3f}")
            continue
        lg = topo.links()
        bound = step_lower_bound(topo.npus, lg.src, lg.dst)
        trans, t_wall = timed(lambda: translated_trees(topo, lg), args.runs)
        greedy, g_wall = timed(lambda: build_trees(topo.npus, lg.src, lg.dst), args.runs)
        t_steps = "-" if trans is None else str(trans.steps)
        t_time = "-" if trans is None else f"{t_wall:.3f}"
        print(f"{name:>20s} {topo.npus:6d} {bound:6d} {t_steps:>11s} {t_time:>9s} {greedy.steps:7d} {g_wall:9.3f}")


if __name__ == "__main__":
    main()
