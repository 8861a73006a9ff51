"""`astra-compile sweep`: run a sweep file's points and keep every result, or plot a results file.

    astra-compile sweep sweep.yml -o results.csv [--workers N | --ray [ADDRESS]] [--cache DIR | --no-cache]
    astra-compile sweep --plot results.csv --x AXIS --y FIELD [--hue AXIS] [--where AXIS=VALUE] [--pareto] -o p.png

Exit status: 0 when every point ran and succeeded, 1 when some points failed (each is in the results file with
its message), 2 when the sweep file or the options are wrong (nothing runs), 130 when interrupted (the finished
points are kept; the same command resumes).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from ...network.errors import AstraError, UserError, one_line
from . import point as points_mod
from . import results as results_mod
from . import spec as spec_mod
from . import workers as workers_mod


def build_parser() -> argparse.ArgumentParser:
    from ..cli.parser import Parser
    p = Parser(prog="astra-compile sweep", description="Run every point of a sweep file (docs/sweeps.md).")
    p.add_argument("sweep", nargs="?", help="the sweep file (YAML: base, axes)")
    p.add_argument("-o", "--output", help="results file (.csv): created, or resumed when it holds this sweep's "
                                          "points; with --plot: the image (.png, .pdf, .svg)")
    p.add_argument("--workers", type=int, help="processes (default: this machine's cores)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run the points as Ray tasks: on a local Ray instance, or the cluster at ADDRESS "
                        "(pip install 'astra-compile[ray]')")
    p.add_argument("--cache", metavar="DIR", help="also keep captured workloads and compiled collectives on disk "
                                                  "in DIR (shared by the workers and by later sweeps)")
    p.add_argument("--no-cache", action="store_true", help="compile every point from scratch")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")
    g = p.add_argument_group("plotting a results file")
    g.add_argument("--plot", metavar="RESULTS.csv", help="plot a results file instead of running a sweep")
    g.add_argument("--x", help="column on the x axis")
    g.add_argument("--y", help="column on the y axis (a report field, e.g. total_time_us)")
    g.add_argument("--hue", help="one line per value of this column")
    g.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                   help="keep only the rows where COLUMN is VALUE (repeatable)")
    g.add_argument("--pareto", action="store_true",
                   help="every point as a dot and the Pareto front of y against x (both smaller is better)")
    return p


def main(argv: list[str]) -> int:
    from ..cli.parser import fail
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.plot:
            from .plot import plot
            _only(args, parser, {"plot", "x", "y", "hue", "where", "pareto", "output"}, "--plot")
            plot(args.plot, args.output, args.x, args.y, args.hue, args.where, args.pareto)
            return 0
        _only(args, parser, {"sweep", "output", "workers", "ray", "cache", "no_cache", "progress"}, "a sweep run")
        return run(args)
    except AstraError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        sys.stderr.write("astra-compile sweep: interrupted; the finished points are in the results file, and the "
                         "same command resumes\n")
        return 130


def _only(args, parser, allowed: set[str], what: str) -> None:
    for dest, value in vars(args).items():
        if dest not in allowed and value != parser.get_default(dest):
            raise UserError(f"--{dest.replace('_', '-')} does not apply to {what}")


def run(args) -> int:
    if not args.sweep:
        raise UserError("give a sweep file: astra-compile sweep sweep.yml -o results.csv (docs/sweeps.md)")
    if not args.output:
        raise UserError("-o results.csv is required: every finished point is appended to it at once")
    workers = workers_mod.cpu_count() if args.workers is None else args.workers
    if not 1 <= workers <= 1024:
        raise UserError(f"--workers must be 1..1024, got {workers}")
    if args.cache and args.no_cache:
        raise UserError("--cache and --no-cache exclude each other")
    if args.cache:   # a file where the cache's folder goes: one line now, not a failure at every point
        from ..core.reuse import open_dir
        open_dir(args.cache)
    sweep = spec_mod.load(args.sweep)
    # every point checked before any runs: one wrong value stops the sweep here, naming the point
    kinds = []
    for p in sweep.points:
        kind = points_mod.check(p.options, sweep.directory, f"{args.sweep}: {_label(p)}: ")
        if kind not in kinds:
            kinds.append(kind)
    cols, where_field = results_mod.columns(sweep.axes, kinds)
    results = results_mod.ResultsFile(args.output, cols, where_field)
    ray = workers_mod.RayPool(None if args.ray == "local" else args.ray, workers) if args.ray else None
    done = results.open(sweep.points)
    try:
        return run_points(args, sweep, results, done, ray, workers)
    finally:
        results.close()


def run_points(args, sweep, results, done: dict, ray, workers: int) -> int:
    todo = [p for p in sweep.points if p.index not in done]
    max_memory = _memory_share(workers)
    cache = False if args.no_cache else (os.path.abspath(args.cache) if args.cache else True)
    tasks = [(p.index, p.options, sweep.directory, max_memory, cache) for p in todo]
    stream = ray.run(tasks) if ray else workers_mod.local(tasks, workers)
    by_index = {p.index: p for p in sweep.points}
    # `done` may hold points of other sweeps into the same file (a plan's rounds): only this one's count here
    already = [done[p.index] for p in sweep.points if p.index in done]
    failed = sum(1 for s in already if s != "ok")
    made, hits, start = {"workload": 0, "collective": 0}, 0, time.perf_counter()
    bar = _progress(args.progress, len(sweep.points), len(already))
    try:
        for index, outcome, made_now, hits_now in stream:
            results.append(by_index[index], outcome)
            for k, v in made_now.items():
                made[k] += v
            hits += hits_now
            if outcome["status"] != "ok":
                failed += 1
                _say(bar, f"{_label(by_index[index])} failed: {outcome['error']}")
            if bar is not None:
                bar.update(1)
    finally:   # stopped early (a full disk, Ctrl-C): the points still running are ended now, not waited for
        stream.close()
    if bar is not None:
        bar.close()
    took = time.perf_counter() - start
    where = f"Ray ({args.ray})" if args.ray else f"{workers} worker{'s' * (workers > 1)}"
    rate = f", {len(todo) / took:.2f} points/s" if todo and took > 0 else ""
    reused = (f"; captured {made['workload']} workload(s), compiled {made['collective']} collective(s), "
              f"reused {hits}" if made["workload"] or made["collective"] or hits else "")
    print(f"{args.sweep}: {len(sweep.points)} points, {len(sweep.points) - failed} ok, {failed} failed "
          f"({len(already)} already in {args.output}); ran {len(todo)} in {took:.1f} s on {where}{rate}{reused}")
    return 1 if failed else 0


def _label(p) -> str:
    """How messages name a point: its index and axis values, e.g. `point 7 (scheduler=themis, chunks=16)`."""
    return f"point {p.index} (" + ", ".join(f"{k}={results_mod.axis_text(v)}" for k, v in p.axes.items()) + ")"


def _memory_share(workers: int) -> int:
    """Each worker's share of the memory available now: the default --max-memory of a point, so that points
    running side by side cannot together exceed the machine (a point's own max-memory wins)."""
    from ..core.estimate import machine_memory
    return max(1, math.floor(machine_memory() / workers))


def _progress(mode: str, total: int, initial: int):
    if mode == "off" or (mode == "auto" and not sys.stderr.isatty()):
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, unit="point", file=sys.stderr, dynamic_ncols=True)


def _say(bar, line: str) -> None:
    line = one_line(line)
    if bar is not None:
        bar.write(line, file=sys.stderr)
    else:
        sys.stderr.write(line + "\n")
