"""Record one training step, op by op, as a `Workload` program: a TorchDispatchMode below every tensor subclass.

Every aten op that reaches the dispatcher on plain (fake) tensors becomes a compute op with its FLOPs from
torch.utils.flop_counter's formulas and the bytes it reads and writes (op_bytes.py); views are not work, but the
host dispatched them: the next compute op counts them (`Op.views`, priced by the --gpu model). Collectives (`c10d.*` from
DistributedDataParallel and FSDP2, `_c10d_functional.*` from DTensor and functional collectives) become
collective ops with their process group's ranks; `wait_tensor` becomes a wait. Dependencies come from tensor
storages: an op depends on the last op that wrote a storage it touches, so views and in-place updates keep the
order a real run needs. This is the mechanism make_fx traces with; recording directly keeps the process groups
and the order in which DDP's and FSDP2's hooks fire during backward, which is what overlap depends on.

Tensor subclasses (DTensor) are let through first (NotImplemented), so what is recorded is each rank's local work.
"""
from __future__ import annotations

import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from ...network.errors import UserError
from ...network.kinds import IN_PLACE
from ...network.op_classes import format_shapes
from .gpu_composites import CUDA_COMPOSITES
from .op_bytes import moved_bytes, only_aliases
from .op_causal import causal
from .op_dtype import compute_dtype, tf32_allowed
from .step_memory import StepMemory
from .storage_keys import storage_key
from .workload import COLLECTIVE, COMPUTE, LOAD, RECOMPUTE, RECV, SEND, STORE, WAIT, Op

# PyTorch's collective ops -> (comm dialect collective, which tensor is the full buffer: "in" | "out")
COLLECTIVE_OPS = {
    "c10d.allreduce_": ("all_reduce", "in"),
    "c10d.allreduce_coalesced_": ("all_reduce", "in"),
    "c10d._allgather_base_": ("all_gather", "out"),
    "c10d.allgather_into_tensor_coalesced_": ("all_gather", "out"),
    "c10d._reduce_scatter_base_": ("reduce_scatter", "in"),
    "c10d.reduce_scatter_tensor_coalesced_": ("reduce_scatter", "in"),
    "c10d.alltoall_base_": ("all_to_all", "in"),
    "c10d.broadcast_": ("broadcast", "in"),
    "c10d.reduce_": ("reduce", "in"),
    "c10d.barrier": ("all_reduce", "in"),   # what ProcessGroupNCCL runs for a barrier: an all-reduce of one element
    "_c10d_functional.all_reduce": ("all_reduce", "in"),
    "_c10d_functional.all_reduce_": ("all_reduce", "in"),
    "_c10d_functional.all_reduce_coalesced": ("all_reduce", "in"),
    "_c10d_functional.all_gather_into_tensor": ("all_gather", "out"),
    "_c10d_functional.all_gather_into_tensor_out": ("all_gather", "out"),
    "_c10d_functional.all_gather_into_tensor_coalesced": ("all_gather", "out"),
    "_c10d_functional.reduce_scatter_tensor": ("reduce_scatter", "in"),
    "_c10d_functional.reduce_scatter_tensor_coalesced": ("reduce_scatter", "in"),
    "_c10d_functional.all_to_all_single": ("all_to_all", "in"),
    "_c10d_functional.broadcast": ("broadcast", "in"),
    "_c10d_functional.broadcast_": ("broadcast", "in"),
}
# where a broadcast's source (a reduce's target) is: its group-local rank's argument (c10d.broadcast_ takes tensors,
# group, root rank; c10d.reduce_ tensors, group, op, root rank; the functional broadcast input, src, group name)
ROOT_ARG = {"c10d.broadcast_": 2, "c10d.reduce_": 3, "_c10d_functional.broadcast": 1,
            "_c10d_functional.broadcast_": 1}
