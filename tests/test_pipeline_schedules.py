"""Pipeline schedules written the torch way (tutorials, torchtitan): the model file's parallelize(module, mesh)
builds this rank's PipelineStage(s) and returns a torch.distributed.pipelining schedule object, which the capture
follows (compiler/frontend/pipeline_schedule.py); and the same schedules named in PIPELINE.

Every schedule torch ships runs on 4 pp ranks: each rank's program holds its stages' forwards and backwards for
every micro-batch, a message for every activation and gradient crossing ranks, paired between programs; the
interleaved schedule's bubble is 1/v of 1F1B's for the same work, and a zero-bubble schedule's weight step is
recorded as backward.
"""
import textwrap
from collections import Counter

import pytest

import astra_compile
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.workload import COMPUTE, RECV, SEND

from helpers import refused

P, LAYERS = 4, 16

# torchtitan's layout of stage ids on the pp ranks: looped (rank, rank + pp, ...) or V-shaped (rank, 2 pp - 1 - rank)
TORCH_WAY = """
import torch
from torch import nn
from torch.distributed import pipelining
LAYERS, D, TOKENS, SCHEDULE, V, M = %d, %d, %d, %r, %d, %d
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
def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
def mesh_axes(world_size):
    return {"pp": %d}
def stage_ids(rank, pp):
    if SCHEDULE in ("ZBVZeroBubble", "DualPipeV"):
        return [rank, 2 * pp - 1 - rank]
    return [rank + v * pp for v in range(V)]
def parallelize(model, mesh):
    pp = mesh["pp"]
    n = pp.size() * V
    per = LAYERS // n
    stages = [pipelining.PipelineStage(nn.Sequential(*model.layers[k * per:(k + 1) * per]), k, n,
                                       torch.device("cpu"), group=pp.get_group())
              for k in stage_ids(pp.get_local_rank(), pp.size())]
    kind = getattr(pipelining, "Schedule" + SCHEDULE)
    return kind(stages[0] if V == 1 else stages, M, loss_fn=lambda out, target: out.sum())
"""

SIMPLE_WAY = """
import torch
from torch import nn
LAYERS, D, TOKENS = %d, %d, %d
PIPELINE = {"schedule": %r, "virtual_stages": %d, "microbatches": %d}
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
def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
def mesh_axes(world_size):
    return {"pp": %d}
def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages
    return nn.Sequential(*model.layers[stage * per:(stage + 1) * per])
"""

SCHEDULES = [("GPipe", 1), ("1F1B", 1), ("Interleaved1F1B", 2), ("LoopedBFS", 2), ("InterleavedZeroBubble", 2),
             ("ZBVZeroBubble", 2), ("DualPipeV", 2)]


