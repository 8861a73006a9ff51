"""Scaled-dot-product attention captured as a GPU runs it (compiler/frontend/gpu_attention.py): CUDA's flash kernel
for bf16 / fp16, its memory-efficient kernel for fp32 or a mask, so that a selective-checkpoint policy naming CUDA's
ops (torchtitan's "op" policy) saves what it saves on a GPU."""
import textwrap

import torch

from astra_compile.compiler.frontend import gpu_attention
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

HEADS, SEQ, HEAD = 4, 128, 64

MODEL = f"""
    import torch
    from torch import nn
    from torch.nn import functional as F
    DTYPE = DTYPE_VALUE

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear({HEADS * HEAD}, {3 * HEADS * HEAD}, bias=False, dtype=DTYPE)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, {HEADS}, {HEAD}).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)

    def _save_attention():   # torchtitan's "op" policy, reduced to the attention kernel it saves
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
        save = {{torch.ops.aten._scaled_dot_product_flash_attention.default,
                torch.ops.aten._scaled_dot_product_efficient_attention.default}}
        return create_selective_checkpoint_contexts(
            lambda ctx, func, *a, **k: CheckpointPolicy.MUST_SAVE if func in save else CheckpointPolicy.PREFER_RECOMPUTE)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()

        def forward(self, x):
            from torch.utils.checkpoint import checkpoint
            return checkpoint(self.attention, x, use_reentrant=False, context_fn=_save_attention)

    def build_model():
        return Model()

    def example_inputs():
        return torch.randn(2, {SEQ}, {HEADS * HEAD}, dtype=DTYPE)

    def parallelize(model, mesh):
        mesh["dp"]
        return model
"""


def _attention_ops(tmp_path, dtype):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL.replace("DTYPE_VALUE", dtype)))
    w = capture(load_model_file(str(path)), 2, {"dp": 2})
    return [(op.name, op.phase) for op in w.programs[0] if op.kind == "compute" and "attention" in op.name]


def test_bf16_attention_is_the_flash_kernel_saved_by_the_policy(tmp_path):
    # on the host it was _scaled_dot_product_flash_attention_for_cpu, which the policy does not name: recomputed
    assert _attention_ops(tmp_path, "torch.bfloat16") == [
        ("aten._scaled_dot_product_flash_attention.default", "forward"),
        ("aten._scaled_dot_product_flash_attention_backward.default", "backward")]


def test_fp32_attention_is_the_memory_efficient_kernel(tmp_path):
    assert _attention_ops(tmp_path, "torch.float32") == [
        ("aten._scaled_dot_product_efficient_attention.default", "forward"),
        ("aten._scaled_dot_product_efficient_attention_backward.default", "backward")]
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::scaled_dot_product_attention", "AutogradCPU")


def test_the_kernel_cuda_chooses():
    k = gpu_attention.kernel
    assert k(torch.bfloat16, 128, False, True) == "flash" and k(torch.float16, 256, False, True) == "flash"
    assert k(torch.bfloat16, 512, False, True) == "efficient"       # past the flash kernel's head size
    assert k(torch.bfloat16, 128, True, True) == "efficient"        # an explicit mask
    assert k(torch.float32, 64, False, True) == "efficient"
    assert k(torch.float32, 60, False, True) == "math"              # a head size neither fused kernel takes
    assert k(torch.bfloat16, 128, False, False) == "math"           # grouped-query heads left to the kernel
