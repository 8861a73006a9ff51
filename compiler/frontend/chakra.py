"""Chakra execution traces (the protobuf ETs ASTRA-sim 2.x runs) in: one `<prefix>.<rank>.et` per rank (the schema
and framing here are chakra_write.py's too, which writes them).

A file is a sequence of protobuf messages, each preceded by its length as a varint: one GlobalMetadata (the
schema version), then the Nodes. The schema is written here from the published format (mlcommons/chakra
et_def.proto: message and field names and numbers) with protobuf's descriptor API; no generated code is used.

Nodes become the workload's ops (frontend/workload.py):
- COMP_NODE on the GPU: compute with `num_ops` FLOPs and `tensor_size` bytes (the roofline's inputs), or, without
  FLOPs, its `duration_micros` as a measured time; `is_cpu_op` nodes and METADATA / storage nodes run nothing
  here and pass their dependencies on. What --emit chakra wrote for ASTRA-sim alone gives way to its own
  attributes: `astra_flops` and `astra_bytes` (the op's FLOPs and bytes), `astra_measured_ns`, `astra_dtype` (the
  dtype it computed in, network/dtypes.py; absent: fp32), `astra_shapes` (its tensor arguments' sizes,
  network/op_classes.format_shapes; absent: not known), `astra_causal` (true: an attention op that masked
  causally, network/compute_model.attention_factor; absent: not), `astra_views` (the kernel-less ops the host
  dispatched before it; absent: 0);
- MEM_LOAD_NODE / MEM_STORE_NODE: a load / store of `tensor_size` bytes in local memory or the remote pool
  (`tensor_loc` 1 or 2, ASTRA-sim's LOCAL_MEMORY / REMOTE_MEMORY; absent: local), docs/memory.md; written back
  with `astra_in_switch` when the pool's switches gather it;
- COMM_COLL_NODE: the collective of `comm_type` (or `astra_comm_type`) with `comm_size` bytes over the process
  group `pg_name` (its ranks from comm_group.json beside the traces, ASTRA-sim's comm-group file; without one, or 0,
  every rank), named `pg_desc` where the trace gives one (dp, tp), else by its pg_name. Chakra gives an
  all-gather's size as each rank's input: the gathered buffer is comm_size x the group's size. A barrier is the
  all-reduce of one 4-byte element (what NCCL runs); gather and scatter are refused;
- COMM_SEND_NODE / COMM_RECV_NODE: a message of `comm_size` bytes to `comm_dst` / from `comm_src`.
Dependencies are ctrl_deps and data_deps together; the nodes run in a dependency order.
"""
from __future__ import annotations

import hashlib
import heapq
import math
import os
import re
from array import array
from functools import lru_cache

import numpy as np

from ...network.dtypes import DEFAULT as DEFAULT_DTYPE, DTYPES
from ...network.errors import UserError
from ...network.kinds import ROOTED
from ...network.op_classes import MAX_VIEWS, is_shapes, is_views
from ...network.user_files import read_bytes, read_json
from ...network.units import MAX_BYTES
from .trace_memory import step_programs, trace_nodes
from .workload import COLLECTIVE, COMPUTE, LOAD, RECV, SEND, STORE, Op, Workload

SUFFIX = ".et"
MAX_FILE_BYTES = 1 << 30
NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
              "COMM_RECV_NODE", "COMM_COLL_NODE", "STORAGE_NODE", "BATCH_NODE", "CHECKPOINT_NODE")
COMM_TYPES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL", "REDUCE_SCATTER",
              "REDUCE_SCATTER_BLOCK", "BARRIER")
KINDS = {"ALL_REDUCE": "all_reduce", "REDUCE": "reduce", "ALL_GATHER": "all_gather", "BROADCAST": "broadcast",
         "ALL_TO_ALL": "all_to_all", "REDUCE_SCATTER": "reduce_scatter", "REDUCE_SCATTER_BLOCK": "reduce_scatter",
         "BARRIER": "all_reduce"}
