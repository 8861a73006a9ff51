"""multitree_optimal: MultiTree's spanning trees in the fewest time steps, proven by CP-SAT (small graphs, up to
about 16 NPUs).

Same constraints as the greedy construction (multitree.py): one spanning tree per root; an edge u -> v of tree r
in step t needs u to hold r's data before t (u is r, or joined in an earlier step); each directed link carries at
most one edge per step; optionally at most `ports` new edges leave a node per step. The smallest T with a
solution is the optimum; the search starts from multitree.step_lower_bound (link count and in-degree).
"""
from __future__ import annotations

import numpy as np

from ..network.errors import UserError
from . import cp_sat
from .multitree import Multitree, allocate, routed, step_lower_bound
from .trees import Trees


def feasible(npus: int, src, dst, steps: int, ports: int | None = None, time_limit_s: float = 30.0):
    """(True/False/None for unknown, solver status) for building all trees within `steps` steps."""
    from ortools.sat.python import cp_model  # imported here: only this search needs it
    src, dst = [int(x) for x in src], [int(x) for x in dst]
    model = cp_model.CpModel()
    x = {}  # (root, link, step) -> bool: the link's edge joins its head to the root's tree in that step
    for r in range(npus):
        for lid, (u, v) in enumerate(zip(src, dst)):
            if v == r:
                continue
            for t in range(1, steps + 1):
                x[r, lid, t] = model.new_bool_var(f"x{r}_{lid}_{t}")
    into = [[] for _ in range(npus)]
    for lid, v in enumerate(dst):
        into[v].append(lid)
    for r in range(npus):
        for v in range(npus):
            if v != r:  # exactly one parent edge
                model.add_exactly_one(x[r, lid, t] for lid in into[v] for t in range(1, steps + 1))
        for lid, (u, v) in enumerate(zip(src, dst)):
            if v == r or u == r:
                continue
            for t in range(1, steps + 1):  # the tail must have joined before
                model.add(sum(x[r, l2, t2] for l2 in into[u] for t2 in range(1, t)) >= x[r, lid, t])
    for lid in range(len(src)):
        for t in range(1, steps + 1):
            model.add_at_most_one(x[r, lid, t] for r in range(npus) if (r, lid, t) in x)
    if ports is not None:
        out = [[] for _ in range(npus)]
        for lid, u in enumerate(src):
            out[u].append(lid)
        for u in range(npus):
            for t in range(1, steps + 1):
                model.add(sum(x[r, lid, t] for r in range(npus) for lid in out[u] if (r, lid, t) in x) <= ports)
    solver = cp_sat.solver(time_limit_s)
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chosen = [(r, lid, t) for (r, lid, t), var in x.items() if solver.value(var)]
        return True, _trees(npus, src, dst, steps, chosen)
    if status == cp_model.INFEASIBLE:
        return False, solver.status_name(status)
    return None, solver.status_name(status)


def _trees(npus, src, dst, steps, chosen):
    parent = np.full((npus, npus), -1, dtype=np.int64)
    step = np.zeros((npus, npus), dtype=np.int64)
    link = np.full((npus, npus), -1, dtype=np.int64)
    for r, lid, t in chosen:
        parent[r, dst[lid]], step[r, dst[lid]], link[r, dst[lid]] = src[lid], t, lid
    return Trees(parent, step, link, int(step.max()) if npus > 1 else 0)


def fewest_steps(npus: int, src, dst, upper: int, ports: int | None = None, time_limit_s: float = 30.0):
    """(optimum or None, trees of the optimum or None) searching T from the lower bound up to `upper`, a
    step count known to be feasible (MultiTree's); None when the solver ran out of time before proving it."""
    lower = max(1, step_lower_bound(npus, np.asarray(src), np.asarray(dst), ports))
    for steps in range(lower, upper + 1):
        ok, found = feasible(npus, src, dst, steps, ports, time_limit_s)
        if ok:
            return steps, found
        if ok is None:  # ran out of time: the optimum lies between here and `upper`
            return None, None
    return None, None


class MultitreeOptimal(Multitree):
    """MultiTree's trees (read, expanded and checked for symmetry as multitree's), allocated by CP-SAT."""
    order = 11
    name = "multitree_optimal"
    label = "multitree_optimal (graph)"
    max_npus = 16  # CP-SAT's model grows with roots x links x steps

    def plan(self, topology, ports: int | None) -> tuple[Trees, str]:
        """MultiTree's trees, replaced by the fewest-step allocation CP-SAT proves when that takes fewer steps."""
        if routed(topology):
            raise UserError(f"multitree_optimal searches over links between NPUs; {topology.name} joins NPUs "
                            f"through switches, so its tree edges are paths: use multitree")
        trees, method = allocate(topology, ports)
        if topology.npus > self.max_npus:
            raise UserError(f"multitree_optimal searches with CP-SAT and is meant for at most {self.max_npus} NPUs; "
                            f"{topology.name} has {topology.npus}")
        lg = topology.links()
        steps, best = fewest_steps(topology.npus, lg.src, lg.dst, trees.steps, ports)
        if best is not None and steps < trees.steps:
            return best, "cp-sat"
        return trees, method