def model_file(tmp_path, schedule: str, v: int, m: int, d: int = 64, tokens: int = 64, way: str = TORCH_WAY,
               extra: str = "", name: str = "pp.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(way % (LAYERS, d, tokens, schedule, v, m, P)) + extra)
    return str(path)


def owners(schedule: str, v: int) -> dict:
    """stage index -> pp rank, as torch lays the stages out"""
    n = P * v
    if schedule in ("ZBVZeroBubble", "DualPipeV"):
        return {k: k if k < P else n - 1 - k for k in range(n)}
    return {k: k % P for k in range(n)}


@pytest.mark.parametrize("schedule,v", SCHEDULES)
def test_each_schedule_runs_every_stage_of_its_ranks(tmp_path, schedule, v):
    m, d, tokens = 8, 64, 64
    w = capture(load_model_file(model_file(tmp_path, schedule, v, m)), P)
    assert sorted(w.programs) == list(range(P)) and w.stands_for == {r: [r] for r in range(P)}
    owner, n = owners(schedule, v), P * v
    message = 4 * tokens // m * d   # one micro-batch's activation (and its gradient), fp32
    for rank, ops in w.programs.items():
        held = [k for k in range(n) if owner[k] == rank]
        # every held stage runs its layers' forward for every micro-batch (a matmul per layer)
        forwards = [op for op in ops if op.kind == COMPUTE and op.name == "aten.mm.default" and op.phase == "forward"]
        assert len(forwards) == m * len(held) * (LAYERS // n)
        # backward: the weight gradient of every layer, the input gradient of all but stage 0's first layer
        backwards = [op for op in ops if op.kind == COMPUTE and op.name == "aten.mm.default" and op.phase == "backward"]
        assert len(backwards) == m * len(held) * 2 * (LAYERS // n) - (m if 0 in held else 0)
        expected = Counter()
        for k in held:   # activations forward, gradients back, one each per micro-batch, to the neighbouring stage
            if k > 0 and owner[k - 1] != rank:
                expected[(RECV, owner[k - 1], "forward")] += m
                expected[(SEND, owner[k - 1], "backward")] += m
            if k < n - 1 and owner[k + 1] != rank:
                expected[(SEND, owner[k + 1], "forward")] += m
                expected[(RECV, owner[k + 1], "backward")] += m
        assert Counter((op.kind, op.peer, op.phase) for op in ops if op.kind in (SEND, RECV)) == expected
        assert {op.bytes for op in ops if op.kind in (SEND, RECV)} == {message}
    # each send meets a receive posted for it: per ordered pair of ranks, as many of each
    sends = Counter((r, op.peer) for r, ops in w.programs.items() for op in ops if op.kind == SEND)
    recvs = Counter((op.peer, r) for r, ops in w.programs.items() for op in ops if op.kind == RECV)
    assert sends == recvs


@pytest.mark.parametrize("schedule,v", [("Interleaved1F1B", 2), ("ZBVZeroBubble", 2), ("1F1B", 1)])
def test_pipeline_dict_gives_the_programs_the_torch_way_gives(tmp_path, schedule, v):
    """PIPELINE = {"schedule": ..., "virtual_stages": v} builds the PipelineStages and schedule a file written the
    torch way builds: the same programs, op for op."""
    torch_way = capture(load_model_file(model_file(tmp_path, schedule, v, 4, name="a.py")), P)
    simple = capture(load_model_file(model_file(tmp_path, schedule, v, 4, way=SIMPLE_WAY, name="b.py")), P)

    def outline(w):
        return {r: [(op.kind, op.name, op.phase, op.peer, op.bytes, op.flops, op.deps) for op in ops]
                for r, ops in w.programs.items()}
    assert outline(simple) == outline(torch_way)


def _bubble(path: str) -> tuple[float, float]:
    """(step time, bubble time): the step less the optimizer and the stage's forward and backward compute (tf + tb
    per micro-batch on the busiest rank, as tests/test_pipeline.py reads them)."""
    reports = [astra_compile.compile(path, "Ring(4)", bandwidth="1600", rank=r) for r in range(P)]
    phases = [{p["phase"]: p["compute_us"] for p in r["phases"]} for r in reports]
    work = max(ph["forward"] + ph["backward"] for ph in phases)
    optimizer = max(ph["optimizer"] for ph in phases)
    return reports[0].total_time_us, reports[0].total_time_us - optimizer - work


def test_interleaving_shrinks_the_bubble_to_one_over_v(tmp_path):
    """Same model, same 8 micro-batches on 4 ranks: 1F1B's bubble is (p - 1)(tf + tb), interleaved 1F1B's with v = 2
    stages per rank (each half the work) (p - 1)(tf + tb) / v, the textbook (p - 1)/m against (p - 1)/(v m). The
    messages on the critical path add to both (20 for 1F1B, 2 (m + p - 2); more, each half the wait, for the
    interleaved), so the ratio is 1/v within 0.1. Zero-bubble (looped or V-shaped) fills the rest of the bubble
    with weight steps (measured: 1F1B 9286 us, Interleaved1F1B 8048, ZBVZeroBubble 7443, InterleavedZeroBubble
    7075)."""
    m = 8
    kw = dict(m=m, d=4096, tokens=1024)
    step1, bubble1 = _bubble(model_file(tmp_path, "1F1B", 1, name="a.py", **kw))
    step2, bubble2 = _bubble(model_file(tmp_path, "Interleaved1F1B", 2, name="b.py", **kw))
    step3, bubble3 = _bubble(model_file(tmp_path, "InterleavedZeroBubble", 2, name="c.py", **kw))
    step4, _ = _bubble(model_file(tmp_path, "ZBVZeroBubble", 2, name="d.py", **kw))
    work = step1 - bubble1
    assert bubble1 / work == pytest.approx((P - 1) / m, abs=0.08)   # 0.375 without messages
    assert bubble2 / bubble1 == pytest.approx(1 / 2, abs=0.1)
    assert step3 < step2 < step1 and step4 < step2
    assert bubble3 < bubble2 / 2


def test_zero_bubble_weight_steps_are_backward(tmp_path):
    """InterleavedZeroBubble splits each backward into the input gradient (autograd's pass) and the weight step,
    which adds the weight gradients into .grad outside the pass: recorded as backward all the same, so each
    phase's compute is the interleaved 1F1B's."""
    def phases(path):
        w = capture(load_model_file(path), P)
        return [{ph: sum(op.flops for op in ops if op.kind == COMPUTE and op.phase == ph) for ph in
                 ("forward", "backward")} | {"adds": sum(op.name == "aten.add_.Tensor" and op.phase == "forward"
                                                          for op in ops)} for ops in w.programs.values()]
    zb = phases(model_file(tmp_path, "InterleavedZeroBubble", 2, 4, name="a.py"))
    plain = phases(model_file(tmp_path, "Interleaved1F1B", 2, 4, name="b.py"))
    assert zb == plain
    assert all(p["adds"] == 0 for p in zb)


def test_schedules_the_capture_cannot_follow_are_one_line(tmp_path, capsys):
    path = model_file(tmp_path, "1F1B", 1, 8, extra=textwrap.dedent("""
        class MySchedule(pipelining.Schedule1F1B):
            pass
        pipelining.ScheduleMine = MySchedule
        SCHEDULE = "Mine"
        """))
    refused(capsys, path, "--topology", "Ring(4)",
            match="the schedule is a MySchedule, which the capture cannot follow")
    path = model_file(tmp_path, "1F1B", 1, 8, extra=textwrap.dedent("""
        def parallelize(model, mesh):   # a single-stage schedule, but 8 stages on 4 ranks
            pp = mesh["pp"]
            r = pp.get_local_rank()
            stage = pipelining.PipelineStage(nn.Sequential(model.layers[r]), r, 8, torch.device("cpu"),
                                             group=pp.get_group())
            return pipelining.Schedule1F1B(stage, M, loss_fn=lambda out, target: out.sum())
        """))
    refused(capsys, path, "--topology", "Ring(4)",
            match="the schedule has 8 stages and pp coordinate 0 holds 1 of them")
    path = model_file(tmp_path, "1F1B", 1, 5)
    refused(capsys, path, "--topology", "Ring(4)",
            match="batch of 64, which does not split into the schedule's n_microbatches = 5 equal micro-batches")
    path = model_file(tmp_path, "1F1B", 1, 8, extra=textwrap.dedent("""
        def mesh_axes(world_size):
            return {"pp": 4, "dp": 2}
        def parallelize(model, mesh):   # the stages talk over the dp axis's group
            pp, dp = mesh["pp"], mesh["dp"]
            r, per = pp.get_local_rank(), LAYERS // 4
            stage = pipelining.PipelineStage(nn.Sequential(*model.layers[r * per:(r + 1) * per]), r, 4,
                                             torch.device("cpu"), group=dp.get_group())
            return pipelining.Schedule1F1B(stage, M, loss_fn=lambda out, target: out.sum())
        """))
    refused(capsys, path, "--topology", "Ring(2)_Ring(4)",
            match="run on the process group of ranks 0, 1, not on the pp axis's (0, 2, 4, 6)")
    path = model_file(tmp_path, "1F1B", 1, 8, extra="def parallelize(model, mesh):\n    return model\n")
    refused(capsys, path, "--topology", "Ring(4)",
            match="with a pp axis, parallelize(module, mesh) returned Net, not a torch.distributed.pipelining schedule")
    path = model_file(tmp_path, "1F1B", 1, 8, extra=textwrap.dedent("""
        _made = parallelize
        def parallelize(model, mesh):   # pp rank 0 splits its batch in 8, the others in 4
            global M
            M = 8 if mesh["pp"].get_local_rank() == 0 else 4
            return _made(model, mesh)
        """))
    refused(capsys, path, "--topology", "Ring(4)", match="pp coordinate 1's schedule (Schedule1F1B, 4 stages, 4 "
            "micro-batches) is not pp coordinate 0's (Schedule1F1B, 4 stages, 8 micro-batches)")
    path = tmp_path / "no_loss.py"   # a forward-only schedule
    path.write_text(open(model_file(tmp_path, "1F1B", 1, 8)).read().replace("loss_fn=lambda out, target: out.sum()",
                                                                            "loss_fn=None"))
    refused(capsys, str(path), "--topology", "Ring(4)",
            match="the Schedule1F1B has no loss_fn, so its step runs no backward")
    path = model_file(tmp_path, "ZBVZeroBubble", 3, 8, way=SIMPLE_WAY)
    refused(capsys, path, "--topology", "Ring(4)", match="PIPELINE['virtual_stages'] = 3: ZBVZeroBubble runs 2 stages")
    path = model_file(tmp_path, "1F1B", 1, 8, way=SIMPLE_WAY, extra="def parallelize(model, mesh):\n    return model\n"
                      "del pipeline_stage\n")
    refused(capsys, path, "--topology", "Ring(4)", match="PIPELINE is for pipeline_stage(model, stage, num_stages)")


TP_DDP = """
import torch
from torch import nn
from torch.distributed import pipelining
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
D, V, M = 256, 2, 4
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)
    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))
def build_model():
    return nn.Sequential(*(Block() for _ in range(4)))
def example_inputs():
    return torch.randn(8, 16, D)
def mesh_axes(world_size):
    return {"pp": 2, "dp": 2, "tp": 2}
def parallelize(model, mesh):
    pp = mesh["pp"]
    stages = []
    for k in (pp.get_local_rank(), pp.get_local_rank() + 2):
        block = model[k]
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        ddp = nn.parallel.DistributedDataParallel(block, device_mesh=mesh["dp"])
        stages.append(pipelining.PipelineStage(ddp, k, 4, torch.device("cpu"), group=pp.get_group()))
    return pipelining.ScheduleInterleaved1F1B(stages, M, loss_fn=lambda out, target: out.sum())
"""


def test_tensor_parallel_stages_in_ddp_keep_their_gradients(tmp_path):
    """A rank's stages built the torch way with tensor parallelism and DDP: each stage's dp all-reduce carries all
    of its tp shard's gradients (2 x 256 x 1024 / 2 fp32 = 1 MiB), and the optimizer updates both stages' weights.
    (Shapes found by running a parallelized stage before its step lost the DTensor gradients of that stage.)"""
    path = tmp_path / "tp_ddp.py"
    path.write_text(TP_DDP)
    w = capture(load_model_file(str(path)), 8)
    assert sorted(w.programs) == [0, 4]
    for ops in w.programs.values():
        reduced = [op.bytes for op in ops if op.collective == "all_reduce" and op.group_name == "dp"]
        assert sorted(reduced) == [2 * 256 * 1024 // 2 * 4] * 2
        updated = [op.shapes for op in ops if op.phase == "optimizer" and op.name == "aten._foreach_mul_.Scalar"]
        assert updated[0] == "[512x256;256x512;512x256;256x512]"   # AdamW's first update: every weight shard


def test_stages_built_for_a_gpu_record_as_on_the_host(tmp_path):
    """torchtitan gives PipelineStage the rank's cuda device; the capture runs on the host (no GPU needed), so the
    stages receive into host buffers there and the programs are those of a file that says cpu."""
    host = capture(load_model_file(model_file(tmp_path, "Interleaved1F1B", 2, 4, name="a.py")), P)
    gpu = tmp_path / "b.py"
    gpu.write_text((tmp_path / "a.py").read_text().replace('torch.device("cpu")', 'torch.device("cuda", 0)'))
    assert 'torch.device("cuda", 0)' in gpu.read_text()
    assert capture(load_model_file(str(gpu)), P).programs == host.programs


def test_a_loss_that_reads_the_target_takes_example_target(tmp_path):
    """torchtitan's loss_fn compares the last stage's output with the labels: the file's example_target() gives the
    batch's target, split into micro-batches by the schedule like the inputs (without it, one zero per
    micro-batch)."""
    extra = textwrap.dedent("""
        def parallelize(model, mesh, _made=parallelize):
            schedule = _made(model, mesh)
            schedule._loss_fn = lambda out, target: (out - target).pow(2).sum()
            return schedule
        """)

    def losses(path):
        return [op.shapes for op in capture(load_model_file(path), P).programs[P - 1]
                if op.name == "aten.sub.Tensor"]
    target = "def example_target():\n    return torch.randn(TOKENS, D)\n"
    assert losses(model_file(tmp_path, "1F1B", 1, 4, extra=extra + target)) == ["16x64,16x64"] * 4
    assert losses(model_file(tmp_path, "1F1B", 1, 4, extra=extra, name="zeros.py")) == ["16x64,1"] * 4


def test_a_dtensor_between_stages_is_one_line(tmp_path, capsys):
    """A stage handing the next a DTensor (a tensor-parallel plan with use_local_output=False) would need its
    placements sent with it, which PipelineStage's static shapes cannot say: refused, naming the stage."""
    path = tmp_path / "dtensor.py"
    text = TP_DDP.replace('"down": RowwiseParallel()', '"down": RowwiseParallel(use_local_output=False)')
    text = text.replace("return x + self.down(", "return self.down(")   # no residual: the output is the DTensor
    path.write_text(text.replace('PipelineStage(ddp,', 'PipelineStage(block,'))
    refused(capsys, str(path), "--topology", "Ring(2)_Ring(2)_Ring(2)",
            match="stage 0's output is a DTensor; the capture passes plain tensors between stages")
