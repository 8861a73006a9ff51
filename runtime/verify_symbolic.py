"""Symbolic verifier: execute schedule tables on symbols instead of bytes, so checking a schedule costs what its rows
and the pieces they cut cost, not what its buffers hold (1 GB checks as fast as 1 KB).

msccl-tools checks a program on symbolic chunks: which rank's which piece a buffer holds, and which reductions. Here
the offsets and ends of every row (and of every shard, and of every all-to-all slot) cut a collective's buffer into
intervals; no row addresses part of an interval, so every byte of one interval on one NPU holds the same kind of
value. A value is the set of group members whose input it sums (a bitset over group-local ranks), their group, and
how far it has moved (`shift`: byte p holds the sum of those members' input bytes p - shift); or zero (nobody's
input: a switch's sum where no member sent); or dead: it holds poison (a byte nobody owned) or a member's input
twice, and can never again equal a definition, since values only grow by sums. Values are kept once each
(`Values`); a cell, one per NPU and interval, holds a value's id, so a sum is computed once per distinct pair of
values, not once per cell.

Executed in the data verifier's order (runtime/verifier.py, the reference), with its checks, its messages and its
answers: a receive that reduces takes the union (a member already in the set makes it dead: summing twice is an
error; as are values of two groups or two shifts, which no definition holds), a copy overwrites, a switch sums what
its members sent in the step. The data verifier's values are random integers, so it holds on a schedule with
probability near one; this one holds exactly (each input byte is a symbol).

A row whose receive lands at another offset than its send read (an all-to-all slot) maps the intervals inside the
one range onto those of the other; where they do not line up, both are cut further until they do (a corrupted table
may need many cuts; past MAX_INTERVALS pieces or MAX_CUT_ROUNDS rounds of cuts it is refused).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..network.kinds import ALL_REDUCE, REDUCE, SHARDED
from .errors import TableError
from .tables import RECV_REDUCE, SEND, DirSchedule
from .verify_rows import (VerificationError, checked_rows, group_layout, is_root, ranges, shard_layout, switch_of,
                          when)

MAX_INTERVALS = 1 << 24   # pieces one buffer may be cut into (row ends, shards, slots and the cuts moves need)
MAX_CUT_ROUNDS = 4096     # rounds of cuts that moves between offsets may take to line up (the compiler's: none)
MAX_CUT_WORK = 1 << 24    # moves mapped over those rounds (a round maps every move that changes offset)
ZERO, DEAD = 0, 1         # the ids of zero and of every dead value
SLICE = 1 << 21           # cells a step reads or writes at once (bounds its index arrays)
TABLE_KEYS = 1 << 16      # keys found by a lookup table over their whole space up to this space (or 4 slots per
                          # key), else by sorting: the table's memory stays within a few bytes per key


def factor(keys: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys, ascending; each key's index among them) for keys in [0, space)."""
    if space <= max(TABLE_KEYS, 4 * len(keys)):  # a table instead of a sort
        present = np.zeros(space, bool)
        present[keys] = True
        distinct = np.flatnonzero(present)
        index = np.empty(space, np.int64)
        index[distinct] = np.arange(len(distinct))
        return distinct, index[keys]
    return np.unique(keys, return_inverse=True)


def distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a) by a sort (numpy 2's np.unique hashes first: 40 times slower on the cuts of a buffer)."""
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if len(a) else a


class Values:
    """Every distinct value once: bits (the members), shift and group per id; 0 is zero and 1 is dead."""

    def __init__(self, words: int):
        self.words = words
        self.bits = np.zeros((2, words), np.uint64)
        self.shift = np.zeros(2, np.int64)
        self.group = np.full(2, -1, np.int64)
        self.ids: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self.shift)

    def intern(self, bits: np.ndarray, shift: np.ndarray, group: np.ndarray) -> np.ndarray:
        """The ids of these values, new ones added."""
        if not len(shift):
            return np.zeros(0, np.int64)
        rows = np.concatenate([bits.view(np.int64), shift[:, None], group[:, None]], axis=1)
        distinct, index = np.unique(rows, axis=0, return_inverse=True)
        ids = np.empty(len(distinct), np.int64)
        new = []
        for i, row in enumerate(distinct):
            v = self.ids.setdefault(row.tobytes(), len(self) + len(new))
            if v >= len(self):
                new.append(i)
            ids[i] = v
        if new:
            add = distinct[new]
            self.bits = np.concatenate([self.bits, add[:, :self.words].view(np.uint64)])
            self.shift = np.concatenate([self.shift, add[:, -2]])
            self.group = np.concatenate([self.group, add[:, -1]])
        return ids[index.reshape(-1)]

    def members(self, local: np.ndarray) -> np.ndarray:
        """(len(local), words) bitsets holding one group-local rank each."""
        local = np.asarray(local, np.int64)
        bits = np.zeros((len(local), self.words), np.uint64)
        bits[np.arange(len(local)), local // 64] = np.left_shift(np.uint64(1), (local % 64).astype(np.uint64))
        return bits

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Elementwise a + b (ids), computed once per distinct pair."""
        pairs, index = factor(a.astype(np.int64) * len(self) + b, len(self) ** 2)
        a, b = pairs // len(self), pairs % len(self)
        out = np.where(a == ZERO, b, np.where(b == ZERO, a, -1))
        out[(a == DEAD) | (b == DEAD)] = DEAD
        both = np.flatnonzero(out == -1)
        a, b = a[both], b[both]
        clash = np.any(self.bits[a] & self.bits[b], axis=1)   # a member's input twice
        clash |= (self.shift[a] != self.shift[b]) | (self.group[a] != self.group[b])
        out[both] = DEAD
        ok = both[~clash]
        a, b = a[~clash], b[~clash]
        out[ok] = self.intern(self.bits[a] | self.bits[b], self.shift[a], self.group[a])
        return out[index].astype(np.int32)

    def moved(self, ids: np.ndarray, by: np.ndarray) -> np.ndarray:
        """Values received `by` bytes from where they were read (zero and dead stay what they are)."""
        out = ids.copy()
        at = np.flatnonzero((by != 0) & (ids > DEAD))
        if len(at):
            shifts, which = np.unique(by[at], return_inverse=True)
            pairs, index = factor(ids[at].astype(np.int64) * len(shifts) + which.reshape(-1), len(self) * len(shifts))
            v, s = pairs // len(shifts), shifts[pairs % len(shifts)]
            out[at] = self.intern(self.bits[v], self.shift[v] + s, self.group[v])[index]
        return out

    def add_into(self, acc: np.ndarray, targets: np.ndarray, incoming: np.ndarray) -> None:
        """acc[targets] += incoming, in place; several values may go into one target (two children into their
        parent, a switch's members into its sum): each target's are summed in pairs, halving them each round (a
        1024-member switch takes 10 rounds, not 1024), then added to what it held. The order does not matter: a sum
        is dead wherever two of its values clash, whichever are added first."""
        if not len(targets):
            return
        seen = np.zeros(len(acc), bool)
        seen[targets] = True
        if np.count_nonzero(seen) == len(targets):
            acc[targets] = self.add(acc[targets], incoming)
            return
        order = np.argsort(targets, kind="stable")
        t, v = targets[order], incoming[order]
        first = np.concatenate([[True], t[1:] != t[:-1]])
        while not first.all():
            pos = np.arange(len(t)) - np.maximum.accumulate(np.where(first, np.arange(len(t)), 0))
            even = pos % 2 == 0
            paired = np.flatnonzero(even & ~np.concatenate([first[1:], [True]]))  # a target's next value follows
            v[paired] = self.add(v[paired], v[paired + 1])
            t, v = t[even], v[even]
            first = np.concatenate([[True], t[1:] != t[:-1]])
        acc[t] = self.add(acc[t], v)


@dataclass
class Buffer:
    """One collective buffer (an all-reduce's halves share one), the intervals its rows cut it into, and its
    messages in interval units, in execution order."""
    name: str
    kind: str               # what its collectives implement together (buffer_kind)
    first: int              # its first collective (whose shard layout and root define it)
    colls: np.ndarray       # its collectives
    bytes: int
    bounds: np.ndarray      # interval i is bytes [bounds[i], bounds[i + 1])
    moves: dict             # per matched row pair: step key, sender, receiver, first intervals, count, shift, reduce
    switch_rows: np.ndarray  # its rows with a switch
    payload: int            # cells the busiest step reads

    @property
    def intervals(self) -> int:
        return len(self.bounds) - 1

    def span(self, offsets, nbytes) -> tuple[np.ndarray, np.ndarray]:
        """(first interval, interval count) of byte ranges [offsets, offsets + nbytes) (clipped to the buffer)."""
        end = np.minimum(np.asarray(offsets) + nbytes, self.bytes)
        lo = np.searchsorted(self.bounds, offsets)
        return lo, np.maximum(np.searchsorted(self.bounds, end) - lo, 0)


def _sharded_bounds(meta, shards, ci: int, size: int) -> list:
    if meta.collectives[ci].buffer_kind in SHARDED:
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
    onto those of the other: each range gets the cuts of the other, round after round (each round maps the cuts the
    last one added), until a round adds none.

    The compiler's moves (all-to-all slots) line up in the first round. A table's may not: a send read one byte
    off its receive's offset adds a cut or two a round until every byte of the range is a piece, n/2 rounds for n
    bytes. So the rounds are limited (MAX_CUT_ROUNDS, fewer where many moves make each round long: MAX_CUT_WORK
    moves mapped in all) as well as the pieces: such a table is refused in a second, not after hours."""
    moved = src != dst
    src, dst, n = src[moved], dst[moved], n[moved]
    rounds = min(MAX_CUT_ROUNDS, MAX_CUT_WORK // max(len(src), 1))
    new = bounds
    for round_ in range(rounds + 1 if len(src) else 0):
        found = []
        for a, b in ((src, dst), (dst, src)):
            lo, hi = np.searchsorted(new, a, "right"), np.searchsorted(new, a + n, "left")
            k = np.maximum(hi - lo, 0)
            found.append(new[ranges(lo, k)] + np.repeat(b - a, k))
        found = distinct(np.concatenate(found))
        at = np.searchsorted(bounds, found)
        fresh = bounds[np.minimum(at, len(bounds) - 1)] != found   # every cut lies inside the buffer: at < len
        new = found[fresh]
        if not len(new):
            return bounds
        if round_ == rounds or len(bounds) + len(new) > MAX_INTERVALS + 1:
            raise TableError(f"{name}: its rows move bytes between offsets that do not line up (cutting the buffer "
                             f"so that every move maps whole pieces takes more than {MAX_INTERVALS} pieces or "
                             f"{rounds} rounds of cuts); too many to verify")
        bounds = np.insert(bounds, at[fresh], new)
    return bounds


class SymbolicRun:
    """A schedule's rows checked and its buffers cut into intervals, ready to execute on symbols. `rows`, `cells`
    and `payload` size the execution before it runs (compiler/driver/resources.py)."""

    def __init__(self, schedule):
        self.meta, t, p, sends, recvs, self.sw = checked_rows(schedule)
        self.rows = len(t)  # the joined table itself is not kept
        meta = self.meta
        shards = meta.shards or {}
        self.buffers: list[Buffer] = []
        for name in dict.fromkeys(c.buffer for c in meta.collectives):
            colls = np.array([ci for ci, c in enumerate(meta.collectives) if c.buffer == name], np.int64)
            first = meta.collectives[colls[0]]
            size = first.bytes
            rows = np.isin(t["coll"], colls)
            cuts = [np.array([0, size], np.int64), t["offset"][rows], t["offset"][rows] + t["bytes"][rows]]
            cuts += _sharded_bounds(meta, shards, int(colls[0]), size) + _slot_bounds(meta, first, size)
            bounds = distinct(np.concatenate(cuts).astype(np.int64))
            mine = np.isin(p["coll"][recvs], colls)
            s, r = sends[mine], recvs[mine]
            order = np.lexsort((p["step"][r], p["stage"][r], p["coll"][r]))
            s, r = s[order], r[order]
            where = f"{schedule.path}: buffer {name}" if isinstance(schedule, DirSchedule) else f"buffer {name}"
            bounds = cut_closed(bounds, p["offset"][s], p["offset"][r], p["bytes"][r], where)
            buf = Buffer(name, first.buffer_kind, int(colls[0]), colls, size, bounds, {},
                         np.flatnonzero(np.isin(self.sw["coll"], colls)), 0)
            src, k = buf.span(p["offset"][s], p["bytes"][s])
            dst, _ = buf.span(p["offset"][r], p["bytes"][r])
            key = when(p, r)
            buf.moves = {"key": key, "sender": p["npu"][s].astype(np.int64), "receiver": p["npu"][r].astype(np.int64),
                         "src": src, "dst": dst, "count": k, "shift": p["offset"][r] - p["offset"][s],
                         "reduce": p["op"][r] == RECV_REDUCE}
            sw_key = when(self.sw, buf.switch_rows)
            _, sw_k = buf.span(self.sw["offset"][buf.switch_rows], self.sw["bytes"][buf.switch_rows])
            steps, at = np.unique(np.concatenate([key, sw_key]), return_inverse=True)
            per_step = np.bincount(at.reshape(-1), np.concatenate([k, sw_k]), minlength=len(steps))
            buf.payload = int(per_step.max()) if len(per_step) else 0
            self.buffers.append(buf)

    def words(self, buf: Buffer) -> int:
        """8-byte words of a value's bitset: one bit per member of the buffer's groups."""
        _, local, _ = group_layout(self.meta.shape, self.meta.buffer_dims(buf.name))
        return (int(local.max()) + 1 + 63) // 64

    @property
    def cells(self) -> int:
        """Cells of the largest buffer: its intervals on every NPU (buffers execute one at a time)."""
        return max((self.meta.npus * b.intervals for b in self.buffers), default=0)

    @property
    def payload(self) -> int:
        """Cells the busiest step of any buffer reads (held until the step writes; a slice of them at a time)."""
        return max((b.payload for b in self.buffers), default=0)

    def run(self) -> dict:
        for buf in self.buffers:
            _Execution(self, buf).run()
        return {"rows": self.rows, "collectives": len(self.meta.collectives), "buffers": len(self.buffers),
                "intervals": sum(b.intervals for b in self.buffers)}


def _slices(count: np.ndarray):
    """Row ranges [a, b) whose cells add up to about SLICE (a row is never split)."""
    ends = np.cumsum(count)
    a = 0
    while a < len(count):
        b = max(int(np.searchsorted(ends, (ends[a - 1] if a else 0) + SLICE, "right")), a + 1)
        yield a, min(b, len(count))
        a = b


class _Execution:
    """One buffer executed on symbols over every NPU, then checked against its collective's definition."""

    def __init__(self, prepared: SymbolicRun, buf: Buffer):
        self.prepared, self.buf = prepared, buf
        meta = prepared.meta
        self.npus, self.n = meta.npus, buf.intervals
        self.lens = np.diff(buf.bounds)
        self.gid, self.local, _ = group_layout(meta.shape, meta.buffer_dims(buf.name))
        self.values = Values(prepared.words(buf))
        self.c = meta.collectives[buf.first]
        self.shards = meta.shards or {}

    def initial(self) -> np.ndarray:
        """Every NPU's input: its own piece of every interval; poison (dead) where it owns nothing (an all-gather's
        bytes outside its shards, a broadcast's NPUs other than the roots)."""
        own = self.values.intern(self.values.members(self.local), np.zeros(self.npus, np.int64), self.gid)
        cells = np.repeat(own.astype(np.int32), self.n)
        if self.buf.kind == "all_gather":
            cells[~self.owned().reshape(-1)] = DEAD
        elif self.buf.kind == "broadcast":
            cells[np.repeat(~is_root(self.prepared.meta.shape, self.c), self.n)] = DEAD
        return cells

    def owned(self) -> np.ndarray:
        """(npus, intervals): the intervals each NPU's all-gather input shards cover."""
        sh = shard_layout(self.shards, self.buf.first)
        lo, k = self.buf.span(sh[:, :, 0].reshape(-1), sh[:, :, 1].reshape(-1))
        npu = np.repeat(np.arange(self.npus), sh.shape[1])
        owned = np.zeros(self.npus * self.n, bool)
        owned[np.repeat(npu * self.n, k) + ranges(lo, k)] = True
        return owned.reshape(self.npus, self.n)

    # ---- execution ------------------------------------------------------------------------------------------------

    def run(self) -> None:
        self.cells = self.initial()
        m, sw = self.buf.moves, self.prepared.sw
        sw_key = when(sw, self.buf.switch_rows)
        for step in np.union1d(m["key"], sw_key).tolist():
            a, b = np.searchsorted(m["key"], step), np.searchsorted(m["key"], step, "right")
            self.step(a, b, self.buf.switch_rows[sw_key == step])
        self.check()

    def step(self, a: int, b: int, sw_rows) -> None:
        """Moves a..b and a step's switch rows: every send reads (a send to a switch adds into its sum), then every
        receive writes (reduces first, then copies; a receive from a switch copies its sum)."""
        m, n = self.buf.moves, self.n
        count = m["count"][a:b]
        payload = []
        for i, j in _slices(count):
            rows = slice(a + i, a + j)
            read = self.cells[np.repeat(m["sender"][rows] * n, count[i:j]) + ranges(m["src"][rows], count[i:j])]
            payload.append(self.values.moved(read, np.repeat(m["shift"][rows], count[i:j])))
        payload = np.concatenate(payload) if payload else np.zeros(0, np.int32)
        sums = self.switch_sums(sw_rows) if len(sw_rows) else None
        starts = np.concatenate([[0], np.cumsum(count)])
        for reduce in (True, False):
            for i, j in _slices(count):
                rows = np.arange(a + i, a + j)[m["reduce"][a + i:a + j] == reduce]
                k = m["count"][rows]
                into = np.repeat(m["receiver"][rows] * n, k) + ranges(m["dst"][rows], k)
                got = payload[ranges(starts[rows - a], k)]
                if reduce:
                    self.values.add_into(self.cells, into, got)
                else:
                    self.cells[into] = got
        if sums is not None:
            self.switch_receives(sw_rows, *sums)

    def switch_keys(self, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(switch ids, the rows' cells on their NPUs, the same intervals at their switches: keys of sums)."""
        sw, shape = self.prepared.sw, self.prepared.meta.shape
        ids = switch_of(sw, rows, shape)
        lo, k = self.buf.span(sw["offset"][rows], sw["bytes"][rows])
        at = ranges(lo, k)
        return ids, np.repeat(sw["npu"][rows].astype(np.int64) * self.n, k) + at, (np.repeat(ids, k), at)

    def switch_sums(self, rows) -> tuple:
        """What every switch holds after the step's sends: (its switches, their cells' keys, sorted; the sums)."""
        sw = self.prepared.sw
        send = rows[sw["op"][rows] == SEND]
        ids, cells, (per, at) = self.switch_keys(send)
        switches, which = np.unique(ids, return_inverse=True)
        keys, index = factor(np.searchsorted(switches, per) * self.n + at, max(len(switches), 1) * self.n)
        sums = np.zeros(len(keys), np.int32)   # zero where no member sent
        self.values.add_into(sums, index, self.cells[cells])
        return switches, keys, sums

    def switch_receives(self, rows, switches, keys, sums) -> None:
        sw = self.prepared.sw
        recv = rows[sw["op"][rows] != SEND]
        ids, cells, (per, at) = self.switch_keys(recv)
        which = np.minimum(np.searchsorted(switches, ids), max(len(switches) - 1, 0))
        missing = switches[which] != ids if len(switches) else np.ones(len(ids), bool)
        if missing.any():
            i = recv[np.argmax(missing)]
            raise VerificationError(f"NPU {sw['npu'][i]} waits at step {sw['step'][i]} for a switch's sum nobody "
                                    "sent to")
        want = np.searchsorted(switches, per) * self.n + at
        where = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        found = keys[where] == want if len(keys) else np.zeros(len(want), bool)
        self.cells[cells] = np.where(found, sums[where] if len(keys) else ZERO, ZERO)

    # ---- the definitions ----------------------------------------------------------------------------------------

    def fail(self, what: str, npu: int, bad: np.ndarray, intervals: np.ndarray, start: int = 0) -> None:
        """`bad` over `intervals` of NPU `npu`: the data verifier's message, in bytes (offsets from `start`)."""
        first, differing = intervals[np.argmax(bad)], int(self.lens[intervals[bad]].sum())
        raise VerificationError(f"{what}: NPU {npu} differs from the definition at {differing} byte(s), first at "
                                f"offset {int(self.buf.bounds[first]) - start}")

    def holds(self, single_or_full, shift, group) -> np.ndarray:
        """(npus, intervals): each NPU's cell holds the expected value: `single_or_full` the one member it sums
        (-1: every member of its group), moved by `shift`, of `group` (arrays broadcast over NPUs, intervals)."""
        v = self.values
        count = np.bitwise_count(v.bits).sum(axis=1)
        word = np.argmax(v.bits != 0, axis=1)   # a one-member value's member: the index of its one set bit
        low = np.take_along_axis(v.bits, word[:, None], axis=1)[:, 0]
        member = word * 64 + np.bitwise_count((low & (~low + np.uint64(1))) - np.uint64(1)).astype(np.int64)
        size = int(self.local.max()) + 1
        cells = self.cells.reshape(self.npus, self.n)
        expected_count = np.where(np.asarray(single_or_full) < 0, size, 1)
        ok = (count[cells] == expected_count) & (v.shift[cells] == shift) & (v.group[cells] == group)
        return ok & ((np.asarray(single_or_full) < 0) | (member[cells] == single_or_full)) & (cells > DEAD)

    def check(self) -> None:
        kind, c = self.buf.kind, self.c
        name = c.name if kind == c.kind else c.buffer
        every = np.arange(self.n)
        if kind in (ALL_REDUCE, REDUCE):
            ok = self.holds(-1, 0, self.gid[:, None])
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
            ok = self.holds(int(self.local[c.root]), 0, self.gid[:, None])
            for n in np.flatnonzero(~ok.all(axis=1))[:1]:
                self.fail(f"broadcast '{name}'", int(n), ~ok[n], every)
        else:
            raise VerificationError(f"no definition to check for {kind}")

    def check_reduce_scatter(self, name: str) -> None:
        """Each NPU's shards hold its group's sum, and the group's shards cover every byte exactly once."""
        ok = self.holds(-1, 0, self.gid[:, None])
        sh = shard_layout(self.shards, self.buf.first)
        lo, k = self.buf.span(sh[:, :, 0].reshape(-1), sh[:, :, 1].reshape(-1))
        npu = np.repeat(np.arange(self.npus), sh.shape[1])
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
            owner = self.local[sel][np.argmax(owned[sel], axis=0)]   # each interval's one owner
            ok = self.holds(owner[None, :], 0, g)[sel]
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
        shift = (j[None, :] - self.local[:, None]) * slot_bytes          # from slot local[n] of member j
        ok = self.holds(j[None, :], shift, self.gid[:, None])
        for n in np.flatnonzero(~ok.all(axis=1))[:1]:
            self.fail(f"all_to_all '{name}'", int(n), ~ok[n], np.arange(self.n))
