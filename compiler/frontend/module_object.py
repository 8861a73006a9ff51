"""An nn.Module object handed to the Python API, read as a model file (model_file.py's convention).

    astra_compile.compile(model, "8x8_torus", example_inputs=batch, parallelize=apply_fsdp, mesh="dp=8,tp=8")

The capture never touches the caller's module: it trains a copy whose parameters and buffers are fake tensors of
the same shapes, dtypes and strides (built inside the capture's fake mode, so no memory is taken for them, and a
module on the meta device works too). Inputs are taken the same way. The module must be the one before
parallelization (a DDP- or FSDP2-wrapped module holds process groups, which cannot be copied): `parallelize` is
applied to the copy, on the capture's device mesh, as a model file's parallelize(module, mesh) would be.
"""
from __future__ import annotations

import copy

from ...network.errors import UserError
from .model_file import ModelFile, one_line


def model_file_from_object(module, example_inputs, parallelize=None, loss=None, optimizer=None) -> ModelFile:
    if example_inputs is None:
        raise UserError(f"compiling an nn.Module ({type(module).__name__}) needs example_inputs: one rank's batch "
                        "(a tensor, a tuple of tensors, or a function returning them)")
    for name, fn in (("parallelize", parallelize), ("loss", loss), ("optimizer", optimizer)):
        if fn is not None and not callable(fn):
            raise UserError(f"{name} must be callable, got {type(fn).__name__}")
    name = f"<{type(module).__name__} object>"

    def build_model():
        return _fake_copy(module, name)

    def inputs():
        return _fake_like(example_inputs() if callable(example_inputs) else example_inputs)

    return ModelFile(name, build_model, inputs, parallelize=parallelize, loss=loss, optimizer=optimizer)


def _fake_tensor(t):
    """Inside the capture's fake mode: a fake CPU tensor shaped like `t` (real, meta or fake)."""
    import torch
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype)


def _fake_copy(module, name: str):
    import torch
    memo: dict = {}
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in memo:
            fake = _fake_tensor(t)
            memo[id(t)] = torch.nn.Parameter(fake, requires_grad=t.requires_grad) \
                if isinstance(t, torch.nn.Parameter) else fake
    try:
        return copy.deepcopy(module, memo)
    except Exception as e:  # a module holding process groups, locks or handles
        raise UserError(f"{name}: cannot copy the module for the capture ({one_line(e)}); pass the module before "
                        "DDP / fully_shard / parallelize_module, and the parallelize function that applies them"
                        ) from None


def _fake_like(value):
    import torch
    from torch.utils._pytree import tree_map
    return tree_map(lambda v: _fake_tensor(v) if isinstance(v, torch.Tensor) else v, value)
