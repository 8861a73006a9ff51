"""Symbolic verifier: execute schedule tables on symbols instead of bytes, so checking a schedule costs what its rows
and the pieces they cut cost, not what its buffers hold (1 GB checks as fast as 1 KB).

msccl-tools checks a program on symbolic chunks: which rank's which piece a buffer holds, and which reductions. Here
the offsets and ends of every row (and of every shard, and of every all-to-all slot) cut a collective's buffer into
intervals; no row ever addresses part of an interval, so every byte of an interval holds the same kind of value. A
value is a cell (`Cells`): the set of group members whose input it sums (a bitset over group-local ranks), the group,
and how far it has moved (`shift`: the value at byte p is the sum of those members' input bytes p - shift), or
`dead`: it holds poison (a byte nobody owned) or some member's piece twice, and can never again equal a definition,
since values only grow by sums. Executed in the data verifier's order (runtime/verifier.py, the reference), with its
checks, its messages and its answers: a receive that reduces takes the union (a member already in the set makes the
cell dead: summing twice is an error), a copy overwrites, a switch sums what its members sent in the step.

The data verifier's values are random integers, so it holds on a schedule with probability near one; this one
holds exactly (each input byte is a symbol). A row whose receive lands at another offset than its send read (an
all-to-all slot) maps the intervals inside the one range onto the other's; where they do not line up, both ranges
are cut further until they do (a corrupted table may need many cuts; past MAX_INTERVALS it is refused).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import TableError
from .tables import RECV_REDUCE, SEND
from .verify_rows import (VerificationError, checked_rows, group_layout, is_root, ranges, shard_layout, switch_of,
                          when)

MAX_INTERVALS = 1 << 24   # pieces one buffer may be cut into (row ends, shards, slots and the cuts moves need)
_BIG = np.iinfo(np.int64).max
CELL_BYTES = 8 + 8 + 1    # shift, group and dead of a cell, besides its bitset's 8-byte words


@dataclass
class Cells:
    """Symbolic values, one per (NPU, interval) of a buffer, or per (switch, interval) of a step's sums."""
    bits: np.ndarray    # (n, words) uint64: the group-local ranks whose input the value sums
    shift: np.ndarray   # (n,) int64: byte p holds their input bytes p - shift
    group: np.ndarray   # (n,) int64: the group whose members the bits name
    dead: np.ndarray    # (n,) bool: holds poison or a member twice

    def __len__(self) -> int:
        return len(self.dead)

    def take(self, idx) -> "Cells":
        return Cells(self.bits[idx], self.shift[idx], self.group[idx], self.dead[idx])

    def put(self, idx, other: "Cells") -> None:
        self.bits[idx], self.shift[idx], self.group[idx], self.dead[idx] = \
            other.bits, other.shift, other.group, other.dead

    @staticmethod
    def empty(n: int, words: int) -> "Cells":
        """Zero: the sum of nobody's input (a switch's sum where no member sent)."""
        return Cells(np.zeros((n, words), np.uint64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool))

    @staticmethod
    def concat(parts: list["Cells"]) -> "Cells":
        return Cells(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("bits", "shift", "group", "dead")))

    def live(self) -> np.ndarray:
        """Cells that hold a sum of at least one member's input (not zero, not dead)."""
        return self.bits.any(axis=1) & ~self.dead

    def equals(self, bits, shift, group) -> np.ndarray:
        """Per cell: holds exactly these members' input, moved by `shift`, of `group` (broadcast over cells)."""
        return ~self.dead & np.all(self.bits == bits, axis=-1) & (self.shift == shift) & (self.group == group)


def combine(targets: np.ndarray, cells: Cells) -> tuple[np.ndarray, Cells]:
    """Sum every cell into its target: (the distinct targets, ascending; their sums). A sum of values of different
    groups or shifts is dead (it holds inputs at two places, which no definition does), and so is one in which a
    member's input occurs twice (the bits' counts add up to more than their union's)."""
    if not len(targets):
        return targets, cells
    order = np.argsort(targets, kind="stable")
    t = targets[order]
    starts = np.flatnonzero(np.concatenate([[True], t[1:] != t[:-1]]))
    c = cells.take(order)
    bits = np.bitwise_or.reduceat(c.bits, starts, axis=0)
    counted = np.add.reduceat(np.bitwise_count(c.bits).sum(axis=1, dtype=np.int64), starts)
    live = c.live()
    lo = {f: np.minimum.reduceat(np.where(live, getattr(c, f), _BIG), starts) for f in ("shift", "group")}
    hi = {f: np.maximum.reduceat(np.where(live, getattr(c, f), -_BIG), starts) for f in ("shift", "group")}
    any_live = lo["shift"] != _BIG
    dead = np.logical_or.reduceat(c.dead, starts)
    dead |= counted != np.bitwise_count(bits).sum(axis=1, dtype=np.int64)
    dead |= any_live & ((lo["shift"] != hi["shift"]) | (lo["group"] != hi["group"]))
    return t[starts], Cells(bits, np.where(any_live, lo["shift"], 0), np.where(any_live, lo["group"], 0), dead)


