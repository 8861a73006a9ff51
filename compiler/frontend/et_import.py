"""PyTorch execution traces (torch.profiler.ExecutionTraceObserver JSON) -> Workload.

    load_traces(["trace_rank0.json", ..., "trace_rank3.json"])     one program per rank
    load_traces(["trace_rank0.json"], world_size=64)                one file standing for every rank (spmd)

What torch 2.15 records (schema "1.1.1-chakra.0.0.4"): a flat list of nodes {id, name, ctrl_deps (the enclosing
node), inputs/outputs {values, shapes, types}, attrs [rf_id, scope, tid, op_schema, ...]}. A tensor value is
[tensor_id, storage_id, offset, numel, elem_bytes, device]. There is no rank in the file, and the ProcessGroup
argument of a c10d op is written as "<Object>": the trace does not say which group a c10d collective ran on. What
it does record is one "## process_group:init ##" node whose input is the JSON of every process group
(pg_name, pg_desc, ranks, group_size; ranks [] means every rank), the `group_name` argument of functional
collectives (_c10d_functional::*) and, on NCCL only, `record_param_comms` children carrying the group's name.

How the trace becomes ops:
- Each outermost operator call becomes one op; the operator calls nested inside it are its implementation
  (aten::linear -> t, addmm -> expand, copy_), and record_function ranges (module/autograd/optimizer labels) are
  only containers. A call that CUDA runs as the calls nested in it (gpu_composites.RUN_AS_CHILDREN: an
  out-of-place masked_fill, logsumexp) is a container too: its nested calls are the ops, as a capture has them;
  softmax's backward (RUN_WITH_CHILDREN) is an op and so is the multiply nested in it.
  Collectives and waits nested inside a compute op (DTensor dispatch) are still taken out.
- Compute: flops from torch.utils.flop_counter's registry, called on meta tensors rebuilt from the recorded shapes;
  an op on DTensors (a "PythonSubclass" node under it, its shapes global) counts the FLOPs and bytes of the
  calls DTensor made under that node on this rank's shards;
  an op without a formula counts the formulas of the calls nested in it (linear -> addmm). bytes = input + output
  tensors, 0 for ops that only make views (every output shares storage with an input and nothing is written) and
  for allocations (empty*), an embedding lookup its gathered rows (op_bytes.py, the capture's rule too). A call
  that only makes a view stays an op of its own (its host time that of any op), so `Op.views` stays 0 here.
- Collectives, full-buffer bytes (docs/workloads.md): all_reduce the buffer, all_gather the gathered output,
  reduce_scatter the input before scattering, all_to_all the input. Collectives the comm dialect has no op for
  are mapped only when one of its collectives computes a superset of the result on the same buffer:
  barrier -> all_reduce of its one-element tensor (what NCCL runs for a barrier). A broadcast or a reduce keeps
  its root (the group-local root rank argument, made global through the group's ranks).
  Point-to-point: c10d::send(tensors, pg, dst, tag) and recv_(tensors, pg, src, tag) become SEND / RECV ops
  with the peer's global rank. The peer argument is group-local and gloo does not record the group, so the
  group is the recorded one (NCCL), else the one of this rank's groups under which the peer's own trace posts the
  matching op back (a pipeline's stages message each other on the pp axis's group), else (a single SPMD file)
  the default group. Rooted gather/scatter and recv from any source raise UserError naming the op.
  _c10d_functional::wait_tensor becomes a WAIT op.
- Copies between the host and the accelerator (aten::_to_copy / to / copy_ whose source is on the CPU and
  destination on a device, or the reverse: what cudaMemcpy HtoD / DtoH does) become LOAD / STORE ops of the
  remote memory (the host memory, --pool; docs/memory.md); copies within one side stay compute.
- Process group of a collective: the recorded group name if there is one; else the recorded groups that contain
  the rank, narrowed for all_gather/reduce_scatter by the gathered/scattered size ratio (= group size); if still
  several, one file per rank is matched across ranks (the members of a group issue its collectives in the same
  order, with the same kind and size; among several fitting groups the largest wins), and a single SPMD file
  takes the largest (the world). On a device mesh (gloo records no group for c10d collectives, NCCL does) two
  preferences come first, because every rank issues the same collectives and matching cannot tell the axes
  apart: a group of the mesh (pg_desc "mesh_*") over the default group, since DDP(device_mesh=) and
  fully_shard(mesh=) issue theirs on a mesh axis; and a group that no functional collective names over one that
  does, since the groups DTensor names are its tensor-parallel axes, while FSDP2 and DDP use the others.
  Limitations: symmetric c10d collectives on a subgroup whose peers issue identical collectives at the same time
  (Megatron-style tensor parallelism written with dist.all_reduce) are attributed to the largest fitting group;
  an HSDP all-reduce over the replicate axis is told from the shard axis only when their sizes differ (the
  larger wins); functional collectives (DTensor, DeviceMesh) and NCCL traces carry their group.
- Phase of an op (forward, backward, optimizer): from the ranges enclosing it; what autograd's hooks issue after
  the first backward op and before the optimizer starts counts as backward (_Builder.phase).
- Iteration of an op, for a trace of several: torch.profiler's ProfilerStep#N ranges, else one iteration per
  optimizer step (_Builder.iterations); `--iteration N` keeps one, the report times each.
- Dependencies: an op depends on the last earlier op that wrote a storage it reads (issue order = node id).
  Outputs count as written, plus arguments the schema marks as mutated, plus the buffer of a c10d collective.
- Measured compute: a torch.profiler (Kineto) trace given with the execution trace of its rank gives each
  operator call its measured time (kineto.py); the workload engine then uses it instead of the roofline. The
  profiler's nesting decides what a time holds (_Builder.measure): each measured call counts once, in the op
  it is filed under; a call the execution trace lacks altogether is warned of (_lost_calls).
- World: the job's recorded ranks; on a topology with more NPUs it runs as recorded on the first ones, or with
  --mesh dp=N its default group re-targeted to all of them (trace_world.py).
- Rank of a file: a top-level "rank" key if present (torch 2.15 writes none), else its name: "rank<N>", "_r<N>"
  or a trailing "-<N>.json" / "_<N>.json". Never the order of the arguments (a shell sorts trace10 before
  trace2): a file whose rank cannot be told, a rank claimed twice or a file given twice is refused.
"""
from __future__ import annotations

import bisect
import json
import os
import re
import warnings
from collections import defaultdict
from pathlib import Path

from ...dialects.comm import ROOTED
from ...network.errors import InputWarning, UserError
from ...network.op_classes import format_shapes
from .gpu_composites import RUN_AS_CHILDREN, RUN_WITH_CHILDREN
from .kineto import Kineto, as_execution_trace, is_kineto, read_kineto
from .op_bytes import moved_bytes, only_aliases
from .op_causal import causal
from .op_dtype import compute_dtype
from .trace_world import on_topology
from .workload import COLLECTIVE, COMPUTE, LOAD, RECV, SEND, STORE, WAIT, Op, Workload

