"""A model file's CUDA autocast (torch.autocast("cuda", ...) in its step_context()) as the capture runs it: on the
host, with CUDA's choice of dtype per op, so each op records the dtype it would compute in on a GPU.

The capture's fake tensors live on the host, where torch.autocast("cuda") does nothing (it warns and disables
itself without a GPU). While capturing, a CUDA autocast becomes the host's autocast at the same dtype (CUDA's
default, fp16, where none is given): matmuls, convolutions and attention run in it, and the tensors they make flow
on in it. The host's policy keeps fewer ops in fp32 than CUDA's, so for the ops CUDA autocasts to fp32 and the host
does not (softmax, layer_norm, exp, pow, sum, ...: torch's "CUDA Ops that can autocast to float32") a kernel at the
host's autocast key widens fp16 / bf16 inputs to fp32 first, as CUDA's does. Both are undone when the capture
ends.
"""
from __future__ import annotations

import contextlib

# CUDA autocast's fp32 ops (torch's autocast op reference), as aten overloads; those the host's autocast already
# sends to fp32 (mse_loss, nll_loss, ...: they have a host kernel of their own) are left to it
CUDA_FP32_OPS = ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log1p", "log2", "reciprocal",
                 "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus",
                 "layer_norm", "native_layer_norm", "group_norm", "rms_norm", "cosine_similarity", "dist", "pdist",
                 "renorm", "logsumexp", "softmax.int", "log_softmax.int", "cumsum", "cumprod", "prod", "sum",
                 "sum.dim_IntList", "linalg_vector_norm", "norm.Scalar", "norm.ScalarOpt_dim")


@contextlib.contextmanager
def cuda_autocast_on_host():
    import torch
    from torch.amp.autocast_mode import autocast
    init = autocast.__init__

    def host_init(self, device_type, dtype=None, *args, **kwargs):
        if device_type == "cuda":
            device_type, dtype = "cpu", dtype if dtype is not None else torch.get_autocast_dtype("cuda")
        init(self, device_type, dtype, *args, **kwargs)
    lib = torch.library.Library("aten", "IMPL")
    try:
        for name in CUDA_FP32_OPS:   # (a capture inside a capture finds its kernels there already)
            if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "AutocastCPU"):
                packet, _, overload = name.partition(".")
                lib.impl(name, _in_fp32(getattr(getattr(torch.ops.aten, packet), overload or "default")),
                         "AutocastCPU")
        autocast.__init__ = host_init
        yield
    finally:
        autocast.__init__ = init
        lib._destroy()


def _in_fp32(op):
    """A host autocast kernel for `op`: fp16 and bf16 tensor arguments widened to fp32, then the op below
    autocast."""
    import torch
    from torch.utils._pytree import tree_map_only
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def widen(t):
        return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(below):
            args, kwargs = tree_map_only(torch.Tensor, widen, (args, kwargs))
            return op(*args, **kwargs)
    return kernel
