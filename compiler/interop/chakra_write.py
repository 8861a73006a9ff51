"""Chakra execution traces out (`--emit chakra -o DIR`): a workload as one `<prefix>.<rank>.et` per rank and
comm_group.json, for ASTRA-sim to run as written (its revision 518bd51 with Chakra f37c2bb: Workload.cc and the
ETFeeder, read in their source) and for frontend/chakra.py to read back to the identical step.

What ASTRA-sim does with a node, and what is written so that it runs:
- It has no streams: the engine's stream rules become ctrl_deps (write_program below).
- A GPU COMP_NODE under `roofline-enabled` takes num_ops / min(local-mem-bw x num_ops / tensor_size, peak-perf)
  seconds, truncated to whole nanoseconds: num_ops 0 gives 0/0 and the node never ends, tensor_size 0 is skipped
  without its dependents being issued, and a time under 1 ns trips EventQueue::proceed's assertion. So every
  compute node (a wait too) carries num_ops >= 1 and tensor_size >= 1 chosen so that the run's own roofline
  (--peak-tflops, --mem-bw) times it at the op's time, and at least 1 ns (astra_work); where they differ from the
  op's FLOPs and bytes, those are kept in `astra_flops` / `astra_bytes`. Roofline off, ASTRA-sim replays
  duration_micros (0 is 1 ns): the op's time, rounded to the microsecond.
- COMM_SEND_NODE / COMM_RECV_NODE: comm_src, comm_dst, comm_size and comm_tag, which ASTRA-sim reads with no
  default (without it the sends are dropped and no rank finishes). The k-th message from a rank to a peer is
  tagged TAG_BASE + k on both ends; ASTRA-sim's analytical backends match a receive to its send by (tag, source,
  destination, size), and the base keeps the tags apart from its collectives' own message tags (stream numbers).
- COMM_COLL_NODE: pg_name is a comm_group.json id, a number from 1 (ASTRA-sim converts it with stoi; 0 or none is
  every rank); `pg_desc` keeps the group's name (dp, tp), which ASTRA-sim ignores; involved_dim names every
  dimension. ASTRA-sim 518bd51 replays a broadcast for its duration_micros (it has no broadcast algorithm) and
  refuses a reduce: a reduce is written as such a broadcast with `astra_comm_type` REDUCE.
"""
from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np

from ...network.dtypes import CODE as DTYPE_CODE, DEFAULT as DEFAULT_DTYPE
from ...network.errors import UserError
from ...network.kinds import ROOTED
from ...network.units import format_size, gbps_to_bytes_per_ns
from ...runtime.workload_engine import Roofline
from ..frontend.chakra import (COMM_TYPES, NODE_TYPES, SUFFIX, TENSOR_LOCATIONS, add_attr, delimited, group_labels,
                               schema, varint)
from ..frontend.workload import COLLECTIVE, COMPUTE, LOAD, RECV, SEND, STORE, WAIT, Op, Workload

VERSION = "0.0.4"          # the schema version written (ASTRA-sim 2.x reads 0.0.4)
COMM_GROUP_FILE = "comm_group.json"
TAG_BASE = 1 << 30         # comm_tag of a rank's first message to a peer (an int32 in ASTRA-sim's network API)
_TYPE_OF = {"all_reduce": "ALL_REDUCE", "reduce": "BROADCAST", "all_gather": "ALL_GATHER", "broadcast": "BROADCAST",
            "all_to_all": "ALL_TO_ALL", "reduce_scatter": "REDUCE_SCATTER"}
_ATTR_FIELD = b"\x52"      # Node.attr: field 10, length-delimited


def write(workload: Workload, topology, out_dir: str, force: bool = False, prefix: str = "trace",
          roofline: Roofline | None = None, collective_ns=None) -> int:
    """The workload as Chakra ETs, `<prefix>.<rank>.et` per rank, and comm_group.json, into `out_dir` (written
    whole or not at all). `roofline` is the run's (compute nodes time at it in ASTRA-sim as here);
    `collective_ns(op, group)` the time of a collective on a group (a broadcast's replayed duration; None: 0).
    Each rank's file is built and written in turn from its program's nodes encoded once; the directory's size is
    estimated from the first rank of each program and refused when the disk has less room. Returns the number of
    trace files."""
    from ...runtime import atomic
    writer = _Writer(workload, topology, roofline or Roofline(), collective_ns)

    def fill(tmp: str) -> None:
        writer.check_room(tmp, out_dir)
        for rank in range(workload.world_size):
            with open(os.path.join(tmp, f"{prefix}.{rank}{SUFFIX}"), "wb") as f:
                f.write(writer.file(rank))
        with open(os.path.join(tmp, COMM_GROUP_FILE), "w", encoding="utf-8") as f:
            json.dump(writer.groups.table(), f)

    atomic.write_dir(out_dir, fill, _not_ours, force, "Chakra traces")
    return workload.world_size


