"""flat-decompose: a collective over several dimensions -> one phase over the whole group (dim = -1).

For topology-aware graph algorithms (MultiTree) that schedule every link of the network at once instead of one
dimension after another. The phase's bytes are its full buffer; select-algorithm then picks a graph algorithm.
"""
from __future__ import annotations

from torch_mlir import ir

from ..dialects import comm
from ..network.kinds import ALL_REDUCE_HALVES
from .base import Pass, PassError, register

FLAT = -1  # the `dim` of a phase that spans every dimension of its group


@register
class FlatDecompose(Pass):
    name = "flat-decompose"
    summary = "one phase per collective over all its dimensions (for graph algorithms such as multitree)"
    after = ("decompose-all-reduce",)

    def apply(self, module, ctx) -> None:
        ndims = len(ctx.topology.dims)
        for op in comm.ops(module):
            kind = comm.short_name(op)
            if kind not in ALL_REDUCE_HALVES:
                if kind in comm.PHASE_KINDS:
                    raise PassError(f"no graph algorithm for {kind}")
                continue
            v = comm.view(op)
            if sorted(v.dims) != list(range(ndims)):
                raise PassError(f"comm.{kind} '{v.name}': graph algorithms need the whole network "
                                f"(dims 0..{ndims - 1}), got {v.dims}")
            keep = {"part_of": v.part_of} if v.part_of is not None else {}
            phase = comm.create("phase", {
                "collective": v.name, "kind": kind, "dim": FLAT, "stage": 0, "chunks": int(v.chunks or 1),
                "bytes": int(v.bytes), "group_bytes": int(v.bytes), "group_dims": list(v.dims), **keep,
            }, deps=list(op.operands), ip=ir.InsertionPoint(op))
            op.result.replace_all_uses_with(phase.result)
            op.erase()
