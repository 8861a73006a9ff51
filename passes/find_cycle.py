"""find-cycle: a Hamiltonian cycle of the NPU-to-NPU links for flat_ring (a ring over the whole network), recorded
in the IR as `comm.cycle` (algorithms/flat_ring.py walks the coordinates of tori and meshes)."""
from __future__ import annotations

from .base import Pass, register
from .structure import phases_planned_by, record


@register
class FindCycle(Pass):
    name = "find-cycle"
    summary = "flat_ring: a Hamiltonian cycle of links, recorded as comm.cycle"
    after = ("select-algorithm",)

    def apply(self, module, ctx) -> None:
        phases = phases_planned_by(module, self.name)
        if phases:
            record(module, phases, "cycle", {"order": [int(r) for r in phases[0][2].plan(ctx.topology)]})
