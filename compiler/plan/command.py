"""`astra-compile plan`: the best parallel layouts for a model file on a cluster, memory included (docs/plan.md).

    astra-compile plan model.py --cluster dgx-h100:32 --global-batch 512 [--top 5] [-o layouts.csv] [--json]

enumerates the layouts the file supports (plan/space.py), skips those whose memory's lower bound exceeds a GPU's
(plan/memory.py), writes each other as a small model file (frontend/layout.py), runs them on the sweep engine
(the local pool, or Ray with --ray; captures shared through the cache) in order of a lower bound on their step,
skipping those surely slower than the --top fastest found (plan/step_bound.py, probe.py, order.py), and prints
the fastest that fit a GPU's memory, with step time, tokens per second per GPU, MFU, memory per rank, exposed
communication and idle time (the pipeline bubble). With -o the results file is kept and the same command
resumes; --plot draws step time against memory with the Pareto front.

Exit status: 0 when a layout fits and ran, 1 when none did (every failure is listed), 2 for bad input (nothing
runs): an unknown cluster, a global batch no layout divides, a model too large for the cluster at all (or for
every layout's bound).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
import tempfile

from ...network.errors import UserError
from ...runtime import atomic
from ..frontend.layout import layout_file_text
from ..sweep import command as sweep_command
from ..sweep import results as results_mod
from ..sweep import workers as workers_mod
from ..sweep.plot import read_results
from ..sweep.spec import Point, Sweep
from . import depth as depth_mod
from . import head_probe, memory, order, probe
from . import space as space_mod
from . import step_bound
from .rank import FIRST_DEPTH, SECOND_DEPTH, WHOLE_AGAIN, Outcome, host_limited, outcomes, point, table

MAX_LAYOUTS = 100_000


def build_parser() -> argparse.ArgumentParser:
    from ..cli.parser import Parser
    p = Parser(prog="astra-compile plan", description="Find the fastest parallel layouts of a model file on a "
                                                      "cluster, memory included (docs/plan.md).")
    p.add_argument("model", help="the model file (.py, docs/workloads.md)")
    p.add_argument("--cluster", required=True, metavar="NAME:NODES[xGPUS]",
                   help="the cluster, or part of each node: dgx-a100:1x4 (docs/clusters.md)")
    p.add_argument("--gpu", metavar="NAME|FILE", help="the GPU instead of the cluster's: a preset or a device file "
                                                     "(docs/compute.md), for the runs and the memory verdicts")
    p.add_argument("--global-batch", required=True, type=int, metavar="SAMPLES",
                   help="samples per optimizer step over every GPU")
    p.add_argument("--seq", type=int, metavar="TOKENS", help="tokens per sample for tokens/s (default: the "
                                                            "second dimension of an integer 2-D first input, else 1)")
    p.add_argument("--top", type=int, default=5, help="how many layouts to print (default 5)")
    p.add_argument("-o", "--output", metavar="RESULTS.csv", help="keep every layout's result here (resumable); "
                                                                 "the layout files go beside it")
    p.add_argument("--json", action="store_true", help="print the ranked layouts as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="step time against memory per rank, the Pareto front marked")
    p.add_argument("--max-layouts", type=int, default=1000, help="refuse a search larger than this (default 1000)")
    p.add_argument("--workers", type=int, help="processes (default: this machine's cores)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS", help="run the layouts as Ray tasks")
    p.add_argument("--cache", metavar="DIR", help="keep captures and compiled collectives in DIR")
    p.add_argument("--capture-limit", type=float, metavar="SECONDS",
                   help="CPU seconds each layout's capture may take (default: astra-compile's, 600); a layout over "
                        "it fails and is listed")
    p.add_argument("--depth", choices=("auto", "full"), default="auto",
                   help="auto: time each layout on the model at 2 and 3 blocks per pipeline stage and extrapolate "
                        "where the file's depth can be set (docs/plan.md, 'Reduced depth'); full: run every layout "
                        "whole")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")
    return p


def main(argv: list[str]) -> int:
    from ..cli.parser import run_subcommand
    return run_subcommand(build_parser, run, argv, "astra-compile plan: interrupted; with -o the finished layouts "
                                                   "are kept and the same command resumes")


def run(args) -> int:
    from ...network import clusters
    cluster = clusters.resolve(args.cluster)
    if args.gpu is not None:   # (an unknown GPU: one line, before anything runs)
        from ...network import devices
        devices.resolve(args.gpu)
        args.gpu = os.path.abspath(args.gpu) if os.path.isfile(args.gpu) else args.gpu   # (the workers' too)
        cluster = dataclasses.replace(cluster, gpu=args.gpu)
    world = cluster.gpus
    if args.global_batch < 1:
        raise UserError(f"--global-batch {args.global_batch}: expected a sample count of 1 or more")
    if args.top < 1 or args.max_layouts < 1 or (args.seq is not None and args.seq < 1):
        raise UserError("--top, --max-layouts and --seq must be 1 or more")
    if args.capture_limit is not None:
        from ..cli.parser import capture_limit
        capture_limit(args.capture_limit)
    workers = workers_mod.cpu_count() if args.workers is None else args.workers
    if not 1 <= workers <= 1024:
        raise UserError(f"--workers must be 1..1024, got {workers}")
    path = os.path.abspath(args.model)
    spec, names, sizes, seq, fits_at_all = _inspect(path, cluster, args.seq)
    searched = space_mod.space_of(spec, names, args.model)
    found = space_mod.layouts(searched, world, cluster.per_node, args.global_batch, sizes.blocks)
    if not found:
        raise UserError(f"--global-batch {args.global_batch}: no layout of {args.model} on {world} GPUs divides it "
                        "among its data-parallel ranks (give a multiple of the data-parallel sizes)")
    if len(found) > min(args.max_layouts, MAX_LAYOUTS):
        raise UserError(f"{args.model}: {len(found)} layouts on {world} GPUs, more than --max-layouts "
                        f"{args.max_layouts}; restrict the search with plan_space() (docs/plan.md)")
    fits_at_all()
    pruned = _prune(args.model, found, sizes, cluster)
    depths = depth_mod.plan(spec, names, args.model, sizes.blocks, found, set(pruned), searched.depth,
                            whole=args.depth == "full")
    _say_depth(depths, len(found) - len(pruned))
    if args.plot:
        from ..core.plotting import check_suffix
        check_suffix(args.plot, "--plot")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="astra-plan-") as scratch:
        results_path = os.path.abspath(args.output) if args.output else os.path.join(scratch, "layouts.csv")
        folder = _layouts_folder(path, results_path, args)
        # what every run is given besides its file, mesh and cluster
        limit = {} if args.capture_limit is None else {"capture_limit": args.capture_limit}
        limit |= {} if args.gpu is None else {"gpu": args.gpu}

        def layouts(indices, again: bool = False, files: bool = True) -> Sweep:
            return _write_layouts(path, digest, found, indices, depths.layouts, folder, world, args.cluster,
                                  results_path, limit, again, files)

        running = [i for i in range(len(found)) if i not in pruned]
        shallower = [i for i in running if i in depths.layouts]   # seconds each: they run first
        whole = [i for i in running if i not in depths.layouts]
        made = probe.probes(found, running, cluster, depths.name, spec.parallelize is not None, step_bound.kind)
        heads, head_counts = _head_probes(spec, path, found, running, made, depths.name)

        def probes(files: bool = True) -> Sweep:
            if files and made:
                os.makedirs(folder, exist_ok=True)
            return Sweep(results_path, {}, ("layout", "depth"), tuple(probe.sweep_points(
                path, digest, len(found), made, depths.name, folder, cluster, args.cluster, limit, files,
                _write_if_changed) + head_probe.sweep_points(
                path, digest, len(found), len(made), heads, depths.name, folder, cluster, args.cluster, limit, files,
                _write_if_changed)))
        # every point the results file may hold (a resumed plan's whole runs again among them)
        known = layouts(running, files=False).points + layouts(shallower, again=True, files=False).points + \
            probes(files=False).points

        def run_some(indices: list, again: bool = False) -> list[dict]:
            return _run(args, layouts(indices, again), results_path, workers, known)

        rows = _run(args, probes(), results_path, workers, known)   # a block's serial time: seconds each
        _say_probes_failed(rows, len(found))
        from ...network import devices
        serial = probe.measured(rows, made, len(found))
        bounds = step_bound.Bounds(spec, path, found, sizes.blocks, devices.resolve(cluster.gpu), serial,
                                   depths.layouts, head_probe.measured(rows, heads, len(made), len(found), serial),
                                   head_counts)
        if spec.parallelize is None:   # (a file's own parallelize() may compute in another dtype than its probes)
            over = _prune_in_flight(found, running, sizes, cluster, probe.activations(rows, made, len(found)),
                                    bounds.per_stage)
            pruned.update(over)
            running = [i for i in running if i not in over]
            shallower = [i for i in shallower if i not in over]
            whole = [i for i in whole if i not in over]

        def threshold(rows: list[dict]) -> float | None:
            # a layout to run again whole (below) has no step yet: its line may be short of it
            ran = {int(r["point"]) for r in rows}
            again = {i for i in host_limited(rows, found, depths.layouts)
                     if point(i, WHOLE_AGAIN, len(found)) not in ran}
            done = outcomes(rows, found, world, args.global_batch, seq, cluster, pruned, depths.layouts,
                            slack_with_tensors=not spec.expandable_segments)
            return step_bound.threshold_us([o for o in done if o.index not in again], args.top)

        def kind_of(i: int) -> tuple | None:   # (None: no probe for its kind, or one trusted from the start)
            return step_bound.kind(found[i]) if bounds.trust_by_runs and step_bound.key(found[i]) in bounds.serial \
                else None
        rows, skipped = order.run_in_order(shallower, rows, run_some, bounds, threshold, True, kind_of,
                                           max(args.top, workers))
        # a layout whose GPU's lead over the host shrinks with depth may turn host-bound only at the real depth,
        # which its shallower runs cannot show: it runs again whole (rank.WHOLE_AGAIN)
        again = host_limited(rows, found, depths.layouts)
        if again:
            print(f"astra-compile plan: {len(again)} layout{'s' if len(again) > 1 else ''} run again whole: the host "
                  "issues a block's ops more slowly than the step grows by a block, so the GPU may wait for it only "
                  "at the real depth", file=sys.stderr)
            rows = run_some(sorted(again), again=True)
        rows, later = order.run_in_order(whole, rows, run_some, bounds, threshold, False, kind_of)
        skipped.update(later)
        _say_skipped(skipped, len(running), threshold(rows), args.top)
        known_bounds = {i: b for i in running if i not in skipped and (b := bounds.of(i)) is not None}
    ranked = outcomes(rows, found, world, args.global_batch, seq, cluster, pruned, depths.layouts, skipped,
                      known_bounds, not spec.expandable_segments)
    return _show(args, ranked, world)


def _head_probes(spec, path: str, found: list, running: list, made: list, depth_name: str | None) -> tuple:
    """plan/head_probe.py's probes, for the block probes whose key a pipelined layout has, and the stage counts
    whose last stage holds the head."""
    piped = [found[i] for i in running if depth_mod.stages_of(found[i]) is not None]
    keys = {step_bound.key(lay) for lay in piped}
    counts = {math.prod(depth_mod.stages_of(lay)) for lay in piped}
    return head_probe.probes([p for p in made if p.key in keys], counts, spec, path, depth_name)


def _say_probes_failed(rows: list[dict], layouts: int) -> None:
    """One line on stderr where probes failed (the sweep has listed each): what that costs the plan."""
    failed = [r for r in rows if int(r["point"]) >= probe.FIRST_PROBE_POINT * layouts and r.get("status") != "ok"]
    if failed:
        why = (failed[0].get("error") or "").strip().splitlines()[:1]
        print(f"astra-compile plan: {len(failed)} probe run{'s' * (len(failed) > 1)} failed"
              + (f" (the first: {why[0]})" if why else "") + ": their layouts are bounded by their FLOPs alone, "
              "or not at all, so fewer are skipped (docs/plan.md, 'Skipped by their step's bound')", file=sys.stderr)


def _say_skipped(skipped: dict, running: int, limit: float | None, top: int) -> None:
    """One line on stderr: how many layouts were not run for their bound (plan/step_bound.py, plan/order.py)."""
    if skipped:
        print(f"astra-compile plan: {len(skipped)} of the {running} layouts not run: their step is surely slower "
              f"than the {top} fastest ({limit / 1e3:,.1f} ms and less; docs/plan.md, 'Skipped by their step's "
              "bound')", file=sys.stderr)


def _inspect(path: str, cluster, seq: int | None):
    """The model file loaded (its names, for the search space), its sizes (plan/memory.py), tokens per sample, and
    a check that refuses a cluster too small for the model at all (its parameters, gradients and Adam states fully
    sharded over every GPU already exceed a GPU's memory)."""
    from ..frontend.model_file import load_model_file, module_name
    spec = load_model_file(path)
    names = dict(vars(sys.modules[module_name(path)]))
    sizes = memory.sizes_of(spec)
    params, param_bytes = sizes.params, sizes.param_bytes
    tokens = seq if seq is not None else sizes.seq

    def fits_at_all():
        from ...network import devices
        gpu = devices.resolve(cluster.gpu)
        need = (2 * param_bytes + 8 * params) / cluster.gpus   # params and grads in their dtype, Adam's 2 fp32
        capacity = gpu.memory_gb * 1e9
        if need > capacity:
            raise UserError(f"{os.path.basename(path)}: {params / 1e9:.3g}B parameters need {need / 2**30:.1f} GiB "
                            f"per GPU for weights, gradients and Adam states even fully sharded over "
                            f"{cluster.gpus} GPUs, more than a {gpu.name}'s {gpu.memory_gb:g} GB: the cluster is "
                            "too small for this model")
    return spec, names, sizes, tokens, fits_at_all


def _prune(path: str, found: list, sizes, cluster) -> dict:
    """{layout index: its memory's lower bound} of the layouts that surely exceed a GPU's memory (plan/memory.py):
    they are not run. Every layout pruned is bad input: no layout can fit."""
    gpu, capacity = _capacity(cluster)
    bounds = [memory.lower_bound(sizes, lay) for lay in found]
    over = {i: b for i, b in enumerate(bounds) if b > capacity}
    if len(over) == len(found):
        least = min(bounds)
        raise UserError(f"{os.path.basename(path)}: none of its {len(found)} layouts on {cluster.gpus} GPUs fits a "
                        f"{gpu.name}'s {gpu.memory_gb:g} GB: the smallest needs at least {least / 2**30:.1f} GiB "
                        "per rank (weights, gradients, optimizer states and block inputs; docs/plan.md): the cluster "
                        "is too small for this model at this global batch")
    return over


def _capacity(cluster) -> tuple:
    """(the cluster's GPU, its memory in bytes)."""
    from ...network import devices
    gpu = devices.resolve(cluster.gpu)
    return gpu, int(gpu.memory_gb * 1e9)


def _prune_in_flight(found: list, running: list, sizes, cluster, activation: dict, per_stage) -> dict:
    """{layout index: its memory's bound} of the layouts `running` whose blocks' activations, as the probes measured
    them (`activation`: step_bound.key -> bytes of a block for one micro-batch), for the micro-batches in flight
    surely exceed a GPU's memory (plan/memory.in_flight_bound); one line on stderr says how many."""
    gpu, capacity = _capacity(cluster)
    out = {}
    for i in running:
        act = activation.get(step_bound.key(found[i]))
        stages = per_stage(i) if act else None
        if stages:
            bound = memory.in_flight_bound(sizes, found[i], stages, act)
            if bound > capacity:
                out[i] = bound
    if out:
        print(f"astra-compile plan: {len(out)} of the {len(running)} layouts not run: their activations for the "
              f"micro-batches in flight, as the block probes measured them, surely exceed a {gpu.name}'s "
              f"{gpu.memory_gb:g} GB (docs/plan.md, 'Memory before running')", file=sys.stderr)
    return out


def _layouts_folder(path: str, results_path: str, args) -> str:
    """Where the layout files go: beside the results file with -o; else, with --cache, in the cache under the
    model file's digest, so a later plan of the same file (another cluster of the same shape, another --top) names
    the same files and the cache, which keys a capture by its file's path and content, gives their captures back;
    else in the plan's scratch folder."""
    if args.output or not args.cache:
        return os.path.splitext(results_path)[0] + ".layouts"
    from ..core import reuse
    cache = reuse.open_dir(args.cache)   # a --cache that is not a directory: one line, before anything is written
    return os.path.join(cache.directory, "plan-layouts", reuse.file_digest(path))


def _say_depth(depths, running: int) -> None:
    """One line on stderr (stdout holds the table or JSON): how many layouts run shallower, or why none does."""
    n = len(depths.layouts)
    if n:
        flat, staged = depth_mod.DEPTHS, depth_mod.PIPELINE_DEPTHS
        print(f"astra-compile plan: {n} of {running} layouts timed with {depths.name} set for {flat[0]} and "
              f"{flat[1]} blocks ({staged[0]} and {staged[1]} per pipeline stage) and extrapolated to the real "
              f"depth; {running - n} run whole (--depth full: all)", file=sys.stderr)
    else:
        print(f"astra-compile plan: every layout runs whole: {depths.why_whole}", file=sys.stderr)


def _write_layouts(path: str, digest: str, found: list, indices: list, depths: dict, folder: str, world: int,
                   cluster: str, results_path: str, options: dict, again: bool = False, files: bool = True) -> Sweep:
    """The sweep of the layouts `indices`, each point numbered as its layout in `found` (so the results file's rows
    and the layout files keep their layout's number; rank.point), each written as a layout file (`files`: else only
    the points); a layout in `depths` (plan/depth.py) runs twice, at its two shallower depths, or with `again`
    whole after them (rank.WHOLE_AGAIN)."""
    if files:
        os.makedirs(folder, exist_ok=True)
    points = []
    for i in indices:
        lay = found[i]
        ex = None if again else depths.get(i)
        whole = point(i, WHOLE_AGAIN if again else FIRST_DEPTH, len(found))
        runs = [(whole, "full", None, "")] if ex is None else \
            [(point(i, k, len(found)), str(d), (ex.name, setting), f"_depth{d}")
             for k, (d, setting) in zip((FIRST_DEPTH, SECOND_DEPTH), zip(ex.depths, ex.settings))]
        for index, depth, shallower, suffix in runs:
            file = os.path.join(folder, f"layout_{i:04d}{suffix}.py")
            if files:
                text = layout_file_text(path, digest, lay.micro_batch * lay.microbatches, lay.microbatches,
                                        lay.checkpointing, lay.schedule, "pp" in lay.axes, lay.label(world),
                                        shallower)
                _write_if_changed(file, text)
            points.append(Point(index, {"input": file, "cluster": cluster, "mesh": lay.mesh_text(world), **options},
                                {"layout": lay.label(world), "depth": depth}))
    return Sweep(results_path, {}, ("layout", "depth"), tuple(points))


def _write_if_changed(file: str, text: str) -> None:
    """Layout files are rewritten only when their text changes (a resumed plan keeps them), whole or not at all
    (runtime/atomic.py)."""
    try:
        with open(file, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    atomic.write_text(file, text)


def _run(args, sweep: Sweep, results_path: str, workers: int, known: tuple) -> list[dict]:
    """Run every point of `sweep` not yet in the results file; returns every row (as the file holds them).
    `known`: every point the file may hold (a resumed plan's)."""
    cols, where = results_mod.columns(sweep.axes, ["workload"])
    results = results_mod.ResultsFile(results_path, cols, where)
    done = results.open(known)
    if not sweep.points:   # none in this round (none timed shallower, or none left to run whole)
        results.close()
        return read_results(results_path)[0]
    ray = workers_mod.RayPool(None if args.ray == "local" else args.ray, workers) if args.ray else None
    run_args = argparse.Namespace(sweep=args.model, output=results_path, no_cache=False, cache=args.cache,
                                  progress=args.progress, ray=args.ray)
    try:
        # the sweep's closing line goes to stderr: stdout holds the plan's own table or JSON
        with contextlib.redirect_stdout(sys.stderr):
            sweep_command.run_points(run_args, sweep, results, done, ray, workers)
    finally:
        results.close()
    return read_results(results_path)[0]


def _show(args, ranked: list[Outcome], world: int) -> int:
    ok = [o for o in ranked if o.ranked]
    if args.plot:
        from .plot import plot
        plot(ranked, args.plot)
    if args.json:
        print(json.dumps({"layouts": [o.as_dict(world) for o in ranked]}, indent=1))
    else:
        print(table(ranked, args.top, world))
    return 0 if ok else 1
