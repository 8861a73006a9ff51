"""What both verifiers (runtime/verifier.py on data, runtime/verify_symbolic.py on symbols) check and share before
anything executes: every row in range, every dep an earlier receive of the bytes its send reads, every receive
matched by a send of the same message and byte count; and the group, shard and switch layouts they execute on."""
from __future__ import annotations

import numpy as np

from ..network.coords import coords as coords_of, group_base, rank, strides
from ..network.errors import AstraError
from .tables import SEND, SWITCH, Table


class VerificationError(AstraError):
    """The schedule does not implement its collective (message names the first NPU and bytes that differ)."""


def group_layout(shape: list[int], dims: list[int]):
    """Per NPU: group id (NPUs that share every coordinate outside dims) and group-local rank."""
    coords = coords_of(np.arange(int(np.prod(shape))), shape)
    inside = sorted(dims)
    outside = [d for d in range(len(shape)) if d not in dims]
    sizes = [shape[d] for d in outside]
    return rank(coords[:, outside], sizes), rank(coords[:, inside], [shape[d] for d in inside]), int(np.prod(sizes))


def shard_layout(shards: dict, ci: int) -> np.ndarray:
    """(npus, chunks, 2) offset and length of each NPU's reduce-scatter output / all-gather input shard."""
    if ci not in shards:
        raise VerificationError(f"collective {ci}: the table directory has no shard layout to verify against")
    return np.asarray(shards[ci])


def is_root(shape, c) -> np.ndarray:
    """Per NPU: is it its group's root (the member at the root NPU's place in the group)?"""
    _, local, _ = group_layout(shape, c.group_dims)
    return local == local[c.root]


def check_rows(t: Table, colls, npus: int) -> None:
    """Every row names a real collective, peer and byte range inside its buffer, and a dep that is -1 or a row."""
    ncoll = len(colls)
    bad = (t["coll"] < 0) | (t["coll"] >= ncoll) | (t["peer"] < SWITCH) | (t["peer"] >= npus) | (t["peer"] == t["npu"])
    bad |= (t["peer"] == SWITCH) & (t["dim"] < 0)
    bad |= (t["bytes"] <= 0) | (t["offset"] < 0) | (t["dep"] < -1)
    size = np.array([c.bytes for c in colls], dtype=np.int64)
    bad |= t["offset"] + t["bytes"] > size[np.clip(t["coll"], 0, ncoll - 1)]
    if bad.any():
        i = int(np.argmax(bad))
        raise VerificationError(f"NPU {t['npu'][i]}: row at step {t['step'][i]} (collective {t['coll'][i]}, chunk "
                                f"{t['flow'][i]}) names peer {t['peer'][i]}, bytes [{t['offset'][i]}, "
                                f"{t['offset'][i] + t['bytes'][i]}) or dep {t['dep'][i]} outside what exists")


def check_deps(t: Table, npus: int) -> None:
    """dep must point at an earlier receive on the same NPU whose bytes overlap the send's."""
    starts = np.concatenate([[0], np.cumsum(np.bincount(t["npu"], minlength=npus))])
    s = np.flatnonzero((t["op"] == SEND) & (t["dep"] >= 0))
    if not len(s):
        return
    d = t["dep"][s] + starts[t["npu"][s]]
    bad = (d >= len(t)) | (t["npu"][np.minimum(d, len(t) - 1)] != t["npu"][s])
    d = np.minimum(d, len(t) - 1)
    bad |= t["op"][d] == SEND
    bad |= when(t, d) >= when(t, s)
    bad |= ~((t["offset"][d] < t["offset"][s] + t["bytes"][s]) & (t["offset"][s] < t["offset"][d] + t["bytes"][d]))
    if bad.any():
        i = s[np.argmax(bad)]
        raise VerificationError(f"NPU {t['npu'][i]}: send at step {t['step'][i]} (chunk {t['flow'][i]}) names dep "
                                f"{t['dep'][i]}, which is not an earlier receive of the bytes it sends")