WAIT_OPS = ("_c10d_functional.wait_tensor",)
# point-to-point (dist.send / isend / batch_isend_irecv, a pipeline stage's activations and gradients): c10d.send
# takes (tensors, group, group-local destination, tag), c10d.recv_ (tensors, group, group-local source, tag)
P2P_OPS = {"c10d.send": SEND, "c10d.recv_": RECV}
# gather and scatter run as NCCL runs them: grouped messages between the root and each other member. c10d.gather_
# takes (outputs per member, input, group, group-local root, ...), c10d.scatter_ (output, inputs per member, group,
# group-local root, ...)
ROOTED_EXCHANGES = ("c10d.gather_", "c10d.scatter_")
# StepRecorder.phase: take each op's phase from autograd (backward while a backward pass runs, else forward), for
# steps whose forward and backward interleave (a pipeline schedule's micro-batches)
AUTOGRAD = None
# ops that only describe tensors or the profiler: no work, no dependency of their own
SKIP_NAMESPACES = ("profiler", "prim")
# ops the host dispatches that launch no kernel and make no tensor a later op waits for: `.item()` of a host scalar
# (torch.optim's Adam and AdamW read each parameter's step counter, which they keep on the host, twice a step),
# torch.tensor() of a literal. Counted as views: host time only
HOST_ONLY_OPS = ("aten._local_scalar_dense", "aten.lift_fresh", "aten.lift_fresh_copy")


def _on_fake_group(func, args: tuple, kwargs: dict):
    """A send or receive of the capture (fake_world's process group, which completes it at once and touches no
    data), handed to the group below the dispatch modes: through them (routing's, fake mode's) it gives the same
    completed work, five times slower (a 175B GPT's capture sends and receives 11,520 times). Where the group does
    not take it there, it goes through them as any op."""
    try:
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            return func(*args, **kwargs)
    except RuntimeError:
        return func(*args, **kwargs)


def _packet_name(func) -> str:
    return f"{func.namespace}.{func._schema.name.split('::', 1)[1]}"


def _tensors(value) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _first_uses(tensors: list) -> list[tuple]:
    """(tensor, is its first appearance) for each: a tensor an op takes twice is read once (op_bytes.py)."""
    seen: set = set()
    out = []
    for t in tensors:
        out.append((t, id(t) not in seen))
        seen.add(id(t))
    return out


def written_args(func, args, kwargs, read_too: bool = False) -> list[torch.Tensor]:
    """The tensors an in-place or out= op writes, from its schema's alias annotations (`read_too`: only those it
    also reads, not its out= arguments)."""
    written = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write and not (read_too and a.is_out):
            value = args[i] if i < len(args) else kwargs.get(a.name)
            written += _tensors(value)
    return written


def _arg_shapes(func, args, kwargs) -> str:
    """The sizes of an op's tensor arguments in schema order (network/op_classes.format_shapes): a tensor its sizes,
    a list of tensors (an optional one's missing entries left out) a list of them, other arguments left out. ""
    where a size is symbolic with no value to give (an unbacked SymInt)."""
    sizes = []
    try:
        for i, a in enumerate(func._schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(a.name)
            if isinstance(value, torch.Tensor):
                sizes.append(tuple(int(s) for s in value.shape))
            elif isinstance(a.type, torch.ListType) and "Tensor" in str(a.type.getElementType()) and \
                    isinstance(value, (list, tuple)):
                sizes.append([tuple(int(s) for s in t.shape) for t in value if isinstance(t, torch.Tensor)])
    except (TypeError, RuntimeError):   # int() of a size torch cannot tell (data-dependent)
        return ""
    return format_shapes(sizes)


def _group_of(args) -> tuple[str, tuple[int, ...]]:
    """(name, ranks) of the process group a collective runs on: a ProcessGroup object (c10d.*) or the name of a
    registered group (_c10d_functional.*, always the op's last string argument)."""
    for a in args:
        if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a._type()):
            pg = ProcessGroup.unbox(a)
            return pg.group_name, tuple(dist.get_process_group_ranks(pg))
    names = [a for a in args if isinstance(a, str)]
    if names:
        from torch.distributed.distributed_c10d import _resolve_process_group
        pg = _resolve_process_group(names[-1])
        return pg.group_name, tuple(dist.get_process_group_ranks(pg))
    raise UserError("a collective without a process group argument: cannot tell which ranks take part")