TENSOR_LOCATIONS = {1: "local", 2: "remote"}   # Chakra's tensor_loc values modelled here
_RANK = re.compile(r"^(.*)\.(\d+)\.et$")
# AttributeProto's oneof `value`: (field name, number, scalar type) for scalars; each list type is number + 1
_SCALARS = (("double", 3, "DOUBLE"), ("float", 5, "FLOAT"), ("int32", 7, "INT32"), ("int64", 9, "INT64"),
            ("uint32", 11, "UINT32"), ("uint64", 13, "UINT64"), ("sint32", 15, "SINT32"), ("sint64", 17, "SINT64"),
            ("fixed32", 19, "FIXED32"), ("fixed64", 21, "FIXED64"), ("sfixed32", 23, "SFIXED32"),
            ("sfixed64", 25, "SFIXED64"), ("bool", 27, "BOOL"), ("string", 29, "STRING"), ("bytes", 31, "BYTES"))


@lru_cache(maxsize=1)
def schema():
    """(GlobalMetadata, Node) message classes of the Chakra ET schema (package ChakraProtoMsg)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="astra_compile/chakra_et.proto", package="ChakraProtoMsg",
                                           syntax="proto3")

    def field(msg, name, number, kind, repeated=False, type_name=None, oneof=None):
        fd = msg.field.add(name=name, number=number, type=getattr(F, f"TYPE_{kind}"),
                           label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
        if type_name:
            fd.type_name = f".ChakraProtoMsg.{type_name}"
        if oneof is not None:
            fd.oneof_index = oneof

    def list_name(word):
        return {"uint32": "Uint32", "uint64": "Uint64", "sint32": "Sint32", "sint64": "Sint64",
                "sfixed32": "Sfixed32", "sfixed64": "Sfixed64"}.get(word, word.capitalize()) + "List"

    for word, _, kind in _SCALARS:
        field(f.message_type.add(name=list_name(word)), "values", 1, kind, repeated=True)
    attr = f.message_type.add(name="AttributeProto")
    field(attr, "name", 1, "STRING")
    field(attr, "doc_string", 2, "STRING")
    attr.oneof_decl.add(name="value")
    for word, number, kind in _SCALARS:
        field(attr, f"{word}_val", number, kind, oneof=0)
        field(attr, f"{word}_list", number + 1, "MESSAGE", type_name=list_name(word), oneof=0)
    meta = f.message_type.add(name="GlobalMetadata")
    field(meta, "version", 1, "STRING")
    field(meta, "attr", 2, "MESSAGE", repeated=True, type_name="AttributeProto")
    for name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COMM_TYPES)):
        enum = f.enum_type.add(name=name)
        for number, value in enumerate(values):
            enum.value.add(name=value, number=number)
    io = f.message_type.add(name="IOInfo")
    for number, name in enumerate(("values", "shapes", "types"), 1):
        field(io, name, number, "STRING")
    node = f.message_type.add(name="Node")
    field(node, "id", 1, "UINT64")
    field(node, "name", 2, "STRING")
    field(node, "type", 3, "ENUM", type_name="NodeType")
    field(node, "ctrl_deps", 4, "UINT64", repeated=True)
    field(node, "data_deps", 5, "UINT64", repeated=True)
    field(node, "start_time_micros", 6, "UINT64")
    field(node, "duration_micros", 7, "UINT64")
    field(node, "inputs", 8, "MESSAGE", type_name="IOInfo")
    field(node, "outputs", 9, "MESSAGE", type_name="IOInfo")
    field(node, "attr", 10, "MESSAGE", repeated=True, type_name="AttributeProto")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = message_factory.GetMessageClass
    return get(pool.FindMessageTypeByName("ChakraProtoMsg.GlobalMetadata")), \
        get(pool.FindMessageTypeByName("ChakraProtoMsg.Node"))


def _count(data: bytes) -> int:
    """How many length-delimited messages a file holds (a frame that does not fit ends the count: messages()
    names it), without making them."""
    pos, n, end = 0, 0, len(data)
    while pos < end:
        length, shift = 0, 0
        while pos < end and data[pos] & 0x80 and shift < 64:
            length |= (data[pos] & 0x7F) << shift
            shift += 7
            pos += 1
        if pos >= end:
            break
        length |= data[pos] << shift
        pos += 1 + length
        n += 1
    return n


def messages(path: str, data: bytes):
    """(byte offset, message bytes) of each length-delimited message of a file."""
    pos = 0
    while pos < len(data):
        start, length, shift = pos, 0, 0
        while True:
            if pos >= len(data) or shift > 63:
                raise UserError(f"{path}: truncated or not a Chakra trace (a length prefix at byte {start} does not "
                                "end)")
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + length > len(data):
            raise UserError(f"{path}: truncated: the message at byte {start} needs {length} bytes, {len(data) - pos} "
                            "remain")
        yield start, data[pos:pos + length]
        pos += length


def is_chakra(paths: list[str]) -> bool:
    return bool(paths) and all(p.endswith(SUFFIX) for p in paths)


def trace_files(directory: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except OSError as e:
        raise UserError(f"cannot read {directory}: {e.strerror}") from None
    return [os.path.join(directory, n) for n in names]


class _Program:
    """One distinct trace's ops (ranks whose files are alike share it), with what the checks across ranks need:
    each op's node id, and per process group its collectives' (kind, bytes, root) in order. Groups are keyed
    by the identity of their tuple: the reader gives every use of one group the same tuple."""

    def __init__(self, path: str, ops: list, nodes: list):
        self.path, self.ops, self.nodes = path, ops, nodes
        self.calls: dict = {}     # id(group) -> indices of its collectives in ops
        for i, op in enumerate(ops):
            if op.kind == COLLECTIVE:
                self.calls.setdefault(id(op.group), []).append(i)
        self.signature = {g: tuple((ops[i].collective, ops[i].bytes, ops[i].root) for i in idx)
                          for g, idx in self.calls.items()}
        self.members = sum(len(self.group(g)) for g in self.calls)   # ranks of the groups it names

    def group(self, key: int) -> tuple:
        return self.ops[self.calls[key][0]].group


class _Reading:
    """The traces of one load: each rank's file and (shared) program, and where an op of a rank came from."""

    def __init__(self, ranked: dict, groups: dict, max_memory: int | None = None):
        self.ranked, self.groups, self.max_memory = ranked, groups, max_memory
        self.kept = 0              # ops of the distinct programs read so far
        self.world = len(ranked)
        self.everyone = tuple(range(self.world))
        self.programs: dict = {}   # rank -> _Program
        self.members: dict = {}    # id(group) -> its ranks as a set

    def read(self) -> None:
        """Every rank's file; a file whose bytes equal an earlier one's (or do up to its node ids, where no node
        depends on another) is parsed once."""
        seen: dict = {}          # digest of a file (or of its nodes without their ids) -> its _Program
        for rank in range(self.world):
            path = self.ranked[rank]
            data = read_bytes(path, "Chakra trace ", MAX_FILE_BYTES)
            digest = hashlib.blake2b(data, digest_size=20).digest()
            program = seen.get(digest)
            if program is None:
                program = seen[digest] = self._parse(path, data, seen)
            self.programs[rank] = program
            self._check_member(rank)

    def _parse(self, path: str, data: bytes, seen: dict) -> _Program:
        """A file's program, or that of an earlier file alike but for its node ids (its Node objects are let go
        before the next file's are made)."""
        trace_nodes(_count(data), self.kept, path).check(self.max_memory)
        nodes, alias = _nodes(path, data)
        program = seen.get(alias) if alias is not None else None
        if program is None:
            program = _Program(path, *_ops(path, self.world, self.groups, self.everyone, nodes))
            self.kept += len(program.ops)
            if alias is not None:
                seen[alias] = program
        return program

    def at(self, rank: int, i: int) -> str:
        """Op `i` of rank `rank` as its file and node. Files alike up to their node ids share a program: such a
        file's own node (the i-th of its nodes that runs something: none depends on another) is read again."""
        program, path = self.programs[rank], self.ranked[rank]
        ids = program.nodes
        if path != program.path:
            nodes, _ = _nodes(path, read_bytes(path, "Chakra trace ", MAX_FILE_BYTES))
            ids = _ops(path, self.world, self.groups, self.everyone, nodes)[1]
        return f"{path}: node {ids[i]} ({program.ops[i].name})"

    def _check_member(self, rank: int) -> None:
        """Every process group rank `rank` runs a collective on holds it."""
        program = self.programs[rank]
        for key, idx in program.calls.items():
            ranks = self.members.get(key)
            if ranks is None:
                ranks = self.members[key] = frozenset(program.group(key))
            if rank not in ranks:
                raise UserError(f"{self.at(rank, idx[0])}: rank {rank} is not a member of process group "
                                f"{program.ops[idx[0]].group_name!r} {_show(program.group(key))}")

    def check_agreement(self) -> None:
        """The members of each process group run the same collectives on it, in the same order: kind, bytes,
        root."""
        first: dict = {}   # id(group) -> its first member rank
        for rank in range(self.world):
            program = self.programs[rank]
            for key in program.calls:
                ref = first.setdefault(key, rank)
                if self.programs[ref] is not program and self.programs[ref].signature[key] != program.signature[key]:
                    self._disagreement(key, ref, rank)
        for key, ref_rank in first.items():
            ref = self.programs[ref_rank]
            for member in ref.group(key):
                if key not in self.programs[member].calls:
                    i = ref.calls[key][0]
                    raise UserError(f"Chakra ranks disagree on process group {ref.ops[i].group_name!r} "
                                    f"{_show(ref.group(key))}: {self.at(ref_rank, i)} is {_call(ref.ops[i])} on it; "
                                    f"{self.ranked[member]} (rank {member}) runs no collective on it")

    def _disagreement(self, key: int, ra: int, rb: int):
        a, b = self.programs[ra], self.programs[rb]
        sa, sb = a.signature[key], b.signature[key]
        k = next((k for k, (x, y) in enumerate(zip(sa, sb)) if x != y), min(len(sa), len(sb)))
        ia, ib = a.calls[key], b.calls[key]
        name, group = a.ops[ia[0]].group_name, a.group(key)
        if k == len(sa) or k == len(sb):
            extra = self.at(ra, ia[k]) if k < len(sa) else self.at(rb, ib[k])
            raise UserError(f"Chakra ranks disagree on process group {name!r} {_show(group)}: {self.ranked[ra]} "
                            f"runs {len(sa)} collectives on it, {self.ranked[rb]} {len(sb)}; {extra} is the first "
                            "without a partner")
        raise UserError(f"Chakra ranks disagree on collective {k + 1} of process group {name!r} {_show(group)}: "
                        f"{self.at(ra, ia[k])} is {_call(a.ops[ia[k]])}, {self.at(rb, ib[k])} is "
                        f"{_call(b.ops[ib[k]])}")


