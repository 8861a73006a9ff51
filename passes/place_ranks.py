"""place-ranks: HDRM's placement of virtual ranks on the NPUs of a BiGraph (algorithms/hdrm.py), recorded in the
IR as `comm.placement`; halving-doubling then runs over the virtual ranks without two messages on one link."""
from __future__ import annotations

from .base import Pass, register
from .structure import phases_planned_by, record


@register
class PlaceRanks(Pass):
    name = "place-ranks"
    summary = "hdrm: virtual ranks placed on BiGraph NPUs, recorded as comm.placement"
    after = ("select-algorithm",)

    def apply(self, module, ctx) -> None:
        phases = phases_planned_by(module, self.name)
        if not phases:
            return
        placement = None
        for _, v, alg in phases:  # every buffer must be an all-reduce's (part_of names it)
            placement = alg.plan(ctx.topology, "all_reduce" if v.part_of else v.kind)
        record(module, phases, "placement", {"ranks": [int(r) for r in placement]})
