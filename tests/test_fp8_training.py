"""fp8 training written the torchao way (torchao.float8.convert_to_float8_training) is captured as it runs: each
Linear's forward and its two backward matmuls become torch._scaled_mm on fp8 operands (the op records fp8, whose
peak the compute model takes), and the scaling ops around them (amax, scale, cast) run eagerly, as without
torch.compile."""
import json
import textwrap

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import cli

W, B = 256, 64


def model(tmp_path) -> str:
    path = tmp_path / "fp8.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn
        from torchao.float8 import convert_to_float8_training


        def build_model():
            return convert_to_float8_training(nn.Sequential(nn.Linear({W}, {W}), nn.GELU(), nn.Linear({W}, {W})))


        def example_inputs():
            return torch.randn({B}, {W})


        def step_context():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    """))
    return str(path)


def test_float8_linears_run_scaled_matmuls_in_fp8(tmp_path):
    ops = capture(load_model_file(model(tmp_path)), 1).programs[0]
    scaled = [(op.phase, op.dtype, op.flops) for op in ops if op.name == "aten._scaled_mm.default"]
    # per Linear: the forward, then the input's and the weight's gradient
    assert sorted(scaled) == sorted([("forward", "fp8", 2 * B * W * W)] * 2 + [("backward", "fp8", 2 * B * W * W)] * 4)
    assert all(op.dtype == "fp8" for op in ops if op.flops and op.phase != "optimizer")


def test_report_counts_the_fp8_flops(tmp_path, capsys):
    code, out, err = cli(capsys, model(tmp_path), "--topology", "Ring(2)", "--gpu", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["flops_by_dtype"]["fp8"] == 6 * 2 * B * W * W
