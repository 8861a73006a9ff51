"""A pipeline stage's later micro-batches copied from an earlier one's ops (compiler/frontend/chunk_replay.py).

The workload must be the one that dispatching every micro-batch records, op for op, while the stage's module
runs only for the micro-batches the replay needs (the warm-up's first forward and last, the recorded step's 0, 1, 2
and last); a micro-batch whose ops differ from the template's makes the stage capture again with all dispatched.
"""
import json
import textwrap

import pytest

from astra_compile.compiler.api import api
from astra_compile.compiler.frontend import trace_memory
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import cli, dispatching_all, refused, replay_from_four  # noqa: F401 (autouse fixture)
from helpers import calls_per_capture as _calls_per_capture


@pytest.fixture(autouse=True)
def calls_per_capture(_calls_per_capture):
    """CALLS counts each capture's forwards."""

M, P = 8, 4

MODEL = """
import torch
from torch import nn
from torch.nn import functional as F
LAYERS, D, TOKENS = 8, 64, 32
CALLS = []
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(D), nn.Linear(D, D)
    def forward(self, x):
        return x + F.gelu(self.fc(self.norm(x)))
class Stage(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)
    def forward(self, x):
        CALLS.append(1)
        %s
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
def mesh_axes(world_size):
    return {"pp": %d, "%s": world_size // %d}
FSDP_UNITS = ["layers.*"]
"""


def spec(tmp_path, schedule="1F1B", odd="", axis="dp"):
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(MODEL % (odd or "pass", schedule, M, P, axis, P)))
    return load_model_file(str(path))



# the last stage's capture runs its module for: the probe of its output's shape, the warm-up's micro-batches 0 and
# M - 1, the recorded step's 0, 1, 2 and M - 1, each of its `v` stages (Interleaved1F1B: 2), but the warm-up's
# micro-batch 0 of a stage that is not the last (the chain of stage shapes gives its output); under FSDP2 too (its
# chunks depend on where they fall: each variant has its template, and the last stage's are 1F1B's); under
# LoopedBFS or a zero-bubble schedule (whose copies would not be these ops), for all of them
@pytest.mark.parametrize("schedule, axis, v, replays, sends", [
    ("1F1B", "dp", 1, True, 1), ("GPipe", "dp", 1, True, 1), ("Interleaved1F1B", "dp", 2, True, 3),
    ("1F1B", "fsdp", 1, True, 1), ("LoopedBFS", "dp", 2, False, 3), ("InterleavedZeroBubble", "dp", 2, False, 3),
    ("ZBVZeroBubble", "dp", 2, False, 2)])
def test_replayed_micro_batches_record_the_same_workload(tmp_path, monkeypatch, schedule, axis, v, replays, sends):
    s = spec(tmp_path, schedule, axis=axis)
    replayed = capture(s, 2 * P).to_json()
    assert len(s.build_model.__globals__["CALLS"]) == 1 + (v * (2 + 4) - (v - 1) if replays else v * 2 * M)
    dispatching_all(monkeypatch)
    every = capture(s, 2 * P).to_json()
    assert len(s.build_model.__globals__["CALLS"]) == 1 + v * 2 * M
    assert replayed.pop("memory") == every.pop("memory")   # and test_copied_micro_batches_use_their_templates_memory
    assert replayed == every
    # the last pp coordinate's `sends` messages per micro-batch: 1F1B's last stage its input's gradient; an
    # interleaved rank's stages p - 1 and 2p - 1 also stage p - 1's output; a V's stages p - 1 and p stage p's
    # output and stage p - 1's input gradient (p - 1 to p stays on the rank)
    ops = dict(every["programs"])[2 * (P - 1)]
    assert sum(op["kind"] == "send" for op in ops) == sends * M and len(ops) > 20 * M


def test_zero_bubble_weight_gradients_come_in_one_order(tmp_path):
    # torch groups a stage's parameters in sets ordered by address (weight_grad_order.py): two captures of one
    # file differed in the order of their weight-gradient accumulations
    s = spec(tmp_path, "ZBVZeroBubble")
    assert capture(s, 2 * P).to_json() == capture(s, 2 * P).to_json()


def test_a_backward_out_of_its_forwards_order_is_captured_again_dispatching_all(tmp_path, monkeypatch):
    # LoopedBFS runs a stage's backwards after all its forwards, in another order: copied forwards would
    # meet dispatched backwards, which record nothing on a copy's stand-in output (the capture then lost 52 of 315
    # ops on rank 0); the replay must notice and dispatch every micro-batch instead
    from astra_compile.compiler.frontend import chunk_replay
    monkeypatch.setattr(chunk_replay, "LOOPED", chunk_replay.LOOPED + ("ScheduleLoopedBFS",))
    s = spec(tmp_path, "LoopedBFS")
    replayed = capture(s, 2 * P).to_json()
    dispatching_all(monkeypatch)
    assert capture(s, 2 * P).to_json() == replayed


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_the_warm_up_runs_the_last_backward_only(tmp_path, monkeypatch, schedule):
    """The warm-up dispatches micro-batch 0's forward (for the shapes of its stand-ins) but of the backwards only
    the last, which builds what the recorded step needs (the test above: the same workload and memory as
    dispatching every micro-batch): each stage's backward runs 5 times, the recorded step's 0, 1, 2 and last, but
    stage 2's 3 times: it takes stage 1's templates (test_chunk_lending.py) and runs neither 1 nor 2."""
    from torch.distributed.pipelining import stage as torch_stage
    real, ran = torch_stage.stage_backward, []
    monkeypatch.setattr(torch_stage, "stage_backward", lambda *a, **k: ran.append(1) or real(*a, **k))
    capture(spec(tmp_path, schedule), 2 * P)
    assert len(ran) == P * (1 + 4) - 2


