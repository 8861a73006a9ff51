"""A model file's dropout as PyTorch runs it on a GPU: one fused kernel each way, while the capture runs on the host.

`torch.nn.functional.dropout` (and nn.Dropout) goes through aten::dropout, which on CUDA runs the fused
`native_dropout` (one kernel: reads the input, writes the output and a one-byte mask) and in the backward
`native_dropout_backward` (one kernel). On the host, where the capture's fake tensors live, aten::dropout takes
its composite path instead: an `empty_like`, a `bernoulli_` filling a mask of the input's dtype, a `div_` scaling
it and a `mul` applying it, then a `mul` in the backward: three kernels and about 2.4 times the bytes of the fused
one (Megatron's 1B GPT, benchmarks/published/megatron_gpt.py, recorded 93 ms a step of such elementwise work that
a GPU does not do, 6 % of its predicted step). While capturing, aten::dropout on the host takes CUDA's
choice: the fused pair where CUDA uses it (0 < p < 1, training, a non-empty input), the input itself where
dropout does nothing, and CUDA's own composite `mul` by zeros for p = 1. Undone when the capture ends.
"""
from __future__ import annotations

from .host_kernel import as_cuda_runs_it


def cuda_dropout_on_host():
    return as_cuda_runs_it("dropout", _dropout_as_cuda)


def _dropout_as_cuda(x, p: float, train: bool):
    """aten::dropout as its CUDA path runs it (ATen's Dropout.cpp: is_fused_kernel_acceptable)."""
    import torch
    if not train or p == 0 or x.numel() == 0:
        return x
    if p == 1:
        return x.mul(torch.zeros_like(x))
    return torch.ops.aten.native_dropout(x, p, train)[0]