def load(paths: list[str], world_size: int | None = None, topology=None, max_memory: int | None = None) -> Workload:
    """One `<prefix>.<rank>.et` per rank, ranks 0..n-1, and an optional comm_group.json beside them. Given the
    topology, ranks that run the same ops, each on its own group of one shape (as_spmd), become one SPMD program
    standing for every rank, as a capture is: the step then compiles and runs one program, not one per rank."""
    ranked = _ranked(paths)
    if world_size is not None and world_size != len(ranked):
        raise UserError(f"{len(ranked)} Chakra traces, but the topology has {world_size} NPUs")
    reading = _Reading(ranked, _comm_groups(os.path.dirname(paths[0]), len(ranked)), max_memory)
    reading.read()
    reading.check_agreement()
    source = ", ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
    spmd = topology is not None and as_spmd(reading.programs, topology)
    lowered = [reading.programs[0]] if spmd else list(reading.programs.values())
    step_programs(sum(len(p.ops) for p in lowered), sum(p.members for p in lowered), len(lowered)).check(max_memory)
    if spmd:
        return Workload(reading.world, {0: reading.programs[0].ops}, source=source, spmd=True)
    return Workload(reading.world, {rank: p.ops for rank, p in reading.programs.items()}, source=source)


def as_spmd(programs: dict, topology) -> bool:
    """Whether rank 0's program stands for every rank's: every rank runs the same ops (a root at the same place in
    its group), no messages (an SPMD program has no partner for them), and each collective on the group of rank 0's
    group's shape through the rank (the same dimensions; on a dimension covered in part the same block or residue:
    group_labels), which is how an SPMD step runs its groups (core/step_keys.group_span)."""
    first = programs[0]
    if any(op.kind in (SEND, RECV) for op in first.ops):
        return False
    distinct = {id(p): p for p in programs.values()}
    shape = _shape(first.ops)
    if any(p is not first and _shape(p.ops) != shape for p in distinct.values()):
        return False
    labelled: dict = {}   # id(group0) -> (labels, members by label); None where it does not map onto the topology
    checked = set()
    for p in distinct.values():
        for key, idx in p.calls.items():
            for i in idx:
                group0, group = first.ops[i].group, p.ops[i].group
                if (id(group0), key) in checked:
                    continue
                if id(group0) not in labelled:
                    try:
                        labelled[id(group0)] = group_labels(topology, group0)
                    except UserError:   # the step names the group that does not map
                        labelled[id(group0)] = None
                if labelled[id(group0)] is None:
                    return False
                labels, members = labelled[id(group0)]
                at = labels[list(group)]
                if (at != at[0]).any() or len(members[int(at[0])]) != len(group):
                    return False
                checked.add((id(group0), key))
    return True


