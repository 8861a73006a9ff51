"""FSDP2 x tensor parallel (SequenceParallel) on a Llama-style model: examples/llama_fsdp_tp.py.

Every collective of the captured step is derived here by hand from the model's sizes and the parallelism APIs'
rules, and the capture is checked against a real 4-rank run of the same file (gloo on loopback, dp=2 x tp=2)
recorded with ExecutionTraceObserver: the same collectives in the same order, each on the same process group and
in the same part of the step (forward, backward).
"""
import collections
import importlib.util
import os

import pytest

import astra_compile
from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.workload import COLLECTIVE

from helpers import gloo_worker, run_gloo_job

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "llama_fsdp_tp.py")
SIZES = "VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ, BATCH = "
# tiny: VOCAB / tp = 126 rows of the embedding and output shards, not a multiple of dp = 4: FSDP2 pads them
TINY = SIZES + "504, 64, 8, 4, 96, 2, 16, 2"
F32 = 4


def tiny_model(tmp_path, loss_parallel: bool = False) -> str:
    text = open(EXAMPLE).read()
    line = next(line for line in text.splitlines() if line.startswith(SIZES))
    text = text.replace(line, TINY)
    if loss_parallel:   # vocab-sharded logits and the cross-entropy computed on the shards (torchtitan's option)
        for old, new in LOSS_PARALLEL:
            assert old in text
            text = text.replace(old, new)
    path = tmp_path / ("llama_loss_parallel.py" if loss_parallel else "llama_tiny.py")
    path.write_text(text)
    return str(path)


LOSS_PARALLEL = [
    ("output_layouts=Replicate(), use_local_output=False)", "output_layouts=Shard(-1), use_local_output=False)"),
    ("    return logits.float().logsumexp(dim=-1).mean()\n",
     "    return F.cross_entropy(logits.flatten(0, 1), torch.randint(0, VOCAB, (BATCH * SEQ,)))\n\n\n"
     "def step_context():\n"
     "    from torch.distributed.tensor.parallel import loss_parallel\n"
     "    return loss_parallel()\n"),
]


