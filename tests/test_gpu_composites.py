"""Ops CUDA runs as more than one kernel, captured as the ops it runs (compiler/frontend/gpu_composites.py): an
out-of-place masked_fill is a clone and an in-place fill, softmax's backward a multiply before its own kernel."""
import textwrap

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

B, H, S = 2, 4, 64


def _ops(tmp_path, body: str):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn
        class Scores(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.randn({S}, {S}))
            def forward(self, x):
                s = x @ self.w
                mask = torch.ones({S}, {S}, dtype=torch.bool).tril()
                BODY
        def build_model():
            return Scores()
        def example_inputs():
            return torch.randn({B}, {H}, {S}, {S})
        def parallelize(model, mesh):
            mesh["dp"]
            return model
    """).replace("BODY", body))
    w = capture(load_model_file(str(path)), 2, {"dp": 2})
    return [op for op in w.programs[0] if op.kind == "compute" and op.phase in ("forward", "backward")]


def test_an_out_of_place_masked_fill_is_a_copy_and_a_fill_each_way(tmp_path):
    ops = _ops(tmp_path, "return s.masked_fill(~mask, float('-inf')).sum()")
    names = [(op.phase, op.name) for op in ops]
    assert ("forward", "aten.masked_fill.Scalar") not in names and ("backward", "aten.masked_fill.Scalar") not in names
    for phase in ("forward", "backward"):   # the backward's gradient is masked_fill(grad, mask, 0): the same pair
        mine = [n for p, n in names if p == phase and n.startswith(("aten.clone", "aten.masked_fill"))]
        assert mine == ["aten.clone.default", "aten.masked_fill_.Scalar"], (phase, mine)
    fill = next(op for op in ops if op.name == "aten.masked_fill_.Scalar")
    copy = next(op for op in ops if op.name == "aten.clone.default" and op.phase == "forward")
    n = B * H * S * S * 4
    assert copy.bytes == 2 * n                              # reads the scores, writes the copy
    assert fill.bytes == 2 * n + S * S                      # reads and writes the copy, reads the one-byte mask
    assert fill.shapes == f"{B}x{H}x{S}x{S},{S}x{S}"        # its mask broadcasts: the broadcast class


def test_a_masked_fill_with_a_tensor_value_keeps_its_overload(tmp_path):
    ops = _ops(tmp_path, "return s.masked_fill(~mask, torch.tensor(0.0)).sum()")
    assert "aten.masked_fill_.Tensor" in [op.name for op in ops if op.phase == "forward"]


def test_softmax_backward_multiplies_before_its_kernel(tmp_path):
    ops = _ops(tmp_path, "return s.softmax(dim=-1).sum()")
    backward = [op for op in ops if op.phase == "backward"]
    names = [op.name for op in backward]
    at = names.index("aten._softmax_backward_data.default")
    assert names[at - 1] == "aten.mul.Tensor" and names.count("aten.mul.Tensor") == 1
    n = B * H * S * S * 4
    assert backward[at - 1].bytes == 3 * n and backward[at - 1].shapes == f"{B}x{H}x{S}x{S},{B}x{H}x{S}x{S}"


def test_log_softmax_backward_is_one_kernel(tmp_path):
    ops = _ops(tmp_path, "return s.log_softmax(dim=-1).sum()")
    names = [op.name for op in ops if op.phase == "backward"]
    assert "aten._log_softmax_backward_data.default" in names and "aten.mul.Tensor" not in names


def test_logsumexp_is_the_reductions_and_passes_cuda_runs(tmp_path):
    ops = _ops(tmp_path, "return s.logsumexp(dim=-1).mean()")
    forward = [op for op in ops if op.phase == "forward"]
    names = [op.name.rsplit(".", 1)[0] for op in forward]
    assert "aten.logsumexp" not in names
    at = names.index("aten.amax")
    assert names[at:at + 9] == ["aten.amax", "aten.abs", "aten.eq", "aten.masked_fill_", "aten.sub", "aten.exp_",
                                "aten.sum", "aten.log_", "aten.add_"]
    n = B * H * S * S * 4
    sub, exp = forward[at + 4], forward[at + 5]
    assert sub.bytes == 2 * n + n // S and exp.bytes == 2 * n   # the full scores read and written each pass


def test_adam_s_step_counters_are_host_dispatches(tmp_path):
    """torch.optim's AdamW keeps each parameter's step counter on the host: one add_ each a step and two .item()
    reads (its bias corrections), each a dispatch of the host and none a kernel: counted as views, the step's
    foreach kernels the only optimizer ops."""
    ops = _ops(tmp_path, "return s.sum()")
    path = tmp_path / "model.py"
    w = capture(load_model_file(str(path)), 2, {"dp": 2})
    optimizer = [op for op in w.programs[0] if op.kind == "compute" and op.phase == "optimizer"]
    assert optimizer and all(op.name.startswith("aten._foreach_") and op.bytes > 0 for op in optimizer), \
        [op.name for op in optimizer]
    assert sum(op.views for op in optimizer) >= 3   # one parameter: its counter's add_ and two reads
    assert ops
