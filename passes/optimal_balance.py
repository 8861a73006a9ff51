"""optimal-balance: split the chunks over dimension orders so the most loaded dimension is as light as possible.

Themis decides chunk by chunk, greedily. Here the choice is one optimisation over all chunks of a buffer: x_o
chunks take order o (every permutation of the group's dimensions); dimension d then carries
sum_o x_o * load(o, d) (phase_cost, the same estimates Themis uses) on top of what earlier collectives left, and
OR-Tools CP-SAT minimises the largest of those sums. The chunks taking each order are then spread evenly over the
chunk sequence (stride scheduling), so every stretch of the pipeline is as balanced as the whole.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..algorithms import cp_sat
from ..dialects import comm
from .base import PassError, option, register
from .dimension_order import OrderingPass, buffer_groups, record_scheduler

SCALE = 1000  # CP-SAT takes integers: loads in picoseconds


def balanced_counts(orders, loads, base, chunks, time_limit_s):
    """x_o per order minimising max_d base[d] + sum_o x_o loads[o][d] (CP-SAT); returns (counts, status)."""
    from ortools.sat.python import cp_model  # imported here: a half-second import only this pass needs
    model = cp_model.CpModel()
    x = [model.new_int_var(0, chunks, f"x{i}") for i in range(len(orders))]
    model.add(sum(x) == chunks)
    dims = list(base)
    # an upper bound on any dimension's load (rounding adds at most one unit per chunk); CP-SAT's integers are 64-bit,
    # so loads too large for picoseconds are counted in coarser units (only enormous collectives ever need it)
    bound = max(base.values()) + chunks * max(max(l.values()) for l in loads)
    scale = SCALE if bound * SCALE < 2 ** 60 else 2 ** 60 / max(bound, 1.0)
    worst = int(scale * bound) + chunks + 1
    top = model.new_int_var(0, worst, "max_load")
    for d in dims:
        model.add(top >= int(scale * base[d]) + sum(int(round(scale * l[d])) * xi for l, xi in zip(loads, x)))
    model.minimize(top)
    solver = cp_sat.solver(time_limit_s)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise PassError(f"optimal-balance: CP-SAT found no assignment ({solver.status_name(status)})")
    return [solver.value(v) for v in x], solver.status_name(status)


def spread(orders, counts) -> list:
    """A chunk sequence with counts[i] copies of orders[i], each order's copies evenly spaced."""
    total = sum(counts)
    seq, given = [], [0] * len(orders)
    for _ in range(total):
        # the order furthest behind its share so far goes next
        i = min((k for k in range(len(orders)) if given[k] < counts[k]),
                key=lambda k: ((given[k] + 1) / counts[k], k))
        given[i] += 1
        seq.append(list(orders[i]))
    return seq


@register
@dataclass(frozen=True)
class OptimalBalance(OrderingPass):
    name = "optimal-balance"
    summary = "CP-SAT split of chunks over dimension orders minimising the most loaded dimension"
    time_limit: float | None = option(float, 5.0, "CP-SAT's deterministic seconds per buffer (the same answer "
                                                   "on any machine load)")

    def apply(self, module, ctx) -> None:
        load = {d: 0.0 for d in range(len(ctx.topology.dims))}
        statuses = []
        for group in buffer_groups(module):
            orders = list(itertools.permutations(group.dims))
            loads = [group.load(list(o), ctx.topology, self.value("latency"), self.value("active")) for o in orders]
            counts, status = balanced_counts(orders, loads, {d: load[d] for d in group.dims}, group.chunks,
                                             self.value("time_limit"))
            statuses.append(status)
            for o, c in zip(loads, counts):
                for d, t in o.items():
                    load[d] += c * t
            group.write(spread(orders, counts), ctx.topology)
        record_scheduler(module, "optimal")
        comm.set_attr(module.operation, "comm.balance", ",".join(statuses) or "none")