def constants(path):
    spec = importlib.util.spec_from_file_location("llama_sizes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def derive(c, dp: int, tp: int) -> collections.Counter:
    """(kind, axis, bytes) -> count for one training step, by hand.

    tp (DTensor, SequenceParallel): the activation between blocks is Shard(1) (sequence); each block all-gathers
    it before attention and before the feed-forward (PrepareModuleInput Shard(1) -> Replicate) and
    reduce-scatters wo's and w2's partial sums back to Shard(1) (RowwiseParallel, output Shard(1)); backward
    swaps the two. The embedding (RowwiseParallel, output Shard(1)) reduce-scatters forward / all-gathers
    backward; the output projection (ColwiseParallel, input Shard(1)) all-gathers its input forward and
    reduce-scatters its gradient backward, and all-gathers the vocab-sharded logits to Replicate. The norms'
    weights are replicated over tp while their inputs are sequence shards: each weight's gradient is a partial
    sum, all-reduced over tp.
    dp (FSDP2): each block is one FSDP unit, the root (embedding, final norm, output) another. A unit's
    all-gather holds its parameters' TP shards, each padded on dim 0 to a multiple of dp; blocks are gathered
    before forward and again before backward (resharded after forward), the root once (it keeps its
    parameters for backward); each unit reduce-scatters its gradients once.
    """
    hd = c.DIM // c.HEADS
    layers = c.LAYERS

    def padded(rows, cols=1):
        return -(-rows // dp) * dp * cols * F32

    block = (padded(c.HEADS * hd // tp, c.DIM) + 2 * padded(c.KV_HEADS * hd // tp, c.DIM)   # wq, wk, wv
             + padded(c.DIM, c.HEADS * hd // tp)                                            # wo: row shards
             + 2 * padded(c.FFN // tp, c.DIM) + padded(c.DIM, c.FFN // tp)                   # w1, w3, w2
             + 2 * padded(c.DIM))                                                           # two norms
    root = 2 * padded(c.VOCAB // tp, c.DIM) + padded(c.DIM)   # embedding, output (vocab shards), final norm
    act = c.BATCH * c.SEQ * c.DIM * F32
    return collections.Counter({
        ("all_gather", "tp", act): 4 * layers + 2,
        ("reduce_scatter", "tp", act): 4 * layers + 2,
        ("all_gather", "tp", c.BATCH * c.SEQ * c.VOCAB * F32): 1,
        ("all_reduce", "tp", c.DIM * F32): 2 * layers + 1,
        ("all_gather", "dp", block): 2 * layers,
        ("reduce_scatter", "dp", block): layers,
        ("all_gather", "dp", root): 1,
        ("reduce_scatter", "dp", root): 1,
    })


def counted(report) -> collections.Counter:
    return collections.Counter((c["kind"], c["group"], c["bytes"]) for c in report.collectives)


def test_every_collective_matches_the_hand_derivation_tiny_and_full_size(tmp_path):
    path = tiny_model(tmp_path)
    report = astra_compile.compile(path, "4x4_torus", mesh="dp=4,tp=4")
    assert counted(report) == derive(constants(path), dp=4, tp=4)
    # the example as shipped, on the topology its docstring names: dp=8 x tp=8
    report = astra_compile.compile(EXAMPLE, "8x8_torus")
    assert counted(report) == derive(constants(EXAMPLE), dp=8, tp=8)
    by_group = {c["group"]: c["dims"] for c in report.collectives}
    assert by_group == {"tp": [0], "dp": [1]}
    assert report.total_time_us > report.compute_time_us > 0


WORKER = gloo_worker(4, args=("out", "path"), mesh={"dp": 2, "tp": 2})   # one warm-up step, as the capture does


def run_on_gloo(d, path: str) -> list[str]:
    run_gloo_job(d, WORKER, 4, lambda r: [d / f"trace_rank{r}.json", path])
    return [str(d / f"trace_rank{r}.json") for r in range(4)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama_gloo")
    path = tiny_model(d)
    return path, run_on_gloo(d, path)


def sequence(ops) -> list[tuple]:
    return [(op.collective, op.bytes, op.group, op.phase) for op in ops if op.kind == COLLECTIVE]


def flops_by_phase(ops) -> dict:
    out = collections.Counter()
    for op in ops:
        out[op.phase] += op.flops
    return dict(out)


def test_dtensor_compute_in_the_trace_counts_local_flops(recorded):
    """The trace records each DTensor op on global shapes with DTensor's calls on this rank's shards nested under
    it: the importer counts the local calls, so a rank's FLOPs, part by part, are the capture's (which records
    local calls only), not tp times more."""
    path, traces = recorded
    captured = flops_by_phase(load_workload(path, 4, {"dp": 2, "tp": 2}).programs[0])
    real = load_traces(traces)
    assert captured["forward"] > 0 and captured["backward"] > captured["forward"]
    for r in range(4):
        assert flops_by_phase(real.programs[r]) == captured, f"rank {r}"


def test_capture_matches_a_real_gloo_run_collective_by_collective(recorded):
    path, traces = recorded
    captured = sequence(load_workload(path, 4, {"dp": 2, "tp": 2}).programs[0])
    real = load_traces(traces)
    assert len(captured) == sum(derive(constants(path), dp=2, tp=2).values())
    # rank 0's groups: tp = {0, 1} (the last mesh axis varies fastest), dp = {0, 2}
    assert sequence(real.programs[0]) == captured
    assert {g for _, _, g, _ in captured} == {(0, 1), (0, 2)}
    assert {p for *_, p in captured} == {"forward", "backward"}
    # every other rank: the same collectives in the same order, each on that rank's own dp or tp group
    for r in range(1, 4):
        tp = tuple(sorted((r // 2 * 2, r // 2 * 2 + 1)))
        dp = tuple(sorted((r % 2, r % 2 + 2)))
        expect = [(k, b, tp if g == (0, 1) else dp, p) for k, b, g, p in captured]
        assert sequence(real.programs[r]) == expect, f"rank {r}"


def test_loss_parallel_through_step_context_matches_a_real_gloo_run(tmp_path):
    """The model file's step_context() (loss_parallel here) wraps forward, loss and backward as the training loop
    does: the logits stay vocab-sharded (no all-gather of them) and the cross-entropy all-reduces its per-token
    statistics over tp, collective by collective as in the real run."""
    path = tiny_model(tmp_path, loss_parallel=True)
    captured = sequence(load_workload(path, 4, {"dp": 2, "tp": 2}).programs[0])
    real = load_traces(run_on_gloo(tmp_path, path))
    assert sequence(real.programs[0]) == captured
    c = constants(path)
    logits = c.BATCH * c.SEQ * c.VOCAB * F32
    assert not [x for x in captured if x[1] == logits]                       # no gathered logits
    per_token = [x for x in captured if x[:2] == ("all_reduce", c.BATCH * c.SEQ * F32)]
    assert per_token and all(x[2] == (0, 1) for x in per_token)              # over tp
