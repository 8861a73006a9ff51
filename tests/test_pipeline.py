"""Pipeline parallelism from a model file (a pp mesh axis, torch.distributed.pipelining's GPipe and 1F1B).

The formula test: 4 stages of equal layers, 8 micro-batches. Each stage's forward and backward time per
micro-batch (tf, tb) is read from its own recorded program (the compute the roofline gives its ops), the message
time `a` from the network (one routed hop); the schedule then has to give the textbook pipeline:

    step = (m + p - 1) (tf + tb)  +  2 (m + p - 2) a  +  optimizer

the bubble (p - 1) / (m + p - 1) of the compute, plus the activation and gradient messages on the critical path
(a stage posts the receive of micro-batch k + 1 after its compute of k, so each one it waits for is exposed).
"""
import logging
import textwrap

import pytest

import astra_compile
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.workload import COMPUTE, RECV, SEND
from astra_compile.network.errors import UserError

from helpers import refused

P, M = 4, 8

MODEL = """
import torch
from torch import nn
LAYERS, D, TOKENS = 16, 4096, 1024
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(D, D, bias=False) for _ in range(LAYERS))
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
def build_model():
    return Net()
def example_inputs():
    return torch.randn(TOKENS, D)
def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages
    return nn.Sequential(*model.layers[stage * per:(stage + 1) * per])
def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
PIPELINE = {"schedule": "%s", "microbatches": %d}
def mesh_axes(world_size):
    return {"pp": %d}
"""


def model_file(tmp_path, schedule: str, micro: int = M, name: str = "pp.py", extra: str = "") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(MODEL % (schedule, micro, P)) + extra)
    return str(path)


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_the_step_is_the_pipeline_formula(tmp_path, schedule):
    path = model_file(tmp_path, schedule)
    reports = [astra_compile.compile(path, "Ring(4)", bandwidth="1600", rank=r) for r in range(P)]
    step = reports[0].total_time_us
    assert all(r.total_time_us == step for r in reports)
    phase = [{p["phase"]: p["compute_us"] for p in r["phases"]} for r in reports]
    tf = max(ph["forward"] for ph in phase) / M
    tb = max(ph["backward"] for ph in phase) / M
    a = [c for c in reports[0].collectives if c["kind"] == "send"][0]["time_us"]
    assert [c["algorithm"] for c in reports[1].collectives if c["kind"] == "send"][0] == "routed 1 hop"
    optimizer = max(ph["optimizer"] for ph in phase)
    formula = (M + P - 1) * (tf + tb) + 2 * (M + P - 2) * a + optimizer
    assert step == pytest.approx(formula, rel=0.02), (step, formula, tf, tb, a, optimizer)
    bubble = 1 - M * (tf + tb) / (step - optimizer - 2 * (M + P - 2) * a)
    assert bubble == pytest.approx((P - 1) / (M + P - 1), rel=0.05)