def one_collective(meta, topology) -> Workload:
    """A compiled collective (runtime Meta) as a one-op workload: every rank runs it on its group."""
    first = meta.collectives[0]
    coords = topology.coords_array()
    outside = [d for d in range(topology.ndims) if d not in meta.buffer_dims(first.buffer)]
    group0 = tuple(int(r) for r in np.flatnonzero(np.all(coords[:, outside] == 0, axis=1)))
    kind = first.buffer_kind
    op = Op(kind, COLLECTIVE, [], bytes=first.bytes, collective=kind, group=group0, group_name="g",
            root=first.root if first.root is not None else -1)
    return Workload(topology.npus, {0: [op]}, source="collective", spmd=True)


def astra_work(flops: int, nbytes: int, time_ns: float, measured: bool, roofline: Roofline) -> tuple[int, int]:
    """(num_ops, tensor_size) that ASTRA-sim's roofline, set to `roofline`, times at `time_ns`, and at least 1 ns:
    the op's own FLOPs and bytes (at least 1 each), or for a measured time 1 FLOP and the bytes memory moves in
    it; the bytes raised where the time would truncate to 0 ns."""
    per_ns = gbps_to_bytes_per_ns(roofline.mem_gbps)
    if measured:
        ops, size = 1, max(1, round(time_ns * per_ns))
    else:
        ops, size = max(flops, 1), max(nbytes, 1)
    if _astra_ns(ops, size, roofline) < 1:
        size = max(size, math.ceil(1.001 * per_ns))
    return ops, size


def _astra_ns(num_ops: int, tensor_size: int, roofline: Roofline) -> int:
    """ASTRA-sim's time of a COMP_NODE under its roofline (Workload::issue_comp, Roofline::get_perf), whole ns,
    for a system file whose peak-perf is --peak-tflops and local-mem-bw --mem-bw in decimal GB/s."""
    peak, bandwidth = roofline.peak_tflops * 1e12, roofline.mem_gbps * 2 ** 30
    perf = min(bandwidth * (num_ops / tensor_size), peak)
    return int(num_ops / perf * 1e9)


def _not_ours(path: str) -> str | None:
    names = os.listdir(path)
    foreign = [n for n in names if not (n.endswith(SUFFIX) or n == COMM_GROUP_FILE)]
    return f"it holds files astra-compile did not write ({sorted(foreign)[0]})" if foreign else None


class _Groups:
    """comm_group.json's process groups: an id per distinct group of ranks, numbered from 1. An SPMD program's
    group is its own rank's; rank r runs the group of the same shape through r (the same dimensions, and on a
    dimension the group covers in part, the same block of consecutive members or the same residue), found for
    every rank at once by labelling the ranks by their coordinates outside the group."""

    def __init__(self, topology):
        self.topology = topology
        self.ids: dict = {}        # group of ranks (tuple) -> its id
        self.shapes: dict = {}     # id(group0) -> (group0, rank labels, ranks by label, label -> id)

    def of(self, group: tuple) -> str:
        gid = self.ids.get(group)
        if gid is None:
            gid = self.ids[group] = str(len(self.ids) + 1)
        return gid

    def through(self, group0: tuple, rank: int) -> str:
        """The id of the group of group0's shape that holds `rank`."""
        shape = self.shapes.get(id(group0))
        if shape is None:
            shape = self.shapes[id(group0)] = (group0, *group_labels(self.topology, group0), {})
        _, labels, members, ids = shape
        label = int(labels[rank])
        gid = ids.get(label)
        if gid is None:
            gid = ids[label] = self.of(tuple(int(r) for r in members[label]))
        return gid

    def table(self) -> dict:
        return {gid: list(group) for group, gid in self.ids.items()}


