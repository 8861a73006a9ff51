"""decompose-all-reduce: all_reduce = reduce_scatter followed by all_gather on the same group.

The all_gather waits on the reduce_scatter's token (per chunk), and every user of the all_reduce's token now
waits on the all_gather. Both halves keep the full-buffer size convention: the reduce_scatter's bytes are its
input, the all_gather's its gathered output, so both equal the all_reduce's buffer.

Option `all-reduce`, for an all_reduce over several dimensions:
- `hierarchical` (the default): one reduce_scatter and one all_gather over all its dimensions, which
  hierarchical-decompose turns into reduce-scatters up the dimensions and all-gathers back, each dimension
  working on what the previous left (ASTRA-sim's localBWAware collective optimization);
- `per-dimension`: a whole all-reduce on each dimension in turn, ascending, each on the full buffer: a
  reduce_scatter + all_gather pair per dimension, all on the all_reduce's buffer, so chunk c of a dimension's
  pair starts once chunk c of the previous dimension's is done (ASTRA-sim's baseline collective optimization,
  Sys.cc generate_collective: more data moved, kept for runs that compare with ASTRA-sim).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from ..dialects import comm
from . import ALL_REDUCE_SPLITS
from .base import Pass, option, register


def _split(text: str) -> str:
    if text not in ALL_REDUCE_SPLITS:
        raise ValueError(f"must be one of {', '.join(ALL_REDUCE_SPLITS)}")
    return text


@register
@dataclass(frozen=True)
class DecomposeAllReduce(Pass):
    name = "decompose-all-reduce"
    summary = "all_reduce -> reduce_scatter + all_gather (over all its dimensions, or a pair per dimension)"
    all_reduce: str | None = option(_split, "hierarchical", "how an all_reduce over several dimensions runs: "
                                    "hierarchical or per-dimension")

    def apply(self, module, ctx) -> None:
        per_dimension = self.value("all_reduce") == "per-dimension"
        for op in comm.ops(module):
            if comm.short_name(op) != "all_reduce":
                continue
            v = comm.view(op)
            extra = {k: x for k, x in v.values().items() if k != "name"}
            ip = ir.InsertionPoint(op)
            groups = [[d] for d in sorted(v.dims)] if per_dimension and len(v.dims) > 1 else [list(v.dims)]
            deps = list(op.operands)
            for dims in groups:
                tag = f".d{dims[0]}" if len(groups) > 1 else ""
                halves = {**extra, "dims": dims, "part_of": v.name}
                rs = comm.create("reduce_scatter", {**halves, "name": f"{v.name}{tag}.rs"}, deps=deps, ip=ip)
                ag = comm.create("all_gather", {**halves, "name": f"{v.name}{tag}.ag"}, deps=[rs.result], ip=ip)
                deps = [ag.result]
            op.result.replace_all_uses_with(deps[0])
            op.erase()

    def ensures(self, module, ctx) -> None:
        super().ensures(module, ctx)
        assert not any(comm.short_name(o) == "all_reduce" for o in comm.ops(module))
