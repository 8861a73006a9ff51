"""The calibration set's model files (benchmarks/published/, docs/published-runs.md) capture the runs their sources
describe: Megatron's GPT does the FLOPs of Megatron's own formula (the recomputed forward of full activation
checkpointing included) and Megatron's tensor-parallel all-reduces."""
import os
import warnings

import pytest

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

PUBLISHED = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "published")


def megatron_flops(layers, hidden, batch=16, seq=1024, vocab=51200):
    """Megatron-LM's FLOPs per iteration with full recomputation (its README's 2020 table)."""
    return 96 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def test_megatron_gpt_2b_on_tp2(monkeypatch):
    monkeypatch.setenv("MEGATRON_SIZE", "2b")
    with warnings.catch_warnings():   # torch warns of a collective autograd would differentiate (none here)
        warnings.simplefilter("error", UserWarning)
        w = capture(load_model_file(os.path.join(PUBLISHED, "megatron_gpt.py")), 2, {"dp": 1, "tp": 2})
    ops = w.programs[0]
    flops = sum(op.flops for op in ops if op.kind == "compute")
    assert flops == pytest.approx(megatron_flops(30, 2304) / 2, rel=1e-3)   # per rank of TP 2
    assert {op.dtype for op in ops if op.kind == "compute" and op.name == "aten.mm.default"} == {"fp16"}
    reduces = sorted(op.bytes for op in ops if op.kind == "collective" and op.collective == "all_reduce")
    activation = 16 * 1024 * 2304 * 2   # an fp16 [batch, seq, hidden]
    # per layer: 2 in the forward (g), 2 in its recomputation, 2 in the backward (f); the vocab-parallel embedding's
    # forward and the output layer's input gradient; the cross-entropy's max, target logit and sum of exponentials
    # (fp32 per token); the gradient norm
    assert reduces == [4] + [16 * 1024 * 4] * 3 + [activation] * (30 * 6 + 2)


def megatron_module(monkeypatch, size):
    """megatron_gpt.py imported as a module of its own at one MEGATRON_SIZE."""
    import importlib.util
    monkeypatch.setenv("MEGATRON_SIZE", size)
    spec = importlib.util.spec_from_file_location(f"_megatron_{size}", os.path.join(PUBLISHED, "megatron_gpt.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("size, tp", [("1b", [1]), ("2b", [1, 2]), ("8b", [1, 2, 4, 8])])
def test_megatron_plan_space_splits_whole_heads(monkeypatch, size, tp):
    # plan weighs every tensor-parallel size Megatron allows (the 1B's 15 heads, the 2B's 18, the 8B's 32), not
    # only the published run's; the file's own full checkpointing stays the only one
    assert megatron_module(monkeypatch, size).plan_space() == {"axes": ["dp", "tp"], "tp": tp,
                                                                "checkpointing": ["none"]}


def test_megatron_cross_entropy_in_place_is_the_cross_entropy(monkeypatch):
    # the file's vocab-parallel cross-entropy works on its fp32 copy in place, as Megatron's (its memory, not its
    # arithmetic, is the point): loss and fp16 gradient are torch's on one rank's whole vocabulary
    import torch
    module = megatron_module(monkeypatch, "1b")
    torch.manual_seed(0)
    logits = (4 * torch.randn(3, 5, 37)).half().requires_grad_()
    labels = torch.randint(0, 37, (3, 5))
    loss = module._VocabParallelCrossEntropy.apply(logits, labels, None, 0)
    (loss * torch.arange(15.0).view(3, 5)).sum().backward()
    same = logits.detach().clone().requires_grad_()
    expected = torch.nn.functional.cross_entropy(same.float().transpose(1, 2), labels, reduction="none")
    (expected * torch.arange(15.0).view(3, 5)).sum().backward()
    assert torch.allclose(loss, expected, atol=1e-5)
    assert logits.grad.dtype == torch.float16 and torch.allclose(logits.grad, same.grad, atol=1e-3)

@pytest.mark.parametrize("name, pipeline", [("gpt3_175b_megatron.py", "Interleaved1F1B"), ("bloom_176b.py", "1F1B"),
                                            ("llama3_405b.py", "Interleaved1F1B")])
def test_the_papers_runs_load_from_a_clone(name, pipeline):
    # they load benchmarks/models/megatron_pipeline.py and the calibration files beside them: an installed (not
    # editable) package holds no benchmarks, so a path from astra_compile's own folder finds nothing there
    spec = load_model_file(os.path.join(PUBLISHED, "..", "models", name))
    assert spec.pipeline["schedule"] == pipeline and spec.pipeline["microbatches"] >= 16
