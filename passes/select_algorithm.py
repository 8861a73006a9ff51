"""select-algorithm: choose the algorithm of every phase from its dimension's building block.

Defaults follow ASTRA-sim 2.0 (seed 002, Table "topology-aware collectives"): Ring -> ring, FullyConnected ->
direct, Switch -> halving_doubling (ring when the switch's size is not a power of two); a Mesh (a line, not in
ASTRA-sim) -> ring, whose wrap-around transfer walks the line back. The `algorithm` option overrides them: one name for every dimension, or a
comma-separated list with one name per topology dimension. Phases that already name an algorithm keep it.
"""
from __future__ import annotations

from ..dialects import comm
from .base import Pass, PassError, register


def _names(text: str) -> list[str]:
    return [comm.canonical_algorithm(t) for t in text.split(",") if t.strip()]


def algorithm_for(dim: int, dims: list, chosen: list[str] | None) -> str:
    """`dims`: the topology's dimensions (each block says its default for its size, network/blocks/)."""
    if chosen:
        return chosen[0] if len(chosen) == 1 else chosen[dim]
    return dims[dim].default_algorithm


def check_applicable(algorithm: str, kind: str, size: int, dim: int) -> None:
    """Reject (algorithm, phase kind, group size) combinations that have no schedule."""
    if algorithm in ("halving_doubling", "hdrm") and size & (size - 1):
        where = "the network" if dim < 0 else f"dimension {dim}"
        raise PassError(f"{algorithm} needs a power-of-two group, {where} has {size} NPUs")
    if algorithm == "double_binary_tree" and kind == "all_to_all":
        raise PassError("double_binary_tree has no all_to_all schedule (trees cannot forward per-destination "
                        "data in place); use ring, direct or halving_doubling for all_to_all")


@register
class SelectAlgorithm(Pass):
    name = "select-algorithm"
    summary = "per-dimension algorithm: ring, direct, halving_doubling or double_binary_tree"
    options = {"algorithm": (_names, None, "one algorithm, or one per topology dimension (comma-separated)"),
               "ports": (int, None, "multitree: new tree edges a node may start per step (its injection ports); "
                                    "default one per link")}

    def apply(self, module, ctx) -> None:
        try:
            chosen = self.option("algorithm", ctx)
        except comm.IRError as e:
            raise PassError(str(e)) from None
        dims = ctx.topology.dims
        if chosen and len(chosen) not in (1, len(dims)):
            raise PassError(f"--algorithm lists {len(chosen)} algorithms for {len(dims)} dimensions")
        for op in comm.ops(module):
            if comm.short_name(op) != "phase":
                continue
            a = comm.attrs(op)
            if a["dim"] == -1:  # a phase over the whole group: only graph algorithms schedule those
                algo = a.get("algorithm") or (chosen[0] if chosen and len(chosen) == 1 else "multitree")
                if algo not in comm.FLAT_ALGORITHMS:
                    raise PassError(f"a phase over every dimension needs one of {', '.join(comm.FLAT_ALGORITHMS)}, "
                                    f"not {algo}")
                check_applicable(algo, a["kind"], ctx.topology.npus, -1)
                comm.set_attr(op, "algorithm", algo)
                ports = self.option("ports", ctx)
                if ports is not None and algo in comm.GRAPH_ALGORITHMS:
                    if ports < 1:
                        raise PassError(f"ports must be at least 1, got {ports}")
                    comm.set_attr(op, "ports", int(ports))
                continue
            algo = a.get("algorithm") or algorithm_for(a["dim"], dims, chosen)
            if algo in comm.GRAPH_ALGORITHMS + ("rank_ring", "hdrm"):
                raise PassError(f"{algo} schedules the whole network at once: compile with --algorithm {algo} "
                                f"(flat-decompose instead of hierarchical-decompose)")
            check_applicable(algo, a["kind"], dims[a["dim"]].size, a["dim"])
            comm.set_attr(op, "algorithm", algo)

    def ensures(self, module, ctx) -> None:
        super().ensures(module, ctx)
        for op in comm.ops(module):
            if comm.short_name(op) == "phase" and "algorithm" not in comm.attrs(op):
                raise PassError("select-algorithm left a phase without an algorithm")
