"""Lowering of collective plans (plans.py) to one schedule table per accelerator.

The IR stays independent of NPU and chunk counts; this module expands it on demand. `Schedule.table(npu)` builds
one NPU's table with array operations over chunks (no Python object per row), so the runtime can execute one
representative NPU of a symmetric schedule without materialising the others; `Schedule.tables(npus)` builds many
NPUs' at once, a phase expanded once per member position over every NPU at that position (full execution).

Regions: a reduce-scatter chain over dimensions d0, d1, ... nests regions: chunk c of the buffer is the level-0
region; at level i+1 an NPU keeps block x_{d_i} (its coordinate) of its level-i region. An all-gather chain walks
the same nesting outwards, so the all-gather half of an all-reduce starts from exactly the shard its
reduce-scatter half produced. All-to-all phases work on the whole chunk, split into one slot per group member.
Broadcast phases work on the whole chunk too; their templates start at member 0, so each group's members are
rotated to put the root's coordinate first, and a phase runs only on the groups that hold the data by then (those
that agree with the root on every dimension the chunk has yet to visit); a reduce's phase only on those that
agree with the root on every dimension the chunk has visited (the others have passed their sums on).
Boundaries are floor(i * length / parts), so any byte count splits exactly.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ... import algorithms
from ...algorithms import NETWORK, RANKS, Algorithm, Transfers
from .dependencies import dependencies
from ...network.coords import coordinate, strides
from ...network.errors import UserError
from .plans import FLAT, CollectivePlan, Stage
from ...network.links import LANE_SHORTEST, ROUTED, LinkMap
from ...runtime.meta import ROOTED, SHARDED, Meta
from ...runtime.tables import COLUMN_NAMES, DTYPES, RECV_COPY, RECV_REDUCE, SEND, SWITCH, Table
from ...network.blocks import SHORTEST, Symmetry
from ...network.topology import Topology

if TYPE_CHECKING:   # the trees' type, for the annotation only (the module imports lazily: it is large)
    from ...algorithms import multitree

READ_AHEAD_ROWS = 1 << 18   # table()'s read-ahead batch: at most this many rows (about 20 MB) held at once


def phase_symmetry(topology: Topology, kind: str, dim: int, algorithm: Algorithm) -> Symmetry:
    """How far NPU 0 stands for every NPU in a `kind` phase on dimension `dim` (not FLAT) under `algorithm`: the
    algorithm answers for the dimension's block. The lowering asks it to let NPU 0 stand for all; the resource
    estimate, to count NPU 0's rows alone."""
    dimension = topology.dims[dim]
    return algorithm.symmetry(kind, dimension.kind, dimension.size)


def _split(base: np.ndarray, length: np.ndarray, parts: int, index) -> tuple[np.ndarray, np.ndarray]:
    """Part `index` of `parts` floor-bounded parts of [base, base+length)."""
    lo = (index * length) // parts
    hi = ((index + 1) * length) // parts
    return base + lo, hi - lo