def test_each_stage_is_one_program_standing_for_its_ranks(tmp_path):
    path = model_file(tmp_path, "1F1B")
    spec = load_model_file(path)
    w = capture(spec, 8, {"pp": P, "dp": 2})
    assert w.spmd and sorted(w.programs) == [0, 2, 4, 6]
    assert w.stands_for == {0: [0, 1], 2: [2, 3], 4: [4, 5], 6: [6, 7]}
    for s, rank in enumerate(sorted(w.programs)):
        ops = w.programs[rank]
        sends = [op for op in ops if op.kind == SEND]
        recvs = [op for op in ops if op.kind == RECV]
        # activations forward and gradients back, one per micro-batch each way
        assert len(sends) == (M if s < P - 1 else 0) + (M if s > 0 else 0)
        assert len(recvs) == len(sends)
        assert {op.peer for op in sends + recvs} == {r for r in (rank - 2, rank + 2) if 0 <= r < 8}
        assert all(op.bytes == 4 * 1024 // M * 4096 for op in sends)
        dp = [op for op in ops if op.kind not in (COMPUTE, SEND, RECV) and op.group]
        assert {op.group for op in dp if op.collective == "all_reduce"} == {(rank, rank + 1)}
    # the DDP gradient all-reduce runs on the stage's own dp group: one bucket per stage of 2 layers
    report = astra_compile.compile(path, "Ring(2)_Ring(4)", mesh="pp=4,dp=2")
    kinds = {(c["kind"], c["group"]) for c in report.collectives}
    assert ("all_reduce", "dp") in kinds and ("send", "p2p") in kinds
    # rank 3 runs stage 1's program (captured on rank 2): its report details that program
    third = astra_compile.compile(path, "Ring(2)_Ring(4)", mesh="pp=4,dp=2", rank=3)
    second = astra_compile.compile(path, "Ring(2)_Ring(4)", mesh="pp=4,dp=2", rank=2)
    assert third.collectives == second.collectives != report.collectives
    with pytest.raises(UserError, match="rank 8 is not among the workload's programs"):
        astra_compile.compile(path, "Ring(2)_Ring(4)", mesh="pp=4,dp=2", rank=8)


def test_pipeline_mistakes_are_one_line(tmp_path, capsys):
    path = model_file(tmp_path, "Zigzag")
    refused(capsys, path, "--topology", "Ring(4)", match="PIPELINE['schedule'] = 'Zigzag': expected GPipe, 1F1B, Interleaved1F1B")
    path = model_file(tmp_path, "GPipe", micro=3)
    refused(capsys, path, "--topology", "Ring(4)", match="batch of 1024, which does not split into")
    path = model_file(tmp_path, "GPipe", extra="del pipeline_stage\n")
    refused(capsys, path, "--topology", "Ring(4)", match="defines neither pipeline_stage(model, stage, num_stages) nor a parallelize(module, mesh)")
    path = model_file(tmp_path, "GPipe", extra="def pipeline_stage(model, stage, num_stages):\n    return 3\n")
    refused(capsys, path, "--topology", "Ring(4)", match="returned int, not an nn.Module")
    with pytest.raises(UserError, match="expected a count from 1 to 4096"):
        astra_compile.compile(model_file(tmp_path, "GPipe", micro=0), "Ring(4)")


FSDP_BF16 = """
import torch
from torch import nn
D, TOKENS = 1024, 256
def build_model():
    return nn.Sequential(*(nn.Linear(D, D, bias=False) for _ in range(4)))
def example_inputs():
    return torch.randn(TOKENS, D)
def pipeline_stage(model, stage, num_stages):
    return nn.Sequential(*model[2 * stage:2 * stage + 2])
def parallelize(stage, mesh):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard(stage, mesh=mesh["dp"], mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16%s))
def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
PIPELINE = {"schedule": "1F1B", "microbatches": 4}
def mesh_axes(world_size):
    return {"pp": 2, "dp": world_size // 2}
"""


@pytest.mark.parametrize("output, width", [("", 2), (", output_dtype=torch.float32", 4)])
def test_a_stage_sends_what_its_fsdp_mixed_precision_computes(tmp_path, output, width):
    """The simple way learns a stage's output from its module before it is parallelized (fp32 here); FSDP2's
    MixedPrecisionPolicy then computes it in bf16 (or in its output_dtype), and the next stage must receive that:
    before, the bf16 activation met an fp32 receive and the capture stopped at the message match."""
    path = tmp_path / "pp_fsdp.py"
    path.write_text(textwrap.dedent(FSDP_BF16 % output))
    w = capture(load_model_file(str(path)), 4, None)
    for rank, ops in w.programs.items():
        messages = [op for op in ops if op.kind in (SEND, RECV)]
        assert len(messages) == 8   # 4 activations and 4 gradients each way
        assert {op.bytes for op in messages} == {width * 256 // 4 * 1024}
    assert astra_compile.compile(str(path), "Ring(4)").total_time_us > 0   # the sends meet their receives


SEQUENCE_PARALLEL = """
import torch
from torch import nn
D, SEQ = 512, 256
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(D), nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)
    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))
def build_model():
    return nn.Sequential(nn.Linear(D, D, bias=False), *(Block() for _ in range(4)))
def example_inputs():
    return torch.randn(4, SEQ, D)
def pipeline_stage(model, stage, num_stages):
    return model[:3] if stage == 0 else model[3:]
def parallelize(stage, mesh):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module
    blocks = [m for m in stage if isinstance(m, Block)]
    if len(blocks) < len(stage):   # the input layer (an embedding's place) scatters the sequence
        parallelize_module(stage[0], mesh["tp"], RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)))
    for block in blocks:   # Megatron's sequence parallelism: the norm on a slice of the sequence, gathered for up
        parallelize_module(block, mesh["tp"], {"norm": SequenceParallel(),
                                               "up": ColwiseParallel(input_layouts=Shard(1)),
                                               "down": RowwiseParallel(output_layouts=Shard(1))})
    return stage
def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
PIPELINE = {"schedule": "1F1B", "microbatches": 4}
def mesh_axes(world_size):
    return {"pp": 2, "tp": world_size // 2}
"""


def test_a_stage_with_sequence_parallelism_hands_on_its_slice_of_the_sequence(tmp_path):
    """Under sequence parallelism each tensor-parallel rank of a stage hands on its 1/tp slice of the sequence. The
    capture learned a pipeline_stage() stage's hand-off from its module before parallelize (the whole sequence):
    the next stage received 4x the bytes and the first backward stopped on torch's shape mismatch. The warm-up now
    checks each stage's output against that chain and, where it differs, finds the chain from the parallelized
    stages (as for a file that builds its own)."""
    path = tmp_path / "pp_sp.py"
    path.write_text(textwrap.dedent(SEQUENCE_PARALLEL))
    w = capture(load_model_file(str(path)), 8, None)
    for rank, ops in w.programs.items():
        messages = [op for op in ops if op.kind in (SEND, RECV)]
        assert len(messages) == 8   # 4 activations and 4 gradients each way
        assert {op.bytes for op in messages} == {256 // 4 * 512 * 4}   # one sequence's SEQ / tp x D, fp32
    assert astra_compile.compile(str(path), "Ring(8)").total_time_us > 0   # the sends meet their receives


def test_a_stage_failing_inside_the_schedule_is_one_line_with_its_cause(tmp_path, capsys):
    """torch's PipelineStage re-raises a stage's error as "[Stage 0] failed to run forward:" followed by its
    arguments, the error itself only chained (`from e`), and its schedule logs its whole action table: the line
    named the wrapper without the cause, under some 30 lines of torch's log."""
    path = model_file(tmp_path, "Interleaved1F1B", extra=textwrap.dedent("""
        class Broken(nn.Module):
            def __init__(self, stage):
                super().__init__()
                self.stage = stage
            def forward(self, x):
                raise ValueError("no kernel for this layer")
        def parallelize(stage, mesh):
            return Broken(stage)
        """))
    logged = []
    log = logging.getLogger("torch.distributed.pipelining.schedules")
    handler = logging.Handler()
    handler.emit = logged.append
    log.addHandler(handler)
    try:
        err = refused(capsys, path, "--topology", "Ring(4)",
                      match="failed to run forward: ValueError: no kernel for this layer")
    finally:
        log.removeHandler(handler)
    assert "[Stage 0]" in err and not logged
