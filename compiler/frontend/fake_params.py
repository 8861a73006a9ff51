"""A model built on fake tensors as the capture builds it (`fake_build`): its initializers skipped, and its parameters
convertible to another dtype.

- Initializers: `torch.nn.init`'s in-place initializers (`kaiming_uniform_`, `normal_`, `ones_`, ...) fill values a
  fake tensor does not have, yet each is dispatched through fake mode: over a quarter of building a 175B GPT's 96
  blocks (0.24 s against 0.17 s), once per pipeline stage captured. While the model is built, parallelized and its
  optimizer made they return their tensor as it is; nothing a capture records reads a value.
- `model.half()`, `model.to(torch.bfloat16)`, `model.float()`, as a training script with bf16 or fp16 parameters
  writes them (Megatron's fp16 models, torchtitan's bf16 ones). PyTorch converts a fake parameter by swapping the
  new tensor into the old Parameter object, and refuses: the fake tensor mode keeps a weak reference to every fake
  tensor it made, and `torch.utils.swap_tensors` will not swap a tensor something refers to weakly. While a model
  file builds its model, a module whose parameters are fake converts them the way PyTorch converts parameters whose
  type changes: a new Parameter of the converted tensor (same requires_grad, the gradient converted too) in the
  module's place, buffers replaced as PyTorch replaces them. The model is built before any optimizer holds its
  parameters, so no one holds the old objects.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def fake_build():
    """While a model file builds (and parallelizes) its model under fake tensors: see the module's docstring."""
    with _initializers_skipped(), _fake_params_convertible():
        yield


@contextlib.contextmanager
def _initializers_skipped():
    import torch.nn.init as init
    saved = {name: fn for name, fn in vars(init).items()
             if name.endswith("_") and not name.startswith("_") and callable(fn)}
    for name in saved:
        setattr(init, name, _as_it_is)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)


def _as_it_is(tensor, *args, **kwargs):
    return tensor


@contextlib.contextmanager
def _fake_params_convertible():
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.nn import Module, Parameter
    original = Module._apply

    def _apply(self, fn, recurse=True):
        params = [p for p in self._parameters.values() if p is not None]
        if not params or not all(isinstance(p, FakeTensor) for p in params):
            return original(self, fn, recurse)
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, p in self._parameters.items():
            if p is None:
                continue
            with torch.no_grad():
                made = Parameter(fn(p), requires_grad=p.requires_grad)
                if p.grad is not None:
                    made.grad = fn(p.grad)
            self._parameters[key] = made
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self

    Module._apply = _apply
    try:
        yield
    finally:
        Module._apply = original