def _shape(ops: list) -> list:
    """What must agree for one program to stand for another: every field but the group's ranks and name (a root
    by its place in its group)."""
    return [(op.name, op.kind, tuple(op.deps), op.flops, op.bytes, op.collective, len(op.group),
             op.group.index(op.root) if op.root >= 0 else -1, op.peer, op.phase, op.iteration, op.measured_ns,
             op.location, op.in_switch) for op in ops]


def group_labels(topology, group0: tuple):
    """(a label per NPU, the NPUs of each label): the groups of group0's shape, one through each NPU (the same
    dimensions; on a dimension group0 covers in part, the same block of consecutive members or the same residue),
    each NPU labelled by its coordinates outside the group. UserError where group0 does not map onto the topology
    (core/step_keys.group_span)."""
    from ..core.step_keys import group_span
    n = topology.npus
    if len(group0) <= 1:
        return np.arange(n), [np.array([r]) for r in range(n)]
    dims, parts = group_span(topology, group0)
    coords = topology.coords_array()
    columns = [coords[:, d] for d in range(topology.ndims) if d not in dims]
    for d, (members, stride) in parts.items():
        columns.append(coords[:, d] // members if stride == 1 else coords[:, d] % stride)
    if not columns:
        return np.zeros(n, dtype=np.int64), [np.arange(n)]
    _, labels = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    labels = labels.reshape(-1)
    order = np.argsort(labels, kind="stable")
    return labels, np.split(order, np.flatnonzero(np.diff(labels[order])) + 1)


def _ranked(paths: list[str]) -> dict:
    """rank -> its file, every rank 0..n-1 once."""
    ranked = {}
    for p in paths:
        m = _RANK.match(os.path.basename(p))
        if not m:
            raise UserError(f"{p}: a Chakra trace is named <prefix>.<rank>.et (as ASTRA-sim reads them)")
        rank = int(m.group(2))
        if rank in ranked:
            raise UserError(f"{p}: rank {rank} is given twice ({ranked[rank]})")
        ranked[rank] = p
    world = len(ranked)
    if sorted(ranked) != list(range(world)):
        missing = min(set(range(max(ranked) + 1)) - set(ranked))
        raise UserError(f"{os.path.dirname(paths[0]) or '.'}: the trace of rank {missing} is missing "
                        f"({world} .et files, ranks up to {max(ranked)})")
    return ranked


def _without_id(raw: bytes) -> bytes:
    """A node's message with its id left out (an encoder writes field 1 first: tag 0x08 and a varint), prefixed by
    its length: what a digest of a file's nodes takes, for traces alike but for their node ids (Chakra's
    microbenchmark numbers its one node by rank)."""
    pos = 0
    if raw[:1] == b"\x08":
        pos = 1
        while pos < len(raw) and raw[pos] & 0x80:
            pos += 1
        pos += 1
    return len(raw).to_bytes(8, "little") + raw[pos:]


def _call(op) -> str:
    root = f" rooted at rank {op.root}" if op.root >= 0 else ""
    return f"{op.collective} of {op.bytes} bytes{root}"


def _show(ranks) -> str:
    return "[" + ",".join(map(str, ranks[:8])) + (",...]" if len(ranks) > 8 else "]")


def _comm_groups(directory: str, world: int) -> dict:
    """comm_group.json ({"id": [ranks]} or {"id": {"ranks": [...]}}), or {} when there is none."""
    path = os.path.join(directory or ".", "comm_group.json")
    if not os.path.exists(path):
        return {}
    data = read_json(path, "a JSON object of process groups", "comm-group file ")
    if not isinstance(data, dict):
        raise UserError(f"{path}: a comm-group file maps group ids to rank lists, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        ranks = value.get("ranks") if isinstance(value, dict) else value
        if not isinstance(ranks, list) or not ranks or not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world for r in ranks):
            raise UserError(f"{path}: group {key!r} must list ranks 0..{world - 1}, got {_short(ranks)}")
        out[str(key)] = tuple(sorted(set(ranks)))
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _attrs(node) -> dict:
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        if which is not None:
            value = getattr(a, which)
            out[a.name] = list(value.values) if which.endswith("_list") else value
    return out


def _where(path: str, node) -> str:
    return f"{path}: node {node.id}" + (f" ({node.name})" if node.name else "")


def _int(path, node, attrs, key, default=0) -> int:
    """A whole, non-negative number attribute (a size, a count, a rank), or one line naming the file, the node and
    the field."""
    value = attrs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or \
            (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise UserError(f"{_where(path, node)}: {key} must be a whole number of at least 0, got {_short(value)}")
    return int(value)


def _at_most(path, node, key: str, nbytes: int) -> int:
    """A message's, collective's or memory move's bytes, at most the largest collective the IR takes."""
    if nbytes > MAX_BYTES:
        raise UserError(f"{_where(path, node)}: {key} gives {nbytes} bytes, more than the largest message, "
                        f"collective or memory move astra-compile takes ({MAX_BYTES} bytes, 1TiB)")
    return nbytes


def _bytes(path, node, attrs) -> int:
    """A compute or memory node's bytes: its own (astra_bytes, where --emit chakra gave ASTRA-sim another
    tensor_size), else tensor_size."""
    return _int(path, node, attrs, "astra_bytes" if "astra_bytes" in attrs else "tensor_size")


def _nodes(path: str, data: bytes) -> tuple[dict, bytes | None]:
    """({node id: Node} in file order, a digest of its nodes without their ids where no node depends on another,
    else None) of one file, its metadata checked."""
    GlobalMetadata, Node = schema()
    from google.protobuf.message import DecodeError
    parts = messages(path, data)
    first = next(parts, None)
    if first is None:
        raise UserError(f"{path}: empty: a Chakra trace starts with its GlobalMetadata")
    try:
        meta = GlobalMetadata.FromString(first[1])
    except DecodeError:
        raise UserError(f"{path}: its first message is not Chakra's GlobalMetadata") from None
    if not meta.version.startswith("0.0."):
        raise UserError(f"{path}: Chakra schema version {_short(meta.version)}; this reads 0.0.x (as ASTRA-sim "
                        "2.x)")
    nodes, alias = {}, hashlib.blake2b(b"ids left out", digest_size=20)
    for offset, raw in parts:
        try:
            node = Node.FromString(raw)
        except DecodeError:
            raise UserError(f"{path}: the message at byte {offset} is not a Chakra node") from None
        if node.id in nodes:
            raise UserError(f"{path}: node id {node.id} appears twice")
        nodes[node.id] = node
        if alias is not None:
            alias = None if node.data_deps or node.ctrl_deps else alias
        if alias is not None:
            alias.update(_without_id(raw))
    return nodes, alias.digest() if alias is not None else None


def _ops(path, world, groups, everyone, nodes: dict) -> tuple[list[Op], array]:
    """The file's ops in a dependency order, and each op's node id."""
    deps = {i: list(dict.fromkeys(list(n.data_deps) + list(n.ctrl_deps))) for i, n in nodes.items()}
    for i, ds in deps.items():
        for d in ds:
            if d not in nodes:
                raise UserError(f"{_where(path, nodes[i])} depends on node {d}, which the trace does not hold")
    order = _dependency_order(path, nodes, deps)
    ops: list[Op] = []
    ids = array("Q")
    index: dict = {}        # node id -> its op's index, or the op indices a skipped node passes on
    for i in order:
        node, attrs = nodes[i], _attrs(nodes[i])
        before = sorted({j for d in deps[i] for j in index[d]})
        kind = NODE_TYPES[node.type] if 0 <= node.type < len(NODE_TYPES) else "INVALID_NODE"
        op = None
        if kind == "COMP_NODE" and not attrs.get("is_cpu_op", False):
            # written by --emit chakra (chakra_write.py): the op's own FLOPs and bytes where ASTRA-sim's roofline
            # needed others, and a profiler's time to the nanosecond; its duration is then only for ASTRA-sim
            ours = "astra_flops" in attrs or "astra_measured_ns" in attrs
            flops = _int(path, node, attrs, "astra_flops" if "astra_flops" in attrs else "num_ops")
            measured = float(node.duration_micros) * 1e3 if not flops and node.duration_micros and not ours else -1.0
            if "astra_measured_ns" in attrs:
                measured = attrs["astra_measured_ns"]
                if not isinstance(measured, float) or not 0 <= measured < 1e18:
                    raise UserError(f"{_where(path, node)}: astra_measured_ns {_short(measured)} is not a time")
            dtype = attrs.get("astra_dtype", DEFAULT_DTYPE)
            if dtype not in DTYPES:
                raise UserError(f"{_where(path, node)}: astra_dtype {_short(dtype)} is not one of {', '.join(DTYPES)}")
            shapes = attrs.get("astra_shapes", "")
            if not is_shapes(shapes):
                raise UserError(f"{_where(path, node)}: astra_shapes {_short(shapes)} is not an op's tensor shapes "
                                "(\"64x4096,4096x4096\": docs/workloads.md)")
            causal = attrs.get("astra_causal", False)
            if not isinstance(causal, bool):
                raise UserError(f"{_where(path, node)}: astra_causal {_short(causal)} is not true or false")
            views = attrs.get("astra_views", 0)
            if not is_views(views):
                raise UserError(f"{_where(path, node)}: astra_views {_short(views)} is not a whole number "
                                f"0..{MAX_VIEWS}")
            op = Op(node.name or "compute", COMPUTE, before, flops=flops, bytes=_bytes(path, node, attrs),
                    measured_ns=measured, dtype=dtype, shapes=shapes, causal=causal, views=views)
        elif kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):   # ASTRA-sim's tensor_loc: 1 local, 2 remote memory
            loc = _int(path, node, attrs, "tensor_loc", 1)
            if loc not in TENSOR_LOCATIONS:
                raise UserError(f"{_where(path, node)}: tensor_loc {loc} is not 1 (local) or 2 (remote memory); "
                                "CXL and storage memories are not modelled")
            group = _int(path, node, attrs, "astra_in_switch", 1)
            if group > 1 and loc != 2 or group > world:
                raise UserError(f"{_where(path, node)}: astra_in_switch {group} needs a remote tensor and at most "
                                f"{world} GPUs")
            op = Op(node.name or kind.lower(), LOAD if kind == "MEM_LOAD_NODE" else STORE, before,
                    bytes=_at_most(path, node, "tensor_size", _bytes(path, node, attrs)),
                    location=TENSOR_LOCATIONS[loc],
                    in_switch=group if group > 1 else 0)
        elif kind == "COMM_COLL_NODE":
            op = _collective(path, node, attrs, before, world, groups, everyone)
        elif kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
            key = "comm_dst" if kind == "COMM_SEND_NODE" else "comm_src"
            peer = _int(path, node, attrs, key, -1) if key in attrs else -1
            if not 0 <= peer < world:
                raise UserError(f"{_where(path, node)}: {key} {_short(attrs.get(key))} is not a rank "
                                f"0..{world - 1}")
            op = Op(node.name or kind.lower(), SEND if kind == "COMM_SEND_NODE" else RECV, before,
                    bytes=_at_most(path, node, "comm_size", _int(path, node, attrs, "comm_size")), peer=peer)
        elif kind == "INVALID_NODE":
            raise UserError(f"{_where(path, node)} has node type {node.type}, not one of Chakra's")
        if op is not None:
            op.phase = str(attrs.get("astra_phase", ""))
            op.iteration = _int(path, node, attrs, "astra_iteration", -1) if "astra_iteration" in attrs else -1
        if op is None:   # runs nothing here: its dependencies pass on
            index[i] = before
        else:
            index[i] = [len(ops)]
            ops.append(op)
            ids.append(node.id)
    return ops, ids


def _collective(path, node, attrs, before, world, groups, everyone) -> Op:
    if "astra_comm_type" in attrs:   # --emit chakra: a reduce, written as a broadcast ASTRA-sim replays
        name = str(attrs["astra_comm_type"])
        if name not in COMM_TYPES:
            raise UserError(f"{_where(path, node)}: astra_comm_type {_short(name)} is not a Chakra collective type")
    else:
        ctype = _int(path, node, attrs, "comm_type")
        name = COMM_TYPES[ctype] if ctype < len(COMM_TYPES) else str(ctype)
    if name not in KINDS:
        why = "gather and scatter have no schedule here" if name in COMM_TYPES else "not a Chakra collective type"
        raise UserError(f"{_where(path, node)}: comm_type {name} is not supported ({why})")
    pg = str(attrs.get("pg_name", ""))
    if pg and pg not in groups and pg != "0":
        raise UserError(f"{_where(path, node)}: process group {_short(pg)} is not in comm_group.json beside the "
                        "traces")
    group = groups[pg] if pg in groups else everyone   # as ASTRA-sim: no pg_name, or 0, is every rank
    nbytes = 4 if name == "BARRIER" else _int(path, node, attrs, "comm_size")
    if name == "ALL_GATHER":
        nbytes *= len(group)   # Chakra: each rank's input; here: the gathered buffer
    if nbytes <= 0:
        raise UserError(f"{_where(path, node)}: comm_size must be positive, got {_short(attrs.get('comm_size'))}")
    _at_most(path, node, "comm_size", nbytes)
    kind = KINDS[name]
    root = _int(path, node, attrs, "comm_root", group[0]) if kind in ROOTED else -1
    if root >= 0 and root not in group:
        raise UserError(f"{_where(path, node)}: comm_root {root} is not a member of process group {_short(pg)} "
                        f"{_show(group)}")
    desc = str(attrs.get("pg_desc", ""))   # the group's name (--emit chakra writes dp, tp there)
    return Op(node.name or kind, COLLECTIVE, before, bytes=nbytes, collective=kind, group=group,
              group_name=desc or pg or "world", root=root)


def _dependency_order(path, nodes: dict, deps: dict) -> list:
    """Node ids in an order where each comes after its dependencies (ties: file order)."""
    waiting = {i: len(ds) for i, ds in deps.items()}
    users: dict = {}
    for i, ds in deps.items():
        for d in ds:
            users.setdefault(d, []).append(i)
    position = {i: k for k, i in enumerate(nodes)}
    ready = [(position[i], i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (position[u], u))
    if len(order) != len(nodes):
        stuck = min((i for i in nodes if waiting[i] > 0), key=position.get)
        raise UserError(f"{path}: node {stuck} depends, through other nodes, on itself (a dependency cycle)")
    return order


def add_attr(node, name: str, value) -> None:
    """An attribute on a node, typed by its Python value: bool, str, float (double), a list of bools, else int64."""
    a = node.attr.add(name=name)
    if isinstance(value, bool):
        a.bool_val = value
    elif isinstance(value, str):
        a.string_val = value
    elif isinstance(value, float):
        a.double_val = value
    elif isinstance(value, list):
        a.bool_list.values.extend(value)
    else:
        a.int64_val = int(value)


def delimited(message) -> bytes:
    """The message preceded by its length as a varint (how a Chakra file frames each message)."""
    raw = message.SerializeToString()
    return varint(len(raw)) + raw


def varint(n: int) -> bytes:
    """A non-negative number as protobuf's base-128 varint."""
    head = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        head.append(b | (0x80 if n else 0))
        if not n:
            return bytes(head)
