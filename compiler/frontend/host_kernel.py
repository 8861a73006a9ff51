"""One op's autograd kernel on the host replaced, for as long as the capture runs, by the one CUDA would run
(gpu_dropout.py, gpu_attention.py): registered at torch's AutogradCPU key, the capture's fake tensors being host
tensors, and removed when the capture ends."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def as_cuda_runs_it(op: str, kernel):
    """aten::`op` runs `kernel` on the host while inside."""
    import torch
    lib = torch.library.Library("aten", "IMPL")
    try:   # (a capture inside a capture finds its kernel there already)
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "AutogradCPU"):
            lib.impl(op, kernel, "AutogradCPU")
        yield
    finally:
        lib._destroy()
