"""The frontends' common output: one training step as a dependency graph of compute ops and collectives per rank.

Both frontends produce a `Workload`: the PyTorch capture (capture.py, one program that stands for every rank of
an SPMD job) and the execution-trace importer (et_import.py, one program per recorded rank). The workload dialect
(dialects/workload.py) turns it into MLIR; nothing downstream reads this object except that conversion.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ...network.dtypes import DEFAULT, DTYPES
from ...network.errors import UserError
from ...network.kinds import COLLECTIVES
from ...network import memory_record
from ...network.op_classes import is_shapes, is_views

COMPUTE, COLLECTIVE, WAIT = "compute", "collective", "wait"
SEND, RECV = "send", "recv"    # point-to-point: a message to (from) one peer rank, matched in order per pair
LOAD, STORE = "load", "store"  # memory: a tensor moved into (out of) the accelerator, docs/memory.md
# the parts of a training step, in the order they start; "recompute" is the forward that activation checkpointing
# runs again inside the backward (recompute.py)
RECOMPUTE = "recompute"
PHASES = ("forward", "backward", RECOMPUTE, "optimizer")


@dataclass
class Op:
    name: str                      # what ran: "aten.mm.default", "c10d.allreduce_", ...
    kind: str                      # COMPUTE | COLLECTIVE | WAIT (a wait blocks compute until its collective ends)
    #                                | SEND | RECV | LOAD | STORE
    deps: list[int] = field(default_factory=list)   # indices of earlier ops of the same program
    flops: int = 0                 # compute: floating-point operations (torch.utils.flop_counter)
    bytes: int = 0                 # compute: bytes read + written; collective: full-buffer size (docs/workloads.md);
    #                                load / store: the bytes that reach (leave) this accelerator
    collective: str = ""           # one of COLLECTIVES
    group: tuple[int, ...] = ()    # collective: ranks of its process group, ascending
    group_name: str = ""           # collective: the process group's name ("dp", "tp", "0", ...)
    root: int = -1                 # broadcast: the global rank it sends from; reduce: the one it sums into
    peer: int = -1                 # send: the global rank it goes to; recv: the one it comes from
    phase: str = ""                # part of the step: forward | backward | optimizer ("" when not known)
    iteration: int = -1            # traces holding several training iterations: which one (-1: not known)
    measured_ns: float = -1.0      # compute: its time measured by a profiler (Kineto), -1: from the roofline
    dtype: str = DEFAULT           # compute: the dtype it ran in (network/dtypes.DTYPES; frontend/op_dtype.py)
    shapes: str = ""               # compute: its tensor arguments' sizes (network/op_classes.format_shapes; "":
    #                                not known)
    causal: bool = False           # compute: an attention op that masked causally (frontend/op_causal.py): its
    #                                kernels skip the masked blocks of the FLOPs counted (network/compute_model.py)
    views: int = 0                 # compute: kernel-less ops (views, aliases) the host dispatched since the previous
    #                                compute op of the program: each costs the --gpu model's host view_us
    location: str = ""             # load / store: one of network/memory.LOCATIONS
    in_switch: int = 0             # remote load / store that the pool's switches all-gather (reduce-scatter): the
    #                                GPUs that share the tensor (its group); 0: a plain load / store


@dataclass
class Workload:
    world_size: int
    programs: dict[int, list[Op]]  # rank -> its ops in issue order (deps point backwards)
    source: str = ""               # the model file or trace it came from
    spmd: bool = False             # True: each program stands for several ranks (stands_for), which run it on
    #                                their own groups; collectives need no matching, messages match between programs
    mesh: dict = field(default_factory=dict)   # device-mesh axes the capture used ({"dp": 8, "tp": 8})
    # SPMD with several programs (one per pipeline stage): program rank -> every rank that runs it. Empty: one
    # program stands for every rank (SPMD) or each rank has its own (not SPMD)
    stands_for: dict = field(default_factory=dict)
    # FSDP2 keeps shards on the host (CPUOffloadPolicy): its copies become remote loads and stores (offload.py)
    host_offload: bool = False
    offload: tuple = ()   # states the model file keeps in the remote pool (OFFLOAD; --offload replaces them)
    # a trace run on more NPUs than its job had ranks: where it runs, or how its groups were re-targeted
    # (trace_world.py); the report says it. "": as recorded
    placement: str = ""
    # a captured step: program rank -> its memory (frontend/step_memory.StepMemory.result: the peak of live bytes
    # and what held them). Empty: not known (a trace records no allocations)
    memory: dict = field(default_factory=dict)

    def collectives(self, rank: int) -> list[Op]:
        return [op for op in self.programs[rank] if op.kind == COLLECTIVE]

    def iterations(self) -> list[int]:
        return sorted({op.iteration for ops in self.programs.values() for op in ops if op.iteration >= 0})

    def only_iteration(self, n: int) -> "Workload":
        """The ops of iteration `n` alone (a trace of several iterations, --iteration N): dependencies on ops of
        other iterations are dropped, the rest renumbered."""
        have = self.iterations()
        if n not in have:
            shown = ", ".join(map(str, have)) if have else "none: it is one step"
            raise UserError(f"--iteration {n}: the workload's iterations are {shown}")
        programs = {}
        for rank, ops in self.programs.items():
            keep = [i for i, op in enumerate(ops) if op.iteration == n]
            new = {old: k for k, old in enumerate(keep)}
            programs[rank] = [dataclasses.replace(ops[i], deps=[new[d] for d in ops[i].deps if d in new])
                              for i in keep]
        return dataclasses.replace(self, programs=programs)

    def to_json(self) -> dict:
        """Plain JSON data (the reuse cache keeps captures on disk in it); from_json reads it back."""
        return {"world_size": self.world_size, "source": self.source, "spmd": self.spmd, "mesh": self.mesh,
                "host_offload": self.host_offload, "offload": list(self.offload), "placement": self.placement,
                "stands_for": [[rank, list(ranks)] for rank, ranks in self.stands_for.items()],
                "memory": [[rank, held] for rank, held in self.memory.items()],
                "programs": [[rank, [dataclasses.asdict(op) for op in ops]] for rank, ops in self.programs.items()]}

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        """The workload `to_json` wrote, checked: a file that no frontend can have written (a negative count, an
        op that depends on a later one, a rank outside the world) raises ValueError (the cache then makes it
        again), never a workload that times to a negative or non-finite figure."""
        world = _count(data["world_size"], "world_size", 1)
        programs = {_rank(rank, world): [_checked(Op(**{**op, "group": tuple(op["group"])}), i, world)
                                         for i, op in enumerate(ops)]
                    for rank, ops in data["programs"]}
        return cls(world, programs, data["source"], bool(data["spmd"]), dict(data["mesh"]),
                   {_rank(rank, world): [_rank(r, world) for r in ranks] for rank, ranks in data.get("stands_for", [])},
                   bool(data.get("host_offload", False)), tuple(data.get("offload", ())),
                   str(data.get("placement", "")),
                   {_rank(rank, world): _memory(held) for rank, held in data.get("memory", [])})


KINDS = (COMPUTE, COLLECTIVE, WAIT, SEND, RECV, LOAD, STORE)
BIGGEST = 2**63 - 1   # counts are int64, as the workload module holds them


def _count(value, what: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= BIGGEST:
        raise ValueError(f"{what} = {value!r}")
    return value


def _rank(value, world: int, low: int = 0) -> int:
    """A rank of the world (`low` -1: or -1, "none")."""
    if _count(value, "rank", low) >= world:
        raise ValueError(f"rank {value} outside a world of {world}")
    return value


def _memory(held: dict) -> dict:
    """A program's memory as step_memory.StepMemory.result gives it (network/memory_record.py)."""
    wrong = memory_record.problem(held)
    if wrong:
        raise ValueError(f"memory: {wrong}")
    return held


