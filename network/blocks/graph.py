"""Graph: NPUs and switches joined by explicit links (network/graphs.py: BiGraph, DGX-1, edge lists). Not a
stackable block: a graph topology is one Graph dimension over all its NPUs, and every message takes a shortest
path over the listed links (network/links.py numbers them as listed)."""
from __future__ import annotations

from .base import Block


class Graph(Block):
    order = 9
    name = "Graph"
    stackable = False
    direct = False      # a path may pass switches, and NPUs sit anywhere in it
    transitive = False
    listed = False      # written as 4x8_bigraph, dgx1 or a .edges file, never Graph(k)

    def link_share(self, k: int) -> int:
        return 1  # the dimension's bandwidth is already the smallest per-NPU injection bandwidth (one estimate)

    def default_algorithm(self, k: int) -> str:
        return "ring"

    def cost_hops(self, k: int, distance: int) -> int:
        return 2  # as if every partner sat behind one switch (an estimate for the ordering passes)