@dataclass
class Buffer:
    """One collective buffer (an all-reduce's halves share one) and the intervals its rows cut it into."""
    name: str
    kind: str               # what its collectives implement together (buffer_kind)
    first: int              # its first collective (whose shard layout and root define it)
    colls: np.ndarray       # its collectives
    bytes: int
    bounds: np.ndarray      # interval i is bytes [bounds[i], bounds[i + 1])

    @property
    def intervals(self) -> int:
        return len(self.bounds) - 1


def _sharded_bounds(meta, shards, ci: int, size: int) -> list:
    c = meta.collectives[ci]
    if c.buffer_kind in ("reduce_scatter", "all_gather"):
        sh = shard_layout(shards, ci).reshape(-1, 2)
        return [np.clip(sh[:, 0], 0, size), np.clip(sh[:, 0] + sh[:, 1], 0, size)]
    return []


def _slot_bounds(meta, c, size: int) -> list:
    """An all-to-all's slot boundaries (the definition moves slots), where the buffer splits into whole slots."""
    if c.buffer_kind != "all_to_all":
        return []
    gid, _, _ = group_layout(meta.shape, c.group_dims)
    slots = meta.npus // len(np.unique(gid))
    if size % (c.chunks * slots):
        return []  # the check names it
    return [np.arange(0, size + 1, size // (c.chunks * slots), dtype=np.int64)]


def cut_closed(bounds: np.ndarray, src: np.ndarray, dst: np.ndarray, n: np.ndarray, name: str) -> np.ndarray:
    """Cut until every move (bytes [src, src + n) received at [dst, dst + n)) maps the intervals of the one range
    onto those of the other: each range gets the cuts of the other, until nothing changes."""
    moved = src != dst
    src, dst, n = src[moved], dst[moved], n[moved]
    while len(src):
        found = [bounds]
        for a, b in ((src, dst), (dst, src)):
            lo, hi = np.searchsorted(bounds, a, "right"), np.searchsorted(bounds, a + n, "left")
            k = np.maximum(hi - lo, 0)
            found.append(bounds[ranges(lo, k)] + np.repeat(b - a, k))
        grown = np.unique(np.concatenate(found))
        if len(grown) == len(bounds):
            break
        if len(grown) > MAX_INTERVALS + 1:
            raise TableError(f"{name}: its rows move bytes between offsets that cut the buffer into more than "
                             f"{MAX_INTERVALS} pieces, too many to verify")
        bounds = grown
    return bounds


class Plan:
    """A schedule's rows checked and its buffers cut into intervals, ready to execute on symbols. `cells` and `words`
    size the execution before it runs (compiler/resources.py)."""

    def __init__(self, schedule):
        self.meta, self.table, self.pairs, self.sends, self.recvs, self.sw = checked_rows(schedule)
        meta = self.meta
        shards = meta.shards or {}
        t, p = self.table, self.pairs
        self.buffers: list[Buffer] = []
        names = list(dict.fromkeys(c.buffer for c in meta.collectives))
        for name in names:
            colls = np.array([ci for ci, c in enumerate(meta.collectives) if c.buffer == name], np.int64)
            first = meta.collectives[colls[0]]
            size = first.bytes
            rows = np.isin(t["coll"], colls)
            cuts = [np.array([0, size], np.int64), t["offset"][rows], t["offset"][rows] + t["bytes"][rows]]
            cuts += _sharded_bounds(meta, shards, int(colls[0]), size) + _slot_bounds(meta, first, size)
            bounds = np.unique(np.concatenate(cuts).astype(np.int64))
            mine = np.isin(p["coll"][self.recvs], colls)
            s, r = self.sends[mine], self.recvs[mine]
            bounds = cut_closed(bounds, p["offset"][s], p["offset"][r], p["bytes"][r], name)
            self.buffers.append(Buffer(name, first.buffer_kind, int(colls[0]), colls, size, bounds))

    def words(self, buf: Buffer) -> int:
        """8-byte words of a cell's bitset: one bit per member of the buffer's groups."""
        _, local, _ = group_layout(self.meta.shape, self.meta.buffer_dims(buf.name))
        return (int(local.max()) + 1 + 63) // 64

    @property
    def cells(self) -> int:
        """Cells of the largest buffer: its intervals on every NPU (buffers execute one at a time)."""
        return max(self.meta.npus * b.intervals for b in self.buffers)

    @property
    def cell_bytes(self) -> int:
        """The largest buffer's cells in bytes (bitset words and the rest)."""
        return max(self.meta.npus * b.intervals * (8 * self.words(b) + CELL_BYTES) for b in self.buffers)

    def run(self) -> dict:
        for buf in self.buffers:
            _Execution(self, buf).run()
        return {"rows": len(self.table), "collectives": len(self.meta.collectives), "buffers": len(self.buffers),
                "intervals": sum(b.intervals for b in self.buffers)}


class _Execution:
    """One buffer executed on symbols over every NPU, then checked against its collective's definition."""

    def __init__(self, plan: Plan, buf: Buffer):
        self.plan, self.buf = plan, buf
        meta = plan.meta
        self.npus, self.n = meta.npus, buf.intervals
        self.lens = np.diff(buf.bounds)
        self.gid, self.local, _ = group_layout(meta.shape, meta.buffer_dims(buf.name))
        self.words = plan.words(buf)
        self.c = meta.collectives[buf.first]
        self.shards = meta.shards or {}

    # ---- cells and intervals ----------------------------------------------------------------------------------

    def first_interval(self, offsets) -> np.ndarray:
        return np.searchsorted(self.buf.bounds, offsets)

    def span(self, offsets, nbytes) -> tuple[np.ndarray, np.ndarray]:
        """(first interval, interval count) of byte ranges [offsets, offsets + nbytes) (clipped to the buffer)."""
        end = np.minimum(np.asarray(offsets) + nbytes, self.buf.bytes)
        lo = self.first_interval(offsets)
        return lo, np.maximum(self.first_interval(end) - lo, 0)

    def member_bits(self, local) -> np.ndarray:
        """(len(local), words) bitsets holding one group-local rank each."""
        local = np.asarray(local, np.int64)
        bits = np.zeros((len(local), self.words), np.uint64)
        bits[np.arange(len(local)), local // 64] = np.left_shift(np.uint64(1), (local % 64).astype(np.uint64))
        return bits

    def initial(self) -> Cells:
        """Every NPU's input: its own piece of every interval; poison where it owns nothing (an all-gather's bytes
        outside its shards, a broadcast's NPUs other than the roots)."""
        npus, n = self.npus, self.n
        bits = np.repeat(self.member_bits(self.local), n, axis=0)
        dead = np.zeros(npus * n, bool)
        if self.buf.kind == "all_gather":
            dead = ~self.owned().reshape(-1)
        elif self.buf.kind == "broadcast":
            dead = np.repeat(~is_root(self.plan.meta.shape, self.c), n)
        return Cells(bits, np.zeros(npus * n, np.int64), np.repeat(self.gid, n), dead)

    def owned(self) -> np.ndarray:
        """(npus, intervals): the intervals each NPU's all-gather input shards cover."""
        sh = shard_layout(self.shards, self.buf.first)
        lo, k = self.span(sh[:, :, 0].reshape(-1), sh[:, :, 1].reshape(-1))
        npu = np.repeat(np.arange(self.npus), sh.shape[1])
        owned = np.zeros(self.npus * self.n, bool)
        owned[np.repeat(npu * self.n, k) + ranges(lo, k)] = True
        return owned.reshape(self.npus, self.n)

    # ---- execution ------------------------------------------------------------------------------------------------

    def run(self) -> None:
        self.state = self.initial()
        p, sw, buf = self.plan.pairs, self.plan.sw, self.buf
        mine = np.isin(p["coll"][self.plan.recvs], buf.colls)
        s_idx, r_idx = self.plan.sends[mine], self.plan.recvs[mine]
        order = np.lexsort((p["step"][r_idx], p["stage"][r_idx], p["coll"][r_idx]))
        s_idx, r_idx = s_idx[order], r_idx[order]
        key = when(p, r_idx)
        sw_rows = np.flatnonzero(np.isin(sw["coll"], buf.colls))
        sw_key = when(sw, sw_rows)
        for step in np.union1d(key, sw_key).tolist():
            a, b = np.searchsorted(key, step), np.searchsorted(key, step, "right")
            self.step(s_idx[a:b], r_idx[a:b], sw_rows[sw_key == step])
        self.check()

    def cells_of(self, npu, offsets, nbytes) -> tuple[np.ndarray, np.ndarray]:
        """(cell indices, their count per row) of rows' byte ranges on their NPUs."""
        lo, k = self.span(offsets, nbytes)
        return np.repeat(np.asarray(npu, np.int64) * self.n, k) + ranges(lo, k), k

    def step(self, si, ri, sw_rows) -> None:
        """One step: every send reads (a send to a switch adds into its sum), then every receive writes (reduces
        first, then copies; a receive from a switch copies its sum)."""
        p, state = self.plan.pairs, self.state
        src, k = self.cells_of(p["npu"][si], p["offset"][si], p["bytes"][si])
        dst, _ = self.cells_of(p["npu"][ri], p["offset"][ri], p["bytes"][ri])
        payload = state.take(src)
        payload.shift += np.repeat(p["offset"][ri] - p["offset"][si], k)
        sums = self.switch_sums(sw_rows) if len(sw_rows) else None
        reduce = np.repeat(p["op"][ri] == RECV_REDUCE, k)
        if reduce.any():
            into = dst[reduce]
            old = np.unique(into)
            targets, summed = combine(np.concatenate([old, into]),
                                      Cells.concat([state.take(old), payload.take(reduce)]))
            state.put(targets, summed)
        copy = ~reduce
        state.put(dst[copy], payload.take(copy))
        if sums is not None:
            self.switch_receives(sw_rows, *sums)

    def switch_sums(self, rows) -> tuple:
        """What every switch holds after the step's sends: (its switches, sorted cell keys, their sums)."""
        sw, shape = self.plan.sw, self.plan.meta.shape
        send = rows[sw["op"][rows] == SEND]
        switches = np.unique(switch_of(sw, send, shape))
        which = np.searchsorted(switches, switch_of(sw, send, shape))
        src, k = self.cells_of(sw["npu"][send], sw["offset"][send], sw["bytes"][send])
        lo, _ = self.span(sw["offset"][send], sw["bytes"][send])
        keys = np.repeat(which * self.n, k) + ranges(lo, k)
        targets, sums = combine(keys, self.state.take(src))
        return switches, targets, sums

    def switch_receives(self, rows, switches, targets, sums: Cells) -> None:
        sw, shape = self.plan.sw, self.plan.meta.shape
        recv = rows[sw["op"][rows] != SEND]
        ids = switch_of(sw, recv, shape)
        which = np.minimum(np.searchsorted(switches, ids), max(len(switches) - 1, 0))
        missing = switches[which] != ids if len(switches) else np.ones(len(ids), bool)
        if missing.any():
            i = recv[np.argmax(missing)]
            raise VerificationError(f"NPU {sw['npu'][i]} waits at step {sw['step'][i]} for a switch's sum nobody "
                                    "sent to")
        dst, k = self.cells_of(sw["npu"][recv], sw["offset"][recv], sw["bytes"][recv])
        lo, _ = self.span(sw["offset"][recv], sw["bytes"][recv])
        keys = np.repeat(which * self.n, k) + ranges(lo, k)
        at = np.minimum(np.searchsorted(targets, keys), len(targets) - 1)
        found = targets[at] == keys
        got = Cells.empty(len(keys), self.words)  # zero where no member sent those bytes
        got.put(found, sums.take(at[found]))
        self.state.put(dst, got)

    # ---- the definitions ----------------------------------------------------------------------------------------

    def fail(self, what: str, npu: int, bad: np.ndarray, intervals: np.ndarray, start: int = 0) -> None:
        """`bad` over `intervals` of NPU `npu`: the data verifier's message, in bytes (offsets from `start`)."""
        first = intervals[np.argmax(bad)]
        raise VerificationError(f"{what}: NPU {npu} differs from the definition at {int(self.lens[intervals[bad]].sum())}"
                                f" byte(s), first at offset {int(self.buf.bounds[first]) - start}")

    def matches(self, bits, shift, group) -> np.ndarray:
        """(npus, intervals): each NPU's cell equals the expected value (arrays broadcast over NPUs, intervals)."""
        s, shape = self.state, (self.npus, self.n)
        view = Cells(s.bits.reshape(*shape, self.words), s.shift.reshape(shape), s.group.reshape(shape),
                     s.dead.reshape(shape))
        return view.equals(bits, shift, group)

    def full_sum(self) -> np.ndarray:
        """(npus, intervals): each NPU holds the sum of its group's inputs, unmoved."""
        everyone = np.bitwise_or.reduce(self.member_bits(np.arange(int(self.local.max()) + 1)), axis=0)
        return self.matches(everyone, 0, self.gid[:, None])

    def check(self) -> None:
        kind, c = self.buf.kind, self.c
        name = c.name if kind == c.kind else c.buffer
        every = np.arange(self.n)
        if kind in ("all_reduce", "reduce"):
            ok = self.full_sum()
            who = np.arange(self.npus) if kind == "all_reduce" else np.flatnonzero(self.local == self.local[c.root])
            what = f"all_reduce '{name}'" if kind == "all_reduce" else f"reduce '{name}' root"
            for n in who[~ok[who].all(axis=1)][:1]:
                self.fail(what, int(n), ~ok[n], every)
        elif kind == "reduce_scatter":
            self.check_reduce_scatter(name)
        elif kind == "all_gather":
            self.check_all_gather(name)
        elif kind == "all_to_all":
            self.check_all_to_all(name)
        elif kind == "broadcast":
            root = self.member_bits([self.local[c.root]])[0]
            ok = self.matches(root, 0, self.gid[:, None])
            for n in np.flatnonzero(~ok.all(axis=1))[:1]:
                self.fail(f"broadcast '{name}'", int(n), ~ok[n], every)
        else:
            raise VerificationError(f"no definition to check for {kind}")

    def check_reduce_scatter(self, name: str) -> None:
        """Each NPU's shards hold its group's sum, and the group's shards cover every byte exactly once."""
        ok = self.full_sum()
        sh = shard_layout(self.shards, self.buf.first)
        chunks = sh.shape[1]
        lo, k = self.span(sh[:, :, 0].reshape(-1), sh[:, :, 1].reshape(-1))
        npu = np.repeat(np.arange(self.npus), chunks)
        cells = ranges(lo, k)
        shard = np.repeat(np.arange(len(k)), k)
        bad = ~ok[np.repeat(npu, k), cells]
        if bad.any():
            s = shard[np.argmax(bad)]
            inside = shard == s
            self.fail(f"reduce_scatter '{name}' shard", int(npu[s]), bad[inside], cells[inside],
                      int(sh.reshape(-1, 2)[s, 0]))
        cover = np.zeros((int(self.gid.max()) + 1) * self.n, np.int64)
        np.add.at(cover, self.gid[np.repeat(npu, k)] * self.n + cells, 1)
        if np.any(cover != 1):
            g, i = divmod(int(np.argmax(cover != 1)), self.n)
            raise VerificationError(f"reduce_scatter '{name}': byte {int(self.buf.bounds[i])} is owned by "
                                    f"{cover[g * self.n + i]} NPUs of group {g}, not exactly one")

    def check_all_gather(self, name: str) -> None:
        """Each byte is one member's input, and every member ends with every member's input, unmoved."""
        owned = self.owned()
        every = np.arange(self.n)
        for g in np.unique(self.gid).tolist():
            sel = np.flatnonzero(self.gid == g)
            owners = owned[sel].sum(axis=0)
            if np.any(owners != 1):
                i = int(np.argmax(owners != 1))
                raise VerificationError(f"all_gather '{name}': byte {int(self.buf.bounds[i])} is the input of "
                                        f"{owners[i]} NPUs of group {g}, not exactly one")
            owner_local = self.local[sel][np.argmax(owned[sel], axis=0)]
            bits = self.member_bits(owner_local)                        # (intervals, words)
            ok = self.matches(bits[None], 0, g)[sel]
            for j in np.flatnonzero(~ok.all(axis=1))[:1]:
                self.fail(f"all_gather '{name}'", int(sel[j]), ~ok[j], every)

    def check_all_to_all(self, name: str) -> None:
        """Slot j of NPU n's chunk holds what group member j had in slot n (the lowering demands whole slots)."""
        c, size = self.c, self.buf.bytes
        slots = self.npus // len(np.unique(self.gid))
        if size % (c.chunks * slots):
            raise VerificationError(f"all_to_all '{name}': {size} bytes do not split into {c.chunks} chunks "
                                    f"of {slots} equal slots")
        slot_bytes = size // (c.chunks * slots)
        j = (self.buf.bounds[:-1] // slot_bytes) % slots                 # each interval's slot
        bits = self.member_bits(j)[None]
        shift = (j[None, :] - self.local[:, None]) * slot_bytes          # from slot local[n] of member j
        ok = self.matches(bits, shift, self.gid[:, None])
        for n in np.flatnonzero(~ok.all(axis=1))[:1]:
            self.fail(f"all_to_all '{name}'", int(n), ~ok[n], np.arange(self.n))


def verify(schedule) -> dict:
    """Check `schedule` on symbols (raises VerificationError naming the first fault)."""
    return Plan(schedule).run()
