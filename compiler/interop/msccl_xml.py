"""MSCCL's XML algorithm format: a compiled all-reduce, reduce-scatter, all-gather or all-to-all schedule written as
an MSCCL algorithm file (the writer).

MSCCL (microsoft/msccl, NCCL with custom algorithms) reads an `<algo>` of `<gpu>`s, each with thread blocks
`<tb id send recv chan>` that run their `<step>`s in order. This module expands the schedule's tables (one per NPU,
runtime/tables.py) into that form; docs/msccl.md states every convention. In short:

- Buffers are cut into `nchunksperloop` equal chunks: the greatest common divisor of every row's offset and bytes,
  of the buffer and of the layout's segments (below). All steps work in place, on the buffer msccl-tools names for
  the collective in place (`i`, or `o` for an all-gather), `coll` says which collective it is.
- Layout: MSCCL keeps a reduce-scatter's or all-gather's shards by rank and an all-to-all's blocks by destination
  (NCCL's layout); ours nests them per chunk and dimension, so every byte is relabelled to MSCCL's place
  (`_layout`), and a row whose bytes MSCCL keeps apart becomes a step per stretch.
- Each NPU gets one thread block per (peer, direction, channel): sends to p on channel c in one, receives from p
  on channel c in another, so no two thread blocks of a GPU share a connection. A chunk of the schedule (a flow)
  runs on channel flow % nchannels; nchannels is the fewest (at most MAX_CHANNELS) that keep every thread block
  within MAX_STEPS steps.
- A send row is an `s` step, a receive that reduces `rrc`, one that overwrites `r`; a row of more than MAX_COUNT
  chunks is split into several steps (both ends split alike).
- Order: the rows of a connection run in the schedule's order (collective, phase, step, chunk, lane, k-th row of
  the message by offset), the same on both ends, so the k-th send meets the k-th receive.
- Dependencies are the data's, found by running the NPU's rows in the schedule's time order (collective, phase,
  step; a step's sends read before its receives write, as runtime/verifier.py executes them): a send waits for
  the receives that last wrote its chunks; a receive for those too and for the sends that read them since. Only
  dependencies across thread blocks are written (a block runs its steps in order); a step with several gets `nop`
  steps before it, each carrying one (MSCCL allows one per step), and `s` numbers every step including the nops.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import NamedTuple
from xml.sax.saxutils import quoteattr

import numpy as np

from ...network.errors import UserError
from ...network.kinds import ROOTED
from ...runtime.tables import RECV_REDUCE, SEND, SWITCH

MAX_COUNT = 64         # chunks per step (MSCCL refuses a count of 72 or more)
MAX_STEPS = 256        # steps per thread block (MSCCL_MAX_NUM_STEPS)
MAX_CHANNELS = 8       # channels tried (MSCCL builds allow 8 to 32)
MAX_CHUNKS = 32767     # chunk offsets are 16-bit in MSCCL's transfer records
MAX_THREAD_BLOCKS = 216  # per GPU (108 SMs x 2, MSCCL's A100 limit)
MAX_NPUS = 1024        # every NPU's table is expanded in memory
MAX_ROWS = 2_000_000   # table rows in all (about 1 GB of Python objects and a 260 MB file)


class _Form(NamedTuple):
    """How one of our collectives is written as MSCCL's `coll`, following msccl-tools' files of that coll."""
    coll: str            # MSCCL's name of the collective
    buf: str             # the buffer every transfer names
    whole: tuple         # (i_chunks, o_chunks): which hold the nchunksperloop chunks (1) and which none (0)
    inplace: bool        # inplace="1" outofplace="0", or inplace="0" outofplace="1"
    copy_in: bool        # first a local copy of the input into `buf`, where the schedule then works
    step_chunks: int     # chunks per transfer step at most


# An in-place all-gather works in the output (each rank's input is its slot there) and an in-place reduce-scatter in
# the input (each rank's output is its slot there), as MSCCL's own in-place files; the buffer they do not name is
# declared empty. An all-to-all is out of place, as msccl-tools writes it: the input is copied into the output and
# the schedule runs there, leaving the input as it was; its steps carry one chunk each, so that a send of a slot and
# the receive that overwrites it in the same step (the exchange of an in-place all-to-all) cannot wait on each
# other: MSCCL's connection always holds one chunk's send before its receive is posted.
FORMS = {"all_reduce": _Form("allreduce", "i", (1, 1), True, False, MAX_COUNT),
         "reduce_scatter": _Form("reducescatter", "i", (1, 0), True, False, MAX_COUNT),
         "all_gather": _Form("allgather", "o", (0, 1), True, False, MAX_COUNT),
         "all_to_all": _Form("alltoall", "o", (1, 1), False, True, 1)}


def to_xml(schedule, name: str) -> str:
    """The MSCCL algorithm of a collective's schedule (runtime/tables.Schedule), or UserError saying why not."""
    meta = schedule.export_meta()
    kinds = {c.buffer_kind for c in meta.collectives}
    if len({c.buffer for c in meta.collectives}) != 1:
        raise UserError(f"--emit msccl-xml writes one collective's schedule; this module holds "
                        f"{len({c.buffer for c in meta.collectives})} ({', '.join(sorted(kinds))})")
    kind = meta.collectives[0].buffer_kind
    if kind in ROOTED:
        raise UserError(f"--emit msccl-xml: MSCCL selects a {kind} algorithm file by size and rank count, not by "
                        f"root, so a {kind} scheduled for root {meta.collectives[0].root} would also run, wrongly, "
                        f"for every other root; it is not written")
    if kind not in FORMS:
        raise UserError(f"--emit msccl-xml writes {', '.join(FORMS)} schedules; this one is {kind}")
    if meta.buffer_dims(meta.collectives[0].buffer) != list(range(meta.ndims)):
        raise UserError("--emit msccl-xml: MSCCL runs a collective over its whole communicator, and this one runs in "
                        "groups (--dims); compile the group's own network instead (its dimensions as --topology)")
    if meta.npus > MAX_NPUS:
        raise UserError(f"--emit msccl-xml: {meta.npus} NPUs; an MSCCL algorithm file is written for at most "
                        f"{MAX_NPUS}")
    size = meta.collectives[0].bytes
    tables = [schedule.table(n) for n in range(meta.npus)]
    if any((t["peer"] == SWITCH).any() for t in tables):
        raise UserError("--emit msccl-xml: the schedule reduces in the switch (in_switch), which MSCCL cannot "
                        "express; choose another algorithm")
    segments = _layout(meta, kind)
    unit = math.gcd(size, *(int(g) for t in tables for g in (np.gcd.reduce(t["offset"]) if len(t) else 0,
                                                               np.gcd.reduce(t["bytes"]) if len(t) else 0)),
                    *(int(x) for seg in segments for x in seg))
    nchunks = size // unit
    if nchunks > MAX_CHUNKS:
        raise UserError(f"--emit msccl-xml: the schedule cuts its {size} bytes into {nchunks} pieces of {unit} "
                        f"bytes, more than MSCCL's {MAX_CHUNKS} chunks; use fewer --chunks or a size with more "
                        "factors of two")
    rows = sum(len(t) for t in tables)
    if rows > MAX_ROWS:   # each becomes a Python object and a line of ~130 bytes: refused before, not after
        raise UserError(f"--emit msccl-xml: {rows} transfers over {meta.npus} GPUs; an MSCCL file of more than "
                        f"{MAX_ROWS} is refused (use fewer --chunks or a smaller network)")
    place = np.empty(nchunks, np.int64)   # our chunk u of the buffer is MSCCL's chunk place[u]
    for start, length, where in segments:
        place[start // unit:(start + length) // unit] = np.arange(where // unit, (where + length) // unit)
    form = FORMS[kind]
    gpus = [_ops(n, t, unit, place, form.step_chunks, nchunks if form.copy_in else 0) for n, t in enumerate(tables)]
    nflows = max((op.flow for ops in gpus for op in ops), default=0) + 1
    for channels in range(1, MAX_CHANNELS + 1):
        blocks = [_blocks(ops, channels, form.buf) for ops in gpus]
        longest = max((len(b.steps) for per_gpu in blocks for b in per_gpu), default=0)
        if longest <= MAX_STEPS or channels >= nflows:
            break
    if longest > MAX_STEPS:
        raise UserError(f"--emit msccl-xml: a thread block needs {longest} steps with {channels} channel(s), more "
                        f"than MSCCL's {MAX_STEPS}; use fewer --chunks")
    most = max(len(b) for b in blocks)
    if most > MAX_THREAD_BLOCKS:
        raise UserError(f"--emit msccl-xml: a GPU needs {most} thread blocks, more than MSCCL's "
                        f"{MAX_THREAD_BLOCKS}")
    lines = [f'<algo name={quoteattr(name)} proto="Simple" nchannels="{channels}" nchunksperloop="{nchunks}" '
             f'ngpus="{meta.npus}" coll="{form.coll}" inplace="{int(form.inplace)}" '
             f'outofplace="{int(not form.inplace)}" minBytes="0" maxBytes="9223372036854775807">']
    for npu, per_gpu in enumerate(blocks):
        lines.append(f'  <gpu id="{npu}" i_chunks="{nchunks * form.whole[0]}" o_chunks="{nchunks * form.whole[1]}" '
                     f's_chunks="0">')
        for b in per_gpu:
            lines.append(f'    <tb id="{b.id}" send="{b.send}" recv="{b.recv}" chan="{b.chan}">')
            lines += [f'      {s}' for s in b.steps]
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


class _Op:
    """One step of an NPU: a send or receive of `cnt` chunks at chunk `off` (peer -1: a local copy from the input)."""
    __slots__ = ("send", "reduce", "peer", "off", "cnt", "flow", "order", "deps", "tb", "step", "depended")

    def __init__(self, send, reduce, peer, off, cnt, flow, order):
        self.send, self.reduce, self.peer, self.off, self.cnt, self.flow, self.order = (send, reduce, peer, off,
                                                                                         cnt, flow, order)
        self.deps: list = []
        self.tb = self.step = -1
        self.depended = False


def _layout(meta, kind: str) -> list[tuple[int, int, int]]:
    """Where MSCCL keeps each byte of our buffer: (start, length, MSCCL offset) segments that tile it.

    MSCCL lays a buffer out as NCCL does, by rank: the all-gather input of rank r (the reduce-scatter output) is
    bytes [r K, (r + 1) K) of the whole, K = size / ranks; an all-to-all's block j of rank r is what r sends to j.
    Ours nests the regions per chunk and per dimension (runtime/verifier.py says which NPU owns what), so the
    bytes are relabelled: NPU r's shards of chunks 0, 1, ... in turn fill [r K, (r + 1) K); slot j of chunk c goes
    to block j at c x (slot bytes). An all-reduce's bytes stay where they are."""
    c = meta.collectives[0]
    size, npus = c.bytes, meta.npus
    if kind == "all_reduce":
        return [(0, size, 0)]
    if kind == "all_to_all":   # the lowering cuts every chunk into whole, equal slots
        slot = size // (c.chunks * npus)
        return [((chunk * npus + j) * slot, slot, j * (size // npus) + chunk * slot)
                for chunk in range(c.chunks) for j in range(npus)]
    shards = np.asarray(meta.shards[0])   # (npus, chunks, 2): offset and length of each NPU's shard per chunk
    per_npu = shards[:, :, 1].sum(axis=1)
    if size % npus or (per_npu != size // npus).any():
        worst = int(np.argmax(per_npu != size // npus))
        raise UserError(f"--emit msccl-xml: MSCCL gives every rank the same count, but this split gives NPU {worst} "
                        f"{int(per_npu[worst])} of the {size} bytes; use a size that splits evenly over the "
                        f"{npus} NPUs and the chunks")
    out = []
    for r in range(npus):
        where = r * (size // npus)
        for off, length in shards[r].tolist():
            if length:
                out.append((off, length, where))
                where += length
    return out


def _runs(places: np.ndarray) -> list[tuple[int, int]]:
    """(first, count) of each stretch of consecutive MSCCL chunks, in our order."""
    cuts = np.flatnonzero(np.diff(places) != 1) + 1
    return [(int(p[0]), len(p)) for p in np.split(places, cuts)]


def _ops(npu: int, t, unit: int, place: np.ndarray, step_chunks: int = MAX_COUNT, copy_in: int = 0) -> list:
    """The NPU's rows as steps in its time order, each with the earlier steps whose data it needs; `copy_in`
    chunks of the input are copied into the working buffer first (local steps, before any transfer)."""
    n = len(t)
    if not n and not copy_in:
        return []
    send = t["op"] == SEND
    # k-th row of its message by offset: messages share (coll, flow, stage, step, peer, lane, direction)
    msg = np.stack([t[c].astype(np.int64) for c in ("coll", "flow", "stage", "step", "peer", "lane")]
                   + [send.astype(np.int64)])
    order = np.lexsort([t["offset"]] + list(msg[::-1]))
    kth = np.zeros(n, np.int64)
    same = np.all(msg[:, order[1:]] == msg[:, order[:-1]], axis=0)
    for j in range(1, n):
        kth[order[j]] = kth[order[j - 1]] + 1 if same[j - 1] else 0
    ops = [_Op(False, False, -1, start, min(MAX_COUNT, copy_in - start), 0, (-1, start))
           for start in range(0, copy_in, MAX_COUNT)]
    for i in range(n):
        off, cnt = int(t["offset"][i]) // unit, int(t["bytes"][i]) // unit
        when = (int(t["coll"][i]), int(t["stage"][i]), int(t["step"][i]))
        # a row whose bytes MSCCL keeps apart becomes a step per stretch, each cut to step_chunks; both ends of a
        # message cut it alike (the same bytes, the same layout), so the k-th piece sent meets the k-th received
        pieces = [(first + start, min(step_chunks, count - start)) for first, count in _runs(place[off:off + cnt])
                  for start in range(0, count, step_chunks)]
        for piece, (first, count) in enumerate(pieces):
            # connection order first (the same on both ends), then the sends of a step before its receives
            key = when + (int(not send[i]), int(t["flow"][i]), int(t["lane"][i]), int(kth[i]), piece,
                          int(t["peer"][i]))
            ops.append(_Op(bool(send[i]), int(t["op"][i]) == RECV_REDUCE, int(t["peer"][i]), first, count,
                           int(t["flow"][i]), key))
    ops.sort(key=lambda o: o.order)
    writer: dict = {}
    readers: dict = defaultdict(list)
    for op in ops:
        deps = []
        for u in range(op.off, op.off + op.cnt):
            if u in writer:
                deps.append(writer[u])
            if not op.send:
                deps += readers.pop(u, [])
                writer[u] = op
            else:
                readers[u].append(op)
        op.deps = list(dict.fromkeys(deps))   # once each, in order
    return ops


class _Block:
    def __init__(self, id_, send, recv, chan):
        self.id, self.send, self.recv, self.chan = id_, send, recv, chan
        self.ops: list = []
        self.steps: list = []


def _blocks(ops: list, channels: int, buf: str) -> list:
    """Thread blocks of one GPU (one per peer, direction and channel) with their steps written out, every step on
    buffer `buf` (in place)."""
    blocks: dict = {}
    for op in ops:
        op.depended = False
        key = (op.peer, op.send, op.flow % channels)
        if key not in blocks:
            blocks[key] = None
    # ids by (send peer, recv peer, channel), as MSCCL's tools order them
    keys = sorted(blocks, key=lambda k: (k[0] if k[1] else -1, -1 if k[1] else k[0], k[2]))
    for i, k in enumerate(keys):
        blocks[k] = _Block(i, k[0] if k[1] else -1, -1 if k[1] else k[0], k[2])
    for op in ops:   # ops are in time order, which is also each connection's order
        b = blocks[(op.peer, op.send, op.flow % channels)]
        op.tb = b.id
        b.ops.append(op)
    for b in blocks.values():   # number the steps, nops included, before any dependency names one
        s = 0
        for op in b.ops:
            across = [d for d in op.deps if d.tb != b.id]
            s += max(len(across) - 1, 0)
            op.step = s
            s += 1
    for b in blocks.values():
        for op in b.ops:
            for d in op.deps:
                if d.tb != b.id:
                    d.depended = True
    for b in blocks.values():
        s = 0
        for op in b.ops:
            across = [d for d in op.deps if d.tb != b.id]
            for d in across[:-1]:
                b.steps.append(f'<step s="{s}" type="nop" srcbuf="{buf}" srcoff="-1" dstbuf="{buf}" dstoff="-1" '
                               f'cnt="0" depid="{d.tb}" deps="{d.step}" hasdep="0"/>')
                s += 1
            dep = across[-1] if across else None
            kind = "cpy" if op.peer < 0 else "s" if op.send else ("rrc" if op.reduce else "r")
            b.steps.append(f'<step s="{s}" type="{kind}" srcbuf="{"i" if op.peer < 0 else buf}" srcoff="{op.off}" '
                           f'dstbuf="{buf}" dstoff="{op.off}" cnt="{op.cnt}" depid="{dep.tb if dep else -1}" '
                           f'deps="{dep.step if dep else -1}" hasdep="{int(op.depended)}"/>')
            s += 1
    return [blocks[k] for k in keys]
