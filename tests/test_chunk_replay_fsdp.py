"""A pipeline stage sharded by FSDP2 copies its micro-batches too (compiler/frontend/chunk_replay.py,
`_sharded_chunk`): each call's template is the first of its variant (its kind and the kind of the call before it,
which decide whether FSDP2 gathers the parameters), checked on the second, copied from the third on. The workload
and the memory must be those of dispatching every micro-batch, while the stages' modules run a number of times
that does not grow with the micro-batches."""
import textwrap

import pytest

from astra_compile.compiler.frontend import capture as capture_module
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.chunk_replay import ChunkReplay
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import dispatching_all

MODEL = """
import torch
from torch import nn
from torch.nn import functional as F
LAYERS, D, TOKENS = %d, 64, %d
CALLS = []
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(D), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))
class Stage(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)
    def forward(self, x):
        CALLS.append(1)
        for layer in self.layers:
            x = layer(x)
        return x
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
def build_model():
    return Net()
def example_inputs():
    return torch.randn(TOKENS, D)
def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages
    return Stage(model.layers[stage * per:(stage + 1) * per])
def loss(out):
    return out.float().logsumexp(dim=-1).mean()
PIPELINE = {"schedule": "%s", "microbatches": %d}
FSDP_UNITS = ["layers.*"]
TP_PLAN = {"layers.*.fc1": "colwise", "layers.*.fc2": "rowwise"}
def mesh_axes(world_size):
    return %s
"""


def runs_per_capture(monkeypatch, s) -> list:
    """How often the stages' modules run in each stage's capture, in the order of the captures."""
    real, runs = capture_module._capture_rank, []

    def counted(*args, **kwargs):
        calls = s.build_model.__globals__["CALLS"]
        calls.clear()
        out = real(*args, **kwargs)
        runs.append(len(calls))
        return out
    monkeypatch.setattr(capture_module, "_capture_rank", counted)
    return runs


@pytest.mark.parametrize("schedule, stages, tp", [("1F1B", 4, 1), ("1F1B", 6, 1), ("GPipe", 4, 1), ("1F1B", 4, 2)])
def test_sharded_stages_copy_micro_batches_the_same_as_dispatching_all(tmp_path, monkeypatch, schedule, stages, tp):
    # FSDP2 over 2 ranks (and tensor parallelism over 2: the gathered parameters are DTensors, whose first
    # accumulated gradient makes ops of its own, so the warm-up runs micro-batch M - 2 too); 3 micro-batches a stage
    # and twice as many: each stage's module runs as often for both
    world = stages * 2 * tp
    mesh = f'{{"pp": {stages}, "fsdp": 2, "tp": {tp}}}' if tp > 1 else f'{{"pp": {stages}, "fsdp": 2}}'
    counts = []
    for m in (3 * stages, 6 * stages):
        path = tmp_path / f"pp{m}.py"
        path.write_text(textwrap.dedent(MODEL % (2 * stages, 4 * m, schedule, m, mesh)))
        s = load_model_file(str(path))
        runs = runs_per_capture(monkeypatch, s)
        copied = capture(s, world).to_json()
        counts.append(runs)
        monkeypatch.undo()
        dispatching_all(monkeypatch)
        every = capture(s, world).to_json()
        monkeypatch.undo()
        assert copied.pop("memory") == every.pop("memory")
        assert copied == every
    assert counts[0] == counts[1]
    assert max(counts[1]) < 6 * stages   # fewer than one forward for two micro-batches in the two steps


def stage_0_plan(p: int, m: int) -> dict:
    """(kind, micro-batch) -> role of stage 0's calls of p in torch's 1F1B over m micro-batches: p forwards, then a
    backward and a forward in turn, then the backwards left (_sharded_plan)."""
    order = [("forward", k) for k in range(p)]
    f = p
    for b in range(m):
        order.append(("full", b))
        if f < m:
            order.append(("forward", f))
            f += 1
    return {call: role for call, role, _ in ChunkReplay._sharded_plan(order, m)}


def test_the_plan_copies_a_backward_only_with_its_forward_and_its_template_s():
    # stage 0 of 4 in 1F1B over 12 micro-batches: 4 forwards (after a forward: they gather), then 1B1F (forwards
    # after a backward gather nothing), then 3 backwards after backwards
    plan = stage_0_plan(4, 12)
    # the forwards after forwards, after backwards, and those whose backward comes after a backward (the
    # cool-down's: a variant of their own, so that those backwards' template read a forward template's activations)
    assert [plan[("forward", k)] for k in range(12)] == \
        ["real", "template", "check", "copy", "template", "check", "copy", "copy", "copy", "template", "check", "real"]
    # the backwards whose forward gathered, then those whose forward did not, then the cool-down's (after a
    # backward: they gather nothing); here too few to copy one, as micro-batch M - 1 always runs
    assert [plan[("full", k)] for k in range(12)] == \
        ["real", "template", "check", "copy", "template", "check", "copy", "copy", "copy", "template", "check", "real"]
    # 16 micro-batches on stage 0 of 8: the cool-down's 7 backwards copy from their third on, with their forwards
    plan = stage_0_plan(8, m := 16)
    assert [plan[("full", k)] for k in range(9, m)] == ["template", "check", "copy", "copy", "copy", "copy", "real"]
    assert [plan[("forward", k)] for k in range(9, m)] == ["template", "check", "copy", "copy", "copy", "copy", "real"]
