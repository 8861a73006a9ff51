"""The compute dtypes, named once: the dtype a compute op ran in (the workload's `Op.dtype`, the IR's `wl.dtype`)
and its code (the index into DTYPES: the engine's ProgramTable.dtype column, Roofline.time_ns's `dtype`), which
also indexes a device's per-dtype peaks (network/devices.py).

"tf32" is fp32 data multiplied on tensor cores (a matmul or convolution that PyTorch let use TF32): an
accelerator's peak for it lies between fp32's and bf16's. Every other op's dtype is its data's. An op of unknown
dtype is fp32 (PyTorch's default); NO_DTYPE (-1) in a dtype column means "not known": the roofline times it as fp32.
"""
from __future__ import annotations

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
CODE = {name: code for code, name in enumerate(DTYPES)}
FP32 = CODE["fp32"]
NO_DTYPE = -1
DEFAULT = "fp32"   # what an op of unknown dtype (an old module, a trace without types) is taken to run in

# torch dtype names (str(torch.bfloat16) without "torch.", or an execution trace's) -> DTYPES
_TORCH = {"float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
          "float16": "fp16", "half": "fp16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
          "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "float8_e8m0fnu": "fp8"}


def from_torch(name: str, tf32: bool = False) -> str:
    """The compute dtype of data of torch dtype `name` ("float32", "torch.bfloat16", ...; anything not floating
    reads as DEFAULT); `tf32`: the op is a matmul or convolution that PyTorch lets run fp32 data in TF32."""
    dtype = _TORCH.get(name.removeprefix("torch."), DEFAULT)
    return "tf32" if dtype == "fp32" and tf32 else dtype


def is_floating(name: str) -> bool:
    """Is torch dtype `name` one of the floating dtypes DTYPES stands for?"""
    return name.removeprefix("torch.") in _TORCH