class _Writer:
    """Every rank's file from its program: the nodes that are the same on every rank running the program are
    encoded once (a run of them is one block of bytes); a collective's process-group id and a message's ends and
    tag, which depend on the rank, are added to the node as attributes of their own."""

    def __init__(self, workload: Workload, topology, roofline: Roofline, collective_ns):
        self.workload, self.topology, self.roofline = workload, topology, roofline
        self.collective_ns = collective_ns or (lambda op, group: 0.0)
        self.groups = _Groups(topology)
        self.stands = _stands_for(workload)
        self.runs = {rank: (p, place) for p, ranks in self.stands.items() for place, rank in enumerate(ranks)}
        if sorted(self.runs) != list(range(workload.world_size)):
            raise UserError(f"--emit chakra: the workload's programs run ranks {sorted(self.runs)[:8]}..., not each "
                            f"of the {workload.world_size} ranks once")
        self.encoded: dict = {}     # program -> its blocks: bytes, or (op index, node bytes) of a rank-bound node
        self.pg: dict = {}          # group id -> its pg_name attribute, encoded
        self.header = delimited(schema()[0](version=VERSION))

    def check_room(self, tmp: str, out_dir: str) -> None:
        """Refuse, before writing, a directory the disk has no room for (its size: each program's first rank's
        file times the ranks running it)."""
        total = sum(len(self.file(ranks[0])) * len(ranks) for ranks in self.stands.values())
        total += sum(len(ranks) for ranks in self.stands.values()) * 8 * 2   # comm_group.json, about
        free = shutil.disk_usage(tmp).free
        if total > free:
            raise UserError(f"--emit chakra: {self.workload.world_size} traces of about {format_size(total)} in all, "
                            f"more than the {format_size(free)} free where {out_dir} goes")

    def file(self, rank: int) -> bytes:
        p, place = self.runs[rank]
        blocks = self.encoded.get(p)
        if blocks is None:
            blocks = self.encoded[p] = self._encode(self.workload.programs[p])
        ops = self.workload.programs[p]
        out = [self.header]
        sent: dict = {}   # (kind, peer) -> messages so far
        for block in blocks:
            if isinstance(block, bytes):
                out.append(block)
                continue
            i, fixed = block
            op = ops[i]
            if op.kind == COLLECTIVE:
                gid = self.groups.through(op.group, rank) if self.workload.spmd else self.groups.of(op.group)
                extra = self.pg.get(gid)
                if extra is None:
                    extra = self.pg[gid] = _attribute("pg_name", gid)
            else:
                peer = self._peer(op, p, place)
                k = sent.get((op.kind, peer), 0)
                sent[op.kind, peer] = k + 1
                src, dst = (rank, peer) if op.kind == SEND else (peer, rank)
                extra = _attribute("comm_src", src) + _attribute("comm_dst", dst) + \
                    _attribute("comm_tag", TAG_BASE + k)
            out.append(varint(len(fixed) + len(extra)) + fixed + extra)
        return b"".join(out)

    def _peer(self, op: Op, p: int, place: int) -> int:
        if not self.workload.spmd:
            return op.peer
        peers = self.stands.get(op.peer)
        if peers is None or len(peers) != len(self.stands[p]) or len(self.stands) == 1:
            raise UserError(f"--emit chakra: {op.name} of rank {p}'s program {op.kind}s "
                            f"{'to' if op.kind == SEND else 'from'} rank {op.peer}, which no stage of as many ranks "
                            "runs: its peer on every other rank cannot be told")
        return peers[place]

    def _encode(self, ops: list) -> list:
        """A program's nodes (node id = op index + 1) as blocks: runs of whole nodes, and the rank-bound ones
        (collectives, messages) without their rank's attributes."""
        _, Node = schema()
        blocks: list = []
        run = bytearray()
        for i, (op, ctrl) in enumerate(zip(ops, _stream_deps(ops))):
            node = Node(id=i + 1, name=op.name)
            node.data_deps.extend(d + 1 for d in op.deps)
            node.ctrl_deps.extend(ctrl)
            for key, value in self._attributes(op, node).items():
                add_attr(node, key, value)
            if op.kind in (COLLECTIVE, SEND, RECV):
                if run:
                    blocks.append(bytes(run))
                    run = bytearray()
                blocks.append((i, node.SerializeToString()))
            else:
                run += delimited(node)
        if run:
            blocks.append(bytes(run))
        return blocks

    def _attributes(self, op: Op, node) -> dict:
        """The node's type (set on `node`) and its attributes but for the rank-bound ones."""
        if op.kind in (COMPUTE, WAIT):
            node.type = NODE_TYPES.index("COMP_NODE")
            measured = op.kind == COMPUTE and op.measured_ns >= 0
            time_ns = op.measured_ns if measured else \
                float(self.roofline.time_ns(np.float64(op.flops), np.float64(op.bytes),
                                            np.int8(DTYPE_CODE[op.dtype])))
            num_ops, size = astra_work(op.flops, op.bytes, time_ns, measured, self.roofline)
            node.duration_micros = int(round(time_ns / 1e3))
            attrs = {"is_cpu_op": False, "num_ops": num_ops, "tensor_size": size}
            if num_ops != op.flops:
                attrs["astra_flops"] = op.flops
            if size != op.bytes:
                attrs["astra_bytes"] = op.bytes
            if measured:
                attrs["astra_measured_ns"] = float(op.measured_ns)
            if op.kind == COMPUTE and op.dtype != DEFAULT_DTYPE:
                attrs["astra_dtype"] = op.dtype
            if op.kind == COMPUTE and op.shapes:
                attrs["astra_shapes"] = op.shapes
            if op.kind == COMPUTE and op.causal:
                attrs["astra_causal"] = True
            if op.kind == COMPUTE and op.views:
                attrs["astra_views"] = op.views
        elif op.kind in (LOAD, STORE):
            node.type = NODE_TYPES.index("MEM_LOAD_NODE" if op.kind == LOAD else "MEM_STORE_NODE")
            attrs = {"is_cpu_op": False, "tensor_size": max(op.bytes, 1),
                     "tensor_loc": next(k for k, v in TENSOR_LOCATIONS.items() if v == op.location)}
            if op.bytes < 1:
                attrs["astra_bytes"] = op.bytes
            if op.in_switch > 1:
                attrs["astra_in_switch"] = op.in_switch
        elif op.kind == COLLECTIVE:
            node.type = NODE_TYPES.index("COMM_COLL_NODE")
            group = tuple(op.group)
            size = op.bytes
            if op.collective == "all_gather":   # Chakra: each rank's input
                if size % len(group):
                    raise UserError(f"--emit chakra: all-gather {op.name} of {size} bytes over {len(group)} ranks: "
                                    "Chakra's per-rank input size is not a whole number of bytes")
                size //= len(group)
            attrs = {"is_cpu_op": False, "comm_type": COMM_TYPES.index(_TYPE_OF[op.collective]), "comm_size": size,
                     "pg_desc": op.group_name, "involved_dim": [True] * self.topology.ndims}
            if op.collective in ROOTED:
                attrs["comm_root"] = op.root
                node.duration_micros = int(round(self.collective_ns(op, group) / 1e3))
            if op.collective == "reduce":
                attrs["astra_comm_type"] = "REDUCE"
        else:
            node.type = NODE_TYPES.index("COMM_SEND_NODE" if op.kind == SEND else "COMM_RECV_NODE")
            attrs = {"is_cpu_op": False, "comm_size": op.bytes}
        if op.phase:
            attrs["astra_phase"] = op.phase
        if op.iteration >= 0:
            attrs["astra_iteration"] = op.iteration
        return attrs


