"""How collectives in flight at the same time share the links they use (the workload engine's contention rule).

A collective run alone takes `alone_ns` and occupies each of its resources for a fraction u of that time. A
resource is one physical link: (NPU, link class), a class being one slot of a dimension (network/links.py: a
ring's forward or backward link, a switch up- or downlink, an FC link to one peer). The analytical backend knows
per dimension how long the phases kept it busy, and spreads that use over every class of the dimension (the
per-dimension rule); the congestion backend measures each link and gives each class its busiest link's time, and
a message its route's links. Run concurrently, collective i progresses at a rate r_i <= 1 (alone-time per ns)
and occupies each of its resources at r_i * u_i. The rates are max-min fair (progressive filling): all rates
grow together until a resource is full (sum of r_i * u_i over its users = 1) or a rate reaches 1; the
collectives on a full resource keep their rate and the others grow on. Two equal all-reduces on one dimension
(u = 1) both run at 1/2 and take twice as long; on two different dimensions they share nothing and run at 1;
over real links (congestion) two messages in opposite directions between two NPUs share nothing either (links
are full duplex). docs/cost-model.md states the rule.
"""
from __future__ import annotations

EPS = 1e-12


# the rates of shared uses already filled, by the uses in order: a step's collectives meet in the same few
# combinations over and over (a pipeline's 192 micro-batches each start the same sends beside the same all-reduce)
_FILLED: dict = {}
_FILLED_MOST = 1 << 16   # combinations kept at most: past it the memo starts again


def fair_rates(uses: dict) -> dict:
    """uses: job -> {resource: fraction of the resource the job needs at full speed}. Returns job -> rate."""
    if _unshared(uses):   # most calls of a step: the filling below would reach rate 1 for all in one round
        return dict.fromkeys(uses, 1.0)
    key = tuple(tuple(use.items()) for use in uses.values())
    rates = _FILLED.get(key)
    if rates is None:
        if len(_FILLED) >= _FILLED_MOST:
            _FILLED.clear()
        filled = _filled(uses)
        rates = _FILLED[key] = tuple(filled[j] for j in uses)
    return dict(zip(uses, rates))


def _filled(uses: dict) -> dict:
    """fair_rates by progressive filling."""
    rates: dict = {}
    free = {}
    for use in uses.values():
        for res in use:
            free[res] = 1.0
    # in the order of `uses` (not a set's): each resource's load is summed in one order, so the rates depend on the
    # uses alone, to the last bit, whatever objects the jobs are (and fair_rates may keep them by the uses)
    growing = [j for j, use in uses.items() if any(u > EPS for u in use.values())]
    for j in uses.keys() - set(growing):
        rates[j] = 1.0   # occupies nothing: never slowed
    level = 0.0
    while growing:
        load: dict = {}
        for j in growing:
            for res, u in uses[j].items():
                if u > EPS:
                    load[res] = load.get(res, 0.0) + u
        step = 1.0 - level
        for res, total in load.items():
            step = min(step, free[res] / total)
        level += step
        full = set()
        for res, total in load.items():
            free[res] -= step * total
            if free[res] <= EPS:
                full.add(res)
        done = [j for j in growing if level >= 1.0 - EPS or any(r in full and u > EPS for r, u in uses[j].items())]
        if not done:   # numerical safety: a step always fills a resource or reaches rate 1
            done = growing
        for j in done:
            rates[j] = min(level, 1.0)
        growing = [j for j in growing if j not in rates]
    return rates


def _unshared(uses: dict) -> bool:
    """Does every resource have one user at most, who needs no more than all of it? Every rate is then 1 (exactly
    what the progressive filling gives: its first round's step is min(1, 1 / u) = 1)."""
    seen = set()
    for use in uses.values():
        for res, u in use.items():
            if u > EPS:
                if u > 1.0 or res in seen:
                    return False
                seen.add(res)
    return True
