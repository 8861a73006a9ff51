"""`model.half()`, `model.to(torch.bfloat16)`, `model.float()` on a model the capture builds under fake tensors, as
a training script with bf16 or fp16 parameters writes them (Megatron's fp16 models, torchtitan's bf16 ones).

PyTorch converts a fake parameter by swapping the new tensor into the old Parameter object, and refuses: the fake
tensor mode keeps a weak reference to every fake tensor it made, and `torch.utils.swap_tensors` will not swap a
tensor something refers to weakly. While a model file builds its model, a module whose parameters are fake
converts them the way PyTorch converts parameters whose type changes: a new Parameter of the converted tensor
(same requires_grad, the gradient converted too) in the module's place, buffers replaced as PyTorch replaces them.
The model is built before any optimizer holds its parameters, so no one holds the old objects.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def fake_params_convertible():
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
