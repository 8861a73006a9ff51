"""choose-schedule: keep whichever of CP-SAT's, Themis's and the baseline's chunk orders runs fastest, and say so.

optimal-balance minimises the estimated load of the busiest dimension (phase_cost). That load is exact per
dimension (the runtime's busy times agree with it), but it is only a lower bound on the time: the time adds the
pipeline's fill and drain and every wait of the busiest dimension for a chunk another dimension still holds, which
depend on the intra-dimension queue (fifo or scf) and which the estimate does not see. Where latency makes one
dimension the bottleneck whatever the order, every order set ties on the estimate and CP-SAT returns one that
loads the other dimensions up to the same level, so they stall each other (docs/scheduling.md, "Why CP-SAT's
balance can lose"). So this pass times the candidates on the real cost model and keeps the fastest: the module's
own orders (CP-SAT's), Themis's and the baseline's, each computed on a copy (comm.copy_module, a clone of the
module, not a print and a parse). An `optimal` schedule therefore never runs slower than the baseline or Themis on
the same runtime options. The winner's orders stay in the module and the module records the decision:
`comm.schedule` ("cp-sat", "themis" or "baseline", the first of the fastest in that order) and each candidate's
time in ns. `--print-ir-after-all` therefore ends with the module that is lowered.

Timing needs the lowering and a runtime, which passes may not import: the driver hands an `evaluate(module) -> ns`
function in the pass context (PassContext.evaluate).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dialects import comm
from .base import PassError, register
from .baseline_order import write_stage_orders
from .dimension_order import OrderingPass, record_scheduler
from .themis import Themis


@register
@dataclass(frozen=True)
class ChooseSchedule(OrderingPass):
    name = "choose-schedule"
    summary = ("time CP-SAT's orders against Themis's and the baseline's on the cost model and keep the fastest "
               "(after optimal-balance)")
    after = ("optimal-balance",)

    def requires(self, module, ctx) -> None:
        super().requires(module, ctx)
        if ctx.evaluate is None:
            raise PassError("choose-schedule times schedules on the cost model: the driver provides it "
                            "(PassContext.evaluate); use --scheduler optimal")

    def apply(self, module, ctx) -> None:
        themis, baseline = comm.copy_module(module), comm.copy_module(module)
        with module.context, comm.ir.Location.unknown():
            Themis(latency=self.latency, active=self.active).apply(themis, ctx)
            write_stage_orders(baseline, ctx.topology)
        candidates = {"cp-sat": module, "themis": themis, "baseline": baseline}
        times = {name: float(ctx.evaluate(m)) for name, m in candidates.items()}
        best = min(times, key=lambda name: times[name])   # ties: the first, CP-SAT's
        if best != "cp-sat":  # the same phases in the same places: take over each one's orders and bytes
            for mine, theirs in zip(_phases(module), _phases(candidates[best])):
                theirs = comm.view(theirs)
                comm.view(mine).set(**{key: getattr(theirs, key) for key in ("order", "bytes") if theirs.has(key)})
        record_scheduler(module, "optimal", keep=("comm.balance",))
        comm.set_attr(module.operation, "comm.schedule", best)
        for name, ns in times.items():
            comm.set_attr(module.operation, f"comm.{name.replace('-', '_')}_time_ns", ns)


def _phases(module) -> list:
    return [op for op in comm.ops(module) if comm.short_name(op) == "phase"]
