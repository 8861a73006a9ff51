"""choose-schedule: keep whichever of CP-SAT's and Themis's chunk orders runs faster, and say so in the IR.

optimal-balance minimises the estimated load of the busiest dimension (phase_cost); the runtime's pipelining can
rank two order sets differently from that estimate. So this pass times both on the real cost model and keeps the
faster: the module's own orders (CP-SAT's) against Themis's, computed on a copy. The orders of the winner stay in
the module, and the module records the decision: `comm.schedule` ("cp-sat" or "themis") and both times in ns.
`--print-ir-after-all` therefore ends with the module that is lowered, never another.

Timing needs the lowering and a runtime, which passes may not import: the driver hands an `evaluate(module) -> ns`
function in the pass context (PassContext.evaluate).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dialects import comm
from .base import PassError, register
from .dimension_order import OrderingPass
from .themis import Themis


@register
@dataclass(frozen=True)
class ChooseSchedule(OrderingPass):
    name = "choose-schedule"
    summary = "time CP-SAT's orders against Themis's on the cost model and keep the faster (after optimal-balance)"
    after = ("optimal-balance",)

    def requires(self, module, ctx) -> None:
        super().requires(module, ctx)
        if ctx.evaluate is None:
            raise PassError("choose-schedule times schedules on the cost model: the driver provides it "
                            "(PassContext.evaluate); use --scheduler optimal")

    def apply(self, module, ctx) -> None:
        themis = comm.parse_module(str(module), module.context)
        with themis.context, comm.ir.Location.unknown():
            Themis(latency=self.latency, active=self.active).apply(themis, ctx)
        cp_sat_ns, themis_ns = ctx.evaluate(module), ctx.evaluate(themis)
        keep_themis = themis_ns < cp_sat_ns
        if keep_themis:  # the same phases in the same places: take over each one's orders and bytes
            for mine, theirs in zip(_phases(module), _phases(themis)):
                theirs = comm.view(theirs)
                comm.view(mine).set(**{key: getattr(theirs, key) for key in ("order", "bytes") if theirs.has(key)})
        comm.set_attr(module.operation, "comm.schedule", "themis" if keep_themis else "cp-sat")
        comm.set_attr(module.operation, "comm.cp_sat_time_ns", float(cp_sat_ns))
        comm.set_attr(module.operation, "comm.themis_time_ns", float(themis_ns))


def _phases(module) -> list:
    return [op for op in comm.ops(module) if comm.short_name(op) == "phase"]
