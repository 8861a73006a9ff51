"""The dtype codes the compute model knows, defined once: a captured op's dtype (its ProgramTable column) and a
device's per-dtype peak (network/devices.py) both index this tuple.

An op with no dtype is fp32 (PyTorch's default); an fp32 matmul run with TF32 allowed is "tf32". NO_DTYPE (-1) in
a dtype column means "not known": the roofline times it as fp32.
"""
from __future__ import annotations

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
CODE = {name: code for code, name in enumerate(DTYPES)}
FP32 = CODE["fp32"]
NO_DTYPE = -1
