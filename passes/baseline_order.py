"""baseline-order: every chunk visits the dimensions in the decomposition's own order (ASTRA-sim's baseline).

Reduce-scatter (and all-to-all, broadcast) over the dimensions ascending, all-gather descending, reduce descending,
for every chunk: the order hierarchical-decompose gave the phases. Writing it out as every phase's `order` (and the
decomposition's bytes) makes the baseline a decision the module records like Themis's or CP-SAT's orders: a
module printed with `--scheduler baseline` re-runs as the baseline, and one scheduled otherwise can be taken back
to it (choose-schedule times it as a candidate on a copy).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dialects import comm
from .base import Pass, register
from .dimension_order import buffer_groups, record_scheduler
from .hierarchical_decompose import phase_plan


def write_stage_orders(module, topology) -> None:
    shape = [d.size for d in topology.dims]
    for group in buffer_groups(module):
        for kind, phases in group.members:
            sizes = dict(phase_plan(kind, group.dims, shape, group.bytes))  # the bytes the decomposition wrote
            for d, op in phases.items():
                comm.view(op).set(order=[comm.view(op).stage] * group.chunks, bytes=int(sizes[d]))


@register
@dataclass(frozen=True)
class BaselineOrder(Pass):
    name = "baseline-order"
    summary = ("ASTRA-sim's baseline: every chunk reduce-scatters over the dimensions ascending and all-gathers "
               "descending, written as each phase's order")
    after = ("hierarchical-decompose",)

    def apply(self, module, ctx) -> None:
        write_stage_orders(module, ctx.topology)
        record_scheduler(module, "baseline")
