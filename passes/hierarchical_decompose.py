"""hierarchical-decompose: a collective over several topology dimensions -> one phase per dimension (multi-rail).

As in ASTRA-sim 2.0 (Sec. II-B): reduce-scatter runs over the dimensions in ascending order, all-gather
in descending order, so an all_reduce (already decomposed) becomes RS dim 0, RS dim 1, ..., AG dim N-1, ...,
AG dim 0. All-to-all exchanges along one dimension at a time, ascending (dimension-ordered store and forward).
A broadcast spreads from its root one dimension at a time, ascending: along the first dimension from the root,
then along the next from every NPU that holds the data, and so on; every phase carries the whole buffer and
names the root. A reduce is that run backwards: over the dimensions descending, gathering towards the root.

Each phase records the bytes per NPU of its own per-dimension collective under the full-buffer convention: a
reduce-scatter phase its input, an all-gather phase its gathered output, an all-to-all phase its buffer.
"""
from __future__ import annotations

from torch_mlir import ir

from ..dialects import comm
from ..network.kinds import ALL_GATHER, ALL_TO_ALL, BROADCAST, REDUCE, REDUCE_SCATTER
from .base import Pass, PassError, register


def phase_plan(kind: str, dims: list[int], shape: list[int], nbytes: int) -> list[tuple[int, int]]:
    """[(dim, bytes)] per stage for a collective of `kind` over `dims` with a `nbytes` full buffer."""
    if kind == REDUCE_SCATTER:
        plan, region = [], nbytes
        for d in sorted(dims):
            plan.append((d, region))
            region //= shape[d]
        return plan
    if kind == ALL_GATHER:
        plan, region = [], nbytes
        for d in sorted(dims):  # region sizes seen from the end: the last stage (dim 0) outputs the full buffer
            plan.append((d, region))
            region //= shape[d]
        return list(reversed(plan))
    if kind in (ALL_TO_ALL, BROADCAST):
        return [(d, nbytes) for d in sorted(dims)]
    if kind == REDUCE:
        return [(d, nbytes) for d in sorted(dims, reverse=True)]
    raise ValueError(kind)


@register
class HierarchicalDecompose(Pass):
    name = "hierarchical-decompose"
    summary = ("one phase per topology dimension: RS ascending, AG descending, all-to-all and broadcast ascending, "
               "reduce descending")
    after = ("decompose-all-reduce",)

    def apply(self, module, ctx) -> None:
        shape = [d.size for d in ctx.topology.dims]
        for op in comm.ops(module):
            kind = comm.short_name(op)
            if kind not in comm.PHASE_KINDS:
                continue
            v = comm.view(op)
            ip = ir.InsertionPoint(op)
            deps = list(op.operands)
            last = None
            # part_of names the buffer an all_reduce's halves share: the lowering nests their regions together
            keep = {"part_of": v.part_of} if v.part_of is not None else {}
            if kind in comm.ROOTED:
                keep["root"] = int(v.root)
            plan = phase_plan(kind, v.dims, shape, v.bytes)
            if any(nbytes <= 0 for _, nbytes in plan):   # a region a dimension splits to nothing
                dim = next(d for d, nbytes in plan if nbytes <= 0)
                raise PassError(f"{v.name}: {v.bytes} bytes are too small for a {kind} over dims "
                                f"{','.join(map(str, sorted(v.dims)))} of {ctx.topology.name}: each NPU's region is "
                                f"under a byte by dimension {dim}; use a larger size")
            for stage, (dim, nbytes) in enumerate(plan):
                last = comm.create("phase", {
                    "collective": v.name, "kind": kind, "dim": dim, "stage": stage,
                    "chunks": int(v.chunks or 1), "bytes": int(nbytes),
                    "group_bytes": int(v.bytes), "group_dims": list(v.dims), **keep,
                }, deps=deps, ip=ip)
                deps = [last.result]
            op.result.replace_all_uses_with(last.result)
            op.erase()
