"""Capture one training step of a model file as a Workload, in one process, without a GPU or a network.

A fake process group (torch's `fake` backend) gives the process rank 0 of a world as large as the topology;
collectives on it return at once. Parameters, activations and optimizer states are FakeTensors (shapes and
dtypes, no data), so models far larger than this machine's memory capture in seconds. The step runs twice:
the first warms up what PyTorch builds lazily (optimizer states, FSDP2's lazy init, DDP's bucket rebuild in
gradient-ready order), the second is recorded (recorder.py). Every rank of an SPMD job runs the same program,
so rank 0's stands for all.
"""
from __future__ import annotations

import contextlib
import logging

from ..network.errors import UserError
from .model_file import ModelFile, one_line
from .parallelize import (apply_builtin, build_mesh, check_mesh, ddp_modules, meshes_outside_fake, prepare_ddp,
                          skip_cross_rank_checks)
from .own_world import script_world_set_aside
from .recorder import StepRecorder
from .routing import AssumedRouting, check_routing
from .workload import Workload


@contextlib.contextmanager
def fake_world(world_size: int):
    """A fake process group of `world_size` ranks, this process rank 0; a script's own process groups (the API
    called inside a training script) are set aside meanwhile and restored after."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    with script_world_set_aside() if dist.is_initialized() else contextlib.nullcontext():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
        try:
            yield
        finally:
            dist.destroy_process_group()


def _first_tensor(value):
    import torch
    from torch.utils._pytree import tree_leaves
    for leaf in tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            return leaf
    raise UserError("the model's forward returned no tensor to take a loss of")


def _as_tuple(inputs):
    return inputs if isinstance(inputs, tuple) else (inputs,)


def mesh_axes_for(spec: ModelFile, world_size: int, mesh: dict[str, int] | None) -> dict[str, int]:
    """The mesh: --mesh, else the file's mesh_axes(world_size), else pure data parallelism over every NPU."""
    if mesh is None and spec.mesh_axes is not None:
        try:
            mesh = dict(spec.mesh_axes(world_size))
        except (Exception, SystemExit) as e:
            raise UserError(f"{spec.path}: mesh_axes({world_size}) failed: {one_line(e)}") from None
    axes = mesh if mesh is not None else {"dp": world_size}
    check_mesh(axes, world_size)
    return axes


@contextlib.contextmanager
def _quiet_fake_tensor_log():
    """Fake-tensor mode logs the traceback of a model op that fails (a shape mismatch in the user's model) before
    raising; the capture turns that exception into its one-line error, so the logged traceback is only noise."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    was = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = was


def _compiled_runs_eager():
    """torch.compile'd modules and functions (on the model, per block, around DDP or FSDP2) run eagerly during
    the capture: Dynamo cannot trace fake tensors that stand for a device, and the collectives a compiled step
    issues are the eager step's (FSDP2's and DDP's hooks stay outside the compiled graphs). Compute is then
    costed per eager op, without the compiler's fusions (docs/workloads.md)."""
    import torch._dynamo
    return torch._dynamo.config.patch(disable=True)


def capture(spec: ModelFile, world_size: int, mesh: dict[str, int] | None = None) -> Workload:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    axes = mesh_axes_for(spec, world_size, mesh)
    # a training step needs autograd whatever mode the caller (or an earlier capture stopped midway by its CPU
    # limit, whose exception can land anywhere in torch) left the process in; enable_grad restores it afterwards
    with torch.enable_grad(), fake_world(world_size), _quiet_fake_tensor_log(), meshes_outside_fake(), \
            _compiled_runs_eager():
        device_mesh = build_mesh(axes)  # outside fake mode: the mesh holds real rank tensors
        fake = FakeTensorMode(allow_non_fake_inputs=True)
        stage = "build_model()"
        try:
            with fake, skip_cross_rank_checks():
                model = spec.build_model()
                stage = "example_inputs()"
                inputs = _as_tuple(spec.example_inputs())
                stage = "parallelize(module, mesh)"
                if spec.parallelize is not None:
                    made = spec.parallelize(model, device_mesh)   # None: parallelized in place
                    model = model if made is None else made     # (not `or`: a module may define __len__)
                else:
                    model = apply_builtin(model, device_mesh, axes, spec.tp_plan, spec.fsdp_units)
                prepare_ddp(model)
                stage = "optimizer(parameters)"
                opt = spec.optimizer(model.parameters()) if spec.optimizer else torch.optim.AdamW(model.parameters())

            def step(recorder=None):
                def phase(name):
                    if recorder is not None:
                        recorder.phase = name
                with spec.step_context() if spec.step_context else contextlib.nullcontext():
                    phase("forward")
                    out = model(*inputs)
                    loss = spec.loss(out) if spec.loss else _first_tensor(out).sum()
                    phase("backward")
                    loss.backward()
                phase("optimizer")
                opt.step()
                opt.zero_grad(set_to_none=True)

            stage = "the warm-up training step"
            routing = AssumedRouting(check_routing(spec.routing, spec.path), spec.path)
            with fake, routing:
                step()
            # DDP re-buckets gradients in the order they became ready; its index exchange reads real data
            for ddp in ddp_modules(model):
                ddp.reducer._rebuild_buckets()
            stage = "the recorded training step"
            recorder = StepRecorder()
            with fake, routing, recorder:
                step(recorder)
        except UserError:
            raise
        except SystemExit as e:  # the user's code called sys.exit(): never exit with its status as if done
            raise UserError(f"{spec.path}: {stage} called sys.exit({e.code!r})") from None
        except Exception as e:  # the user's model failed to build or trace: bad input, one line
            raise UserError(f"{spec.path}: {stage} failed: {one_line(e)}") from None
        names = axis_names(device_mesh, axes)
    for op in recorder.ops:
        op.group_name = names.get(op.group, op.group_name)
    return Workload(world_size, {0: recorder.ops}, source=spec.path, spmd=True, mesh=axes)


def axis_names(device_mesh, axes: dict[str, int]) -> dict[tuple, str]:
    """Rank tuples of rank 0's mesh groups -> the mesh axis name, so reports say "tp" rather than "9"."""
    import torch.distributed as dist
    names = {tuple(range(dist.get_world_size())): "world"}
    if len(axes) > 1:
        for axis in axes:
            names[tuple(sorted(dist.get_process_group_ranks(device_mesh[axis].get_group())))] = axis
    else:
        names[tuple(range(dist.get_world_size()))] = next(iter(axes))
    return names
