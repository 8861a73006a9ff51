"""`astra-compile calibrate`: fit the network's bandwidth and latency per dimension to nccl-tests logs.

    astra-compile calibrate LOG... --topology T [--algorithm A] [--chunks N] [--min-size S] [--check LOG...]
                            [--collective C] [--hold DIMS] [--json] [-o net.yml]

The model is the compiler's own: each logged collective and size is compiled on the topology (baseline
scheduler, the given algorithm and chunks) and timed by the analytical runtime. That time is a sum over the
critical path of latencies and bytes / bandwidth, so near any point it is linear in the per-dimension latencies
L_d and inverse bandwidths g_d = 1/B_d: t = sum_d a_d L_d + b_d g_d (homogeneous of degree one). The fit takes
the coefficients at the current network by finite differences, minimises the absolute relative errors
(least squares reweighted by each row's error, numpy.linalg.lstsq; a parameter that would go negative is held
at its bound and the rest solved again), and repeats at the new network until it no longer moves (the critical path can
change with the network).
docs/calibrate.md states the choices and limits.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from dataclasses import dataclass

import numpy as np

from ...network.errors import UserError
from ...network.units import MAX_GBPS, MIN_GBPS, parse_size
from .parser import chunk_count

STEP = 0.01          # relative perturbation of a parameter for its coefficient
ITERATIONS = 8
TOLERANCE = 1e-4     # relative change of every parameter that ends the iteration
MAX_ROWS = 2000      # rows compiled per iteration at most (each is a compilation)
IRLS_ROUNDS = 50     # reweightings of the robust (least absolute error) fit
IRLS_FLOOR = 1e-4    # relative error below which a row's weight stops growing


@dataclass
class Fit:
    bandwidth_gbps: list
    latency_ns: list
    determined: list          # per parameter (latencies, then bandwidths): did any row depend on it?
    note: str                 # parameters the rows cannot tell apart ("" when every one is identified)
    rows: list                # (log, row, predicted_us) of the fitted logs' rows at or above --min-size
    checked: list             # the same for --check logs
    iterations: int
    held: tuple = ()          # the dimensions --hold kept at their given bandwidth and latency


def build_parser() -> argparse.ArgumentParser:
    from .parser import Parser
    p = Parser(prog="astra-compile calibrate",
               description="Fit the network's bandwidth and latency per dimension to nccl-tests / rccl-tests "
                           "logs (docs/calibrate.md).")
    p.add_argument("logs", nargs="*", help="all_reduce_perf / all_gather_perf / reduce_scatter_perf / "
                                           "alltoall_perf output")
    p.add_argument("--topology", help="the machine's network (every rank of the logs is one of its NPUs)")
    p.add_argument("--bandwidth", help="starting bandwidth per dimension, GB/s (default 50)")
    p.add_argument("--latency", help="starting latency per dimension, ns (default 500)")
    p.add_argument("--links", help="links per dimension, as for a run")
    p.add_argument("--algorithm", help="the algorithm the library ran, one or one per dimension (default: the "
                                       "compiler's choice)")
    p.add_argument("--chunks", help="chunks per collective (default: the compiler's), or 'fastest': each logged "
                                    "collective and size in the fastest of 1, 2, 4, 8 and 16 at the network being "
                                    "fitted, as NCCL pipelines a collective over a node and its NICs")
    p.add_argument("--collective", help="what the logs measured, when neither the log nor its name says")
    p.add_argument("--hold", metavar="DIMS", help="dimensions kept at their --bandwidth and --latency, not fitted "
                   "(comma-separated, e.g. 0: the node's fabric, fitted before from a one-node log, under a "
                   "multi-node log that fits the NICs)")
    p.add_argument("--min-size", help="leave out smaller sizes (e.g. 1MB: the latency-bound end)")
    p.add_argument("--check", nargs="+", default=[], metavar="LOG", help="predict these logs with the fitted "
                                                                          "network")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    p.add_argument("-o", "--output", help="write the fitted network as an ASTRA-sim network .yml")
    return p


def main(argv: list[str]) -> int:
    from .parser import run_subcommand
    return run_subcommand(build_parser, run, argv)


def run(args) -> int:
    from ..interop import nccl_tests_log
    from ...network.parse import parse_topology
    if not args.logs:
        raise UserError("give one or more nccl-tests logs: astra-compile calibrate LOG... --topology T")
    if not args.topology:
        raise UserError("--topology is required: the network whose bandwidth and latency are fitted")
    if args.collective is not None and args.collective not in nccl_tests_log.KINDS:
        raise UserError(f"--collective must be one of {', '.join(nccl_tests_log.KINDS)}, got '{args.collective}'")
    if args.chunks is not None:
        args.chunks = chunk_count(args.chunks)   # a count, or fastest (the driver compiles each and keeps the best)
    try:
        min_size = parse_size(args.min_size) if args.min_size else 0
    except UserError as e:
        raise UserError(f"--min-size: {e}") from None
    start = parse_topology(args.topology, args.bandwidth, args.latency, args.links)
    if start.graph is not None:
        raise UserError("calibrate fits a dimension's bandwidth and latency; a graph topology has per-link values")
    held = _held(args.hold, start.ndims)
    logs = [nccl_tests_log.read(p, args.collective) for p in args.logs]
    checks = [nccl_tests_log.read(p, args.collective) for p in args.check]
    for log in logs + checks:
        if log.ranks is not None and log.ranks != start.npus:
            raise UserError(f"{log.path}: the log measured {log.ranks} ranks; --topology {args.topology} has "
                            f"{start.npus} NPUs")
    defaults = {k: v for k, v in (("algorithm", args.algorithm), ("chunks", args.chunks)) if v is not None}
    fit = calibrate(args.topology, args.links, start, logs, checks, defaults, min_size, held)
    if args.output:
        from ...network.parse import network_yml
        from ...runtime import atomic
        fitted = parse_topology(args.topology, fit.bandwidth_gbps, fit.latency_ns, args.links)
        atomic.write_text(args.output, network_yml(fitted, "fitted by astra-compile calibrate to " +
                                                   ", ".join(args.logs)))
    print(json.dumps(to_json(fit), indent=1) if args.json else format_fit(fit, start, min_size))
    return 0


def _held(text: str | None, ndims: int) -> tuple[int, ...]:
    """--hold's dimensions: distinct indices of the topology's dimensions, at least one left to fit."""
    if text is None:
        return ()
    parts = [t.strip() for t in text.split(",")]
    if not all(t.isascii() and t.isdigit() and len(t) <= 6 for t in parts):
        raise UserError(f"--hold {text!r}: expected dimension indices, comma-separated (e.g. 0)")
    held = tuple(int(t) for t in parts)
    if any(d >= ndims for d in held) or len(set(held)) != len(held):
        raise UserError(f"--hold {text!r}: the topology's dimensions are 0..{ndims - 1}, each named once")
    if len(held) == ndims:
        raise UserError(f"--hold {text!r} holds every dimension: nothing is left to fit")
    return held


def calibrate(spec: str, links, start, logs, checks, defaults: dict, min_size: int, held: tuple = ()) -> Fit:
    from ...network.parse import parse_topology
    rows = [(log, r) for log in logs for r in log.rows if r.bytes >= min_size]
    if not rows:
        raise UserError(f"no row of the logs is at least --min-size {min_size} bytes")
    if len(rows) > MAX_ROWS:
        raise UserError(f"{len(rows)} rows to fit; at most {MAX_ROWS} (each is a compilation): raise --min-size")
    ndims = start.ndims
    lat = np.array([float(d.latency_ns) for d in start.dims])
    gap = np.array([1.0 / float(d.bandwidth_gbps) for d in start.dims])
    timer = _Timer(spec, links, defaults)
    cases = sorted({(log.collective, r.bytes) for log, r in rows})
    first = {}   # case -> the log row that first asks for it: a size the compiler refuses is named by its line
    for log, r in rows:
        first.setdefault((log.collective, r.bytes), (log, r))
    measured = np.array([r.measured_us * 1e3 for _, r in rows])
    determined = [False] * (2 * ndims)
    it = 0
    for it in range(1, ITERATIONS + 1):
        coef = {case: _at_row(first[case], lambda: timer.coefficients(case, lat, gap)) for case in cases}
        a = np.array([coef[(log.collective, r.bytes)] for log, r in rows])
        # a held dimension's two parameters stay where they started: left out of the solve like undetermined ones
        determined = [bool(np.any(a[:, j] > 0)) and j % ndims not in held for j in range(2 * ndims)]
        x = _robust(a, measured, np.concatenate([lat, gap]), determined, ndims)
        new_lat, new_gap = x[:ndims], x[ndims:]
        moved = np.max(np.abs(np.concatenate([new_lat - lat, new_gap - gap])) /
                       np.maximum(np.abs(np.concatenate([lat, gap])), 1e-12))
        lat, gap = new_lat, new_gap
        if moved < TOLERANCE:
            break
    free = [j for j in range(2 * ndims) if determined[j]]
    note = ""
    if free and np.linalg.matrix_rank(a[:, free] / measured[:, None], tol=1e-9) < len(free):
        names = [f"latency[{j}]" if j < ndims else f"bandwidth[{j - ndims}]" for j in free]
        note = (f"the rows cannot tell {', '.join(names)} apart (every row moves them together): the fit is one of "
                "many that match; give logs over one dimension each, or fit a flat topology")
    fitted = parse_topology(spec, [1.0 / g for g in gap], list(lat), links)
    final = _Timer(spec, links, defaults, fitted)
    predict = lambda pairs: [(log, r, _at_row((log, r), lambda: final.time_ns(log.collective, r.bytes)) / 1e3)  # noqa: E731
                             for log, r in pairs]
    checked = predict([(log, r) for log in checks for r in log.rows if r.bytes >= min_size])
    return Fit([1.0 / g for g in gap], list(lat), determined, note, predict(rows), checked, it, held)


def _at_row(row, compute):
    """compute(), a compilation of a logged row's collective and size: a refusal (a size too small to split over
    the topology, ...) names the log, its line and the size."""
    from ...dialects.comm import IRError
    from ...passes import PassError
    log, r = row
    try:
        return compute()
    except (UserError, IRError, PassError) as e:
        raise UserError(f"{log.path} line {r.line}: {log.collective} of {r.bytes} B: {e} (leave such sizes out with "
                        "--min-size)") from None


def _robust(a: np.ndarray, y: np.ndarray, current: np.ndarray, determined: list, ndims: int) -> np.ndarray:
    """The parameters that minimise the sum of absolute relative errors (iteratively reweighted least squares):
    a benchmark log has rows a stall inflated and sizes where the library switched protocol or algorithm, which
    a squared error would let pull every other row."""
    weight = np.ones(len(y))
    x = _solve(a, y, current, determined, ndims, weight)
    for _ in range(IRLS_ROUNDS):
        rel = np.abs(a @ x / y - 1.0)
        weight = 1.0 / np.maximum(rel, IRLS_FLOOR)
        x_new = _solve(a, y, x, determined, ndims, weight)
        if np.allclose(x_new, x, rtol=1e-9, atol=0):
            return x_new
        x = x_new
    return x


def _solve(a: np.ndarray, y: np.ndarray, current: np.ndarray, determined: list, ndims: int,
           weight: np.ndarray) -> np.ndarray:
    """Least squares of the relative errors with every parameter at or above its bound (latency 0, inverse
    bandwidth 1/MAX_GBPS): the unconstrained solution if it is feasible, else the best of the solutions with some
    parameters held at their bounds (at most 2 x dimensions parameters: a few dozen small solves)."""
    low = np.array([0.0] * ndims + [1.0 / MAX_GBPS] * ndims)
    high = np.array([np.inf] * ndims + [1.0 / MIN_GBPS] * ndims)
    free_all = [j for j in range(2 * ndims) if determined[j]]
    root = np.sqrt(weight)
    w = a / y[:, None] * root[:, None]
    best, best_cost = None, math.inf
    for k in range(len(free_all) + 1):
        for held in itertools.combinations(free_all, k):
            x = current.copy()
            free = [j for j in free_all if j not in held]
            for j in held:
                x[j] = low[j]
            # every parameter not solved for (at its bound, held by --hold, or one no row depends on) keeps its
            # value, and its share of each row's time comes off the right-hand side
            fixed = [j for j in range(2 * ndims) if j not in free]
            rhs = root - w[:, fixed] @ x[fixed]
            if free:
                sol, *_ = np.linalg.lstsq(w[:, free], rhs, rcond=None)
                x[free] = sol
            if np.any(x[free_all] < low[free_all] - 1e-15) or np.any(x[free_all] > high[free_all]):
                continue
            cost = float(np.sum((w @ x - root) ** 2))
            if cost < best_cost:
                best, best_cost = x, cost
        if best is not None and k == 0:
            break   # the unconstrained solution is feasible
    if best is None:
        raise UserError("the logs cannot be fitted with positive bandwidths and latencies on this topology")
    return best


class _Timer:
    """A collective's time on the topology with given per-dimension latencies and inverse bandwidths."""

    def __init__(self, spec: str, links, defaults: dict, topology=None):
        from ..driver import driver
        self.spec, self.links, self.defaults, self.topology = spec, links, defaults, topology
        self.ctx = driver.comm.new_context()
        self.memo: dict = {}

    def time_ns(self, kind: str, nbytes: int, topology=None) -> float:
        from ..driver import driver
        topology = topology or self.topology
        key = (kind, nbytes, json.dumps(topology.to_dict(), sort_keys=True))
        if key not in self.memo:
            module = driver.build_module(self.ctx, topology, kind, nbytes)
            compiled = driver.compile_schedule(str(module), self.ctx, topology, "baseline", self.defaults,
                                               driver.RunOptions(intra="fifo"))
            self.memo[key] = compiled.result.total_ns
        return self.memo[key]

    def _at(self, lat, gap):
        from ...network.parse import parse_topology
        return parse_topology(self.spec, [1.0 / g for g in gap], list(lat), self.links)

    def coefficients(self, case, lat: np.ndarray, gap: np.ndarray) -> list:
        """d time / d L_d, then d time / d g_d, at (lat, gap), by a forward difference of STEP."""
        kind, nbytes = case
        t0 = self.time_ns(kind, nbytes, self._at(lat, gap))
        out = []
        for which in (0, 1):
            for d in range(len(lat)):
                l2, g2 = lat.copy(), gap.copy()
                if which == 0:
                    h = max(l2[d] * STEP, 1.0)
                    l2[d] += h
                else:
                    h = g2[d] * STEP
                    g2[d] += h
                out.append(max((self.time_ns(kind, nbytes, self._at(l2, g2)) - t0) / h, 0.0))
        return out