OUT = "out"  # "the op's recorded outputs" in the tables below

# short name -> (collective, where the full buffer is, where the per-rank part is): an input index or OUT.
# The part (all_gather input, reduce_scatter output) gives the group size as full / part.
_C10D = {
    "allreduce_": ("all_reduce", 0, None),
    "allreduce_coalesced_": ("all_reduce", 0, None),
    "broadcast_": ("broadcast", 0, None),
    "reduce_": ("reduce", 0, None),
    "barrier": ("all_reduce", 0, None),
    "monitored_barrier_": ("all_reduce", 0, None),
    "allgather_": ("all_gather", 0, 1),
    "_allgather_base_": ("all_gather", 0, 1),
    "allgather_coalesced_": ("all_gather", 0, 1),
    "allgather_into_tensor_coalesced_": ("all_gather", 0, 1),
    "reduce_scatter_": ("reduce_scatter", 1, 0),
    "_reduce_scatter_base_": ("reduce_scatter", 1, 0),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1, 0),
    "alltoall_": ("all_to_all", 1, None),
    "alltoall_base_": ("all_to_all", 1, None),
}
_FUNCTIONAL = {
    "all_reduce": ("all_reduce", 0, None),
    "all_reduce_": ("all_reduce", 0, None),
    "all_reduce_coalesced": ("all_reduce", 0, None),
    "all_reduce_coalesced_": ("all_reduce", 0, None),
    "broadcast": ("broadcast", 0, None),
    "broadcast_": ("broadcast", 0, None),
    "all_gather_into_tensor": ("all_gather", OUT, 0),
    "all_gather_into_tensor_out": ("all_gather", OUT, 0),
    "all_gather_into_tensor_coalesced": ("all_gather", OUT, 0),
    "reduce_scatter_tensor": ("reduce_scatter", 0, OUT),
    "reduce_scatter_tensor_out": ("reduce_scatter", 0, OUT),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 0, OUT),
    "all_to_all_single": ("all_to_all", 0, None),
}
_P2P = {"send": SEND, "recv_": RECV}   # c10d::send(tensors, pg, dst, tag), c10d::recv_(tensors, pg, src, tag)
_COMM_NS = ("c10d", "_c10d_functional", "_c10d_functional_autograd")
_DTYPES = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
           "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
           "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
           "unsigned char": "uint8", "bool": "bool"}
# where a file name says its rank: trace_rank3.json, trace-rank_3.json, et_r3.json, trace-3.json, trace_3.json
_RANK_IN_NAME = (re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE),
                 re.compile(r"(?:^|[-_.])r(\d+)(?=[-_.]|$)", re.IGNORECASE),
                 re.compile(r"[-_](\d+)\.json$", re.IGNORECASE))


def load_traces(paths: list[str], world_size: int | None = None, mesh: dict[str, int] | None = None) -> Workload:
    """One ExecutionTraceObserver file per rank, or one file for every rank (spmd); see the module notes.
    `world_size`: the topology's NPUs, as many as the recorded job's ranks or more; `mesh` ({"dp": world_size})
    re-targets the recorded default group to all of them (trace_world.py)."""
    if not paths:
        raise UserError("no execution trace given")
    seen: dict[str, str] = {}
    for p in paths:  # the same file twice would stand for two ranks
        real = os.path.realpath(str(p))
        if real in seen:
            raise UserError(f"{p}: given twice" + (f" (as {seen[real]})" if seen[real] != str(p) else "") +
                            ": give each rank's trace once")
        seen[real] = str(p)
    files = [(str(p), _read(str(p))) for p in paths]
    profiles = [read_kineto(p, data) for p, data in files if is_kineto(data)]
    traces = [_Trace(p, data) for p, data in files if not is_kineto(data)]
    spans = {}   # profiler traces alone: per trace, node id -> (start, end) ns of what it did
    if not traces:
        for p, data in files:
            trace, spans[p] = as_execution_trace(p, data)
            traces.append(_Trace(p, trace))
    spmd = len(traces) == 1
    world = _world_size(traces, world_size, spmd)
    ranks = _ranks(traces, world, spmd)
    _attach_profiles(traces, ranks, profiles, spmd)
    for trace, rank in zip(traces, ranks):
        trace.build(rank, world)
        if trace.path in spans:
            _happens_before(trace, spans[trace.path])
        elif trace.profile is not None:
            _lost_calls(trace)
    _resolve_groups(traces, spmd)
    _resolve_peers(traces)
    recorded = Workload(world_size=world, programs={t.rank: t.ops for t in traces},
                        source=", ".join(t.path for t in traces), spmd=spmd)
    return on_topology(recorded, world_size, mesh)


# ---------------------------------------------------------------------------------------------- files, ranks