@pytest.mark.parametrize("schedule", ["1F1B", "Interleaved1F1B"])
def test_the_warm_up_sends_and_receives_nothing(tmp_path, monkeypatch, schedule):
    """The warm-up records nothing and its messages would carry fake tensors the schedule has allocated already:
    the schedule's sends and receives are dispatched in the recorded step only, each once (the capture dispatched
    every one twice, 7 % of a 175B GPT's capture)."""
    from torch.distributed.pipelining import schedules
    real, issued = schedules._batch_p2p, []
    monkeypatch.setattr(schedules, "_batch_p2p", lambda ops, desc=None: issued.extend(ops) or real(ops, desc))
    workload = capture(spec(tmp_path, schedule), 2 * P)
    messages = sum(op.kind in ("send", "recv") for ops in workload.programs.values() for op in ops)
    assert len(issued) == messages and messages >= 2 * (P - 1) * M


def test_a_micro_batch_unlike_the_template_is_captured_again_dispatching_all(tmp_path, monkeypatch):
    # the recorded step's micro-batch 1 (the module's fifth call) runs one more op than micro-batch 2
    s = spec(tmp_path, odd="x = x * 2 if len(CALLS) == 5 else x")
    replayed = capture(s, 2 * P).to_json()
    assert len(s.build_model.__globals__["CALLS"]) >= 2 * M   # the last stage's capture dispatched all
    dispatching_all(monkeypatch)
    assert capture(s, 2 * P).to_json() == replayed


def test_a_captured_step_too_large_for_memory_is_refused_before_it_is_lowered(tmp_path, capsys, monkeypatch):
    s = spec(tmp_path)
    w = capture(s, 2 * P)
    ops = sum(map(len, w.programs.values()))
    need = trace_memory.captured_step(w).bytes
    assert need > trace_memory.STEP_BASE + ops * (trace_memory.PER_KEPT_OP + trace_memory.PER_STEP_OP)
    lowered = []
    real = api.lower
    monkeypatch.setattr(api, "lower", lambda *a: lowered.append(1) or real(*a))
    err = refused(capsys, s.path, "--topology", "Ring(2)_Ring(4)", "--max-memory", str(need - 1),
                  match=f"({ops:.3g} ops in {P} program(s))")
    assert "capture a smaller step (fewer micro-batches, layers or pipeline stages)" in err and lowered == []
    code, out, _ = cli(capsys, s.path, "--topology", "Ring(2)_Ring(4)", "--max-memory", str(need), "--json")
    assert code == 0 and json.loads(out)["total_time_us"] > 0 and lowered == [1]


def test_below_replay_from_every_micro_batch_runs_and_memory_is_known(tmp_path, monkeypatch):
    from astra_compile.compiler.frontend import chunk_replay
    monkeypatch.setattr(chunk_replay, "REPLAY_FROM", M + 1)
    s = spec(tmp_path, "1F1B")
    step = capture(s, 2 * P)
    assert len(s.build_model.__globals__["CALLS"]) >= 2 * M
    assert all(m is not None for m in step.memory.values())



# a copy allocates and frees what its template did, on storages of its own (the last stage: its real losses freed by
# the copied backward, its received inputs held by the losses' graphs to the step's end): every storage's allocation
# and free, in order, is the one dispatching every micro-batch records, so the memory per rank is the same
@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_copied_micro_batches_use_their_templates_memory(tmp_path, monkeypatch, schedule):
    from astra_compile.compiler.frontend import step_memory
    sequences, result = [], step_memory.StepMemory.result

    def recorded(memory, *args, **kwargs):
        events = sorted((clock, nbytes, s.tag, when) for nbytes, born, died, s, _ in memory._blocks
                        for clock, when in ((born, "+"), (died, "-")) if clock is not None and clock >= 0)
        sequences.append([e[1:] for e in events])
        return result(memory, *args, **kwargs)
    monkeypatch.setattr(step_memory.StepMemory, "result", recorded)
    s = spec(tmp_path, schedule)
    replayed = capture(s, 2 * P).memory
    copied, sequences[:] = list(sequences), []
    dispatching_all(monkeypatch)
    every = capture(s, 2 * P).memory
    assert copied == sequences and len(copied) == P and all(len(q) > 100 for q in copied)
    assert replayed == every and sorted(every) == [0, 2, 4, 6]
    assert all(m["peak_bytes"] > 0 and m["activations_bytes"] > 0 and m["reserved_bytes"] > 0 for m in every.values())
    if schedule == "1F1B":   # the earlier a 1F1B stage, the more micro-batches in flight at its peak
        assert every[0]["activations_bytes"] > every[4]["activations_bytes"]
