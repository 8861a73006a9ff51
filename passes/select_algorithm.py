"""select-algorithm: choose the algorithm of every phase from its dimension's building block.

Defaults follow ASTRA-sim 2.0 (Table "topology-aware collectives"): Ring -> ring, FullyConnected ->
direct, Switch -> halving_doubling (ring when the switch's size is not a power of two; direct for an all-to-all,
as ASTRA-sim); a Mesh (a line, not in ASTRA-sim) -> ring, whose wrap-around transfer walks the line back. The
`algorithm` option overrides them: one name for every dimension, or a comma-separated list with one name per
topology dimension. Phases that already name an algorithm keep it.
A block's default that has no schedule for a phase's kind (halving-doubling has no broadcast) gives way to ring
on neighbour links and to direct elsewhere (for a broadcast: a pipelined chain, or a scatter and an all-gather).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import algorithms
from ..dialects import comm
from ..network.errors import UserError
from .base import Pass, PassError, option, register
from .dimension_order import per_dimension_buffers


def _names(text: str) -> tuple[str, ...]:
    """--algorithm names (aliases resolved); a phase name of a whole-network algorithm ('ring' for the
    Hamiltonian cycle) is resolved per phase."""
    out = []
    for t in text.split(","):
        if t.strip():
            name = algorithms.canonical(t)
            if name is None:
                raise PassError(f"unknown algorithm '{t.strip()}'; expected one of {', '.join(algorithms.all_algorithms())}")
            out.append(name)
    return tuple(out)


def algorithm_for(dim: int, dims: list, chosen: list[str] | None, kind: str = "") -> str:
    """`dims`: the topology's dimensions (each block says its default for its size, network/blocks/)."""
    if chosen:
        return chosen[0] if len(chosen) == 1 else chosen[dim]
    default = dims[dim].kind.default_for(dims[dim].size, kind) if kind else dims[dim].default_algorithm
    if not kind or kind in algorithms.get(default).kinds:
        return default
    return "ring" if dims[dim].kind.neighbour_links else "direct"


def check_applicable(alg, kind: str, size: int, dim: int) -> None:
    """Reject (algorithm, phase kind, group size) combinations that have no schedule (the algorithm's check)."""
    try:
        alg.check(kind, size, "the network" if dim < 0 else f"dimension {dim}")
    except UserError as e:
        raise PassError(str(e)) from None


@register
@dataclass(frozen=True)
class SelectAlgorithm(Pass):
    name = "select-algorithm"
    summary = "the algorithm of every phase (algorithms/: per dimension, or over the whole network)"
    after = ("hierarchical-decompose", "flat-decompose")
    algorithm: tuple[str, ...] | None = option(_names, None, "one algorithm, or one per topology dimension "
                                                             "(comma-separated); default: each block's own")
    ports: int | None = option(int, None, "multitree: new tree edges a node may start per step (its injection "
                                          "ports); default one per link")

    def apply(self, module, ctx) -> None:
        chosen = self.value("algorithm")
        dims = ctx.topology.dims
        # each dimension's all-reduce of an all_reduce run per dimension is one pass per chunk, as ASTRA-sim's
        # all-reduce phase on a dimension
        split = per_dimension_buffers(module)
        if chosen and len(chosen) not in (1, len(dims)):
            raise PassError(f"--algorithm lists {len(chosen)} algorithms for {len(dims)} dimensions")
        for op in comm.ops(module):
            if comm.short_name(op) != "phase":
                continue
            p = comm.view(op)
            if p.dim == -1:  # a phase over the whole group: only whole-network algorithms schedule those
                word = p.algorithm or (chosen[0] if chosen and len(chosen) == 1 else "multitree")
                try:
                    alg = algorithms.for_phase(word, flat=True)
                except UserError:
                    flat = ", ".join(dict.fromkeys(x.phase_name for x in algorithms.scoped(algorithms.NETWORK,
                                                                                           algorithms.RANKS)))
                    raise PassError(f"a phase over every dimension needs one of {flat}, not {word}") from None
                check_applicable(alg, p.kind, ctx.topology.npus, -1)
                p.set(algorithm=alg.phase_name)
                ports = self.value("ports")
                if ports is not None and alg.takes_ports:
                    if ports < 1:
                        raise PassError(f"ports must be at least 1, got {ports}")
                    p.set(ports=int(ports))
                continue
            word = p.algorithm or algorithm_for(p.dim, dims, chosen, p.kind)
            name = algorithms.canonical(word)
            if name is not None and algorithms.REGISTRY[name].scope != algorithms.DIMENSION:
                raise PassError(f"{name} schedules the whole network at once: compile with --algorithm {name} "
                                f"(flat-decompose instead of hierarchical-decompose)")
            try:
                alg = algorithms.for_phase(word, flat=False)
            except UserError as e:
                raise PassError(str(e)) from None
            check_applicable(alg, p.kind, dims[p.dim].size, p.dim)
            if alg.blocks is not None and dims[p.dim].block not in alg.blocks:
                raise PassError(f"{alg.name} runs on {' or '.join(alg.blocks)} dimensions; dimension {p.dim} is a "
                                f"{dims[p.dim].block}")
            p.set(algorithm=alg.phase_name)
            if (alg.fuses_all_reduce or p.part_of in split) and p.part_of and len(p.group_dims) == 1:
                p.set(fused=1)  # the all-reduce's halves become one pass

    def ensures(self, module, ctx) -> None:
        super().ensures(module, ctx)
        for op in comm.ops(module):
            if comm.short_name(op) == "phase" and comm.view(op).algorithm is None:
                raise PassError("select-algorithm left a phase without an algorithm")