def match(t: Table, colls):
    """Pair every receive with its send: same (coll, flow, stage, step, sender, receiver, lane), k-th row by offset."""
    is_send = t["op"] == SEND
    sender = np.where(is_send, t["npu"], t["peer"]).astype(np.int64)
    receiver = np.where(is_send, t["peer"], t["npu"]).astype(np.int64)
    keys = [t["coll"], t["flow"], t["stage"], t["step"], sender, receiver, t["lane"]]
    s_idx = np.flatnonzero(is_send)
    r_idx = np.flatnonzero(~is_send)
    s_idx = s_idx[np.lexsort([t["offset"][s_idx]] + [k[s_idx] for k in keys][::-1])]
    r_idx = r_idx[np.lexsort([t["offset"][r_idx]] + [k[r_idx] for k in keys][::-1])]
    ks = np.stack([k[s_idx].astype(np.int64) for k in keys]) if len(s_idx) else np.zeros((7, 0), np.int64)
    kr = np.stack([k[r_idx].astype(np.int64) for k in keys]) if len(r_idx) else np.zeros((7, 0), np.int64)
    if ks.shape != kr.shape or not np.array_equal(ks, kr):
        _explain_mismatch(ks, kr, colls)
    if not np.array_equal(t["bytes"][s_idx], t["bytes"][r_idx]):
        i = np.argmax(t["bytes"][s_idx] != t["bytes"][r_idx])
        raise VerificationError(f"NPU {receiver[r_idx[i]]} receives {t['bytes'][r_idx[i]]} bytes at step "
                                f"{t['step'][r_idx[i]]} but NPU {sender[s_idx[i]]} sends {t['bytes'][s_idx[i]]}")
    return s_idx, r_idx


def _explain_mismatch(ks, kr, colls):
    sset = {tuple(x) for x in ks.T.tolist()}
    rset = {tuple(x) for x in kr.T.tolist()}
    for key in kr.T.tolist():
        if tuple(key) not in sset:
            c, f, st, step, snd, rcv, _ = key
            raise VerificationError(f"NPU {rcv} waits in {colls[c].name} chunk {f} phase {st} step {step} for data "
                                    f"from NPU {snd} that is never sent")
    for key in ks.T.tolist():
        if tuple(key) not in rset:
            c, f, st, step, snd, rcv, _ = key
            raise VerificationError(f"NPU {snd} sends to NPU {rcv} in {colls[c].name} chunk {f} phase {st} step "
                                    f"{step} but NPU {rcv} never receives it")
    raise VerificationError("sends and receives differ in number of rows per message")


def checked_rows(schedule):
    """(meta with every shard layout, every NPU's rows joined, matched (send, receive) row pairs, the rows with a
    switch) once the rows, deps and matching are checked: what either verifier executes."""
    meta = schedule.export_meta()
    table = Table.concat([schedule.table(n) for n in range(meta.npus)])
    check_rows(table, meta.collectives, meta.npus)
    check_deps(table, meta.npus)
    switch = table["peer"] == SWITCH  # transfers with a switch that reduces and multicasts (in_switch)
    pairs = Table({c: v[~switch] for c, v in table.cols.items()})
    sends, recvs = match(pairs, meta.collectives)
    return meta, table, pairs, sends, recvs, Table({c: v[switch] for c, v in table.cols.items()})


def ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated index ranges [starts[i], starts[i] + lens[i]) as one array."""
    total = int(lens.sum())
    before = np.repeat(np.cumsum(lens) - lens, lens)
    return np.arange(total, dtype=np.int64) - before + np.repeat(np.asarray(starts, np.int64), lens)


def when(t: Table, rows) -> np.ndarray:
    """The execution order of rows: collective, then phase, then step (every chunk's step s runs together)."""
    return (t["coll"][rows].astype(np.int64) << 40) + (t["stage"][rows].astype(np.int64) << 20) + t["step"][rows]


def switch_of(sw: Table, rows, shape) -> np.ndarray:
    """Each row's switch: its NPU's group in the row's dimension (the NPU with that coordinate 0), per dimension."""
    d = sw["dim"][rows].astype(np.int64)
    k, st = np.asarray(shape)[d], np.asarray(strides(shape), np.int64)[d]
    return d * (1 << 40) + group_base(sw["npu"][rows].astype(np.int64), k, st)
