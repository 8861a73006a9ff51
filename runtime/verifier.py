"""Verifiers: execute schedule tables and check each collective's definition on every NPU.

The idea is msccl-tools' checker: a collective defines the initial buffers and a check of the final ones. `verify`
(what `--verify` runs) executes on symbols (runtime/verify_symbolic.py): its cost is the tables' rows and the pieces
they cut the buffers into, whatever the size. `verify_on_data` is the reference it agrees with: every NPU gets a
numpy buffer per collective buffer (one int64 element per byte, so offsets are byte offsets), limited to
MAX_ELEMENTS bytes in all. Both run rows in (collective, phase, step) order, all sends of a step reading before its
receives write (a message carries the bytes as they were when its step began). Checks:

- every receive is matched by a send of the same step from its peer with the same byte count (no step waits on
  data that never arrives) and every send is received;
- every send's `dep` names an earlier receive on the same NPU that wrote bytes the send reads;
- all_reduce: every NPU ends with the sum over its group; reduce_scatter: each NPU's shard holds the group sum
  and the group's shards tile each chunk exactly; all_gather: each NPU ends with every member's shard (starting
  from its own shard only, the rest poisoned); all_to_all: slot j of NPU n's chunk holds what group member j had in
  slot n (chunk c of a buffer is bytes [floor(c*S/C), floor((c+1)*S/C)), slot j of a chunk its j-th of N equal
  floor-bounded parts); broadcast: every NPU ends with what its group's root held (only the roots start with data,
  the rest poisoned); reduce: each group's root ends with the group's sum (the others' buffers are scratch). A sum
  that holds some NPU's data twice is wrong, as is poison anywhere a definition looks.
"""
from __future__ import annotations

import numpy as np

from .tables import RECV_REDUCE, SEND, SWITCH, Schedule, Table, TableError
from .verify_rows import (VerificationError, checked_rows, group_layout, is_root, ranges, shard_layout,  # noqa: F401
                          switch_of, when)
from .verify_symbolic import SymbolicRun

MAX_ELEMENTS = 50_000_000  # verify_on_data: bytes of every collective on every NPU, in all
POISON = -(1 << 40)


def verify(schedule: Schedule) -> dict:
    """Check `schedule` on symbols, any size (raises VerificationError naming the first fault)."""
    return SymbolicRun(schedule).run()


def check_size(meta) -> None:
    """Refuse (TableError, one line) collectives too large for verify_on_data: one int64 element per byte on every
    NPU."""
    for c in meta.collectives:
        if meta.npus * c.bytes > MAX_ELEMENTS:
            raise TableError(f"{c.name}: {meta.npus} NPUs x {c.bytes} bytes is too large to execute on data "
                             f"(limit {MAX_ELEMENTS} bytes in all); verify a smaller size")


def verify_on_data(schedule: Schedule, seed: int = 0) -> dict:
    """Check `schedule` on random data, the reference `verify` agrees with (up to MAX_ELEMENTS bytes in all)."""
    check_size(schedule.export_meta())
    meta, table, pairs, sends, recvs, sw = checked_rows(schedule)
    shards = meta.shards or {}
    npus = meta.npus
    shape = meta.shape
    colls = meta.collectives
    rng = np.random.default_rng(seed)

    buffers, init, kinds, members = {}, {}, {}, {}
    for ci, c in enumerate(colls):
        b = c.buffer
        members.setdefault(b, []).append(ci)
        if b in buffers:
            continue
        kinds[b] = c.buffer_kind
        # values of 2^20: a wrong element holds the right value (a copy of a neighbour, a sum) by chance about once
        # in a million, where with 1,000 values an offset-corrupted all_gather of 130 elements matched somewhere on
        # most seeds; sums of every NPU's values stay far above POISON
        data = rng.integers(0, 1 << 20, size=(npus, c.bytes), dtype=np.int64)
        if kinds[b] == "all_gather":
            sh = shard_layout(shards, ci)
            owned = np.zeros_like(data, dtype=bool)
            for n in range(npus):
                for off, ln in sh[n]:
                    owned[n, off:off + ln] = True
            data = np.where(owned, data, POISON)
        elif kinds[b] == "broadcast":
            data[~is_root(shape, c)] = POISON
        init[b] = data
        buffers[b] = data.copy()

    _execute(pairs, sends, recvs, colls, buffers, sw, shape)

    for b, kind in kinds.items():
        ci = members[b][0]
        c = colls[ci]
        gid, local, _ = group_layout(shape, meta.buffer_dims(b))
        _check(kind, c, ci, shards, init[b], buffers[b], gid, local)
    return {"rows": len(table), "collectives": len(colls), "buffers": len(buffers)}


