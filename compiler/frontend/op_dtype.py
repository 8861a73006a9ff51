"""The dtype a compute op ran in (network/dtypes.py): the one rule both frontends apply (the capture's recorder.py
and the execution-trace importer et_import.py); the roofline takes that dtype's peak.

A matmul, convolution or attention computes in its inputs' dtype (its output may be wider: fp8 scaled matmuls
write bf16); fp32 inputs run as TF32 where PyTorch allows it when the op runs (matmuls:
torch.backends.cuda.matmul.allow_tf32 or torch.set_float32_matmul_precision("high" / "medium"); convolutions:
torch.backends.cudnn.allow_tf32, on by default). Not attention: fp32 scaled-dot-product attention runs the
memory-efficient kernel in fp32 whatever the setting (the flash kernel takes only fp16 / bf16; an H200's
llama step spent the same 8 ms in it with TF32 on and off). Any other op computes in its output's floating dtype (an op
that writes none, its inputs'). Ops on no floating data read as fp32.
"""
from __future__ import annotations

from ...network.dtypes import DEFAULT, from_torch, is_floating
from .op_bytes import aten_name

MATMULS = frozenset({"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "vdot",
                     "einsum", "_scaled_mm", "_int_mm", "scaled_dot_product_attention"})
CONVOLUTION_PREFIXES = ("conv", "_conv", "cudnn_conv", "mkldnn_conv", "miopen_conv", "slow_conv", "thnn_conv")
ATTENTION_PREFIXES = ("_scaled_dot_product_", "_flash_attention", "_efficient_attention", "_cudnn_attention")


def is_convolution(short: str) -> bool:
    return short.startswith(CONVOLUTION_PREFIXES)


def is_matmul(short: str) -> bool:
    """A matmul or attention (its fp32 runs as TF32 under the matmul setting); not a convolution."""
    return short in MATMULS or short.startswith(ATTENTION_PREFIXES)


def tf32_allowed() -> tuple[bool, bool]:
    """(matmul, convolution): may fp32 ones run as TF32, as PyTorch's settings stand now?"""
    import torch
    matmul = bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"
    return matmul, bool(torch.backends.cudnn.allow_tf32)


def compute_dtype(name: str, inputs: list[str], outputs: list[str], tf32: tuple[bool, bool] = (False, False)) -> str:
    """The DTYPES name op `name` ("aten.mm.default", "aten::mm") computes in, from its tensor inputs' and outputs'
    torch dtype names ("float32", "torch.bfloat16", ...) in argument order; `tf32`: tf32_allowed() as it ran."""
    short = aten_name(name)
    matmul, conv = is_matmul(short), is_convolution(short)
    order = (inputs, outputs) if matmul or conv else (outputs, inputs)
    attention = short.startswith(ATTENTION_PREFIXES) or short == "scaled_dot_product_attention"
    for dtypes in order:
        for d in dtypes:
            if is_floating(d):
                return from_torch(d, tf32=(matmul and not attention and tf32[0]) or (conv and tf32[1]))
    return DEFAULT