def _stream_deps(ops: list) -> list[list[int]]:
    """Each op's ctrl_deps (node ids): the engine's stream rules, which ASTRA-sim has not. A compute op (or wait)
    comes after the previous one; a collective after the previous op of its process group and the compute issued
    before it; a message after the previous message to or from the same peer in the same direction, and the
    compute before it; a load or store waits for its data only (its memory serves the first ready)."""
    last: dict = {}   # stream -> latest node id; the compute stream is "compute"
    out = []
    for i, op in enumerate(ops):
        if op.kind in (COMPUTE, WAIT):
            stream = "compute"
        elif op.kind in (LOAD, STORE):
            stream = None
        elif op.kind == COLLECTIVE:
            stream = ("group", op.group)
        else:
            stream = (op.kind, op.peer)
        ctrl = []
        if stream is not None:
            if stream in last:
                ctrl.append(last[stream])
            if stream != "compute" and "compute" in last:
                ctrl.append(last["compute"])
            last[stream] = i + 1
        out.append([d for d in dict.fromkeys(ctrl) if d - 1 not in op.deps])
    return out


def _stands_for(workload: Workload) -> dict:
    """program rank -> the ranks running it, in order (a pipeline stage's ranks: a message goes to the rank at
    the same place in the peer's stage, as pipeline.plan lays every stage's ranks out alike)."""
    if not workload.spmd:
        return {rank: [rank] for rank in sorted(workload.programs)}
    stands = {p: sorted(r) for p, r in workload.stands_for.items()} or \
        {p: list(range(workload.world_size)) for p in workload.programs}
    if len(stands) != len(workload.programs) or set(stands) != set(workload.programs):
        raise UserError("--emit chakra: an SPMD capture whose programs do not each say which ranks run them")
    return stands


def _attribute(name: str, value) -> bytes:
    """One AttributeProto as a Node's field 10, ready to append to an encoded node."""
    _, Node = schema()
    node = Node()
    add_attr(node, name, value)
    raw = node.attr[0].SerializeToString()
    return _ATTR_FIELD + varint(len(raw)) + raw

