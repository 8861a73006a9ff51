"""MSCCL's XML algorithm format: a compiled all-reduce schedule written as an MSCCL algorithm file (the writer).

MSCCL (microsoft/msccl, NCCL with custom algorithms) reads an `<algo>` of `<gpu>`s, each with thread blocks
`<tb id send recv chan>` that run their `<step>`s in order. This module expands the schedule's tables (one per NPU,
runtime/tables.py) into that form; docs/msccl.md states every convention. In short:

- Buffers are cut into `nchunksperloop` equal chunks: the greatest common divisor of every row's offset and bytes
  and of the buffer (so the file fits any size that is a multiple of that many chunks). All steps work in place on
  the input buffer `i`.
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
from xml.sax.saxutils import quoteattr

import numpy as np

from .network.errors import UserError
from .runtime.tables import RECV_REDUCE, SEND, SWITCH

MAX_COUNT = 64         # chunks per step (MSCCL refuses a count of 72 or more)
MAX_STEPS = 256        # steps per thread block (MSCCL_MAX_NUM_STEPS)
MAX_CHANNELS = 8       # channels tried (MSCCL builds allow 8 to 32)
MAX_CHUNKS = 32767     # chunk offsets are 16-bit in MSCCL's transfer records
MAX_THREAD_BLOCKS = 216  # per GPU (108 SMs x 2, MSCCL's A100 limit)
MAX_NPUS = 1024        # every NPU's table is expanded in memory
MAX_ROWS = 2_000_000   # table rows in all (about 1 GB of Python objects and a 260 MB file)


def to_xml(schedule, name: str) -> str:
    """The MSCCL algorithm of an all-reduce schedule (runtime/tables.Schedule), or UserError saying why not."""
    meta = schedule.export_meta()
    kinds = {c.buffer_kind for c in meta.collectives}
    if kinds != {"all_reduce"} or len({c.buffer for c in meta.collectives}) != 1:
        raise UserError(f"--emit msccl-xml writes all-reduce schedules; this one is {', '.join(sorted(kinds))}")
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
    unit = math.gcd(size, *(int(g) for t in tables for g in (np.gcd.reduce(t["offset"]) if len(t) else 0,
                                                               np.gcd.reduce(t["bytes"]) if len(t) else 0)))
    nchunks = size // unit
    if nchunks > MAX_CHUNKS:
        raise UserError(f"--emit msccl-xml: the schedule cuts its {size} bytes into {nchunks} pieces of {unit} "
                        f"bytes, more than MSCCL's {MAX_CHUNKS} chunks; use fewer --chunks or a size with more "
                        "factors of two")
    rows = sum(len(t) for t in tables)
    if rows > MAX_ROWS:   # each becomes a Python object and a line of ~130 bytes: refused before, not after
        raise UserError(f"--emit msccl-xml: {rows} transfers over {meta.npus} GPUs; an MSCCL file of more than "
                        f"{MAX_ROWS} is refused (use fewer --chunks or a smaller network)")
    gpus = [_ops(n, t, unit) for n, t in enumerate(tables)]
    nflows = max((op.flow for ops in gpus for op in ops), default=0) + 1
    for channels in range(1, MAX_CHANNELS + 1):
        blocks = [_blocks(ops, channels) for ops in gpus]
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
             f'ngpus="{meta.npus}" coll="allreduce" inplace="1" outofplace="0" minBytes="0" '
             f'maxBytes="9223372036854775807">']
    for npu, per_gpu in enumerate(blocks):
        lines.append(f'  <gpu id="{npu}" i_chunks="{nchunks}" o_chunks="{nchunks}" s_chunks="0">')
        for b in per_gpu:
            lines.append(f'    <tb id="{b.id}" send="{b.send}" recv="{b.recv}" chan="{b.chan}">')
            lines += [f'      {s}' for s in b.steps]
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


class _Op:
    """One step of an NPU: a send or receive of `cnt` chunks at chunk `off`."""
    __slots__ = ("send", "reduce", "peer", "off", "cnt", "flow", "order", "deps", "tb", "step", "depended")

    def __init__(self, send, reduce, peer, off, cnt, flow, order):
        self.send, self.reduce, self.peer, self.off, self.cnt, self.flow, self.order = (send, reduce, peer, off,
                                                                                         cnt, flow, order)
        self.deps: list = []
        self.tb = self.step = -1
        self.depended = False


def _ops(npu: int, t, unit: int) -> list:
    """The NPU's rows as steps in its time order, each with the earlier steps whose data it needs."""
    n = len(t)
    if not n:
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
    ops = []
    for i in range(n):
        off, cnt = int(t["offset"][i]) // unit, int(t["bytes"][i]) // unit
        when = (int(t["coll"][i]), int(t["stage"][i]), int(t["step"][i]))
        for piece, start in enumerate(range(0, cnt, MAX_COUNT)):
            # connection order first (the same on both ends), then the sends of a step before its receives
            key = when + (int(not send[i]), int(t["flow"][i]), int(t["lane"][i]), int(kth[i]), piece,
                          int(t["peer"][i]))
            ops.append(_Op(bool(send[i]), int(t["op"][i]) == RECV_REDUCE, int(t["peer"][i]), off + start,
                           min(MAX_COUNT, cnt - start), int(t["flow"][i]), key))
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


def _blocks(ops: list, channels: int) -> list:
    """Thread blocks of one GPU (one per peer, direction and channel) with their steps written out."""
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
                b.steps.append(f'<step s="{s}" type="nop" srcbuf="i" srcoff="-1" dstbuf="i" dstoff="-1" cnt="0" '
                               f'depid="{d.tb}" deps="{d.step}" hasdep="0"/>')
                s += 1
            dep = across[-1] if across else None
            kind = "s" if op.send else ("rrc" if op.reduce else "r")
            b.steps.append(f'<step s="{s}" type="{kind}" srcbuf="i" srcoff="{op.off}" dstbuf="i" dstoff="{op.off}" '
                           f'cnt="{op.cnt}" depid="{dep.tb if dep else -1}" deps="{dep.step if dep else -1}" '
                           f'hasdep="{int(op.depended)}"/>')
            s += 1
    return [blocks[k] for k in keys]
