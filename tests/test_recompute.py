"""Activation checkpointing (frontend/recompute.py): the forward that torch.utils.checkpoint runs again in the
backward is recorded with the phase "recompute", as torch runs it: non-reentrant checkpointing stops once the
activations backward needs are back (a block's last matmul, whose output nothing saves, is not rerun), reentrant
checkpointing reruns the whole function, selective checkpointing reruns only what its policy did not save, and
torch's checkpoint_wrapper is non-reentrant checkpointing. The report's phase table gains a recompute row."""
import json
import textwrap

import pytest

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import cli

W, B, N = 64, 8, 3
MM = 2 * B * W * W     # one Linear's forward FLOPs

WRAP = {
    "none": "x = blk(x)",
    "full": "x = checkpoint(blk, x, use_reentrant=False)",
    "reentrant": "x = checkpoint(blk, x, use_reentrant=True)",
    "selective": "x = checkpoint(blk, x, use_reentrant=False, "
                 "context_fn=functools.partial(create_selective_checkpoint_contexts, save_matmuls))",
    "wrapper": "x = blk(x)",
}


def model(tmp_path, mode: str) -> str:
    wrapped = "checkpoint_wrapper(Block())" if mode == "wrapper" else "Block()"
    path = tmp_path / f"ckpt_{mode}.py"
    path.write_text(textwrap.dedent(f"""
        import functools
        import torch
        from torch import nn
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear({W}, {W}), nn.Linear({W}, {W})

            def forward(self, x):
                return self.b(torch.nn.functional.gelu(self.a(x)))


        def save_matmuls(ctx, op, *args, **kwargs):
            keep = op in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList({wrapped} for _ in range({N}))

            def forward(self, x):
                for blk in self.blocks:
                    {WRAP[mode]}
                return x


        def build_model():
            return Net()


        def example_inputs():
            return torch.randn({B}, {W}, requires_grad=True)   # reentrant checkpointing needs a graph to its input
    """))
    return str(path)


def recomputed(tmp_path, mode: str) -> list:
    ops = capture(load_model_file(model(tmp_path, mode)), 1).programs[0]
    return [(op.name, op.flops) for op in ops if op.phase == "recompute"]


def test_no_checkpointing_recomputes_nothing(tmp_path):
    assert recomputed(tmp_path, "none") == []


@pytest.mark.parametrize("mode", ["full", "wrapper"])
def test_non_reentrant_reruns_up_to_the_last_saved_activation(tmp_path, mode):
    # backward needs a's input, a's output (gelu's backward) and gelu's output (b's weight gradient): the rerun
    # stops after gelu, so b's matmul is not recomputed
    assert recomputed(tmp_path, mode) == [("aten.addmm.default", MM), ("aten.gelu.default", 0)] * N


def test_reentrant_reruns_the_whole_function(tmp_path):
    assert recomputed(tmp_path, "reentrant") == [("aten.addmm.default", MM), ("aten.gelu.default", 0),
                                                 ("aten.addmm.default", MM)] * N


def test_selective_reruns_what_its_policy_did_not_save(tmp_path):
    assert recomputed(tmp_path, "selective") == [("aten.gelu.default", 0)] * N


def test_forward_and_backward_are_unchanged_by_checkpointing(tmp_path):
    def rest(mode):
        ops = capture(load_model_file(model(tmp_path, mode)), 1).programs[0]
        return [(op.name, op.flops, op.phase) for op in ops if op.phase != "recompute"]
    assert rest("full") == rest("none")


def test_report_has_a_recompute_phase(tmp_path, capsys):
    code, out, err = cli(capsys, model(tmp_path, "full"), "--topology", "Ring(2)", "--json")
    assert code == 0, err
    phases = {p["phase"]: p for p in json.loads(out)["phases"]}
    assert list(phases) == ["forward", "backward", "recompute", "optimizer"]
    assert phases["recompute"]["flops"] == N * MM
    backward = phases["backward"]
    assert backward["start_us"] <= phases["recompute"]["start_us"] <= phases["recompute"]["end_us"] <= \
        backward["end_us"]
    code, out, _ = cli(capsys, model(tmp_path, "full"), "--topology", "Ring(2)")
    assert code == 0 and "\nrecompute " in out


def test_a_recorded_real_step_marks_its_recomputation_too():
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    import astra_compile
    net = nn.Sequential(nn.Linear(W, W), nn.GELU(), nn.Linear(W, W))
    x = torch.randn(B, W, requires_grad=True)
    with astra_compile.record() as rec:
        checkpoint(net, x, use_reentrant=False).sum().backward()
    ops = rec.workload.programs[0]
    assert [(op.name, op.flops) for op in ops if op.phase == "recompute"] == \
        [("aten.addmm.default", MM), ("aten.gelu.default", 0)]
