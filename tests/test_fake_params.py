"""A model built on fake tensors (frontend/fake_params.py). bf16 / fp16 parameters written the usual way,
`model.half()` or `model.to(torch.bfloat16)` in build_model(): under fake tensors PyTorch refused to convert them;
the capture now converts them as PyTorch converts parameters, so matmuls run in the parameters' dtype and DDP
all-reduces 2-byte gradients. Initializers, which fill values a fake tensor does not have, are not dispatched."""
import textwrap

import pytest

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

W, B = 64, 8


def model(tmp_path, convert: str, dtype: str) -> str:
    path = tmp_path / "params.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn


        def build_model():
            net = nn.Sequential(nn.Linear({W}, {W}), nn.BatchNorm1d({W}), nn.Linear({W}, {W}))
            return net{convert}


        def example_inputs():
            return torch.randn({B}, {W}, dtype=torch.{dtype})
    """))
    return str(path)


@pytest.mark.parametrize("convert, dtype, short", [(".half()", "float16", "fp16"),
                                                   (".to(torch.bfloat16)", "bfloat16", "bf16")])
def test_converted_parameters_compute_and_reduce_in_their_dtype(tmp_path, convert, dtype, short):
    ops = capture(load_model_file(model(tmp_path, convert, dtype)), 2).programs[0]
    matmuls = [op for op in ops if op.name in ("aten.addmm.default", "aten.mm.default")]
    assert len(matmuls) == 5 and {op.dtype for op in matmuls} == {short}   # 2 forward, 3 backward (no input grad)
    reduced = sum(op.bytes for op in ops if op.kind == "collective" and op.collective == "all_reduce")
    params = 2 * (W * W + W) + 2 * W              # two Linears and BatchNorm's weight and bias
    assert reduced == 2 * params                  # 2 bytes per gradient, not 4


def test_fp32_model_is_unchanged(tmp_path):
    ops = capture(load_model_file(model(tmp_path, "", "float32")), 2).programs[0]
    reduced = sum(op.bytes for op in ops if op.kind == "collective" and op.collective == "all_reduce")
    assert reduced == 4 * (2 * (W * W + W) + 2 * W)


def test_initializers_are_not_dispatched_while_building_and_are_restored_after():
    import torch
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from astra_compile.compiler.frontend.fake_params import fake_build

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    before = nn.init.kaiming_uniform_
    with FakeTensorMode(), fake_build(), Ops() as seen:
        net = nn.Sequential(nn.Linear(W, W), nn.LayerNorm(W), nn.Embedding(10, W))
    assert [p.shape for p in net.parameters()] == [(W, W), (W,), (W,), (W,), (10, W)]
    assert seen.names and not [n for n in seen.names if n.split(".")[0] in ("uniform_", "normal_", "fill_")]
    assert nn.init.kaiming_uniform_ is before
    with FakeTensorMode(), Ops() as seen:
        nn.Linear(W, W)
    assert "uniform_.default" in seen.names   # outside the build, torch's own
