"""themis: per-chunk dimension order by current dimension load (Themis, ISCA'22).

Hierarchical collectives walk every chunk through the dimensions in one fixed order, so on networks whose
dimensions differ in bandwidth the fast dimension idles while the slow one works. Themis tracks the estimated
load of every dimension (phase_cost: bandwidth term plus per-step latency) and sends each chunk's reduce-scatter
to the least-loaded dimension first, where the chunk is still whole and the work is largest; the all-gather
visits the dimensions in reverse. Loads accumulate over the module's collectives in program order.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import register
from .dimension_order import OrderingPass, buffer_groups, record_scheduler


def themis_orders(group, topology, load: dict[int, float], latency: bool = True, active: int = 1) -> list[list[int]]:
    orders = []
    for _ in range(group.chunks):
        order = sorted(group.dims, key=lambda d: (load[d], d))  # least-loaded first
        for d, t in group.load(order, topology, latency, active).items():
            load[d] += t
        orders.append(order)
    return orders


@register
@dataclass(frozen=True)
class Themis(OrderingPass):
    name = "themis"
    summary = "Themis: each chunk visits the least-loaded dimension first (needs select-algorithm before it)"

    def apply(self, module, ctx) -> None:
        load = {d: 0.0 for d in range(len(ctx.topology.dims))}
        for group in buffer_groups(module):
            group.write(themis_orders(group, ctx.topology, load, self.value("latency"), self.value("active")),
                        ctx.topology)
        record_scheduler(module, "themis")