def _checked(op: Op, index: int, world: int) -> Op:
    """An op read back from JSON as a frontend makes them, else ValueError."""
    if op.kind not in KINDS or (op.kind == COLLECTIVE and op.collective not in COLLECTIVES):
        raise ValueError(f"op {index}: kind {op.kind!r}, collective {op.collective!r}")
    for what in ("flops", "bytes", "in_switch"):
        _count(getattr(op, what), f"op {index}: {what}")
    _count(op.iteration, f"op {index}: iteration", -1)
    if op.dtype not in DTYPES:
        raise ValueError(f"op {index}: dtype {op.dtype!r}")
    if not is_shapes(op.shapes):
        raise ValueError(f"op {index}: shapes = {op.shapes!r}")
    if not isinstance(op.causal, bool) or (op.causal and op.kind != COMPUTE):
        raise ValueError(f"op {index}: causal = {op.causal!r}")
    if not is_views(op.views) or (op.views and op.kind != COMPUTE):
        raise ValueError(f"op {index}: views = {op.views!r}")
    for d in op.deps:
        if _count(d, f"op {index}: deps") >= index:
            raise ValueError(f"op {index} depends on op {d}, which is not before it")
    for r in op.group:
        _rank(r, world)
    _rank(op.root, world, -1)
    _rank(op.peer, world, -1)
    m = op.measured_ns
    if not isinstance(m, (int, float)) or isinstance(m, bool) or not math.isfinite(m) or not (m >= 0 or m == -1):
        raise ValueError(f"op {index}: measured_ns = {m!r}")
    return op