def _read(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: " + ("not a file" if p.exists() else "no such file"))
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise UserError(f"{path}: cannot read it ({e.strerror})") from None
    if not text.strip():
        raise UserError(f"{path}: empty file, not an execution trace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if is_kineto(data):
        return data
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise UserError(f"{path}: not a PyTorch ExecutionTraceObserver trace (no 'nodes' list)")
    if not data["nodes"]:
        raise UserError(f"{path}: the execution trace has no nodes")
    first = data["nodes"][0]
    if not isinstance(first, dict) or not isinstance(first.get("inputs"), dict):
        raise UserError(f"{path}: unsupported execution-trace format (schema {data.get('schema', '?')}; "
                        "expected torch's 1.1 schema or newer)")
    return data


class _Trace:
    """One file: its nodes, what it says about process groups, and (after build) its ops."""

    def __init__(self, path: str, data: dict):
        self.path = path
        self.data = data
        self.measured_ns: dict[int, float] = {}   # record-function id -> measured time (a Kineto trace's)
        self.profile: Kineto | None = None         # the Kineto trace given with this execution trace
        self.mesh_groups: set[str] = set()   # groups a device mesh made (pg_desc "mesh_<axis>")
        self.groups, self.world_group = self._process_groups()
        self.named_groups: set[str] = set()  # groups that functional (DTensor) collectives name
        self.rank = -1
        self.ops: list[Op] = []
        self.pending: list[tuple[int, list[str]]] = []  # (op index, candidate group names) to resolve
        self.roots: dict[int, int] = {}  # op index of a broadcast -> its group-local root rank
        self.messages: list[tuple[int, int, list[str]]] = []   # (op index, group-local peer, candidate groups)
        self.op_nodes: list[int] = []    # the node each op came from

    def fail(self, problem: str):
        raise UserError(f"{self.path}: {problem}")

    def _process_groups(self) -> tuple[dict[str, list[int] | None], str]:
        # pg name -> its ranks (None: every rank); the default group is the world
        for node in self.data["nodes"]:
            if isinstance(node, dict) and node.get("name") == "## process_group:init ##":
                try:
                    configs = json.loads(node["inputs"]["values"][0])
                    groups = {str(c["pg_name"]): (_rank_list(c["ranks"]) or None, _count(c["group_size"]))
                              for c in configs}
                    self.mesh_groups = {str(c["pg_name"]) for c in configs
                                        if str(c.get("pg_desc", "")).startswith("mesh_")}
                except (KeyError, IndexError, TypeError, ValueError):
                    self.fail(f"unreadable process-group record in node {node.get('id')}")
                # the default group (ranks []) spans the world
                world = [n for n, (ranks, _) in groups.items() if ranks is None] or ["0"]
                self.world_size = groups[world[0]][1] if world[0] in groups else None
                return {n: ranks for n, (ranks, _) in groups.items()}, world[0]
        self.world_size = None
        return {}, "0"

    def rank_hint(self) -> int | None:
        rank = self.data.get("rank")
        if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 2**31:
            return rank
        return _rank_in_name(self.path)

    def build(self, rank: int, world: int):
        self.rank, self.world = rank, world
        try:
            _Builder(self, world).run()
        except UserError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            # a node that does not have the shape torch writes: name the file, never a traceback
            self.fail(f"malformed execution trace ({type(e).__name__}: {e})".replace("\n", " "))


def _count(value) -> int:
    """A rank or group size of a process-group record: an integer in 32 bits (JSON may hold 1e400, 2**64, "4")."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise ValueError(f"{value!r} is not a rank or group size")
    return value


def _rank_list(value) -> list[int]:
    if not isinstance(value, list):
        raise TypeError(f"ranks must be a list, got {value!r}")
    return [_count(r) for r in value]


def _world_size(traces: list[_Trace], asked: int | None, spmd: bool) -> int:
    recorded = {t.world_size for t in traces if t.world_size is not None}
    if len(recorded) > 1:
        a, b = (next(t for t in traces if t.world_size == w) for w in sorted(recorded)[:2])
        raise UserError(f"{b.path}: records world size {b.world_size} but {a.path} records {a.world_size}")
    recorded_world = recorded.pop() if recorded else None
    if asked is not None and asked < 1:
        raise UserError(f"world size must be at least 1, got {asked}")
    if asked is not None and recorded_world is not None and asked < recorded_world:
        raise UserError(f"{traces[0].path}: the trace records world size {recorded_world}: it runs on a topology of "
                        f"{recorded_world} NPUs or more, not {asked}")
    if spmd:
        if asked or recorded_world:
            return recorded_world or asked
        if not any(str(n.get("name")).startswith(_COMM_NS) for n in traces[0].data["nodes"] if isinstance(n, dict)):
            return 1  # a single-process trace without collectives
        raise UserError(f"{traces[0].path}: the trace does not record the world size; pass world_size")
    world = recorded_world or len(traces)   # the job's own; a larger topology is trace_world.on_topology's
    if world != len(traces):
        raise UserError(f"{len(traces)} trace files for world size {world}: give one file per rank, "
                        "or one file that stands for every rank")
    return world


def _attach_profiles(traces: list[_Trace], ranks: list[int], profiles: list[Kineto], spmd: bool) -> None:
    """Each Kineto trace gives its measured times to the execution trace of its rank."""
    if spmd and len(profiles) == 1:
        traces[0].measured_ns, traces[0].profile = profiles[0].measured_ns, profiles[0]
        return
    by_rank = dict(zip(ranks, traces))
    claimed: dict[int, str] = {}
    for k in profiles:
        rank = k.rank if k.rank is not None else _rank_in_name(k.path)
        if rank is None or rank not in by_rank:
            raise UserError(f"{k.path}: a profiler trace of " + (f"rank {rank}, which has no execution trace given"
                                                                 if rank is not None else "an unknown rank") +
                            ": give each rank's ExecutionTraceObserver and profiler traces together")
        if rank in claimed:
            raise UserError(f"two profiler traces claim rank {rank}: {claimed[rank]}, {k.path}")
        claimed[rank] = k.path
        by_rank[rank].measured_ns, by_rank[rank].profile = k.measured_ns, k


def _lost_calls(t: _Trace) -> None:
    """Warn of the outermost calls the profiler measured that the execution trace lacks: under gloo's threads the
    observer loses a call now and then (a DDP bucket's unflatten, its copies), and its time would leave the
    step unsaid."""
    have = {_attr(n, "rf_id") for n in t.data["nodes"] if isinstance(n, dict)}
    lost = [ns for rf, ns in t.measured_ns.items() if rf not in t.profile.nested_in and rf not in have]
    if lost:
        warnings.warn(f"{t.profile.path}: the profiler measured {len(lost)} operator call(s) ({sum(lost) / 1e3:.3f} "
                      f"us) that the execution trace {t.path} lacks (its observer lost them): the step leaves them "
                      "out", InputWarning, stacklevel=2)


def _rank_in_name(path: str) -> int | None:
    name = Path(path).name
    for pattern in _RANK_IN_NAME:
        m = pattern.search(name)
        if m and len(m.group(1)) < 10:
            return int(m.group(1))
    return None


def _ranks(traces: list[_Trace], world: int, spmd: bool) -> list[int]:
    hints = [t.rank_hint() for t in traces]
    if spmd:
        return [hints[0] if hints[0] is not None and hints[0] < world else 0]
    for t, h in zip(traces, hints):
        if h is None:  # never the order of the arguments: a shell sorts trace10 before trace2
            raise UserError(f"{t.path}: cannot tell its rank: name each trace file with its rank (trace_rank3.json, "
                            "trace_r3.json or trace-3.json) or record a top-level \"rank\"")
        if h >= world:
            raise UserError(f"{t.path}: rank {h} is outside world size {world}")
    if len(set(hints)) != len(hints):
        dup = next(h for h in hints if hints.count(h) > 1)
        raise UserError(f"two trace files claim rank {dup}: "
                        + ", ".join(t.path for t, h in zip(traces, hints) if h == dup))
    return hints


# ---------------------------------------------------------------------------------------------- nodes -> ops


def _well_formed(n) -> bool:
    return (isinstance(n, dict) and isinstance(n.get("id"), int) and isinstance(n.get("name"), str)
            and isinstance(n.get("ctrl_deps"), int)
            and all(isinstance(n.get(side), dict) and all(isinstance(n[side].get(k), list)
                                                         for k in ("values", "shapes", "types"))
                    for side in ("inputs", "outputs")))


def _attr(node: dict, key: str):
    for a in node.get("attrs") or ():
        if a.get("name") == key:
            return a.get("value")
    return None


def _is_tensor(v) -> bool:
    return (isinstance(v, list) and len(v) == 6 and isinstance(v[5], str)
            and all(isinstance(x, int) for x in v[:5]))


def _tensors(v):
    """The tensor tuples inside a recorded value (a tensor, or nested lists of them)."""
    if _is_tensor(v):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from _tensors(x)


_COPIES = ("_to_copy", "to", "copy_")


def _device_class(device) -> str | None:
    """"host" (the CPU), "accelerator" (cuda:0, xpu, ...) or None (meta, or not recorded)."""
    device = str(device)
    if device.startswith("cpu"):
        return "host"
    return None if device in ("", "meta") or device.startswith("meta") else "accelerator"


def host_copy(node: dict) -> tuple | None:
    """(LOAD, destination values) for an aten copy from the host to the accelerator (cudaMemcpy HtoD: a
    `.to("cuda")`, a `copy_` into a device tensor), (STORE, destination) for one back, else None."""
    ns, _, short = node["name"].partition("::")
    if ns != "aten" or short not in _COPIES:
        return None
    ins, outs = node["inputs"]["values"], node["outputs"]["values"]
    src, dst = (ins[1:2], ins[:1]) if short == "copy_" else (ins[:1], outs)
    s, d = ({_device_class(t[5]) for t in _tensors(v)} for v in (src, dst))
    if s == {"host"} and d == {"accelerator"}:
        return LOAD, dst
    if s == {"accelerator"} and d == {"host"}:
        return STORE, dst
    return None


MAX_TENSOR_BYTES = 1 << 40   # 1 TiB: past it a recorded tensor is damage, and the IR's sizes would overflow


def _tensor_like(v) -> bool:
    """A recorded value shaped as a tensor tuple [tensor_id, storage_id, offset, numel, elem_bytes, device],
    whatever its numel and element size hold (_Builder.nbytes checks them)."""
    return (isinstance(v, list) and len(v) == 6 and isinstance(v[5], str)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v[:3]))


def _tensor_likes(v):
    if _tensor_like(v):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from _tensor_likes(x)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _storages(v) -> set:
    return {(t[1], t[5]) for t in _tensors(v)}


_schema_cache: dict[str, object] = {}


def _schema(node: dict):
    """The parsed op schema (argument names, kwarg-only, alias/mutation annotations), or None."""
    text = _attr(node, "op_schema")
    if not text:
        return None
    if text not in _schema_cache:
        import torch
        try:
            _schema_cache[text] = torch._C.parse_schema(text)
        except RuntimeError:  # schemas naming script classes (c10d ProcessGroup) may not parse
            _schema_cache[text] = None
    return _schema_cache[text]


_OBSERVER_ROOTS = "[pytorch|profiler|execution_trace|"   # its process and thread nodes: "...|process]", "...|thread]"


class _Builder:
    def __init__(self, trace: _Trace, world: int):
        self.trace, self.world = trace, world
        nodes = trace.data["nodes"]
        for i, n in enumerate(nodes):
            if not _well_formed(n):
                trace.fail(f"malformed node #{i} (id {n.get('id') if isinstance(n, dict) else '?'}): expected id, "
                           "name, ctrl_deps, inputs/outputs with values, shapes and types")
        self.nodes = sorted(nodes, key=lambda n: n["id"])
        self.byid = {n["id"]: n for n in self.nodes}
        written = {n["id"]: i for i, n in enumerate(nodes)}  # the observer writes a call when it ends
        self.parent = {n["id"]: self._caller(n, written) for n in self.nodes}
        self.children = defaultdict(list)
        for n in self.nodes:
            if self.parent[n["id"]] is not None:
                self.children[self.parent[n["id"]]["id"]].append(n)
        # calls CUDA runs as the calls nested in them (runs_as_children): id -> True, or False where the call's own
        # kernel runs too; a call with nothing nested (a trace that recorded no children) is none
        self.composite: dict[int, bool] = {}
        for n in self.nodes:
            if self.children[n["id"]]:
                name = _op_name(n).rsplit(".", 1)[0]
                if name in RUN_AS_CHILDREN or name in RUN_WITH_CHILDREN:
                    self.composite[n["id"]] = name in RUN_AS_CHILDREN
        self.last_writer: dict = {}

    def _caller(self, node: dict, written: dict) -> dict | None:
        """The node `node` ran inside. ctrl_deps says, except after an asynchronous collective: its backend's
        record (gloo:all_reduce) starts on the calling thread and ends on a worker thread, popping the observer's
        stack of the wrong thread, so calls made after the collective returned are filed under it, or under
        whatever call the wrong pop left on top (an aten::mm that had ended: the call would be taken for part of
        it). A call is written when it ends, so a parent written before the node did not enclose it: its own
        caller is taken instead. The observer's process and thread nodes alone are written when the trace starts."""
        parent, seen = self.byid.get(node.get("ctrl_deps")), {node["id"]}
        while (parent is not None and parent["id"] not in seen and not parent["name"].startswith(_OBSERVER_ROOTS)
               and written[parent["id"]] < written[node["id"]]):
            seen.add(parent["id"])
            parent = self.byid.get(parent.get("ctrl_deps"))
        return None if parent is None or parent["id"] == node["id"] else parent

    # what a node is
    @staticmethod
    def kind(node: dict) -> str | None:
        name = node["name"]
        ns, _, short = name.partition("::")
        if ns in _COMM_NS:
            return WAIT if short == "wait_tensor" else COLLECTIVE
        schema = _attr(node, "op_schema")
        if ns == "profiler":  # record_function bookkeeping ops
            return None
        if schema or (schema is None and ns == "aten"):
            return COMPUTE
        return None

    def runs_as_children(self, node: dict, too: bool = False) -> bool:
        """A call CUDA runs as the calls nested in it (gpu_composites.RUN_AS_CHILDREN: an out-of-place masked_fill
        is a clone and a masked_fill_, logsumexp an amax, a sub, an exp_, ...): those are the ops, not the call, as
        a capture records them. `too`: or one whose nested calls are ops beside its own (RUN_WITH_CHILDREN:
        softmax's backward multiplies first). A call with nothing nested (a trace that recorded no children) stays
        one op."""
        whole = self.composite.get(node["id"])
        return whole is True or too and whole is False

    def last_nested(self, node: dict) -> int:
        """The id of the last call nested in `node`, at any depth (the nodes run in id order)."""
        last, stack, seen = node["id"], list(self.children[node["id"]]), {node["id"]}
        while stack:
            n = stack.pop()
            if n["id"] not in seen:
                seen.add(n["id"])
                last = max(last, n["id"])
                stack.extend(self.children[n["id"]])
        return last

    def enclosing(self) -> dict[int, tuple[bool, bool]]:
        """node id -> (inside an operator call, inside a collective/wait), following callers upwards."""
        memo: dict[int, tuple[bool, bool]] = {}
        for start in self.nodes:
            path, on_path, n = [], set(), start
            while n["id"] not in memo:
                path.append(n)
                on_path.add(n["id"])
                parent = self.parent[n["id"]]
                if parent is None or parent["id"] in on_path:  # a root (or a broken cycle)
                    memo[n["id"]] = (False, False)
                    path.pop()
                    break
                n = parent
            for child in reversed(path):
                parent = self.parent[child["id"]]
                in_op, in_comm = memo[parent["id"]]
                kind = self.kind(parent)
                around = kind is not None and not (kind == COMPUTE and self.runs_as_children(parent, too=True))
                memo[child["id"]] = (in_op or around, in_comm or kind in (COLLECTIVE, WAIT))
        return memo

    def run(self):
        inside = self.enclosing()
        calls = [n for n in self.nodes if self.kind(n) is not None]
        self.ranged = {n["id"]: self.range_phase(n) for n in calls}
        self.iteration = self.iterations(calls)
        self.backward_spans = self.backward_runs(calls)
        # a call whose nested calls run before its own kernel (RUN_WITH_CHILDREN) goes after the last of them
        after: dict[int, list] = defaultdict(list)
        for node in self.nodes:
            kind = self.kind(node)
            in_op, in_comm = inside[node["id"]]
            if kind == COMPUTE and not in_op and self.runs_as_children(node, too=True) \
                    and not self.runs_as_children(node):
                after[self.last_nested(node)].append(node)
            elif kind == COMPUTE and not in_op and not self.runs_as_children(node):
                move = host_copy(node)
                self.add(node, *(self.memory(node, *move) if move else self.compute(node)))
            elif kind in (COLLECTIVE, WAIT) and not in_comm:
                self.add(node, *self.comm(node, kind))
            for waiting in after.pop(node["id"], ()):
                self.add(waiting, *self.compute(waiting))
        if self.trace.measured_ns:
            self.measure()

    def enclosing_range(self, node: dict, prefixes: tuple) -> str | None:
        """The name of the innermost range (or call) around `node`, itself included, starting with a prefix."""
        seen, n = set(), node
        while n is not None and n["id"] not in seen:
            seen.add(n["id"])
            if n["name"].startswith(prefixes):
                return n["name"]
            n = self.parent[n["id"]]
        return None

    def range_phase(self, node: dict) -> str | None:
        """"backward" inside one of autograd's evaluate_function ranges, "optimizer" inside torch.optim's
        "Optimizer.*" ranges, else None."""
        found = self.enclosing_range(node, ("autograd::engine::evaluate_function", "Optimizer."))
        return None if found is None else "optimizer" if found.startswith("Optimizer.") else "backward"

    def iterations(self, calls: list[dict]) -> dict[int, int]:
        """node id -> training iteration, for a trace of several (else empty): torch.profiler's ProfilerStep#N
        marks when the trace has them, else the optimizer steps: an iteration ends with its optimizer step, and
        what follows the last step without a backward pass of its own belongs to the last iteration."""
        # ProfilerStep#N ranges start at each prof.step(); the trace's nesting of them is not reliable (a step's
        # range may appear inside the previous one), so a call belongs to the last one started before it
        marks = [(n["id"], n["name"][len("ProfilerStep#"):]) for n in self.nodes
                 if n["name"].startswith("ProfilerStep#")]
        marks = [(i, int(k)) for i, k in marks if k.isdigit() and len(k) < 10]
        if len({k for _, k in marks}) > 1:
            starts = [i for i, _ in marks]
            out = {}
            for n in calls:
                at = bisect.bisect_right(starts, n["id"]) - 1
                if at >= 0:
                    out[n["id"]] = marks[at][1]
            return out
        ends, previous, last = [], None, None   # the last call of each run of optimizer calls
        for n in calls:
            here = self.ranged[n["id"]]
            if previous == "optimizer" and here != "optimizer":
                ends.append(last)
            previous, last = here, n["id"]
        if ends and not any(p == "backward" and i > ends[-1] for i, p in self.ranged.items()):
            ends.pop()   # trailing calls after the last step: part of the last iteration
        if not ends:
            return {}
        return {n["id"]: sum(n["id"] > e for e in ends) for n in calls}

    def backward_runs(self, calls: list[dict]) -> dict[int, tuple[int, int]]:
        """iteration -> (first, last) node id of its backward pass: from its first call in autograd's ranges until
        its optimizer starts (or its own last backward call)."""
        spans, by_iteration = {}, defaultdict(list)
        for n in calls:
            by_iteration[self.iteration.get(n["id"], -1)].append(n["id"])
        for it, mine in by_iteration.items():
            backward = [i for i in mine if self.ranged[i] == "backward"]
            if backward:
                step = [i for i in mine if self.ranged[i] == "optimizer" and i > backward[0]]
                spans[it] = (backward[0], step[0] - 1 if step else backward[-1])
        return spans

    def phase(self, node: dict) -> str:
        """The part of the step an op ran in: its enclosing range's, else backward when issued after the first op
        of autograd's ranges and before the optimizer starts (what autograd's hooks and final callbacks run:
        FSDP2's pre-backward all-gathers and last reduce-scatter, DDP's bucket all-reduces), else forward."""
        found = self.ranged.get(node["id"])
        if found is not None:
            return found
        first, last = self.backward_spans.get(self.iteration.get(node["id"], -1), (0, -1))
        return "backward" if first <= node["id"] <= last else "forward"

    def add(self, node: dict, op: Op, writes: set):
        op.phase = self.phase(node)
        op.iteration = self.iteration.get(node["id"], -1)
        ins = node["inputs"]
        for v, ty in zip(ins["values"], ins.get("types") or [""] * len(ins["values"])):
            if "Tensor" in ty or not ty:
                for s in _storages(v):
                    if s in self.last_writer:
                        op.deps.append(self.last_writer[s])
        op.deps = sorted(set(op.deps))
        index = len(self.trace.ops)
        for s in writes:
            self.last_writer[s] = index
        self.trace.ops.append(op)
        self.trace.op_nodes.append(node["id"])

    def written_args(self, node: dict, read_too: bool = False) -> list:
        """The values of the arguments a call writes in place (`read_too`: only those it also reads, not its out=
        arguments), from its schema's alias annotations (recorder.written_args for a capture)."""
        schema = _schema(node)
        values = node["inputs"]["values"]
        if schema is None:  # no annotations: the trailing-underscore convention of in-place ops
            return values[:1] if values and node["name"].endswith("_") else []
        return [v for a, v in zip(schema.arguments, values)
                if a.alias_info is not None and a.alias_info.is_write and not (read_too and a.is_out)]

    def mutated_args(self, node: dict) -> set:
        return {s for v in self.written_args(node) for s in _storages(v)}

    # memory ops
    def memory(self, node: dict, move: str, dst) -> tuple[Op, set]:
        """A copy between the host and the accelerator (host_copy): a load from (store to) the host memory, the
        pool of --pool (docs/memory.md), of the bytes that land in `dst`."""
        return Op(name=_op_name(node), kind=move, bytes=self.nbytes(node, "outputs", dst), location="remote"), \
            _storages(dst)

    def nbytes(self, node: dict, field: str, value, seen: set | None = None) -> int:
        """Bytes of the tensors in a recorded value (numel x element size each). A tensor whose numel or element
        size is not a whole number of at least 0 (NaN, 1e400, -4, "4", true), or of more than MAX_TENSOR_BYTES,
        ends the run naming the file, the node and the field. `seen`: tensors counted already (left out; the
        ones counted here are added)."""
        total = 0
        for t in _tensor_likes(value):
            if seen is not None:
                key = repr(t)
                if key in seen:
                    continue
                seen.add(key)
            numel, size = t[3], t[4]
            if not (_whole(numel) and _whole(size)) or numel * size > MAX_TENSOR_BYTES:
                self.trace.fail(f"node {node['id']} ({node['name']}): {field}: tensor {t[0]} has numel "
                                f"{_shown(numel)} and element size {_shown(size)}; each must be a whole number of at "
                                f"least 0, their product at most {MAX_TENSOR_BYTES} bytes")
            total += numel * size
        return total

    # compute ops
    def compute(self, node: dict) -> tuple[Op, set]:
        view, writes, nbytes = self.call_bytes(node)
        local = self.local_calls(node)
        if local:  # an op on DTensors: its shapes are global; count the calls DTensor made on this rank's shards
            op = Op(name=_op_name(node), kind=COMPUTE, flops=sum(self.flops(c, set()) for c in local),
                    bytes=sum(self.call_bytes(c)[2] for c in local),
                    shapes=_input_shapes(local[0]) if len(local) == 1 else "")   # several calls: no one shape
        else:
            op = Op(name=_op_name(node), kind=COMPUTE, flops=self.flops(node, set()), bytes=nbytes,
                    shapes=_input_shapes(node))
        # TF32 is not in the trace: an fp32 matmul reads as fp32
        op.causal = _causal(node)
        op.dtype = compute_dtype(node["name"], _tensor_dtypes(node["inputs"]["types"]),
                                 _tensor_dtypes(node["outputs"]["types"]))
        return op, writes

    def measure(self):
        """Each compute op whose call the profiler has takes the measured time of that call and of the calls the
        execution trace files under it, each call counted once, inside the outermost of them as the profiler
        saw it. Under gloo's threads the observer sometimes files a call under the wrong parent: a later call
        under the one before it (its time would be lost), or a nested call beside its parent (counted twice)."""
        measured = self.trace.measured_ns
        nested_in = self.trace.profile.nested_in if self.trace.profile is not None else {}
        owner: dict[int, int] = {}   # record-function id -> the op whose call it is or is filed under
        timed = []
        for i, (op, nid) in enumerate(zip(self.trace.ops, self.trace.op_nodes)):
            if op.kind != COMPUTE or _attr(self.byid[nid], "rf_id") not in measured:
                continue   # a call the profiler does not have keeps the roofline
            timed.append(i)
            stack = [self.byid[nid]]
            while stack:
                n = stack.pop()
                rf = _attr(n, "rf_id")
                if isinstance(rf, int) and rf in measured and self.kind(n) == COMPUTE:   # a collective filed
                    owner.setdefault(rf, i)                                            # here is timed as one
                stack.extend(self.children[n["id"]])
        total = defaultdict(float)
        for rf, i in owner.items():
            up, seen = nested_in.get(rf), {rf}
            while up is not None and up not in owner and up not in seen:
                seen.add(up)
                up = nested_in.get(up)
            if up is None or up in seen:   # outermost of the timed calls: its time holds the nested ones'
                total[i] += measured[rf]
        for i in timed:
            self.trace.ops[i].measured_ns = total[i]

    def call_bytes(self, node: dict) -> tuple[bool, set, int]:
        """(only makes a view, storages written, bytes read + written) of one operator call."""
        ins, outs = node["inputs"]["values"], node["outputs"]["values"]
        mutated = self.mutated_args(node)
        out_storages, in_storages = _storages(outs), _storages(ins)
        view = only_aliases(bool(mutated), out_storages, in_storages)
        # an op that writes arguments in place and returns nothing (_foreach_mul_, ...) writes their bytes too
        # (an out= argument is among the inputs already, and written, not read: it is not counted again)
        in_place = 0 if out_storages else sum(self.nbytes(node, "inputs", v)
                                              for v in self.written_args(node, read_too=True))
        seen: set = set()   # a tensor the call takes twice is read once (op_bytes.py)
        nbytes = 0 if view else moved_bytes(node["name"], [self.nbytes(node, "inputs", v, seen) for v in ins],
                                            [self.nbytes(node, "outputs", v) for v in outs], in_place)
        return view, set() if view else out_storages | mutated, nbytes

    def local_calls(self, node: dict) -> list[dict]:
        """The calls a tensor subclass (DTensor) made for this call or one nested in it, on local shards: the
        children of the "PythonSubclass" nodes under it (the trace records the call on global shapes, then the
        subclass's own calls nested under such a node). Empty for a call on plain tensors."""
        found, stack = [], list(self.children[node["id"]])
        while stack:
            n = stack.pop()
            if n["name"] == "PythonSubclass":
                found += [c for c in self.children[n["id"]] if self.kind(c) == COMPUTE]
            else:
                stack.extend(self.children[n["id"]])
        return sorted(found, key=lambda n: n["id"])

    def flops(self, node: dict, seen: set) -> int:
        seen.add(node["id"])
        formula = _formula(node)
        if formula is not None:
            return _call_formula(formula, node)
        return sum(self.flops(c, seen) for c in self.children[node["id"]]
                   if c["id"] not in seen and self.kind(c) == COMPUTE)

    # collectives and waits
    def comm(self, node: dict, kind: str) -> tuple[Op, set]:
        name = node["name"]
        ns, _, short = name.partition("::")
        ins, outs = node["inputs"]["values"], node["outputs"]["values"]
        if kind == WAIT:
            return Op(name=_op_name(node), kind=WAIT), _storages(outs)
        if ns == "c10d" and short in _P2P:
            return self.message(node, _P2P[short])
        table = _C10D if ns == "c10d" else _FUNCTIONAL
        if short not in table:
            self.trace.fail(f"node {node['id']}: {name} is not supported: the comm dialect lowers only "
                            "all_reduce, reduce_scatter, all_gather, all_to_all, broadcast and reduce, and "
                            "point-to-point send and recv (no rooted gather/scatter or recv from any source)")
        collective, full, part = table[short]
        pick = lambda where: self.nbytes(node, "outputs", outs) if where == OUT else \
            self.nbytes(node, f"inputs[{where}]", ins[where])  # noqa: E731
        nbytes = pick(full)
        op = Op(name=_op_name(node), kind=COLLECTIVE, bytes=nbytes, collective=collective)
        ratio = nbytes // pick(part) if part is not None and pick(part) else None
        if collective in ROOTED:
            # c10d broadcast_: (tensors, group, root rank, ...), reduce_: (tensors, group, op, root rank, ...);
            # functional broadcast: (input, src, group)
            at = {"broadcast_": 2, "reduce_": 3}.get(short, 1) if ns == "c10d" else 1
            root = ins[at] if len(ins) > at else None
            if isinstance(root, bool) or not isinstance(root, int) or root < 0:
                self.trace.fail(f"node {node['id']}: {name} names no root rank (got {root!r})")
            self.trace.roots[len(self.trace.ops)] = root
        self.trace.pending.append((len(self.trace.ops), self.candidates(node, ratio)))
        writes = _storages(outs) | self.mutated_args(node)
        if ns == "c10d":  # c10d collectives work in place on their first argument (and do not all return it)
            writes |= _storages(ins[0])
        return op, writes

    def message(self, node: dict, kind: str) -> tuple[Op, set]:
        """A send or recv: its bytes now, its peer once every trace is read (_resolve_peers)."""
        ins = node["inputs"]["values"]
        local = ins[2] if len(ins) > 2 else None
        if isinstance(local, bool) or not isinstance(local, int) or local < 0:
            self.trace.fail(f"node {node['id']}: {node['name']} names no peer rank (got {local!r})")
        name = self.recorded_group(node)
        cands = [name] if name is not None else \
            [self.trace.world_group] + sorted(g for g, ranks in self.trace.groups.items()
                                              if ranks is not None and self.trace.rank in ranks)
        self.trace.messages.append((len(self.trace.ops), local, cands))
        return Op(name=_op_name(node), kind=kind, bytes=self.nbytes(node, "inputs[0]", ins[0])), \
            _storages(ins[0]) if kind == RECV else set()

    def candidates(self, node: dict, ratio: int | None) -> list[str]:
        """Names of the process groups this collective may have run on, largest first."""
        t = self.trace
        name = self.recorded_group(node)
        if name is not None:
            return [name]
        mine = [g for g, ranks in t.groups.items() if ranks is None or t.rank in ranks]
        if not mine:
            return [t.world_group]
        sized = [g for g in mine if len(self.ranks_of(g)) == ratio]
        return sorted(sized or mine, key=lambda g: -len(self.ranks_of(g)))

    def recorded_group(self, node: dict) -> str | None:
        schema = _schema(node)
        if schema is not None:  # functional collectives name their group
            for a, v in zip(schema.arguments, node["inputs"]["values"]):
                if a.name == "group_name" and isinstance(v, str):
                    self.trace.named_groups.add(v)
                    return self.known_group(v)
        for child in self.children[node["id"]]:  # NCCL: record_param_comms(..., seq, pg_name, rank, ...)
            if child["name"] == "record_param_comms":
                return self.param_comms_group(child["inputs"]["values"])
        return None

    def param_comms_group(self, values: list) -> str | None:
        # the macro's order after the optional input tensors: seq, pgName, rank, collName, inSplitSizes,
        # outSplitSizes, globalRankStart, globalRankStride, worldSize; pgName is a name or (name, desc)
        for i, v in enumerate(values):
            if isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(x, str) for x in v)):
                name = v if isinstance(v, str) else v[0]
                start, stride, size = (values[i + k] if i + k < len(values) else -1 for k in (5, 6, 7))
                if name not in self.trace.groups and all(isinstance(x, int) for x in (start, stride, size)) \
                        and start >= 0 and stride > 0 and size > 0:
                    self.trace.groups[name] = list(range(start, start + stride * size, stride))
                return self.known_group(name)
        return None

    def known_group(self, name: str) -> str:
        if self.trace.groups and name not in self.trace.groups:
            self.trace.fail(f"process group {name!r} is used but not in the trace's process-group record")
        if not self.trace.groups:
            self.trace.groups[name] = None  # no record at all: the world
        return name

    def ranks_of(self, group: str) -> list[int]:
        ranks = self.trace.groups.get(group)
        return list(range(self.world)) if ranks is None else ranks


def _op_name(node: dict) -> str:
    """aten::sum.dim_IntList(...) -> aten.sum.dim_IntList; aten ops without an overload get .default."""
    name = node["name"]
    schema = _attr(node, "op_schema") or ""
    full = schema.split("(", 1)[0] if schema.startswith(name) else name
    dotted = full.replace("::", ".")
    if name.startswith("aten::") and "." not in full:
        dotted += ".default"
    return dotted


# ---------------------------------------------------------------------------------------------- FLOPs


def _formula(node: dict):
    name = node["name"]
    if not name.startswith("aten::"):
        return None
    import torch
    from torch.utils.flop_counter import flop_registry
    packet = getattr(torch.ops.aten, name[len("aten::"):], None)
    return flop_registry.get(packet) if packet is not None else None


def _call_formula(formula, node: dict) -> int:
    """torch's formula on meta tensors shaped as recorded; kwarg-only arguments (addmm's beta) by name."""
    schema = _schema(node)
    args, kwargs = [], {}
    ins, outs = node["inputs"], node["outputs"]
    try:
        for i, v in enumerate(ins["values"]):
            value = _rebuild(v, ins["shapes"][i], ins["types"][i])
            arg = schema.arguments[i] if schema is not None and i < len(schema.arguments) else None
            if arg is not None and arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
        results = [_rebuild(v, s, t) for v, s, t in zip(outs["values"], outs["shapes"], outs["types"])]
        out_val = results[0] if len(results) == 1 else tuple(results)
        return int(formula(*args, out_val=out_val, **kwargs))
    except (TypeError, ValueError, IndexError, RuntimeError, AttributeError, AssertionError):
        return 0  # arguments the recording could not render (symbolic sizes, opaque objects, shapes that disagree)


def _tensor_dtypes(types: list) -> list[str]:
    """The torch dtype names of the tensors a call's recorded types list, in order ("Tensor(c10::BFloat16)",
    "GenericList[Tensor(float),Tensor(float)]" -> "bfloat16", "float32", "float32"); unknown ones as given."""
    return [_DTYPES.get(t, t) for ty in types if isinstance(ty, str) for t in _TENSOR_TYPE.findall(ty)]


_TENSOR_TYPE = re.compile(r"Tensor\(([^()]*)\)")


def _input_shapes(node: dict) -> str:
    """A call's tensor arguments' sizes as the trace records them (network/op_classes.format_shapes): its inputs
    whose type is a Tensor or a list of Tensors, in order. "" where a recorded shape is not a list of sizes (the
    shapes only refine the op's time, so the trace is not refused for them)."""
    inputs, sizes = node["inputs"], []
    for shape, type_ in zip(inputs.get("shapes") or [], inputs.get("types") or []):
        if isinstance(type_, str) and type_.startswith("Tensor"):
            if not _is_sizes(shape):
                return ""
            sizes.append(tuple(shape))
        elif isinstance(type_, str) and type_.startswith("GenericList[Tensor"):
            if not isinstance(shape, list) or not all(map(_is_sizes, shape)):
                return ""
            sizes.append([tuple(t) for t in shape])
    return format_shapes(sizes)


def _causal(node: dict) -> bool:
    """Whether an attention call masked causally (frontend/op_causal.py), from its recorded arguments: the schema's
    where the trace has it, else the ATen op's of the node's name (a Kineto-alone trace, whose scalars are the
    text of "Concrete Inputs"; absent there: not causal)."""
    values = node["inputs"].get("values")
    return causal(node["name"], _schema(node), values if isinstance(values, list) else [])


def _is_sizes(shape) -> bool:
    return isinstance(shape, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63
                                           for x in shape)


def _rebuild(value, shape, type_: str):
    """A recorded argument as the op saw it: tensors become meta tensors of the recorded shape and dtype."""
    import torch
    if type_.startswith("Tensor"):
        dtype = getattr(torch, _DTYPES.get(type_[type_.find("(") + 1:-1], "float32"))
        return torch.empty(shape, dtype=dtype, device="meta")
    if type_.startswith("GenericList[Tensor"):
        inner = type_[len("GenericList["):-1]
        return [_rebuild(v, s, inner) for v, s in zip(value, shape)]
    if value == "<None>":
        return None
    return value


# ---------------------------------------------------------------------------------------------- groups


def _resolve_groups(traces: list[_Trace], spmd: bool):
    """Give every collective its process group: directly when one candidate is left, else by matching ranks."""
    for t in traces:
        t.pending = [(index, _preferred(t, cands)) for index, cands in t.pending]
    ambiguous = any(len(c) > 1 for t in traces for _, c in t.pending)
    if ambiguous and not spmd:
        _match_across_ranks(traces)
    for t in traces:
        for index, cands in t.pending:
            _assign(t, t.ops[index], cands[0], index)


def _resolve_peers(traces: list[_Trace]) -> None:
    """Each send's and recv's peer as a global rank: the first of its candidate groups under which the peer's
    trace posts the opposite op for this rank; a peer without a trace (one SPMD file) takes the first candidate."""
    by_rank = {t.rank: t for t in traces}
    back = {t.rank: {(t.ops[i].kind, local, g) for i, local, cands in t.messages for g in cands} for t in traces}
    for t in traces:
        for index, local, cands in t.messages:
            op = t.ops[index]
            opposite = RECV if op.kind == SEND else SEND
            for g in cands:
                members = list(range(t.world)) if t.groups.get(g) is None else list(t.groups[g])
                if local >= len(members) or members[local] == t.rank:
                    continue
                peer = members[local]
                if peer not in by_rank or (opposite, members.index(t.rank), g) in back[peer]:
                    op.peer = peer
                    break
            else:
                t.fail(f"{op.name} #{index} ({op.kind} with group-local rank {local}) matches no peer: no process "
                       "group of this rank holds a rank whose trace posts the matching "
                       f"{'receive' if op.kind == SEND else 'send'}")


def _preferred(t: _Trace, cands: list[str]) -> list[str]:
    """Narrow an unnamed collective's candidate groups on a device mesh (module docstring): mesh groups over the
    default group, then groups no functional collective names. A preference that would leave none is skipped."""
    for keep in (lambda g: g in t.mesh_groups, lambda g: g not in t.named_groups):
        if len(cands) > 1 and any(keep(g) for g in cands):
            cands = [g for g in cands if keep(g)]
    return cands


def _happens_before(t: _Trace, spans: dict) -> None:
    """A profiler trace records no tensors, so an op's inputs are unknown: it is taken to depend on every
    collective that had finished (by its backend's record) before the op started in the recorded run, the order
    that run observed. An op that overlapped a collective there may overlap it here; one that came after waits.
    A collective waited for by a compute op needs no later compute op to wait again (the stream is in order)."""
    pending: list[tuple[float, int]] = []   # (end, op index) of collectives no compute op has waited for
    for i, (op, node) in enumerate(zip(t.ops, t.op_nodes)):
        start = spans[node][0]
        done = [c for end, c in pending if end <= start]
        op.deps = sorted(set(op.deps) | set(done))
        if op.kind not in (COLLECTIVE, SEND, RECV) and done:
            pending = [(end, c) for end, c in pending if c not in done]
        if op.kind in (COLLECTIVE, SEND, RECV):
            pending.append((spans[node][1], i))


def _assign(t: _Trace, op: Op, group: str, index: int):
    ranks = t.groups.get(group)
    op.group = tuple(range(t.world)) if ranks is None else tuple(sorted(ranks))
    op.group_name = group
    if index in t.roots:  # a broadcast's group-local root, in the group's own rank order
        order = list(range(t.world)) if ranks is None else list(ranks)
        if t.roots[index] >= len(order):
            t.fail(f"{op.name} #{index}: root rank {t.roots[index]} is outside its group of {len(order)} ranks")
        op.root = order[t.roots[index]]


def _match_across_ranks(traces: list[_Trace]):
    """The members of a group issue its collectives in the same order with the same kind (and size, except
    all-to-all). Walk every rank's collectives together; a rank's next collective goes to the largest of its
    candidate groups whose members all have a fitting collective next."""
    by_rank = {t.rank: t for t in traces}
    heads = {t.rank: 0 for t in traces}
    world = len(traces)

    def members(t: _Trace, g: str) -> list[int]:
        ranks = t.groups.get(g)
        return list(range(world)) if ranks is None else ranks

    def fits(r: int, g: str, op: Op) -> bool:
        t = by_rank.get(r)
        if t is None or heads[r] >= len(t.pending):
            return False
        index, cands = t.pending[heads[r]]
        other = t.ops[index]
        return (g in cands and other.collective == op.collective
                and (op.collective == "all_to_all" or other.bytes == op.bytes))

    while any(heads[t.rank] < len(t.pending) for t in traces):
        progressed = False
        for t in traces:
            if heads[t.rank] >= len(t.pending):
                continue
            index, cands = t.pending[heads[t.rank]]
            op = t.ops[index]
            for g in cands:
                group = members(t, g)
                if all(fits(m, g, op) for m in group):
                    for m in group:
                        tm = by_rank[m]
                        tm.pending[heads[m]] = (tm.pending[heads[m]][0], [g])
                        heads[m] += 1
                    progressed = True
                    break
        if not progressed:
            t = next(t for t in traces if heads[t.rank] < len(t.pending))
            op = t.ops[t.pending[heads[t.rank]][0]]
            raise UserError(f"{t.path}: rank {t.rank}'s collective #{heads[t.rank]} ({op.name}, {op.bytes} bytes) "
                            "matches no process group across the rank traces; were all ranks recorded over the "
                            "same steps?")
