"""Training states kept in the remote memory pool (`--offload params,grads,optimizer`, ZeRO-Infinity style).

ZeRO-Infinity keeps the fully sharded states (ZeRO-3, here FSDP2) out of the accelerators and moves each where the
step needs it. This pass adds those moves to a captured step as loads and stores of the remote pool
(docs/memory.md), per rank program:
- params: before each FSDP all-gather of a parameter group (forward and backward) its shard is loaded; after the
  optimizer step the updated shards are stored back;
- grads: after each FSDP reduce-scatter of gradients (backward) its shard is stored; before the optimizer step the
  shards are loaded;
- optimizer: the optimizer states are loaded before the optimizer step and stored after it; their size is two per
  parameter in the parameters' dtype (Adam's exp_avg and exp_avg_sq), i.e. twice the parameter shards.
FSDP2's own CPU offload (fully_shard(..., offload_policy=CPUOffloadPolicy()), found by the capture) is params and
grads with the optimizer step on the host, where the states are: it moves nothing (`host_states`).
With `in_switch` (a HierMem pool) the pool's switches do the FSDP collectives: a parameter all-gather becomes one
remote load the switches gather (every member ends with the whole group's parameters) and a gradient
reduce-scatter one remote store they reduce (ASTRA-sim 2.0's in-switch collective communication).

FSDP's process group is the one whose reduce-scatters all run in the backward pass (gradients): tensor
parallelism's sequence-parallel reduce-scatters run in the forward pass too, whatever the mesh axis is called.
The optimizer step's moves are one load (and one store) of all the rank's shards, before its first op (after its
last); the step's own compute and collectives are unchanged.
"""
from __future__ import annotations

import dataclasses

from ...network.errors import UserError
from .workload import COLLECTIVE, COMPUTE, LOAD, RECOMPUTE, STORE, Op, Workload

STATES = ("params", "grads", "optimizer")
OPTIMIZER_STATES = 2          # Adam: exp_avg, exp_avg_sq


def parse_states(text: str | None) -> tuple[str, ...]:
    """--offload's value: states from STATES, comma-separated, each once."""
    if text is None:
        return ()
    states = [s.strip() for s in str(text).split(",")]
    for s in states:
        if s not in STATES:
            raise UserError(f"--offload: unknown state {s!r}; expected {', '.join(STATES)} (comma-separated)")
    if len(set(states)) != len(states):
        raise UserError(f"--offload: a state is named twice in {text!r}")
    return tuple(states)


def offload(workload: Workload, states: tuple[str, ...], in_switch: bool = False,
            optimizer_at_states: bool = False) -> Workload:
    """The workload with the moves of `states` to and from the remote pool added to every program.
    optimizer_at_states: the optimizer step runs where the states are (FSDP2's CPUOffloadPolicy: on the host), so
    it moves nothing."""
    if not states:
        if in_switch:
            raise UserError("--in-switch: the pool's switches act on offloaded states: give --offload (or the model "
                            "file's OFFLOAD) too")
        return workload
    programs = {rank: _program(ops, set(states), in_switch, rank, optimizer_at_states)
                for rank, ops in workload.programs.items()}
    return dataclasses.replace(workload, programs=programs)


def host_states(workload: Workload, states: tuple[str, ...], pool) -> tuple[tuple[str, ...], bool]:
    """The states to offload and whether the optimizer runs at them: those asked for (--offload), else the model
    file's OFFLOAD, else what the capture found (FSDP2's CPUOffloadPolicy: parameter and gradient shards on the host,
    the optimizer step there too), which needs the pool that stands for the host memory."""
    if states or workload.offload or not workload.host_offload:
        return states or tuple(workload.offload), False
    if pool is None:
        raise UserError(f"{workload.source}: FSDP2 keeps its shards on the host (CPUOffloadPolicy), so the step "
                        "copies them in and out: give --pool describing the host memory (a zero-infinity pool with "
                        "memory: cpu; docs/memory.md)")
    return ("params", "grads"), True


