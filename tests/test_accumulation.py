"""Gradient accumulation (frontend/accumulation.py): GRADIENT_ACCUMULATION = M runs forward and backward on M
micro-batches before one optimizer step, the same FLOPs as the whole batch at once; gradients are synchronised in
the last micro-batch only (DDP no_sync, FSDP2 set_requires_gradient_sync(False)), or after each with sync "every".
FSDP2 all-gathers its parameters in every micro-batch either way."""
import collections
import textwrap

import pytest

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import refused

W, B = 64, 8
PARAM_BYTES = 4 * 2 * (W * W + W)


def model(tmp_path, setting: str = "", batch: int = B) -> str:
    path = tmp_path / "accumulate.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn

        {setting}
        FSDP_UNITS = ["0", "2"]


        def build_model():
            return nn.Sequential(nn.Linear({W}, {W}), nn.GELU(), nn.Linear({W}, {W}))


        def example_inputs():
            return torch.randn({batch}, {W})
    """))
    return str(path)


def collectives(path, mesh):
    ops = capture(load_model_file(path), 2, mesh).programs[0]
    calls = collections.Counter((op.collective, op.phase) for op in ops if op.kind == "collective")
    return calls, sum(op.flops for op in ops), sum(op.bytes for op in ops if op.kind == "collective")


@pytest.mark.parametrize("setting, reduces", [("", 1), ("GRADIENT_ACCUMULATION = 4", 1),
                                              ('GRADIENT_ACCUMULATION = {"microbatches": 4, "sync": "every"}', 4)])
def test_ddp_all_reduces_once_or_per_micro_batch(tmp_path, setting, reduces):
    calls, flops, moved = collectives(model(tmp_path, setting), {"dp": 2})
    whole = collectives(model(tmp_path), {"dp": 2})[1]
    assert calls == {("all_reduce", "backward"): reduces}
    assert flops == whole                       # M micro-batches of B/M samples: the batch's FLOPs
    assert moved == reduces * PARAM_BYTES


@pytest.mark.parametrize("setting, scatters", [("GRADIENT_ACCUMULATION = 4", 2),
                                               ('GRADIENT_ACCUMULATION = {"microbatches": 4, "sync": "every"}', 8)])
def test_fsdp_gathers_every_micro_batch_and_scatters_as_asked(tmp_path, setting, scatters):
    calls, _, _ = collectives(model(tmp_path, setting), {"fsdp": 2})
    assert calls == {("all_gather", "forward"): 8, ("all_gather", "backward"): 8,
                     ("reduce_scatter", "backward"): scatters}


@pytest.mark.parametrize("setting, match", [
    ("GRADIENT_ACCUMULATION = 0", "GRADIENT_ACCUMULATION microbatches = 0"),
    ("GRADIENT_ACCUMULATION = 'four'", "GRADIENT_ACCUMULATION = 'four'"),
    ('GRADIENT_ACCUMULATION = {"microbatches": 2, "sync": "never"}', "sync = 'never'"),
    ('GRADIENT_ACCUMULATION = {"micro": 2}', "expected a micro-batch count"),
    ("GRADIENT_ACCUMULATION = 3", "batch of 8, which does not split into GRADIENT_ACCUMULATION = 3"),
])
def test_bad_settings_are_refused_in_one_line(tmp_path, capsys, setting, match):
    refused(capsys, model(tmp_path, setting), "--topology", "Ring(2)", match=match)


def test_refused_with_a_pipeline(tmp_path, capsys):
    path = tmp_path / "pp.py"
    path.write_text(open(model(tmp_path, "GRADIENT_ACCUMULATION = 2")).read() +
                    "\n\ndef pipeline_stage(model, stage, num_stages):\n    return model\n")
    refused(capsys, str(path), "--topology", "Ring(2)", "--mesh", "pp=2", match="set PIPELINE['microbatches']")


# micro-batches 3 to M - 2 copied from micro-batch 1 (chunk_replay.py, from REPLAY_FROM micro-batches): the model
# runs for the warm-up's first and last and the recorded step's 0, 1, 2 and last, and the workload and memory per
# rank are the ones dispatching every micro-batch records, under DDP and FSDP2. DDP synchronising every micro-batch
# rebuilds its buckets in micro-batch 1, so micro-batch 2 is not its copy: the capture notices and dispatches all
@pytest.mark.parametrize("mesh, sync, copies", [({"dp": 2}, "last", True), ({"fsdp": 2}, "last", True),
                                                ({"fsdp": 2}, "every", True), ({"dp": 2}, "every", False)])
def test_copied_micro_batches_record_what_dispatching_each_does(tmp_path, monkeypatch, mesh, sync, copies):
    from astra_compile.compiler.frontend import capture as capture_module, chunk_replay
    micro = 8
    monkeypatch.setattr(chunk_replay, "REPLAY_FROM", micro)
    path = tmp_path / "counted.py"
    path.write_text(open(model(tmp_path, f'GRADIENT_ACCUMULATION = {{"microbatches": {micro}, "sync": "{sync}"}}',
                               batch=2 * micro)).read() + textwrap.dedent("""
        CALLS = []
        _built = build_model
        def build_model():
            CALLS.clear()
            m = _built()
            m.register_forward_pre_hook(lambda *a: CALLS.append(1))
            return m
    """))
    spec = load_model_file(str(path))
    copied = capture(spec, 2, mesh)
    assert len(spec.build_model.__globals__["CALLS"]) == (2 + 4 if copies else 2 * micro)
    real = capture_module._capture_rank
    monkeypatch.setattr(capture_module, "_capture_rank", lambda *a, replay=True, **k: real(*a, replay=False, **k))
    every = capture(spec, 2, mesh)
    assert len(spec.build_model.__globals__["CALLS"]) == 2 * micro
    assert copied.to_json() == every.to_json()
    assert every.memory[0]["peak_bytes"] > 0
