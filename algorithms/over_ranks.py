"""The base of the algorithms run over ranks that reuse a per-dimension algorithm's template (flat_direct,
rank_ring, hdrm, ...): a file of its own, above the registry (__init__.py) that finds the algorithm it names."""
from __future__ import annotations

from .base import RANKS, Algorithm


class OverRanks(Algorithm):
    """A per-dimension algorithm run over every NPU at once by rank, each message routed across the dimensions (a
    topology-unaware baseline); `over` names the per-dimension algorithm whose template it runs."""
    scope = RANKS
    over: str = ""

    def template(self, kind, k, bidirectional=False):
        from . import get  # the registry, loading the per-dimension algorithm's file if no one has yet
        return get(self.over).template(kind, k, True)

    def footprint(self, kind, k, bidirectional=False):
        from . import get
        return get(self.over).footprint(kind, k, True)
