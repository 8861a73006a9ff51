"""A model file's scaled-dot-product attention as PyTorch runs it on a GPU: CUDA's choice of fused kernel, while the
capture runs on the host.

`F.scaled_dot_product_attention` picks a kernel by device. On CUDA: the flash kernel
(`_scaled_dot_product_flash_attention`, and its own backward) for fp16 / bf16 inputs without an explicit mask and a
head size of at most 256 that is a multiple of 8; otherwise the memory-efficient kernel
(`_scaled_dot_product_efficient_attention`: fp32 too, and a mask as an additive bias); otherwise the math path
(matmuls and a softmax). On the host, where the capture's fake tensors live, it is
`_scaled_dot_product_flash_attention_for_cpu` for every dtype. The time is the same op class either way
(network/op_classes.py), but a selective-checkpoint policy names CUDA's ops: torchtitan's "op" policy saves
`_scaled_dot_product_flash_attention` and recomputes everything else, so on the host its Llama 3 8B recomputed
every attention in the backward (32 more attention forwards a step) where a GPU saves them. While capturing,
aten::scaled_dot_product_attention on the host takes CUDA's choice. Undone when the capture ends.
"""
from __future__ import annotations

from .host_kernel import as_cuda_runs_it

FLASH_MAX_HEAD = 256    # the flash kernel's largest head size (sm80 and later)
HEAD_ALIGN = 8          # head sizes both fused kernels take without padding


def cuda_attention_on_host():
    return as_cuda_runs_it("scaled_dot_product_attention", _attention_as_cuda)


def kernel(dtype, head: int, masked: bool, same_heads: bool) -> str:
    """The kernel CUDA's scaled_dot_product_attention runs: "flash", "efficient" or "math"."""
    import torch
    if not same_heads:   # grouped-query attention left to the kernel (enable_gqa): the math path takes it
        return "math"
    aligned = head % HEAD_ALIGN == 0
    if dtype in (torch.float16, torch.bfloat16) and not masked and aligned and head <= FLASH_MAX_HEAD:
        return "flash"
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and aligned:
        return "efficient"
    return "math"


def _attention_as_cuda(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    import torch
    aten = torch.ops.aten
    choice = kernel(q.dtype, q.shape[-1], attn_mask is not None, q.shape[-3] == k.shape[-3] == v.shape[-3])
    if choice == "flash":
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    if choice == "efficient":
        if attn_mask is not None and attn_mask.dtype == torch.bool:   # a boolean mask becomes an additive bias
            attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(~attn_mask, float("-inf"))
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        return aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, grad, dropout_p, is_causal,
                                                            scale=scale)[0]
    return aten._scaled_dot_product_attention_math(q, k, v, attn_mask, dropout_p, is_causal, None, scale=scale,
                                                   enable_gqa=enable_gqa)[0]