class StepRecorder(TorchDispatchMode):
    """Collects the ops dispatched while active into `self.ops` (one rank's program)."""

    def __init__(self, live: bool = False):
        """`live`: recording a real training step (astra_compile.record) rather than a fake capture: storages are
        not kept alive (a real step would hold every activation until the end), a writer counts only while the
        tensor it wrote is alive, each op's phase comes from autograd and the optimizer hooks, and a collective
        that cannot be scheduled is remembered (`unsupported`) instead of stopping the user's step."""
        super().__init__()
        self.ops: list[Op] = []
        self.phase = ""                     # set by the capture as the step moves on; stamped on every op
        self.live = live
        self.unsupported = ""               # live: the first collective the comm dialect cannot schedule
        self.in_optimizer = False           # live: set by torch.optim's global step hooks (record.py)
        self.recomputing = 0                # > 0 while activation checkpointing reruns a forward (recompute.py)
        # storage -> (index of the last op that wrote it, live: a weak reference to the tensor it wrote)
        self._writer: dict[int, tuple] = {}
        # capture: the step's memory (step_memory.py), which also reports each freed storage: its writer is
        # forgotten (no later storage takes its key: storage_keys.py), keeping the map to the live ones; live: the
        # weak reference tells a writer whose tensor (and so storage) is gone
        self.memory = None if live else StepMemory(forget=self._forget)
        self._alive: list = []              # capture: activations save_on_cpu packed (their ids stay theirs)
        self._saved: dict[int, int] = {}    # id of an activation save_on_cpu packed -> its store op
        # views and aliases dispatched since the last compute op: the next compute op's `views` (host time only)
        self._views = 0
        # chunk_replay.py: while a pipeline chunk is logged, one entry per dispatch that recorded ops (first op,
        # end op, storages read, storages written, those of them written for the first time); None: not logging
        self.events: list | None = None
        self.paused = 0   # > 0: ops run without being recorded (chunk_replay.py's stand-in tensors)

    def _forget(self, key: int) -> None:
        """step_memory: the storage of this key (storage_keys.py) was freed: its writer goes with it."""
        self._writer.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        # a tensor subclass (DTensor) handles the op first; its local ops then come back here
        if any(t is not torch.Tensor and not issubclass(t, FakeTensor) for t in types):
            return NotImplemented
        name = _packet_name(func)
        composite = CUDA_COMPOSITES.get(name)
        if composite is not None:   # the ops CUDA runs for it, each recorded (gpu_composites.py)
            out = composite(lambda f, a, k: self._record(f, _packet_name(f), a, k), func, args, kwargs)
            if out is not None:
                return out
        return self._record(func, name, args, kwargs)

    def _record(self, func, name: str, args: tuple, kwargs: dict):
        """Run one op on (fake) plain tensors and record it."""
        out = _on_fake_group(func, args, kwargs) if name in P2P_OPS and not self.live else func(*args, **kwargs)
        if func.namespace in SKIP_NAMESPACES:
            return out
        if name in HOST_ONLY_OPS:
            self._views += 1
            return out
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        if name.startswith("aten._foreach_") and inputs and all(t.dim() == 0 for t in inputs):
            # a foreach op over scalars: torch.optim's step counters, which Adam and AdamW (neither capturable nor
            # fused) keep on the host and count up every step, one add_ each on the host (a CUDA run launches no
            # kernel for it): so many host dispatches
            self._views += len(_tensors(args[0]) if args else inputs)
            return out
        mutates = any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)
        if self.memory is not None and self.memory.saw(inputs, outputs, self._phase(), name in COLLECTIVE_OPS,
                                                       mutates, func.is_view and not mutates):
            # fake mode's twins of a real tensor (DDP's buckets) are kept: fake mode hands the same twin to every
            # later op while it lives, so those ops find the writer of the bytes the twin stands for
            self._alive += [t.untyped_storage() for t in outputs]
        if func.is_view and not mutates:
            self._views += 1   # no kernel, but the host dispatched it
            return out  # a view aliases its input's storage: later readers already depend on its writer
        # an op that writes no argument makes its outputs anew: their storages have no earlier writer
        made_anew = [] if mutates else outputs
        touched = [storage_key(t) for t in inputs + outputs if not any(t is m for m in made_anew)]
        deps = sorted({w[0] for w in map(self._writer.get, touched)
                       if w is not None and (w[1] is None or w[1]() is not None)})
        if func.namespace == "aten" and only_aliases(mutates, set(map(storage_key, outputs)), set(map(storage_key, inputs))):
            self._views += 1
            return out  # _unsafe_view and the like: storage shared as a view's, no work, the writer already known
        if name in COLLECTIVE_OPS:
            op = self._collective(name, args, inputs, outputs, deps)
        elif name in P2P_OPS:
            _, ranks = _group_of(args)
            op = Op(name, P2P_OPS[name], deps, bytes=sum(map(_nbytes, inputs)), peer=int(ranks[int(args[2])]))
        elif name in ROOTED_EXCHANGES:
            *messages, op = self._rooted_exchange(name, args, deps)
            for m in messages:
                m.phase = self._phase()
                self.ops.append(m)
        elif name in WAIT_OPS:
            op = Op(str(func), WAIT, deps)
        elif name.startswith(("c10d.", "_c10d_functional.")):
            problem = (f"the step calls {name}, which astra-compile cannot schedule yet (supported: all_reduce, "
                       "reduce_scatter, all_gather, all_to_all, broadcast, reduce, send, recv, gather, scatter)")
            if not self.live:
                raise UserError(problem)
            self.unsupported = self.unsupported or problem
            return out
        else:
            flops = 0
            if func._overloadpacket in flop_registry:
                flops = int(flop_registry[func._overloadpacket](*args, **kwargs, out_val=out))
            # an op that writes arguments in place and returns nothing (_foreach_mul_, ...) writes their bytes too
            # (an out= argument is among the inputs already, and written, not read: it is not counted again)
            in_place = sum(map(_nbytes, written_args(func, args, kwargs, read_too=True))) \
                if mutates and not outputs else 0
            op = Op(str(func), COMPUTE, deps, flops=flops,
                    bytes=moved_bytes(name, [_nbytes(t) if first else 0 for t, first in _first_uses(inputs)],
                                      list(map(_nbytes, outputs)), in_place),
                    dtype=compute_dtype(name, [str(t.dtype) for t in inputs], [str(t.dtype) for t in outputs],
                                        tf32_allowed()),
                    shapes=_arg_shapes(func, args, kwargs),
                    causal=causal(name, func._schema, list(args), kwargs), views=self._views)
            self._views = 0
        op.phase = self._phase()
        first = len(self.ops) - (len(messages) if name in ROOTED_EXCHANGES else 0)
        self.ops.append(op)
        written = written_args(func, args, kwargs) if mutates else []
        if op.kind == RECV or name in ROOTED_EXCHANGES:   # c10d.recv_, gather_, scatter_ fill their first
            written = _tensors(args[0])                     # argument (their schemas do not say so)
        if self.events is not None:
            writes = [storage_key(t) for t in outputs + written]
            anew = {storage_key(t) for t in made_anew}   # new allocations, whatever a stale writer entry says
            self.events.append((first, len(self.ops), touched, writes,
                                {s for s in writes if s not in self._writer or s in anew}))
        for t in outputs + written:
            if self.live:
                self._writer[storage_key(t)] = (len(self.ops) - 1, weakref.ref(t))
            else:
                self._writer[storage_key(t)] = (len(self.ops) - 1, None)
        return out

    def offload_saved(self, t: torch.Tensor) -> torch.Tensor:
        """torch.autograd.graph.save_on_cpu's pack hook as the capture runs it (capture.py): the activation autograd
        saves goes to the host (a store of the remote memory, the host being the pool) once its writer is done;
        the tensor itself stays, as the capture's device is the host already."""
        w = self._writer.get(storage_key(t))
        self.ops.append(Op("save_on_cpu: activation to host", STORE, [w[0]] if w is not None else [],
                           bytes=_nbytes(t), location="remote", phase=self._phase()))
        self._saved[id(t)] = len(self.ops) - 1
        if not self.live:
            self._alive.append(t)   # its id must not come back for another tensor while recording
            self.memory.to_host(t)
        return t

    def reload_saved(self, t: torch.Tensor) -> torch.Tensor:
        """save_on_cpu's unpack hook: the activation comes back (a load) before the backward op that uses it."""
        stored = self._saved.get(id(t))
        self.ops.append(Op("save_on_cpu: activation from host", LOAD, [stored] if stored is not None else [],
                           bytes=_nbytes(t), location="remote", phase=self._phase()))
        self._writer[storage_key(t)] = (len(self.ops) - 1, weakref.ref(t) if self.live else None)
        return t

    def _phase(self) -> str:
        """The part of the step an op recorded now belongs to: set by the capture, or told by autograd; a forward
        that activation checkpointing runs again inside the backward is "recompute"."""
        if self.recomputing:
            return RECOMPUTE
        return self._live_phase() if self.live or self.phase is AUTOGRAD else self.phase

    def _live_phase(self) -> str:
        if self.in_optimizer:
            return "optimizer"
        return "backward" if torch._C._current_graph_task_id() != -1 else "forward"

    def _rooted_exchange(self, name, args, deps) -> list[Op]:
        """A gather's or scatter's messages on this rank, the last op standing for their end: the root exchanges
        one chunk with every other member (then a wait on all of them), another member one with the root."""
        _, ranks = _group_of(args)
        root, me = int(ranks[int(args[3])]), dist.get_rank()
        gather = name == "c10d.gather_"
        chunk = sum(map(_nbytes, _tensors(args[1] if gather else args[0])))
        if me != root:
            return [Op(name, SEND if gather else RECV, deps, bytes=chunk, peer=root)]
        first = len(self.ops)
        messages = [Op(name, RECV if gather else SEND, deps, bytes=chunk, peer=int(r)) for r in ranks if r != root]
        return messages + [Op(name, WAIT, list(range(first, first + len(messages))))]

    def _collective(self, name, args, inputs, outputs, deps) -> Op:
        kind, buffer = COLLECTIVE_OPS[name]
        group_name, ranks = _group_of(args)
        if name.startswith("c10d."):
            # c10d ops take (output, input, ...) for gathers/scatters and (tensors, ...) for all-reduce; their
            # outputs repeat the tensors they fill
            tensors = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)]
            if kind in IN_PLACE:
                full = tensors
            else:
                full = tensors[:1] if buffer == "out" else tensors[1:2]
                if "coalesced" in name:
                    half = len(tensors) // 2
                    full = tensors[:half] if buffer == "out" else tensors[half:]
        else:
            full = outputs if buffer == "out" else inputs
        root = ranks[int(args[ROOT_ARG[name]])] if name in ROOT_ARG else -1  # group-local -> global rank
        return Op(name, COLLECTIVE, deps, bytes=sum(map(_nbytes, full)), collective=kind,
                  group=tuple(sorted(ranks)), group_name=group_name, root=root)
