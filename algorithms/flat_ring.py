"""flat_ring: a ring over the whole network along a Hamiltonian cycle of the link graph, run bidirectionally (the
MultiTree paper's "ring").

The cycle follows a reflected (boustrophedon) walk of the coordinates, in which consecutive NPUs differ by one
step in one dimension; it closes when the last NPU is a neighbour of the first, as on tori of even size. Meshes
have no wrap-around links: there a comb walk (out along one dimension, snake back through the rest) closes. Blocks
are relabelled so that the NPU at every position owns the block of its own rank, the layout every flat phase uses.
"""
from __future__ import annotations

from ..network.errors import UserError
from . import ring
from .base import NETWORK, Algorithm, Transfers


def snake_order(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Coordinates in reflected mixed-radix Gray order (dimension 0 fastest)."""
    if len(shape) == 1:
        return [(x,) for x in range(shape[0])]
    inner = snake_order(shape[:-1])
    out = []
    for y in range(shape[-1]):
        for c in (inner if y % 2 == 0 else inner[::-1]):
            out.append(c + (y,))
    return out


def comb_order(shape: tuple[int, ...]) -> list[tuple[int, ...]] | None:
    """A closed walk that needs no wrap-around link (a Hamiltonian cycle of the mesh of this shape), or None.

    Dimension 0 is the comb's spine: the walk runs along it at the first position of the other dimensions, then
    snakes through every further position of them over dimension-0 coordinates 1..k-1 and comes home along
    coordinate 0. It closes when the other dimensions hold an even number of positions."""
    if len(shape) < 2:
        return None
    rest = snake_order(shape[1:])
    if len(rest) % 2:
        return None
    out = [(x,) + rest[0] for x in range(shape[0])]
    for j, y in enumerate(rest[1:], start=1):
        xs = range(shape[0] - 1, 0, -1) if j % 2 else range(1, shape[0])
        out.extend((x,) + y for x in xs)
    out.extend((0,) + y for y in reversed(rest[1:]))
    return out


def hamiltonian_cycle(topology, src, dst) -> list[int] | None:
    """Ranks along a cycle of physical links, or None when no walk closes. The snake walk (closing over a
    wrap-around link, as on tori of even size) and the comb walk (no wrap-around, as on meshes) are tried with
    every dimension in every role."""
    import itertools
    edges = set(zip(src.tolist(), dst.tolist()))
    shape = topology.shape
    for perm in itertools.permutations(range(len(shape))):
        permuted = tuple(shape[d] for d in perm)
        for walk in (snake_order(permuted), comb_order(permuted)):
            if walk is None:
                continue
            order = []
            for c in walk:
                coords = [0] * len(shape)
                for i, d in enumerate(perm):
                    coords[d] = c[i]
                order.append(topology.rank(coords))
            if all((a, b) in edges and (b, a) in edges for a, b in zip(order, order[1:] + order[:1])):
                return order
    return None


def template(kind: str, cycle: list[int], src, dst) -> Transfers:
    """The bidirectional ring template on the cycle, in ranks, with the physical link of every transfer."""
    n = len(cycle)
    links: dict = {}
    for lid, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        links.setdefault((a, b), []).append(lid)
    base = ring.template(kind, n, bidirectional=True)
    rows = []
    for st, s, d, lo, direction in zip(base.step.tolist(), base.src.tolist(), base.dst.tolist(), base.src_lo.tolist(),
                                       base.direction.tolist()):
        a, b = cycle[s], cycle[d]
        block, half = divmod(lo, 2)
        unit = 2 * cycle[block] + half  # the block owned by position p becomes the block of rank cycle[p]
        choices = links[(a, b)]
        lid = choices[half % len(choices)]  # Ring(2): the two directions take the two parallel links
        rows.append((st, a, b, unit, unit + 1, unit, unit + 1, direction, lid))
    return Transfers.build(2 * n, rows, reduce=(kind == "reduce_scatter"))


class FlatRing(Algorithm):
    order = 12
    name = "flat_ring"
    phase_name = "ring"
    scope = NETWORK
    planned_by = "find-cycle"
    label = "ring along a Hamiltonian cycle (graph)"

    def footprint(self, kind, k, bidirectional=False):
        return 2 * k * (k - 1)  # a ring both ways round the cycle

    def read_plan(self, topology, attributes, links) -> list[int]:
        return attributes["order"]   # the cycle find-cycle recorded (comm.cycle)

    def network_template(self, kind, topology, plan, links):
        graph = links()
        return template(kind, plan, graph.src, graph.dst)

    def plan(self, topology) -> list[int]:
        """Ranks along a Hamiltonian cycle of the NPU-to-NPU links (the find-cycle pass records it)."""
        if topology.graph is not None:
            raise UserError(f"flat_ring walks the coordinates of a torus or mesh; {topology.name} is a graph: use "
                            f"rank_ring (a ring over ranks along shortest paths)")
        if not all(d.kind.direct for d in topology.dims):
            raise UserError(f"a ring over the whole network needs links between NPUs; {topology.name} has switch "
                            f"dimensions")
        links = topology.links()
        cycle = hamiltonian_cycle(topology, links.src, links.dst)
        if cycle is None:
            raise UserError(f"no Hamiltonian ring found in {topology.name} (the walks tried close only when some "
                            f"dimension has an even size, and a mesh needs two dimensions)")
        return cycle
