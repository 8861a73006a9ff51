"""From the final comm IR to collective plans: each collective's chain of phases, chunks, buffer and dependencies."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import algorithms
from ...dialects import comm
from ...network.errors import UserError
from ...network.kinds import ALL_REDUCE, ALL_REDUCE_HALVES
from ...runtime.meta import CollectiveMeta, StageMeta

FLAT = -1  # a phase over every dimension of its group (graph algorithms)


@dataclass
class Stage:
    kind: str
    dim: int
    algorithm: str
    bytes: int
    ports: int | None = None  # multitree: new tree edges per node per step (None: one per link)
    # whole-network phases: (kind, attributes) of the structure op they run on (comm.trees, comm.cycle, ...)
    structure: tuple[str, dict] | None = None
    fused: bool = False  # an all-reduce half that runs fused with its twin (in_switch: one reduce-and-multicast)


@dataclass
class CollectivePlan:
    index: int
    name: str
    kind: str              # reduce_scatter, all_gather, all_to_all, broadcast or reduce
    buffer: str            # collectives sharing a buffer run one after the other on it (all_reduce halves)
    buffer_kind: str       # what the buffer's collectives implement together (e.g. all_reduce)
    bytes: int
    chunks: int
    group_dims: list[int]
    stages: list[Stage] = field(default_factory=list)
    deps: list[int] = field(default_factory=list)
    # (chunks, stages): the stage visited at each position of a chunk's chain; None: the stages' own order
    orders: np.ndarray | None = None
    root: int | None = None  # a broadcast's or reduce's root NPU (its coordinates on the group's dimensions root
                             # every group)

    def chunk_orders(self) -> np.ndarray:
        if self.orders is not None:
            return self.orders
        return np.tile(np.arange(len(self.stages)), (self.chunks, 1))

    def order_groups(self) -> list[tuple[tuple[int, ...], np.ndarray]]:
        """Chunks grouped by the order in which they visit the stages: [(order, chunk indices)]."""
        orders = self.chunk_orders()
        uniq, inverse = np.unique(orders, axis=0, return_inverse=True)
        return [(tuple(int(x) for x in u), np.flatnonzero(inverse.ravel() == i)) for i, u in enumerate(uniq)]

    def to_meta(self) -> CollectiveMeta:
        # chunk_dims: the dims each chunk visits, in order (the runtime needs a phase's dimension before it runs)
        return CollectiveMeta(self.name, self.kind, self.buffer, self.buffer_kind, self.bytes, self.chunks,
                              tuple(self.group_dims), tuple(self.deps),
                              tuple(StageMeta(s.kind, s.dim, s.algorithm, s.bytes,
                                              algorithms.for_phase(s.algorithm, flat=s.dim == FLAT).ends_on_send)
                                    for s in self.stages),
                              tuple(tuple(self.stages[i].dim for i in row) for row in self.chunk_orders().tolist()),
                              self.root)


def plans_from_module(module, shape: list[int] | None = None) -> list[CollectivePlan]:
    """Group the module's phase ops into per-collective chains; reject ops the lowering cannot handle, and (given
    the topology's `shape`) phases a module written by hand makes disagree with their collective."""
    plans: dict[str, CollectivePlan] = {}
    positions: dict[str, list] = {}  # per collective, per stage: position of the stage in each chunk's chain
    producer: dict = {}
    for op in comm.ops(module):
        kind = comm.short_name(op)
        if kind in comm.STRUCTURES:  # read through the phases that take its token
            continue
        if kind != "phase":
            raise UserError(f"comm.{kind} '{comm.view(op).values().get('name', '?')}' is not lowered to phases: "
                            f"the schedule lowering handles all_reduce, reduce_scatter, all_gather, all_to_all, "
                            f"broadcast and reduce")
        p = comm.view(op)
        if p.algorithm is None:
            raise UserError(f"phase {p.stage} of '{p.collective}' has no algorithm (run select-algorithm)")
        name = p.collective
        if name not in plans:
            plans[name] = CollectivePlan(len(plans), name, p.kind, buffer=p.part_of or name, buffer_kind=p.kind,
                                         bytes=p.group_bytes, chunks=p.chunks, group_dims=sorted(p.group_dims),
                                         root=p.root)
        plan = plans[name]
        if p.stage != len(plan.stages) or p.kind != plan.kind or p.chunks != plan.chunks or p.root != plan.root:
            raise UserError(f"phases of '{name}' are out of order or disagree on kind/chunks/root")
        alg = algorithms.for_phase(p.algorithm, flat=p.dim == FLAT)
        plan.stages.append(Stage(p.kind, p.dim, alg.phase_name, p.bytes, p.ports, comm.structure_of(op),
                                 bool(p.fused)))
        if alg.planned_by and plan.stages[-1].structure is None:
            raise UserError(f"phase {p.stage} of '{name}' runs {alg.name} but takes no structure token (trees, "
                            f"cycle, placement): run {alg.planned_by} first")
        positions.setdefault(name, []).append(p.order)
        for operand in op.operands:
            dep = producer.get(operand.owner)
            if dep is not None and dep != name and plans[dep].index not in plan.deps:
                plan.deps.append(plans[dep].index)
        producer[op] = name
    # an all_reduce decomposed into reduce_scatter + all_gather shares one buffer (a pair per dimension when it
    # runs per dimension)
    by_buffer: dict[str, list[CollectivePlan]] = {}
    for p in plans.values():
        by_buffer.setdefault(p.buffer, []).append(p)
    for buffer, group in by_buffer.items():
        kinds = [p.kind for p in group]
        if kinds and kinds == list(ALL_REDUCE_HALVES) * (len(kinds) // 2):
            for p in group:
                p.buffer_kind = ALL_REDUCE
        elif any(p.buffer != p.name for p in group):   # part_of names an all-reduce its halves make together
            raise UserError(f"the phases part_of '{buffer}' are {', '.join(f'{p.name} ({p.kind})' for p in group)}: "
                            "an all-reduce's halves are a reduce_scatter then an all_gather (one pair per dimension "
                            "when it runs per dimension)")
        if len({(p.bytes, p.chunks) for p in group}) > 1:
            raise UserError(f"the halves of all-reduce '{buffer}' disagree on group_bytes or chunks")
    for p in plans.values():
        p.orders = _orders(p, positions[p.name])
        if shape is not None:
            _check_bytes(p, shape)
        if [s.dim for s in p.stages] == [FLAT]:
            continue
        if sorted(s.dim for s in p.stages) != p.group_dims:
            raise UserError(f"phases of '{p.name}' do not cover its dimensions {p.group_dims} exactly once")
    return list(plans.values())


def _check_bytes(plan: CollectivePlan, shape: list[int]) -> None:
    """Each phase's bytes are what its collective gives it: a whole-network phase the full buffer; a per-dimension
    phase the sum over chunks of the region entering it at its place in each chunk's order (what
    hierarchical-decompose writes, and the ordering passes rewrite: passes/dimension_order.py). The lowering takes
    the collective's group_bytes, so a phase written by hand whose bytes say otherwise would be timed as something
    else than it says."""
    from ...passes.phase_cost import region_sizes
    dims = [s.dim for s in plan.stages]
    if dims == [FLAT]:
        expected = [float(plan.bytes)]
    elif sorted(dims) == plan.group_dims and all(0 <= d < len(shape) for d in dims):
        expected = [0.0] * len(dims)
        for order, chunks in plan.order_groups():
            regions = region_sizes(plan.kind, [dims[i] for i in order], shape, plan.bytes / plan.chunks)
            for i, region in zip(order, regions):
                expected[i] += region * len(chunks)
    else:
        return   # the cover check names it
    for stage, (s, want) in enumerate(zip(plan.stages, expected)):
        if abs(s.bytes - want) > max(1, plan.chunks):   # each chunk's region rounds on its own
            raise UserError(f"phase {stage} of '{plan.name}' (dim {s.dim}): bytes {s.bytes}, but its {plan.kind} of "
                            f"{plan.bytes} B (group_bytes) over dims {plan.group_dims} in {plan.chunks} chunk(s) "
                            f"gives it {int(round(want))}")


def _orders(plan: CollectivePlan, positions: list) -> np.ndarray | None:
    """Per-chunk stage order from the phases' `order` attributes (position of the phase in chunk c's chain)."""
    if all(p is None for p in positions):
        return None
    n = len(plan.stages)
    pos = np.array([p if p is not None else [i] * plan.chunks for i, p in enumerate(positions)], dtype=np.int64)
    if pos.shape != (n, plan.chunks):
        raise UserError(f"phases of '{plan.name}': every `order` must list one position per chunk ({plan.chunks})")
    if not np.array_equal(np.sort(pos, axis=0), np.tile(np.arange(n)[:, None], (1, plan.chunks))):
        raise UserError(f"phases of '{plan.name}': the `order` positions of a chunk must be a permutation of "
                        f"0..{n - 1}")
    orders = np.empty((plan.chunks, n), np.int64)
    orders[np.arange(plan.chunks)[None, :], pos] = np.arange(n)[:, None]
    return orders


