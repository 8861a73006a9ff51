"""allocate-trees: MultiTree's spanning-tree link allocation (ISCA'21), recorded in the IR.

For the phases over the whole network that run multitree or multitree_optimal, build one spanning tree per root
by allocating links per time step (algorithms/multitree.py: translated trees on tori, greedy turns elsewhere,
routed paths through switches; CP-SAT's fewest-step trees for multitree_optimal) and record them as one
`comm.trees` op (parent, step and link of every tree node) whose token those phases take. The lowering only
expands the trees it finds there.
"""
from __future__ import annotations

import numpy as np

from ..dialects import comm
from .base import Pass, PassError, register
from .structure import phases_planned_by, record


@register
class AllocateTrees(Pass):
    name = "allocate-trees"
    summary = "MultiTree: spanning trees by link allocation per time step, recorded as comm.trees"
    after = ("select-algorithm",)

    def apply(self, module, ctx) -> None:
        phases = phases_planned_by(module, self.name)
        if not phases:
            return
        ports = next((v.ports for _, v, _ in phases if v.ports), None)
        algs = {alg.name: alg for _, _, alg in phases}
        if len(algs) > 1:
            raise PassError(f"one module's phases run {' and '.join(sorted(algs))}: give them one tree algorithm")
        trees, method = next(iter(algs.values())).plan(ctx.topology, ports)
        lg = ctx.topology.links()
        # edges over single links name the link by its id in the network's numbering; routed edges name none
        link = np.where(trees.link >= 0, lg.id[np.maximum(trees.link, 0)], -1) if method != "paths" else trees.link
        record(module, phases, "trees", {
            "npus": int(ctx.topology.npus), "steps": int(trees.steps), "parent": trees.parent.ravel().tolist(),
            "step": trees.step.ravel().tolist(), "link": np.asarray(link).ravel().tolist(), "method": method})

    def ensures(self, module, ctx) -> None:
        super().ensures(module, ctx)
        if any(comm.structure_of(op) is None for op, _, _ in phases_planned_by(module, self.name)):
            raise PassError("allocate-trees left a multitree phase without trees")