def _errors(rows) -> list:
    return [(p - r.measured_us) / r.measured_us * 100 for _, r, p in rows]


def decimal_gbps(gbps: float) -> float:
    """GB/s of 2^30 B (ASTRA-sim's and this compiler's unit) in GB/s of 10^9 B (nccl-tests' algbw and busbw)."""
    return gbps * 2**30 / 1e9


def to_json(fit: Fit) -> dict:
    def table(rows):
        return [{"file": log.path, "collective": log.collective, "bytes": r.bytes, "measured_us": r.measured_us,
                 "predicted_us": p, "error_pct": e} for (log, r, p), e in zip(rows, _errors(rows))]
    return {"bandwidth_gbps": fit.bandwidth_gbps,
            "bandwidth_decimal_gbps": [decimal_gbps(b) for b in fit.bandwidth_gbps],
            "latency_ns": fit.latency_ns, "rows": table(fit.rows),
            "checked": table(fit.checked), "note": fit.note}


def format_fit(fit: Fit, start, min_size: int) -> str:
    ndims = len(fit.bandwidth_gbps)
    lines = [f"fitted network: {start.name}, {len(fit.rows)} row(s)"
             + (f" of at least {min_size} bytes" if min_size else "") + f" ({fit.iterations} iteration(s))"]
    for d in range(ndims):
        if d in fit.held:
            lines.append(f"  dim {d} {start.dims[d].block}({start.dims[d].size}): held at bandwidth "
                         f"{fit.bandwidth_gbps[d]:.3f} GB/s of 2^30 B, latency {fit.latency_ns[d]:.1f} ns (--hold)")
            continue
        bw = "not determined (no row depends on it)" if not fit.determined[ndims + d] else \
            f"{fit.bandwidth_gbps[d]:.3f} GB/s of 2^30 B ({decimal_gbps(fit.bandwidth_gbps[d]):.3f} GB/s of 10^9 B, " \
            "nccl-tests' busbw unit)"
        lat = "not determined" if not fit.determined[d] else f"{fit.latency_ns[d]:.1f} ns"
        lines.append(f"  dim {d} {start.dims[d].block}({start.dims[d].size}): bandwidth {bw}, latency {lat}")
    if fit.note:
        lines.append(f"note: {fit.note}")
    for title, rows in (("fitted", fit.rows), ("checked", fit.checked)):
        if not rows:
            continue
        errs = _errors(rows)
        lines += ["", f"{title}: median |error| {statistics.median(abs(e) for e in errs):.1f} %",
                  f"{'file':<28} {'collective':<14} {'bytes':>12} {'measured_us':>12} {'predicted_us':>13} "
                  f"{'error_%':>8}"]
        for (log, r, p), e in zip(rows, errs):
            name = log.path if len(log.path) <= 28 else "..." + log.path[-25:]
            lines.append(f"{name:<28} {log.collective:<14} {r.bytes:>12} {r.measured_us:>12.2f} {p:>13.2f} "
                         f"{e:>8.1f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