def _execute(t: Table, s_idx, r_idx, colls, buffers, sw: Table, shape) -> None:
    """Run every step of every phase in time order: all its sends read (a send to a switch adds into that
    switch's sum), then all its receives write (a receive from a switch copies its sum); vectorised per step."""
    order = np.lexsort((t["step"][r_idx], t["stage"][r_idx], t["coll"][r_idx]))
    s_idx, r_idx = s_idx[order], r_idx[order]
    key = when(t, r_idx)
    sw_key = when(sw, np.arange(len(sw)))
    for step in np.union1d(key, sw_key).tolist():
        grp = np.flatnonzero(key == step)
        rows = np.flatnonzero(sw_key == step)
        coll = int((t if len(grp) else sw)["coll"][(r_idx[grp[0]] if len(grp) else rows[0])])
        buf = buffers[colls[coll].buffer]
        size = buf.shape[1]
        flat = buf.reshape(-1)
        si, ri = s_idx[grp], r_idx[grp]
        lens = t["bytes"][si]
        payload = flat[ranges(t["npu"][si].astype(np.int64) * size + t["offset"][si], lens)]
        dst = ranges(t["npu"][ri].astype(np.int64) * size + t["offset"][ri], lens)
        sums = _switch_sums(sw, rows, flat, size, shape) if len(rows) else None
        reduce = np.repeat(t["op"][ri] == RECV_REDUCE, lens)
        np.add.at(flat, dst[reduce], payload[reduce])  # add.at: two children may add into one parent's bytes
        flat[dst[~reduce]] = payload[~reduce]
        if sums is not None:
            _switch_receives(sw, rows, flat, size, shape, sums)


def _switch_sums(sw: Table, rows, flat, size: int, shape) -> dict:
    """The sums every switch holds after this step's sends: switch -> bytes of the buffer (zero where nothing came)."""
    send = rows[sw["op"][rows] == SEND]
    sums: dict = {}
    for s, npu, off, n in zip(switch_of(sw, send, shape).tolist(), sw["npu"][send].tolist(),
                              sw["offset"][send].tolist(), sw["bytes"][send].tolist()):
        acc = sums.setdefault(s, np.zeros(size, flat.dtype))
        acc[off:off + n] += flat[npu * size + off: npu * size + off + n]
    return sums


def _switch_receives(sw: Table, rows, flat, size: int, shape, sums: dict) -> None:
    recv = rows[sw["op"][rows] != SEND]
    for s, npu, off, n, step in zip(switch_of(sw, recv, shape).tolist(), sw["npu"][recv].tolist(),
                                    sw["offset"][recv].tolist(), sw["bytes"][recv].tolist(),
                                    sw["step"][recv].tolist()):
        if s not in sums:
            raise VerificationError(f"NPU {npu} waits at step {step} for a switch's sum nobody sent to")
        flat[npu * size + off: npu * size + off + n] = sums[s][off:off + n]


def _fail(what: str, npu: int, final, expected) -> None:
    bad = np.flatnonzero(final != expected)
    raise VerificationError(f"{what}: NPU {npu} differs from the definition at {len(bad)} byte(s), first at offset "
                            f"{bad[0]}")


