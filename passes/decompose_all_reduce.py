"""decompose-all-reduce: all_reduce = reduce_scatter followed by all_gather on the same group.

The all_gather waits on the reduce_scatter's token (per chunk), and every user of the all_reduce's token now
waits on the all_gather. Both halves keep the full-buffer size convention: the reduce_scatter's bytes are its
input, the all_gather's its gathered output, so both equal the all_reduce's buffer.
"""
from __future__ import annotations

from torch_mlir import ir

from ..dialects import comm
from .base import Pass, register


@register
class DecomposeAllReduce(Pass):
    name = "decompose-all-reduce"
    summary = "all_reduce -> reduce_scatter + all_gather"

    def apply(self, module, ctx) -> None:
        for op in comm.ops(module):
            if comm.short_name(op) != "all_reduce":
                continue
            v = comm.view(op)
            extra = {k: x for k, x in v.values().items() if k != "name"}
            ip = ir.InsertionPoint(op)
            rs = comm.create("reduce_scatter", {**extra, "name": f"{v.name}.rs", "part_of": v.name},
                             deps=list(op.operands), ip=ip)
            ag = comm.create("all_gather", {**extra, "name": f"{v.name}.ag", "part_of": v.name},
                             deps=[rs.result], ip=ip)
            op.result.replace_all_uses_with(ag.result)
            op.erase()

    def ensures(self, module, ctx) -> None:
        super().ensures(module, ctx)
        assert not any(comm.short_name(o) == "all_reduce" for o in comm.ops(module))