class Schedule:
    """The lowered schedule: meta (JSON-ready) and per-NPU tables on demand."""

    def __init__(self, topology: Topology, plans: list[CollectivePlan]):
        self.topology = topology
        self.plans = plans
        self._network_templates: dict = {}  # (kind, algorithm) -> its whole-network template, built once
        # (algorithm, structure kind) -> what the planning pass recorded, read once; and the symmetry of its phases
        self._recorded: dict = {}
        self._network_symmetry: dict = {}
        # table()'s read-ahead: NPU -> its table, built with the one asked for; how many, rows per NPU, last asked
        self._ahead: dict = {}
        self._ahead_count, self._rows_per_npu, self._last_npu = 0, 1, -2
        self.shape = topology.shape
        self.strides = topology.strides()
        self._check_sizes()
        symmetry = self.symmetry()
        self.meta = Meta(topology.npus, topology.to_dict(), tuple(d.latency_ns for d in topology.dims),
                         symmetry >= Symmetry.STEPS, tuple(p.to_meta() for p in plans),
                         symmetric_links=symmetry == Symmetry.LINKS)

    # ---- regions ------------------------------------------------------------------------------------------

    def chunk_regions(self, plan: CollectivePlan, flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _split(np.zeros(len(flows), np.int64), np.full(len(flows), plan.bytes, np.int64), plan.chunks, flows)

    def nest_dims(self, plan: CollectivePlan, order) -> list[int]:
        """Dimensions in region-nesting order for chunks visiting the stages in `order`: a reduce-scatter nests in
        the order it visits them, an all-gather (which grows regions) in reverse."""
        dims = [plan.stages[i].dim for i in order]
        return dims[::-1] if plan.kind == "all_gather" else dims

    def levels(self, plan: CollectivePlan, coords, order, flows) -> list[tuple[np.ndarray, np.ndarray]]:
        """Region (base, length) of chunks `flows` at every nesting level for an NPU (coords may be arrays)."""
        base, length = self.chunk_regions(plan, flows)
        out = [(base, length)]
        for d in self.nest_dims(plan, order):
            x = np.asarray(self._member(coords, d))
            base, length = _split(out[-1][0], out[-1][1], self._size(d), x[..., None] if x.ndim else x)
            out.append((base, length))
        return out

    def _size(self, dim: int) -> int:
        """Members of a phase's groups: the dimension's size, or every NPU for a flat phase."""
        return self.topology.npus if dim == FLAT else self.shape[dim]

    def _member(self, coords, dim: int):
        """An NPU's member index in a phase's group: its coordinate, or its rank for a flat phase."""
        if dim != FLAT:
            return coords[dim]
        return sum(np.asarray(c) * st for c, st in zip(coords, self.strides))

    def shards(self, index: int) -> np.ndarray:
        """(npus, chunks, 2) offset and length of each NPU's reduce-scatter output / all-gather input shard."""
        plan = self.plans[index]
        coords = self.topology.coords_array().T
        out = np.zeros((self.topology.npus, plan.chunks, 2), np.int64)
        for order, flows in plan.order_groups():
            base, length = self.levels(plan, coords, order, flows)[-1]
            out[:, flows, 0], out[:, flows, 1] = np.broadcast_arrays(base, length)
        return out

    def export_meta(self) -> Meta:
        """meta plus every reduce-scatter/all-gather shard layout, so written tables can be verified on their own."""
        if getattr(self, "_exported", None) is None:
            self._exported = self.meta.with_(shards={p.index: self.shards(p.index) for p in self.plans
                                                     if p.kind in SHARDED})
        return self._exported

    def _stage_region(self, plan: CollectivePlan, levels, position: int):
        if plan.kind == "reduce_scatter":
            return levels[position]
        if plan.kind == "all_gather":
            return levels[len(plan.stages) - 1 - position]
        return levels[0]

    def _regions_along(self, plan: CollectivePlan, length: int, order):
        """(stage, region bytes) at every position for a chunk of `length` bytes visiting `order` (floor sizes)."""
        if plan.kind not in SHARDED:  # all-to-all, broadcast and reduce phases carry the whole chunk
            return [(plan.stages[i], length) for i in order]
        out, region = {}, length
        for d in self.nest_dims(plan, order):
            out[d] = region
            region //= self._size(d)
        return [(plan.stages[i], out[plan.stages[i].dim]) for i in order]

    def _check_sizes(self) -> None:
        """Every unit of every phase must hold at least one byte, or transfers would be empty."""
        for plan in self.plans:
            if plan.kind == "all_to_all":
                group = int(np.prod([self.shape[d] for d in plan.group_dims]))
                if plan.bytes % (plan.chunks * group):
                    raise UserError(f"{plan.name}: all_to_all of {plan.bytes} bytes in {plan.chunks} chunks does not "
                                    f"split into {group} equal slots per chunk (size must be a multiple of "
                                    f"{plan.chunks * group} bytes)")
            for order, _ in plan.order_groups():
                for stage, region in self._regions_along(plan, plan.bytes // plan.chunks, order):
                    units = self._units(plan, stage)
                    if region < units:
                        raise UserError(
                            f"{plan.name}: {plan.bytes} bytes in {plan.chunks} chunks are too small for the "
                            f"{stage.algorithm} {stage.kind} on dimension {stage.dim}: a chunk's region of {region} "
                            f"bytes must split into {units} parts; use fewer chunks or a larger size")

    def symmetry(self) -> Symmetry:
        """The one answer to "may NPU 0 stand for every NPU" (meta.json's `symmetric`, and Meta.symmetric_links
        for the congestion runtime): every phase's algorithm answers for its block (a dimension) or for the
        structure it runs on (the whole network), the weakest answer holds, and only where every chunk, block and
        unit has the same bytes on every NPU (uneven floor splits differ by a byte here and there)."""
        level = Symmetry.LINKS if self._splits_evenly() else Symmetry.NONE
        for plan in self.plans:
            for stage in plan.stages:
                if level == Symmetry.NONE:
                    return level
                level = min(level, self._stage_symmetry(plan, stage))
        return level

    def _stage_symmetry(self, plan: CollectivePlan, stage: Stage) -> Symmetry:
        alg = algorithms.for_phase(stage.algorithm, flat=stage.dim == FLAT)
        if stage.dim != FLAT:
            return phase_symmetry(self.topology, plan.kind, stage.dim, alg)
        if stage.structure is None:   # over ranks as they are: NPUs sit at different places of the template
            return Symmetry.NONE
        key = alg.name, stage.structure[0]
        if key not in self._network_symmetry:   # asked per phase; an n x n check (translated trees), made once
            self._network_symmetry[key] = alg.network_symmetry(self.topology, self._plan(stage), self._graph_links)
        return self._network_symmetry[key]

    def _plan(self, stage: Stage):
        """What the planning pass recorded for a whole-network phase (trees, a cycle, a placement), as its
        algorithm reads it: once per schedule."""
        alg = algorithms.for_phase(stage.algorithm, flat=True)
        key = alg.name, stage.structure[0]
        if key not in self._recorded:
            self._recorded[key] = alg.read_plan(self.topology, self._structure(stage.structure[0]), self._graph_links)
        return self._recorded[key]

    def _splits_evenly(self) -> bool:
        """True when every chunk, block and unit has the same byte count on every NPU."""
        for plan in self.plans:
            if plan.bytes % plan.chunks:
                return False
            if plan.kind == "all_to_all":
                continue  # _check_sizes already demands whole slots
            for order, _ in plan.order_groups():
                if any(region % self._units(plan, stage)
                       for stage, region in self._regions_along(plan, plan.bytes // plan.chunks, order)):
                    return False
        return True

    def _units(self, plan: CollectivePlan, stage: Stage) -> int:
        if plan.kind == "all_to_all":
            return int(np.prod([self.shape[d] for d in plan.group_dims]))
        return self._template(plan.kind, stage).units

    def _parities(self, plan: CollectivePlan, flows: np.ndarray) -> list[tuple[bool, np.ndarray]]:
        """Chunks `flows` as (odd, chunks) groups: even and odd chunks apart where a stage's algorithm runs its
        template and its mirror image in turn (mirrored_chunks: ASTRA-sim's doubleBinaryTree), else all as even."""
        if not any(s.fused and algorithms.for_phase(s.algorithm, flat=s.dim == FLAT).mirrored_chunks
                   for s in plan.stages):
            return [(False, flows)]
        return [(odd, flows[flows % 2 == odd]) for odd in (False, True) if np.any(flows % 2 == odd)]

    def _template(self, kind: str, stage: Stage, odd: bool = False) -> Transfers:
        """The transfers of a phase on one group (odd: of an odd chunk, mirrored where the algorithm says so: a
        whole all-reduce's pass)."""
        alg = algorithms.for_phase(stage.algorithm, flat=stage.dim == FLAT)
        if odd and alg.mirrored_chunks and stage.fused:   # (a reduce-scatter alone must leave member m block m)
            return self._template(kind, stage).reflected(self._size(stage.dim))
        if alg.scope == RANKS:  # over ranks, routed across dimensions
            return alg.template(kind, self.topology.npus, bidirectional=True)
        if alg.scope == NETWORK:
            # a whole-network template is built once per schedule, not once per NPU's table (n^2 rows each time)
            if (kind, alg.name) not in self._network_templates:
                self._network_templates[kind, alg.name] = alg.network_template(kind, self.topology, self._plan(stage),
                                                                              self._graph_links)
            return self._network_templates[kind, alg.name]
        dim = self.topology.dims[stage.dim]
        if stage.fused:  # an all-reduce's halves run as one pass (select-algorithm decided, the phases say so)
            return alg.fused_template(kind, dim.size, dim.kind.neighbour_links)
        return alg.template(kind, dim.size, bidirectional=dim.kind.neighbour_links)

    def _structure(self, kind: str) -> dict:
        """Attributes of the comm.<kind> op the whole-network phases run on (recorded by a pass; one per module)."""
        return self._structure_stage(kind).structure[1]

    def _structure_stage(self, kind: str) -> Stage:
        """The first phase that runs on a comm.<kind> op."""
        for plan in self.plans:
            for stage in plan.stages:
                if stage.structure is not None and stage.structure[0] == kind:
                    return stage
        raise UserError(f"the module has no comm.{kind} for its whole-network phases")

    def _graph_links(self):
        """The physical links in the order the tree and cycle searches used (Topology.links())."""
        if getattr(self, "_links", None) is None:
            self._links = self.topology.links()
        return self._links

    def _rank_map(self, stage: Stage, inverse: bool = False) -> np.ndarray | None:
        """The NPU of each virtual rank a phase over ranks runs on (HDRM's placement), or with `inverse` each NPU's
        virtual rank; None where ranks are NPUs."""
        if stage.structure is None:
            return None
        key = "rank map", stage.algorithm, stage.structure[0]
        if key not in self._recorded:
            pi = algorithms.for_phase(stage.algorithm, flat=True).rank_map(self._plan(stage))
            self._recorded[key] = None if pi is None else (pi, np.argsort(pi))
        found = self._recorded[key]
        return None if found is None else found[1 if inverse else 0]

    def cycle(self) -> list[int]:
        """The Hamiltonian cycle find-cycle recorded (comm.cycle), for the flat ring."""
        return self._structure("cycle")["order"]

    def trees(self) -> "multitree.Trees":
        """The spanning trees allocate-trees recorded (comm.trees), as their algorithm reads them (the tree view,
        tests)."""
        return self._plan(self._structure_stage("trees"))

    # ---- tables -------------------------------------------------------------------------------------------

    def table(self, npu: int, deps: bool = True) -> Table:
        """NPU `npu`'s table. Callers that ask for the NPUs one after another (writing a table directory, the
        verifier, MSCCL XML) get them built in batches that grow while the requests stay in order: one batch of
        tables() costs about what one NPU's does, so a per-NPU loop is not a loop of full lowerings."""
        ahead = self._ahead
        if npu not in ahead:
            # in order: read further ahead each time (up to READ_AHEAD_ROWS rows); out of order: this NPU alone
            grow = npu == self._last_npu + 1
            count = min(self.topology.npus - npu, max(1, 2 * self._ahead_count if grow else 1),
                        max(1, READ_AHEAD_ROWS // max(1, self._rows_per_npu)))
            joined = self.tables(np.arange(npu, npu + count))
            ahead = self._ahead = joined.split(np.arange(npu, npu + count))
            self._ahead_count, self._rows_per_npu = count, -(-len(joined) // count)
        self._last_npu = npu
        table = ahead.pop(npu)
        if deps:
            table.cols["dep"] = dependencies(table, [p.buffer for p in self.plans])
        return table

    def tables(self, npus, ordered: bool = True) -> Table:
        """The tables of NPUs `npus` joined in one Table (no `dep` column work), each NPU's rows in its table's order
        (`ordered`; otherwise in any order, which saves a sort of every row). NPUs at the same place of their
        groups run the same template rows, so a phase on a dimension of building blocks is expanded once per member
        position over all its NPUs at once: no Python work per NPU."""
        npus = np.asarray(npus, np.int64)
        coords = tuple(self._coords()[npus].T)
        parts = []
        for plan in self.plans:
            for order, group in plan.order_groups():
                for odd, flows in self._parities(plan, group):
                    parts += self._order_parts(npus, coords, plan, order, flows, odd)
        # the phases' columns are joined, then typed once (a Table per phase cost as much as building its rows);
        # column by column, each phase's copy let go as it is joined: the peak is one table and one column
        table = Table({c: np.concatenate([p.pop(c) for p in parts], dtype=DTYPES[c], casting="unsafe")
                       for c in COLUMN_NAMES} if parts else Table.empty().cols)
        if not ordered:
            return table
        order = np.lexsort((table["offset"], table["peer"], table["op"], table["step"], table["stage"],
                            table["flow"], table["coll"], table["npu"]))
        return Table({c: v[order] for c, v in table.cols.items()})

    def _order_parts(self, npus, coords, plan: CollectivePlan, order, flows, odd: bool) -> list[dict]:
        """The rows of chunks `flows` of `plan`, which visit its stages in `order` (odd: they run a mirrored_chunks
        algorithm's templates in the mirror), for NPUs `npus` (coordinates `coords`)."""
        parts = []
        levels = self.levels(plan, coords, order, flows) if plan.kind in SHARDED else None
        for position, si in enumerate(order):
            stage = plan.stages[si]
            member = np.broadcast_to(self._member(coords, stage.dim), npus.shape)
            if plan.kind not in ROOTED and plan.kind != "all_to_all" and self._per_rank(stage):
                # peers are ranks, each NPU a member position of its own: every NPU's rows in one go
                parts.append(self._expand_ranks(npus, plan, position, stage, member,
                                                self._stage_region(plan, levels, position), flows, odd))
                continue
            for key, sel in self._classes(plan, stage, order, position, coords, member):
                if plan.kind == "all_to_all":
                    rows = self._a2a_rows(plan, stage, key)
                    base, length = self.chunk_regions(plan, flows)
                elif plan.kind in ROOTED:
                    rows = self._rooted_rows(plan, stage, key)
                    base, length = self.chunk_regions(plan, flows)
                else:
                    rows = _template_rows(self._template(plan.kind, stage, odd), key)
                    base, length = self._stage_region(plan, levels, position)
                base, length = _of_npus(base, sel), _of_npus(length, sel)
                parts += self._expand(npus[sel], plan, position, stage, rows, base, length,
                                      int(member[sel[0]]), flows)
        return parts

    def _coords(self) -> np.ndarray:
        if getattr(self, "_coords_array", None) is None:
            self._coords_array = self.topology.coords_array()
        return self._coords_array

    def _classes(self, plan: CollectivePlan, stage: Stage, order, position: int, coords, member):
        """(template member, indices of the NPUs that run its rows) for one phase: NPUs with the same member index
        in their groups run the same template rows. A broadcast's members are rotated so the root is member 0 and
        only groups that agree with the root on every dimension still to come take part (a reduce's: on every
        dimension done). (Phases over ranks, HDRM's among them, take _expand_ranks instead.)"""
        key = member
        if len(member) == 1 and plan.kind not in ROOTED:
            return [(int(member[0]), np.zeros(1, np.int64))]  # one NPU: one class
        take = np.ones(len(member), bool)
        if plan.kind in ROOTED:
            root = self.topology.coords(plan.root)
            rest = order[position + 1:] if plan.kind == "broadcast" else order[:position]
            for d in (plan.stages[i].dim for i in rest):
                take &= coords[d] == root[d]
            key = (member - root[stage.dim]) % self.shape[stage.dim]
        idx = np.flatnonzero(take)
        idx = idx[np.argsort(key[idx], kind="stable")]
        values, starts = np.unique(key[idx], return_index=True)
        return [(int(v), sel) for v, sel in zip(values.tolist(), np.split(idx, starts[1:]))]

    def _rooted_rows(self, plan: CollectivePlan, stage: Stage, rotated: int):
        """Rows of a broadcast or reduce phase for the member at `rotated` places after the root's coordinate (the
        templates start at member 0), its peers turned back into coordinates."""
        k, shift = self.shape[stage.dim], self.topology.coords(plan.root)[stage.dim]
        step, op, peer, lo, hi, direction, units, link = _template_rows(self._template(plan.kind, stage), rotated)
        peer = np.where(peer == k, k, (peer + shift) % k)  # member k of an in-switch template is the switch
        return step, op, peer, lo, hi, direction, units, link

    def _a2a_rows(self, plan: CollectivePlan, stage: Stage, member: int):
        return _a2a_template(stage.algorithm, tuple(self.shape[d] for d in plan.group_dims),
                             plan.group_dims.index(stage.dim), member,
                             self.topology.dims[stage.dim].kind.neighbour_links)

    def _expand(self, npus, plan, si, stage, rows, base, length, member, flows) -> list[dict]:
        """Template rows of one member position x chunks `flows` -> table rows in bytes and ranks (stage column =
        si) for NPUs `npus`, all at that position; base/length: their chunks' regions, (npus, chunks)."""
        step, op, peer_m, lo, hi, direction, units, link = rows
        n = len(step)
        off = base[:, None, :] + (lo[None, :, None] * length[:, None, :]) // units   # (npus, transfers, chunks)
        end = base[:, None, :] + (hi[None, :, None] * length[:, None, :]) // units
        if self._per_rank(stage):  # peers are ranks (a broadcast, reduce or all-to-all on a graph): one NPU each
            return [self._expand_one(int(v), plan, si, stage, step, op, peer_m, direction, link, off[i], end[i],
                                     flows) for i, v in enumerate(npus.tolist())]
        dim = self.topology.dims[stage.dim]
        k = dim.size
        sender = np.where(op == SEND, member, peer_m)
        receiver = np.where(op == SEND, peer_m, member)
        # the template's direction (+1 forward, -1 backward, 0 the shorter way) as a lane; the block says the hops
        hops, lane = dim.kind.path(k, sender, receiver, np.where(direction == 1, 0, np.where(direction == -1, 1,
                                                                                          SHORTEST)))
        peer = npus[:, None] + (peer_m - member) * self.strides[stage.dim]
        # member k of a template is the switch (in-network reduction): one link up or down, peer SWITCH
        to_switch = peer_m == k
        peer, hops = np.where(to_switch, SWITCH, peer), np.where(to_switch, 1, hops)
        return [_rows(npus, plan.index, si, flows, step, op, peer, np.full(n, stage.dim), lane, hops,
                      np.full(n, dim.link_gbps()), off, end)]

    def _per_rank(self, stage: Stage) -> bool:
        """A phase whose peers are ranks: over the whole network, or a graph's one dimension."""
        return stage.dim == FLAT or not self.topology.dims[stage.dim].kind.stackable

    def _expand_ranks(self, npus, plan, si, stage, member, region, flows, odd: bool = False) -> dict:
        """Rows of a phase whose peers are ranks for every NPU in `npus` at once (member: each one's position)."""
        if self._rank_map(stage) is not None:  # over virtual ranks: pi^-1
            member = self._rank_map(stage, inverse=True)[member]
        owner, (step, op, peer_m, lo, hi, direction, units, link) = _members_rows(
            self._template(plan.kind, stage, odd), np.asarray(member))
        base, length = (_of_npus(a, owner) for a in region)
        off = base + (lo[:, None] * length) // units
        end = base + (hi[:, None] * length) // units
        return self._expand_one(npus[owner], plan, si, stage, step, op, peer_m, direction, link, off, end, flows)

    def _expand_one(self, npu, plan, si, stage, step, op, peer_m, direction, link, off, end, flows) -> dict:
        """Rows of a phase whose peers are ranks: over the whole network, or a graph's one dimension. `npu`: the
        NPU, or each row's NPU."""
        if stage.dim == FLAT and algorithms.for_phase(stage.algorithm, flat=True).scope == RANKS:
            if self._rank_map(stage) is not None:  # peers are virtual ranks: place them
                peer_m = self._rank_map(stage)[peer_m]
            return self._expand_routed(npu, plan, si, step, op, peer_m, direction, off, end, flows)
        if stage.dim == FLAT:
            return self._expand_graph(npu, plan, si, step, op, peer_m, link, off, end, flows)
        # a graph: one dimension over ranks, every message takes its shortest path
        return self._routed_rows(npu, plan, si, flows, step, op, peer_m, np.full(len(step), stage.dim),
                                 np.zeros(len(step), np.int64), off, end)

    def _expand_graph(self, npu, plan, si, step, op, peer, link, off, end, flows) -> dict:
        """Rows of a flat (graph) phase: peers are ranks and each transfer names its physical link, or the
        algorithm says how the runtime routes them. A reduce-scatter that runs its links backwards (trees) goes
        back across the same dimension the way its block routes the other lane: one hop on a ring's other link,
        all the way round a ring of one-way links (the block's path, never a link the block does not have)."""
        alg = algorithms.for_phase(plan.stages[si].algorithm, flat=True)
        routes = alg.routes(self.topology, len(step))
        if routes is not None:  # e.g. tree edges as routed paths between NPUs
            return self._routed_rows(npu, plan, si, flows, step, op, peer, *routes, off, end)
        lg = self._graph_links()
        dims = lg.dim[link]
        lane = lg.lane[link]
        hops = np.ones(len(step), np.int64)
        if plan.kind == "reduce_scatter" and alg.reduce_scatter_reverses_links:
            sender = np.broadcast_to(np.where(op == SEND, npu, peer), (len(step),))
            receiver = np.broadcast_to(np.where(op == SEND, peer, npu), (len(step),))
            _, (_, _, _, lane, hops) = self._link_map().legs(sender, receiver, 1 - lane)   # one leg: a link's ends
        return _rows(npu, plan.index, si, flows, step, op, peer, dims, lane, hops, lg.gbps[link], off, end)

    def _expand_routed(self, npu, plan, si, step, op, peer, direction, off, end, flows) -> dict:
        """Rows of a phase over ranks: each message is routed dimension by dimension (network/links.py); its lane
        says which way round the Ring legs go (the template's direction, or the shorter way), `hops` counts its
        links and `gbps` is its slowest link's bandwidth (cut-through: the message streams at that rate)."""
        lane = np.where(direction == 1, 0, np.where(direction == -1, 1, LANE_SHORTEST))
        return self._routed_rows(npu, plan, si, flows, step, op, peer, np.full(len(step), ROUTED), lane, off, end)

    def _routed_rows(self, npu, plan, si, flows, step, op, peer, dim, lane, off, end) -> dict:
        """Rows of messages the runtime routes (network/links.py): `hops` counts the links of each route and `gbps`
        is the slowest of them."""
        sender = np.where(op == SEND, npu, peer)
        receiver = np.where(op == SEND, peer, npu)
        links = self._link_map()
        start, ids = links.routes(sender, receiver, dim, lane, np.zeros(len(sender), np.int64))
        if self.topology.graph is not None:
            per_link = self.topology.graph.gbps[ids]
        else:
            per_link = np.array([d.link_gbps() for d in self.topology.dims])[links.dim_of(ids)]
        gbps = np.minimum.reduceat(per_link, start[:-1]) if len(ids) else np.zeros(0)
        return _rows(npu, plan.index, si, flows, step, op, peer, dim, lane, np.diff(start), gbps, off, end)

    def _link_map(self) -> LinkMap:
        if getattr(self, "_links_map", None) is None:
            self._links_map = LinkMap(self.topology.to_dict())
        return self._links_map


def _of_npus(a: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Chunk regions (npus, chunks) of the NPUs `sel`: the rows of a per-NPU array, a view of a shared one."""
    return a[sel] if a.ndim == 2 else np.broadcast_to(a, (len(sel), len(a)))


def _rows(npus, coll, stage, flows, step, op, peer, dim, lane, hops, gbps, off, end) -> dict:
    """Table columns (untyped: tables() types them once) for one phase: each transfer's values repeated for every
    chunk in `flows`. Either NPUs `npus` at one member position, values per transfer or per (NPU, transfer) and
    off/end per (NPU, transfer, chunk); or (off/end per (transfer, chunk)) transfers of one NPU (a scalar) or each
    of its own NPU (`npus` per transfer)."""
    chunks = len(flows)
    if off.ndim == 2:  # one row per transfer
        shape = (len(step),)
        rep = lambda a: np.repeat(np.broadcast_to(a, shape), chunks)  # noqa: E731  (once per chunk)
        npu = rep(npus)
    else:
        npus = np.atleast_1d(npus)
        shape = (len(npus), len(step))
        if len(npus) == 1:  # one NPU's table (the common call): no broadcasting
            rep = lambda a: np.repeat(np.asarray(a).reshape(-1), chunks)  # noqa: E731
        else:
            rep = lambda a: np.repeat(np.broadcast_to(a, shape).ravel(), chunks)  # noqa: E731
        npu = np.repeat(npus, len(step) * chunks)
    total = len(npu)
    return {
        "npu": npu, "coll": np.full(total, coll), "flow": np.tile(flows, total // max(chunks, 1)),
        "stage": np.full(total, stage), "step": rep(step), "op": rep(op), "peer": rep(peer), "dim": rep(dim),
        "lane": rep(lane), "hops": rep(hops), "gbps": rep(gbps), "offset": off.ravel(), "bytes": (end - off).ravel(),
        "dep": np.full(total, -1),
    }


def _members_rows(t: Transfers, members: np.ndarray):
    """_template_rows for several members at once: (owner, rows), `owner` the index in `members` of each row's
    member, each member's rows together in _template_rows's order (its sends, then its receives)."""
    send_order, send_starts, recv_order, recv_starts = t._by_member
    valid = (members >= 0) & (members < len(send_starts) - 1)
    m = np.where(valid, members, 0)

    def gather(order, starts):
        lo = np.where(valid, starts[m], 0)
        length = np.where(valid, starts[np.where(valid, m + 1, 0)], 0) - lo   # (an empty template has no m + 1)
        owner = np.repeat(np.arange(len(members)), length)
        first = np.repeat(np.cumsum(length) - length, length)
        return owner, order[np.repeat(lo, length) + np.arange(len(owner)) - first]

    s_owner, send = gather(send_order, send_starts)
    r_owner, recv = gather(recv_order, recv_starts)
    owner = np.concatenate([s_owner, r_owner])
    by_owner = np.argsort(owner, kind="stable")  # a member's sends, then its receives, each in template order
    pick = lambda a, b: np.concatenate([a, b])[by_owner]  # noqa: E731
    rows = (pick(t.step[send], t.step[recv]),
            pick(np.full(len(send), SEND), _recv_ops(t, recv)),
            pick(t.dst[send], t.src[recv]), pick(t.src_lo[send], t.dst_lo[recv]),
            pick(t.src_hi[send], t.dst_hi[recv]), pick(t.direction[send], t.direction[recv]), t.units,
            pick(t.link[send], t.link[recv]) if t.link is not None else None)
    return owner[by_owner], rows


def _recv_ops(t: Transfers, recv: np.ndarray) -> np.ndarray:
    """The op of each receive: adding in or copying, transfer by transfer (a fused all-reduce's template reduces,
    then copies)."""
    return np.where(t.reduce[recv], RECV_REDUCE, RECV_COPY)


def _template_rows(t: Transfers, member: int):
    """Rows of template t that member takes part in: (step, op, peer member, unit lo, unit hi, direction, units)."""
    send, recv = t.of_member(member)
    link = np.concatenate([t.link[send], t.link[recv]]) if t.link is not None else None
    return (np.concatenate([t.step[send], t.step[recv]]),
            np.concatenate([np.full(len(send), SEND), _recv_ops(t, recv)]),
            np.concatenate([t.dst[send], t.src[recv]]),
            np.concatenate([t.src_lo[send], t.dst_lo[recv]]),
            np.concatenate([t.src_hi[send], t.dst_hi[recv]]),
            np.concatenate([t.direction[send], t.direction[recv]]),
            t.units, link)


def _runs(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted slot indices -> [lo, hi) runs of consecutive slots."""
    breaks = np.flatnonzero(np.diff(slots) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(slots)]])
    return slots[starts], slots[ends - 1] + 1


@lru_cache(maxsize=None)
def _a2a_template(algorithm: str, group_shape: tuple, local_dim: int, member: int, ring_dim: bool):
    """All-to-all rows of one member along one dimension of the group, in slot units (slot = group-local rank)."""
    nslots = int(np.prod(group_shape))
    stride, k = strides(group_shape)[local_dim], group_shape[local_dim]
    slot_coord = coordinate(np.arange(nslots), k, stride)
    cols = {c: [] for c in ("step", "op", "peer", "lo", "hi", "dir")}
    for step, src, dst, x, direction in algorithms.for_phase(algorithm, flat=False).exchanges(k, ring_dim):
        if member not in (src, dst):
            continue
        lo, hi = _runs(np.flatnonzero(slot_coord == x))
        if member == dst:  # stored with coordinate x ^ src ^ dst: the same runs, shifted
            shift = ((x ^ src ^ dst) - x) * stride
            lo, hi = lo + shift, hi + shift
        cols["step"].append(np.full(len(lo), step))
        cols["op"].append(np.full(len(lo), SEND if member == src else RECV_COPY))
        cols["peer"].append(np.full(len(lo), dst if member == src else src))
        cols["lo"].append(lo)
        cols["hi"].append(hi)
        cols["dir"].append(np.full(len(lo), direction))
    cat = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in cols.items()}
    return cat["step"], cat["op"], cat["peer"], cat["lo"], cat["hi"], cat["dir"], nslots, None