def fsdp_groups(ops: list[Op]) -> set[tuple]:
    """The process groups FSDP shards over: reduce-scatters in the backward pass and never in the forward."""
    def groups(phase):
        return {op.group for op in ops if op.kind == COLLECTIVE and op.collective == "reduce_scatter"
                and op.phase == phase and len(op.group) > 1}
    return groups("backward") - groups("forward")


def _program(ops: list[Op], states: set, in_switch: bool, rank: int, optimizer_at_states: bool) -> list[Op]:
    fsdp = fsdp_groups(ops)

    def of(i: int, kind: str) -> bool:
        return ops[i].kind == COLLECTIVE and ops[i].collective == kind and ops[i].group in fsdp
    gathers = {i for i, op in enumerate(ops) if of(i, "all_gather") and op.phase in ("forward", "backward", RECOMPUTE)}
    scatters = {i for i, op in enumerate(ops) if of(i, "reduce_scatter") and op.phase == "backward"}
    if not scatters:
        raise UserError(f"--offload: rank {rank}'s step has no FSDP gradient reduce-scatter: ZeRO-Infinity offloads "
                        "fully sharded states; shard the model with FSDP2 (--mesh fsdp=N)")
    shard = sum(ops[i].bytes // len(ops[i].group) for i in scatters)   # this rank's parameters (and gradients)
    optimizer = [i for i, op in enumerate(ops) if op.phase == "optimizer" and op.kind == COMPUTE]
    load_before = {}   # optimizer prologue: name -> bytes
    store_after = {}
    at_step = set() if optimizer_at_states else states   # what the optimizer step moves in and out
    if "params" in at_step:
        load_before["params"] = shard
        store_after["params"] = shard
    if "grads" in at_step:
        load_before["grads"] = shard
    if "optimizer" in at_step:
        load_before["optimizer states"] = OPTIMIZER_STATES * shard
        store_after["optimizer states"] = OPTIMIZER_STATES * shard
    first_opt, last_opt = (optimizer[0], optimizer[-1]) if optimizer else (None, None)

    out: list[Op] = []
    new: dict[int, int] = {}     # old index -> the index its dependants now use

    def add(op: Op) -> int:
        out.append(op)
        return len(out) - 1

    for i, op in enumerate(ops):
        base = [new[d] for d in op.deps]
        deps = list(base)
        if i == first_opt:   # the optimizer step waits for its states, fetched as soon as it could start
            for name, nbytes in load_before.items():
                deps.append(add(Op(f"load {name}", LOAD, list(base), bytes=nbytes, location="remote",
                                   phase="optimizer", iteration=op.iteration)))
        if i in gathers and "params" in states:
            group = len(op.group)
            if in_switch:   # the switches gather it on the way: the load stands for the all-gather
                new[i] = add(Op(f"load params (in-switch {op.name})", LOAD, deps, bytes=op.bytes, location="remote",
                                in_switch=group, phase=op.phase, iteration=op.iteration))
                continue
            deps.append(add(Op("load params shard", LOAD, list(base), bytes=op.bytes // group, location="remote",
                               phase=op.phase, iteration=op.iteration)))
        if i in scatters and "grads" in states and in_switch:
            new[i] = add(Op(f"store grads (in-switch {op.name})", STORE, deps, bytes=op.bytes, location="remote",
                            in_switch=len(op.group), phase=op.phase, iteration=op.iteration))
            continue
        new[i] = add(dataclasses.replace(op, deps=deps))
        if i in scatters and "grads" in states:
            add(Op("store grads shard", STORE, [new[i]], bytes=op.bytes // len(op.group), location="remote",
                   phase=op.phase, iteration=op.iteration))
        if i == last_opt:
            for name, nbytes in store_after.items():
                add(Op(f"store {name}", STORE, [new[i]], bytes=nbytes, location="remote", phase="optimizer",
                       iteration=op.iteration))
    return out
