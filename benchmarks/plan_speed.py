"""How fast `astra-compile plan` searches (issue 35): the Llama-3-70B-shaped model (models/llama70b_plan.py) on
256 H100s (dgx-h100:32) for one global batch.

It prints the search (layouts enumerated, those skipped by their memory's lower bound, those left to run, how many
of them are timed at reduced depth (compiler/plan/depth.py: the model at 2 and 3 blocks per pipeline stage,
extrapolated), and the seconds enumerating, bounding and choosing the depths took, median of --runs) and where one
layout's seconds go, for --sample layouts spread over those left to run, each in this process: the capture
(build, parallelize and record the step on fake tensors) and the rest (lowering, collectives, the engine), both
shallower runs summed for a layout at reduced depth; then the whole search's wall time and a 200-layout search's
projected for --workers processes (the sweep's workers import torch once each, not once per layout). --depth full
times the layouts whole, as before reduced depth. With --full it runs the real `astra-compile plan` too and prints
its wall time, layouts per second, the layouts run and those it did not run by their step's bound
(compiler/plan/step_bound.py: the projection above runs them all), --full-runs times, and their median.

    python benchmarks/plan_speed.py [--global-batch 256] [--sample 3] [--workers 2] [--depth auto|full] [--full]
                                    [--full-runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "models", "llama70b_plan.py")
CLUSTER = "dgx-h100:32"


def search(global_batch: int, runs: int, whole: bool):
    """(the layouts, {index: bound} of those skipped, {index: Extrapolation} of those at reduced depth, median
    seconds to load the file, enumerate, bound and choose the depths)."""
    from astra_compile.compiler.plan import command, depth, space
    from astra_compile.network import clusters
    cluster = clusters.resolve(CLUSTER)
    walls, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        spec, names, sizes, _seq, _fits = command._inspect(MODEL, cluster, None)
        searched = space.space_of(spec, names, MODEL)
        found = space.layouts(searched, cluster.gpus, cluster.per_node, global_batch, sizes.blocks)
        pruned = command._prune(MODEL, found, sizes, cluster)
        depths = depth.plan(spec, names, MODEL, sizes.blocks, found, set(pruned), searched.depth, whole)
        walls.append(time.perf_counter() - start)
        out = found, pruned, depths.layouts
    return (*out, statistics.median(walls))


def one_layout(layout, global_batch: int, directory: str, ex=None) -> tuple[float, float, float, float]:
    """(capture seconds, its CPU seconds, the rest's seconds, step ms) of one layout, run in this process without
    a cache (CPU seconds: what a busy machine does not inflate); with `ex` (plan/depth.Extrapolation) both
    shallower runs, their seconds summed and the step extrapolated."""
    if ex is not None:
        runs = [one_run(layout, global_batch, directory, (ex.name, setting)) for setting in ex.settings]
        return (*(sum(r[k] for r in runs) for k in range(3)), ex.at(runs[0][3], runs[1][3]))
    return one_run(layout, global_batch, directory, None)


def one_run(layout, global_batch: int, directory: str, shallower) -> tuple[float, float, float, float]:
    import astra_compile
    from astra_compile.compiler.api.api import load_workload
    from astra_compile.compiler.core import heap
    from astra_compile.compiler.frontend.layout import layout_file_text
    from astra_compile.compiler.frontend.mesh import parse_mesh
    world = 256
    path = os.path.join(directory, f"layout_{abs(hash((layout, shallower)))}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(layout_file_text(MODEL, "-", layout.micro_batch * layout.microbatches, layout.microbatches,
                                 layout.checkpointing, layout.schedule, "pp" in layout.axes, layout.label(world),
                                 shallower))
    mesh = parse_mesh(layout.mesh_text(world))
    start, cpu = time.perf_counter(), time.process_time()
    with heap.compiling():   # as the command line's compile: what a capture keeps is frozen out of the collector
        workload = load_workload(path, world, mesh, capture_limit=None)
        captured, captured_cpu = time.perf_counter() - start, time.process_time() - cpu
        report = astra_compile.compile(workload, cluster=CLUSTER, mesh=mesh)
    return captured, captured_cpu, time.perf_counter() - start - captured, report.total_time_us / 1e3


def spread(items: list, n: int) -> list:
    """n items evenly spaced over the list (its first and last among them)."""
    if n >= len(items):
        return list(items)
    return [items[round(k * (len(items) - 1) / max(n - 1, 1))] for k in range(n)]


def torch_import_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def full(global_batch: int, workers: int, depth: str, runs: int) -> None:
    """The real plan `runs` times, each first run (a fresh results file, no cache): each run's line, then the
    median wall time and whether every run printed the same fastest layouts."""
    import json
    walls, tops = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            start = time.perf_counter()
            done = subprocess.run(["astra-compile", "plan", MODEL, "--cluster", CLUSTER, "--global-batch",
                                   str(global_batch), "--workers", str(workers), "--depth", depth, "--json", "-o",
                                   os.path.join(d, "plan.csv")], capture_output=True, text=True)
            wall = time.perf_counter() - start
        layouts = json.loads(done.stdout)["layouts"] if done.returncode in (0, 1) else []
        ran = sum(not lay["memory_estimated"] and lay["status"] != "skipped" for lay in layouts)
        skipped = sum(lay["status"] == "skipped" for lay in layouts)
        walls.append(wall)
        tops.append([(lay["layout"], round(lay["step_time_us"])) for lay in layouts[:5]])
        print(f"full plan: {len(layouts)} layouts, {ran} run, {skipped} not run by their step's bound, {wall:.0f} s "
              f"wall, {len(layouts) / wall:.3f} layouts/s; exit {done.returncode}; "
              f"{done.stderr.strip().splitlines()[-1:]}", flush=True)
    print(f"full plan: median {statistics.median(walls):.0f} s wall over {runs} run(s) "
          f"({', '.join(f'{w:.0f}' for w in walls)}); the same five fastest in each: {all(t == tops[0] for t in tops)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--sample", type=int, default=3,
                    help="layouts at reduced depth timed one by one (default 3)")
    ap.add_argument("--sample-whole", type=int, default=1, help="layouts run whole timed one by one (default 1)")
    ap.add_argument("--runs", type=int, default=3, help="runs of the enumeration and bounding (median)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--depth", choices=("auto", "full"), default="auto",
                    help="auto: layouts at reduced depth where plan would (default); full: every layout whole")
    ap.add_argument("--full", action="store_true", help="also run the whole plan")
    ap.add_argument("--full-runs", type=int, default=1, help="times to run the whole plan (median; default 1)")
    args = ap.parse_args()
    found, pruned, depths, enum_s = search(args.global_batch, args.runs, args.depth == "full")
    left = [(i, lay) for i, lay in enumerate(found) if i not in pruned]
    print(f"Llama-3-70B shape on {CLUSTER} (256 GPUs), global batch {args.global_batch}")
    print(f"layouts {len(found)}, over memory by their lower bound {len(pruned)} (not run), to run {len(left)}, "
          f"{len(depths)} of them at reduced depth; enumerating, bounding and choosing depths {enum_s:.2f} s "
          f"(median of {args.runs})")
    print(f"torch import in a fresh process {torch_import_seconds():.1f} s (once per sweep worker)")
    print(f"{'layout':72s} {'depth':>7s} {'capture s':>9s} {'CPU s':>7s} {'rest s':>7s} {'step ms':>9s}")
    per: dict = {"reduced": [], "whole": []}
    short = [(i, lay) for i, lay in left if i in depths]
    whole = [(i, lay) for i, lay in left if i not in depths]
    with tempfile.TemporaryDirectory() as d:
        for i, lay in spread(short, args.sample) + spread(whole, args.sample_whole):
            ex = depths.get(i)
            cap, cpu, rest, step = one_layout(lay, args.global_batch, d, ex)
            per["whole" if ex is None else "reduced"].append(cap + rest)
            how = "whole" if ex is None else f"{ex.depths[0]},{ex.depths[1]}"
            print(f"{lay.label(256):72s} {how:>7s} {cap:9.1f} {cpu:7.1f} {rest:7.1f} {step:9.1f}", flush=True)
    medians = {k: statistics.median(v) for k, v in per.items() if v}
    for kind, layouts in (("reduced", short), ("whole", whole)):
        if kind in medians:
            print(f"{kind}: {len(layouts)} layouts, median {medians[kind]:.1f} s a layout, "
                  f"{len(layouts) * medians[kind] / args.workers / 60:.0f} min on {args.workers} workers")
    if len(medians) == 2 or (medians and not (short and whole)):
        wall = sum(len(ls) * medians.get(k, 0.0) for k, ls in (("reduced", short), ("whole", whole))) / args.workers
        print(f"projected search {wall / 60:.0f} min on {args.workers} workers ({len(found) / wall:.3f} layouts/s), "
              "every layout run whole among them (the real plan skips those whose step's bound exceeds the top "
              "five's: --full)")
    if args.full:
        full(args.global_batch, args.workers, args.depth, args.full_runs)


if __name__ == "__main__":
    main()
