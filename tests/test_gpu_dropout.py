"""Dropout captured as a GPU runs it (compiler/frontend/gpu_dropout.py): CUDA's fused native_dropout forward and
native_dropout_backward, not the host's bernoulli_ / div_ / mul composite."""
import textwrap

import torch

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

ROWS, DIM = 64, 1024


def _step(tmp_path, p):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn
        def build_model():
            return nn.Sequential(nn.Linear({DIM}, {DIM}, dtype=torch.float16), nn.Dropout({p}))
        def example_inputs():
            return torch.randn({ROWS}, {DIM}, dtype=torch.float16)
        def parallelize(model, mesh):
            mesh["dp"]
            return model
    """))
    w = capture(load_model_file(str(path)), 2, {"dp": 2})
    return [op for op in w.programs[0] if op.kind == "compute" and op.phase in ("forward", "backward")]


def test_dropout_is_the_fused_kernel_each_way(tmp_path):
    ops = _step(tmp_path, 0.1)
    names = [op.name for op in ops]
    assert "aten.bernoulli_.float" not in names and "aten.div_.Scalar" not in names
    fwd = [op for op in ops if op.name == "aten.native_dropout.default"]
    bwd = [op for op in ops if op.name == "aten.native_dropout_backward.default"]
    assert len(fwd) == 1 and fwd[0].phase == "forward" and len(bwd) == 1 and bwd[0].phase == "backward"
    # one pass: reads the fp16 input, writes the fp16 output and a one-byte mask (the host's path: 12 bytes)
    assert fwd[0].bytes == ROWS * DIM * (2 + 2 + 1)
    # reads the gradient and the mask, writes the gradient
    assert bwd[0].bytes == ROWS * DIM * (2 + 1 + 2)


def test_dropout_that_does_nothing_records_nothing_and_the_host_is_left_as_it_was(tmp_path):
    names = [op.name for op in _step(tmp_path, 0.0)]
    assert not [n for n in names if "dropout" in n or "bernoulli" in n]
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::dropout", "AutogradCPU")
