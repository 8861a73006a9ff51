"""chunk: split every collective into `chunks` chunks that pipeline through its phases.

This is ASTRA-sim's preferred-dataset-splits: chunk c of a phase may start once chunk c of the previous phase
is done, so different dimensions work on different chunks at the same time. Collectives that already carry a
`chunks` attribute (written in the input IR) keep it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dialects import comm
from .base import Pass, PassError, option, positive_int, register


@register
@dataclass(frozen=True)
class Chunk(Pass):
    name = "chunk"
    summary = "set the chunk count of every collective (ASTRA-sim preferred-dataset-splits)"
    before = ("hierarchical-decompose", "flat-decompose")  # they copy each collective's chunk count to its phases
    chunks: int | None = option(positive_int, 1, "chunks per collective")

    def apply(self, module, ctx) -> None:
        chunks = self.value("chunks")
        for op in comm.ops(module):
            v = comm.view(op)
            if v.opname in comm.COLLECTIVES and v.chunks is None:
                if chunks > v.bytes:
                    raise PassError(f"comm.{v.opname} '{v.name}': {chunks} chunks do not fit in {v.bytes} bytes")
                v.set(chunks=int(chunks))
