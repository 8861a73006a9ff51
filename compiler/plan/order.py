"""The order in which a plan runs its layouts, and those it skips (docs/plan.md, "Skipped by their step's bound"):
branch and bound over the layouts with plan/step_bound.py's lower bounds.

A round runs the layouts with the least bounds first; after each, the --top-th fastest step found (the threshold)
can only have fallen, and every layout left whose bound exceeds it is skipped: it cannot be among the --top. The
first round runs only as many as it takes to have a threshold (--top, or a layout for each worker), and where
none of the layouts left can ever have a bound (step_bound.Bounds.may_bound) they all run in one. A
kind's first layout (`first_of_kinds`: the least estimate among each kind, step_bound.kind) runs in the first
round, so each kind's probe is trusted or not (plan/probe.py) before its bounds decide anything (a kind without
a probe, or with one trusted from the start, needs no such round).
"""
from __future__ import annotations

# layouts a round runs: enough to keep the workers busy, few enough that the threshold tightens between rounds
# (each round starts the workers again: about as long as importing torch)
ROUND = 16


def run_in_order(indices: list, rows: list, run, bounds, threshold, first_of_kinds: bool, kind_of,
                 first: int = ROUND) -> tuple[list, dict]:
    """Runs the layouts `indices` (`run(some)` runs them and returns every row so far; `rows`: those so far) in
    rounds, the first of `first` layouts; returns every row and {index: bound} of the layouts skipped, `bounds`
    (step_bound.Bounds) updated to the last rows. `threshold(rows)`: the --top-th fastest step of the layouts that
    ran and fit, or None; `kind_of(index)`: step_bound.kind of that layout where its probe (plan/probe.py) is to
    be trusted or not, else None."""
    skipped: dict = {}
    size = first
    pending = sorted(indices, key=bounds.estimate)
    if first_of_kinds and pending:
        firsts: dict = {}
        for i in pending:   # in order of estimate: each kind's first is its least
            if kind_of(i) is not None:
                firsts.setdefault(kind_of(i), i)
        kinds_first = set(firsts.values())
        if kinds_first:
            rows = run(sorted(kinds_first))
            pending = [i for i in pending if i not in kinds_first]
    while True:
        bounds.update(rows)
        limit = threshold(rows)
        left = []
        for i in pending:
            bound = bounds.of(i)
            if limit is not None and bound is not None and bound > limit:
                skipped[i] = bound
            else:
                left.append(i)
        if not left:
            return rows, skipped
        left.sort(key=bounds.estimate)
        if not any(bounds.may_bound(i) for i in left):   # none can ever be skipped: rounds would only wait
            size = len(left)
        rows = run(left[:size])
        pending, size = left[size:], ROUND
