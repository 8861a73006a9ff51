"""Per-chunk dimension orders: what the scheduling passes (themis, optimal-balance) read and write.

A buffer group is the phases working on one buffer: an all_reduce's reduce_scatter and all_gather halves, or a
lone reduce_scatter, all_gather or all_to_all (an all_reduce run per dimension has no order to choose). A group's
order for a chunk is the sequence of dimensions its reduce-scatter (or all-to-all) visits; all-gathers visit it
reversed, so the two halves of an all-reduce nest the same regions and every all-gather phase has the size of its
reduce-scatter twin. Orders are written as the `order` attribute of each phase: the phase's position in each
chunk's chain.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dialects import comm
from .base import Pass, PassError, option
from .phase_cost import phase_time_ns, region_sizes


def flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class OrderingPass(Pass):
    """Base of the passes that choose per-chunk dimension orders: they weigh phases by their algorithms."""
    after = ("select-algorithm",)
    latency: bool | None = option(flag, True, "count per-step latency as dimension load (true when a dimension runs "
                                              "one chunk at a time)")
    active: int | None = option(int, 1, "chunks a dimension works on at once (the runtime's --active-chunks): a "
                                        "step's latency overlaps the other chunks' transfers")

    def requires(self, module, ctx) -> None:
        for op in comm.ops(module):
            if comm.short_name(op) == "phase" and comm.view(op).algorithm is None:
                raise PassError(f"{self.name} needs every phase's algorithm: run select-algorithm first")


@dataclass
class BufferGroup:
    name: str
    chunks: int
    bytes: int
    dims: list[int]
    # per collective of the group: (kind, {dim: phase op})
    members: list[tuple[str, dict]] = field(default_factory=list)

    def visits(self, kind: str, order: list[int]) -> list[int]:
        return order[::-1] if kind == "all_gather" else order

    def load(self, order: list[int], topology, latency: bool = True, active: int = 1) -> dict[int, float]:
        """Estimated busy time each dimension gets from one chunk visiting `order`."""
        shape = [d.size for d in topology.dims]
        out = {d: 0.0 for d in self.dims}
        for kind, phases in self.members:
            dims = self.visits(kind, order)
            for d, region in zip(dims, region_sizes(kind, dims, shape, self.bytes / self.chunks)):
                dim = topology.dims[d]
                algo = comm.view(phases[d]).algorithm
                out[d] += phase_time_ns(kind, algo, dim.block, dim.size, dim.effective_gbps,
                                        dim.latency_ns if latency else 0.0, region, active,
                                        topology.endpoint_delay_ns if latency else 0.0)
        return out

    def has_orders(self) -> bool:
        """Whether a scheduling pass wrote this buffer's orders (every phase of it carries `order`)."""
        return all(comm.view(op).order is not None for _, phases in self.members for op in phases.values())

    def write(self, orders: list[list[int]], topology) -> None:
        """Record one order per chunk on every phase (position attribute) and the bytes each phase now sees."""
        shape = [d.size for d in topology.dims]
        for kind, phases in self.members:
            positions = {d: [] for d in phases}
            total = {d: 0.0 for d in phases}
            for order in orders:
                dims = self.visits(kind, order)
                for pos, (d, region) in enumerate(zip(dims, region_sizes(kind, dims, shape, self.bytes / self.chunks))):
                    positions[d].append(pos)
                    total[d] += region
            for d, op in phases.items():
                comm.set_attr(op, "order", positions[d])
                comm.set_attr(op, "bytes", int(round(total[d])))


def record_scheduler(module, name: str, keep: tuple[str, ...] = ()) -> None:
    """Say in the module whose orders it now holds (comm.scheduler): a re-run keeps them (docs/scheduling.md).
    What an earlier scheduling recorded about its own orders goes (a module scheduled again as the baseline no
    longer claims CP-SAT's times), but the attributes in `keep`."""
    attributes = module.operation.attributes
    for attr in comm.MODULE_ATTRS:
        if attr not in (comm.TOPOLOGY_ATTR, "comm.scheduler") + keep and attr in attributes:
            del attributes[attr]
    comm.set_attr(module.operation, "comm.scheduler", name)


def buffer_groups(module) -> list[BufferGroup]:
    """The module's per-dimension phases grouped by buffer, in program order (a phase over the whole network has
    no dimension order to choose)."""
    groups: dict[str, BufferGroup] = {}
    by_coll: dict[str, tuple[str, dict]] = {}
    for op in comm.ops(module):
        if comm.short_name(op) != "phase":
            continue
        p = comm.view(op)
        if p.dim == -1:
            continue
        buffer = p.part_of or p.collective
        g = groups.setdefault(buffer, BufferGroup(buffer, p.chunks, p.group_bytes, sorted(p.group_dims)))
        if p.collective not in by_coll:
            by_coll[p.collective] = (p.kind, {})
            g.members.append(by_coll[p.collective])
        by_coll[p.collective][1][p.dim] = op
    fixed = per_dimension_buffers(module)   # its order is fixed, ascending, as ASTRA-sim's baseline runs it
    return [g for g in groups.values() if g.name not in fixed]


def per_dimension_buffers(module) -> set[str]:
    """The all_reduces run per dimension (decompose-all-reduce{all-reduce=per-dimension}): buffers whose phases
    are on one dimension each, on more than one dimension in all (a reduce_scatter + all_gather pair on each)."""
    dims: dict[str, set] = {}
    for op in comm.ops(module):
        if comm.short_name(op) == "phase":
            p = comm.view(op)
            if p.part_of is not None and len(p.group_dims) == 1:
                dims.setdefault(p.part_of, set()).add(p.dim)
    return {b for b, d in dims.items() if len(d) > 1}