def _check(kind, c, ci, shards, init, final, gid, local) -> None:
    name = c.name if kind == c.kind else c.buffer
    npus = len(gid)
    group_sum = np.zeros_like(init)
    for g in np.unique(gid):
        sel = gid == g
        group_sum[sel] = init[sel].sum(axis=0)
    if kind == "all_reduce":
        for n in range(npus):
            if not np.array_equal(final[n], group_sum[n]):
                _fail(f"all_reduce '{name}'", n, final[n], group_sum[n])
    elif kind == "reduce_scatter":
        sh = shard_layout(shards, ci)
        cover = np.zeros((int(gid.max()) + 1, init.shape[1]), np.int64)
        for n in range(npus):
            for off, ln in sh[n]:
                if not np.array_equal(final[n, off:off + ln], group_sum[n, off:off + ln]):
                    _fail(f"reduce_scatter '{name}' shard", n, final[n, off:off + ln], group_sum[n, off:off + ln])
                cover[gid[n], off:off + ln] += 1
        if not np.all(cover == 1):
            g, byte = np.argwhere(cover != 1)[0]
            raise VerificationError(f"reduce_scatter '{name}': byte {byte} is owned by {cover[g, byte]} NPUs of "
                                    f"group {g}, not exactly one")
    elif kind == "all_gather":
        for g in np.unique(gid):
            sel = np.flatnonzero(gid == g)
            owners = np.sum(init[sel] != POISON, axis=0)
            if np.any(owners != 1):
                byte = int(np.argmax(owners != 1))
                raise VerificationError(f"all_gather '{name}': byte {byte} is the input of {owners[byte]} NPUs of "
                                        f"group {g}, not exactly one")
            expected = np.max(init[sel], axis=0)  # the one owner's value (the others hold POISON)
            for n in sel:
                if not np.array_equal(final[n], expected):
                    _fail(f"all_gather '{name}'", n, final[n], expected)
    elif kind == "all_to_all":
        # the lowering demands whole slots, so the buffer is (chunks, slots, slot bytes) on every NPU
        groups = np.unique(gid)
        nslots = len(gid) // len(groups)
        if c.bytes % (c.chunks * nslots):
            raise VerificationError(f"all_to_all '{name}': {c.bytes} bytes do not split into {c.chunks} chunks "
                                    f"of {nslots} equal slots")
        members = np.zeros((int(gid.max()) + 1, nslots), np.int64)
        members[gid, local] = np.arange(npus)
        shaped = init.reshape(npus, c.chunks, nslots, -1)
        # expected[n, chunk, j] = what member j of n's group had in slot local[n]
        src = members[gid][:, :, None]                     # (npus, slots, 1)
        expected = shaped[src, np.arange(c.chunks)[None, None, :], local[:, None, None]]  # (npus, j, chunk, L)
        expected = expected.transpose(0, 2, 1, 3).reshape(npus, -1)
        for n in np.flatnonzero(np.any(final != expected, axis=1))[:1]:
            _fail(f"all_to_all '{name}'", n, final[n], expected[n])
    elif kind == "reduce":
        for n in np.flatnonzero(local == local[c.root]):  # each group's root: the member at the root's place
            if not np.array_equal(final[n], group_sum[n]):
                _fail(f"reduce '{name}' root", n, final[n], group_sum[n])
    elif kind == "broadcast":
        roots = np.flatnonzero(init[:, 0] != POISON)
        expected = np.zeros_like(init)
        expected[gid[roots]] = init[roots]  # indexed by group id: each group's root's data
        expected = expected[gid]
        for n in np.flatnonzero(np.any(final != expected, axis=1))[:1]:
            _fail(f"broadcast '{name}'", n, final[n], expected[n])
    else:
        raise VerificationError(f"no definition to check for {kind}")


def link_conflicts(schedule: Schedule) -> list[tuple]:
    """Directed links that carry two messages in the same step of the same phase and chunk.

    Every message is followed along its route (as the congestion runtime routes it); an empty list means the
    schedule is contention-free step by step, as MultiTree's link allocation promises."""
    from ..network.links import LinkMap
    from .phases import messages
    meta = schedule.meta
    links = LinkMap(meta.topology)
    seen: dict = {}
    conflicts = []
    for npu in range(meta.npus):
        m = messages(schedule.table(npu), meta)
        s = (m["send"] == 1) & (m["peer"] != SWITCH)  # a switch that reduces takes every member's message at once
        start, ids = links.routes(m["npu"][s], m["peer"][s], m["dim"][s], m["lane"][s], m["hops"][s])
        cols = [m[k][s].tolist() for k in ("coll", "flow", "stage", "step", "peer")]
        for i, (c, f, s_, st, peer) in enumerate(zip(*cols)):
            for link in ids[start[i]:start[i + 1]].tolist():
                key = (c, f, s_, st, link)
                if key in seen:
                    conflicts.append((links.describe(link), c, f, s_, st, seen[key], (npu, peer)))
                else:
                    seen[key] = (npu, peer)
    return conflicts
