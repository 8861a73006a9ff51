"""Memory per rank of a captured step (compiler/frontend/step_memory.py, compiler/report/memory_report.py): the
peak of live tensor bytes and what held them, counted by hand on models whose every tensor is known."""
import json
import textwrap

import pytest

from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.frontend.step_memory import ALLOCATOR_BLOCK, rounded
from astra_compile.network.memory_record import CATEGORIES
from astra_compile.compiler.report.memory_report import CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_GROUP
from helpers import cli, refused

MIB = 2**20
STEP_TENSOR = ALLOCATOR_BLOCK   # AdamW's per-parameter step count: one scalar, one allocator block

# A stack of DEPTH layers, each Linear -> ReLU -> Linear -> ReLU without biases, on a batch of BATCH x WIDTH fp32:
# every activation is BATCH * WIDTH * 4 = 8 MiB, every weight WIDTH * WIDTH * 4 = 256 KiB.
STACK = """
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint
    WIDTH, DEPTH, BATCH, CHECKPOINT = {width}, 4, {batch}, {checkpoint}

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(WIDTH, WIDTH, bias=False)
            self.fc2 = nn.Linear(WIDTH, WIDTH, bias=False)

        def forward(self, x):
            return torch.relu(self.fc2(torch.relu(self.fc1(x))))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(DEPTH))

        def forward(self, x):
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False) if CHECKPOINT else layer(x)
            return x

    def build_model():
        return Stack()

    def example_inputs():
        return torch.randn(BATCH, WIDTH)
"""


def stack(tmp_path, name="stack.py", width=256, batch=8192, checkpoint=False, extra=""):
    path = tmp_path / name
    path.write_text(textwrap.dedent(STACK.format(width=width, batch=batch, checkpoint=checkpoint)) +
                    textwrap.dedent(extra))
    return path


def memory_of(path, world=1, rank=0):
    return load_workload(str(path), world).memory[rank]


def test_categories_sum_to_the_peak_and_a_stack_counts_by_hand(tmp_path):
    m = memory_of(stack(tmp_path))
    assert sum(m[f"{c}_bytes"] for c in CATEGORIES) == m["peak_bytes"]
    weight, act = 256 * 256 * 4, 8 * MIB
    assert m["parameters_bytes"] == 8 * weight
    assert m["optimizer_states_bytes"] == 2 * 8 * weight + 8 * STEP_TENSOR   # AdamW: exp_avg, exp_avg_sq, step
    # the peak is in the last layer's backward, once fc2's weight gradient exists: 7 of the 8 ReLU outputs are
    # still saved (the last one's backward has run) and the loss, a scalar, is live; so are the batch, the gradient
    # that reached fc2 and the one it hands on, with one scalar (the loss's gradient). AdamW's host constant
    # (torch.tensor(1.0) added to its step counters, host memory in a CUDA run) is not counted
    assert m["peak_phase"] == "backward"
    assert m["activations_bytes"] == 7 * act + ALLOCATOR_BLOCK
    assert m["gradients_bytes"] == weight
    assert m["other_bytes"] == 3 * act + ALLOCATOR_BLOCK
    assert m["peak_bytes"] == 8 * weight + 2 * 8 * weight + 8 * STEP_TENSOR + weight + 10 * act + 2 * ALLOCATOR_BLOCK


def test_each_phase_has_its_own_peak(tmp_path):
    # plan's reduced depth extrapolates each phase's peak apart (compiler/plan/rank.py): the step's peak is the
    # backward's; the forward's is at the last ReLU (its input, the 7 ReLU outputs before it and its own output, and
    # the batch; AdamW's host constant, which the capture counted until 2026-11-27, is host memory); the
    # optimizer's holds no activations: parameters, gradients, AdamW's two states and one foreach temporary (the
    # denominators), the step counts, the batch and the loss
    m = memory_of(stack(tmp_path))
    weight, act = 256 * 256 * 4, 8 * MIB
    peaks = m["phase_peak_bytes"]
    assert set(peaks) == {"forward", "backward", "optimizer"}
    assert peaks["backward"] == m["peak_bytes"]
    assert peaks["forward"] == 8 * weight + 2 * 8 * weight + 8 * STEP_TENSOR + 10 * act
    assert peaks["optimizer"] == 5 * 8 * weight + 8 * STEP_TENSOR + act + ALLOCATOR_BLOCK


def test_activation_checkpointing_keeps_only_each_layers_input(tmp_path):
    plain = memory_of(stack(tmp_path))
    kept = memory_of(stack(tmp_path, "ckpt.py", checkpoint=True))
    # torch.utils.checkpoint keeps each layer's input (the batch, counted as other, and 3 ReLU outputs) and
    # recomputes the rest in the backward pass: at the peak (the last layer recomputed, its backward running) the
    # inputs of layers 2 and 3 are still kept
    assert kept["activations_bytes"] == 2 * 8 * MIB + ALLOCATOR_BLOCK   # (and the loss)
    assert plain["activations_bytes"] == 7 * 8 * MIB + ALLOCATOR_BLOCK
    assert kept["peak_bytes"] < plain["peak_bytes"]
    assert kept["parameters_bytes"] == plain["parameters_bytes"]


FSDP = """
    from torch.distributed.fsdp import fully_shard

    def mesh_axes(world_size):
        return {"fsdp": world_size}

    def parallelize(model, mesh):
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["fsdp"])
        return fully_shard(model, mesh=mesh["fsdp"])
"""


def test_fsdp_divides_parameters_gradients_and_states_by_its_size(tmp_path):
    alone = memory_of(stack(tmp_path, width=1024, batch=16))
    sharded = memory_of(stack(tmp_path, "fsdp.py", width=1024, batch=16, extra=FSDP), world=8)
    weight = 1024 * 1024 * 4
    assert alone["parameters_bytes"] == 8 * weight
    assert sharded["parameters_bytes"] == 8 * weight // 8
    assert sharded["optimizer_states_bytes"] == 2 * 8 * weight // 8 + 8 * STEP_TENSOR
    # the all-gathered unsharded parameters (and their all-gather buffers) are communication buffers
    assert sharded["communication_bytes"] >= weight


def test_fsdp_unsharded_parameters_count_only_while_gathered(tmp_path):
    # FSDP2 gathers a layer's parameters by growing a storage it emptied at the end of the step before (resize_):
    # such a storage, first seen at that resize, held nothing before it, not the bytes it grows to (which counted
    # every layer's unsharded parameters as live from the step's start: 109 of 186 MB at 12 layers)
    path = stack(tmp_path, width=1024, batch=64, extra=FSDP)
    path.write_text(path.read_text().replace(", 4, 64,", ", 12, 64,"))
    m = memory_of(path, world=4)
    layer = 2 * 1024 * 1024 * 4   # a layer's two weights, unsharded
    assert m["parameters_bytes"] == 12 * layer // 4
    assert m["peak_phase"] == "backward"
    assert m["communication_bytes"] <= 3 * layer   # the layer running, the one gathered ahead, and its gradient's
    assert m["phase_peak_bytes"]["forward"] < m["peak_bytes"]


def hand_count(shapes) -> int:
    """Bytes of fp32 tensors of these numels, each rounded up to the allocator's block."""
    return sum(rounded(4 * n) for n in shapes)


def test_mlp_dp_example_against_a_hand_count():
    m = memory_of("examples/mlp_dp.py", world=64)
    params = hand_count([4096 * 4096, 4096] * 8)                # 8 x Linear(4096, 4096)
    buckets = hand_count([4096 * 4096 + 4096] * 8)              # DDP: a bucket per layer (25 MiB cap)
    assert m["parameters_bytes"] == params
    assert m["optimizer_states_bytes"] == 2 * params + 16 * STEP_TENSOR
    # the peak is AdamW's foreach step: every gradient, DDP's buckets, and its sqrt(exp_avg_sq) temporaries
    assert m["peak_phase"] == "optimizer"
    assert m["gradients_bytes"] == params
    assert m["communication_bytes"] == buckets
    assert params <= m["other_bytes"] <= params + 2 * MIB        # + the batch, 64 x 4096 fp32 = 1 MiB


def test_gpt_tp_dp_example_parameters_by_hand():
    m = memory_of("examples/gpt_tp_dp.py", world=64)
    d, vocab, tp, layers = 2048, 32000, 8, 8
    block = [3 * d // tp * d, 3 * d // tp, d * d // tp, d, 4 * d // tp * d, 4 * d // tp, d * 4 * d // tp, d,
             d, d, d, d]   # qkv, proj (rowwise: bias whole), fc1, fc2, two LayerNorms
    params = hand_count([vocab * d] + block * layers + [d, d] + [vocab * d])
    assert m["parameters_bytes"] == params
    assert m["optimizer_states_bytes"] == 2 * params + (2 + 12 * layers + 2) * STEP_TENSOR
    assert m["communication_bytes"] >= params - 2 * MIB          # DDP's buckets hold every gradient


@pytest.fixture(scope="module")
def pipelined():
    return load_workload("examples/llama_pp_tp_dp.py", 64)


def test_pipeline_stages_each_have_their_own_peak(pipelined):
    w = pipelined
    assert set(w.memory) == set(w.programs)
    stages = [w.memory[r] for r in sorted(w.programs)]
    # 1F1B over 4 stages: stage s holds 4 - s micro-batches' activations at once (the last stage's peak is its
    # logits instead)
    first, second, third = (m["activations_bytes"] for m in stages[:3])
    assert first > second > third
    assert second - third == pytest.approx(third / 2, rel=0.05)   # 3 micro-batches against 2


OVER = """
    import torch
    from torch import nn

    def build_model():
        return nn.Sequential(*[nn.Linear(32768, 32768, bias=False) for _ in range(8)])   # 32 GiB of fp32

    def example_inputs():
        return torch.randn(8, 32768)
"""


def test_json_memory_object_and_the_over_capacity_warning(tmp_path, capsys):
    path = tmp_path / "big.py"
    path.write_text(textwrap.dedent(OVER))
    code, out, err = cli(capsys, path, "--topology", "4_switch", "--gpu", "h100", "--json")
    assert code == 0, err
    m = json.loads(out)["memory"]
    assert set(m) == {"peak_bytes", "reserved_bytes", "peak_phase", "at_peak_bytes", "nccl_bytes", "cuda_context_bytes",
                      "needs_bytes", "gpu", "capacity_bytes", "fits", "phase_peak_bytes"}
    assert set(m["at_peak_bytes"]) == set(CATEGORIES)
    assert max(m["phase_peak_bytes"].values()) == m["peak_bytes"]
    assert m["at_peak_bytes"]["parameters"] == 8 * 32768 * 32768 * 4
    assert m["nccl_bytes"] == NCCL_BYTES_PER_GROUP   # one process group: dp
    assert m["needs_bytes"] == m["reserved_bytes"] + NCCL_BYTES_PER_GROUP + CUDA_CONTEXT_BYTES
    assert m["reserved_bytes"] >= m["peak_bytes"]
    assert m["gpu"] == "h100" and m["capacity_bytes"] == 80 * 10**9 and m["fits"] is False
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("astra-compile: warning: rank 0 needs ") and \
        "more than the h100's 80 GB" in lines[0], err


def test_a_layout_that_fits_says_so_and_warns_nothing(tmp_path, capsys):
    code, out, err = cli(capsys, stack(tmp_path), "--topology", "4_switch", "--gpu", "h100")
    assert code == 0 and err == "", err
    line = next(s for s in out.splitlines() if "NCCL buffers" in s)
    assert line.endswith("of the h100's 80 GB (74.506 GiB), fits"), line


def test_without_gpu_the_bytes_come_without_a_verdict(tmp_path, capsys):
    code, out, err = cli(capsys, stack(tmp_path), "--topology", "4_switch", "--json")
    m = json.loads(out)["memory"]
    assert code == 0 and m["capacity_bytes"] is None and m["fits"] is None and m["gpu"] is None
    assert m["peak_bytes"] > 0


def test_a_trace_says_memory_is_not_known(capsys):
    code, out, err = cli(capsys, "tests/ir/step_two_ranks.mlir")
    assert code == 0, err
    assert "memory per rank not known" in out


def test_the_capture_cache_keeps_the_memory(tmp_path):
    from astra_compile.compiler.frontend.workload import Workload
    w = load_workload(str(stack(tmp_path)), 1)
    back = Workload.from_json(json.loads(json.dumps(w.to_json())))
    assert back.memory == w.memory
    bad = w.to_json()
    bad["memory"][0][1]["peak_bytes"] = -1
    with pytest.raises(ValueError):
        Workload.from_json(bad)


def test_the_caching_allocator_by_hand():
    from astra_compile.compiler.frontend.caching_allocator import CachingAllocator, reserved_bytes
    a = CachingAllocator()
    a.malloc(1, 8 * MIB)            # under 10 MiB: a 20 MiB segment, 12 MiB of it left free
    a.malloc(2, 8 * MIB)            # fits the rest
    assert a.reserved == 20 * MIB
    a.malloc(3, 12 * MIB)           # a segment of its own (rounded to 2 MiB)
    a.free(3)
    a.malloc(4, 8 * MIB)            # best fit: the freed 12 MiB block, its 4 MiB tail left free
    a.malloc(5, 6 * MIB)            # no free block holds it: a new 20 MiB segment (fragmentation)
    assert a.reserved == 52 * MIB
    a.free(1)
    a.free(2)                       # merges with its free neighbours: the first segment is whole again
    a.malloc(6, 18 * MIB)
    assert a.reserved == 52 * MIB
    small = CachingAllocator()
    for i in range(2048):           # 1000 B rounds to 1 KiB: 2048 of them fill one 2 MiB small segment
        small.malloc(i, 1000)
    assert small.reserved == 2 * MIB
    # a step that frees what it allocates reserves the same again on its next run (the steady state)
    assert reserved_bytes([4 * MIB], [("x", 30 * MIB, 0), ("x", None, None)], steps=3) == 20 * MIB + 30 * MIB


def test_each_stream_reuses_only_its_own_blocks():
    from astra_compile.compiler.frontend.caching_allocator import CachingAllocator
    a = CachingAllocator()
    a.malloc(1, 30 * MIB)                # the compute stream's own 30 MiB segment
    a.free(1)
    a.malloc(2, 30 * MIB, stream=1)      # FSDP2's reduce-scatter stream cannot take the freed block: a segment
    assert a.reserved == 60 * MIB
    a.free(2)
    a.malloc(3, 20 * MIB)                # each stream's freed block serves its own requests again
    a.malloc(4, 20 * MIB, stream=1)
    assert a.reserved == 60 * MIB


def test_expandable_segments_grow_one_segment_per_pool():
    from astra_compile.compiler.frontend.caching_allocator import CachingAllocator
    fixed, grown = CachingAllocator(), CachingAllocator(expandable=True)
    for a in (fixed, grown):
        a.malloc(1, 100 * MIB)
        a.malloc(2, 100 * MIB)
        a.free(1)
        a.free(2)
        a.malloc(3, 200 * MIB)   # two freed neighbours: one block only where they share a segment
    assert fixed.reserved == 400 * MIB and grown.reserved == 200 * MIB
    a = CachingAllocator(expandable=True)
    a.malloc(1, 30 * MIB)        # pages of 20 MiB in the large pool: 40 MiB mapped, its last 10 MiB free
    assert a.reserved == 40 * MIB
    a.malloc(2, 25 * MIB)        # the free 10 MiB at the end and one more page, not 25 MiB of a segment of its own
    assert a.reserved == 60 * MIB
    a.malloc(3, 4 * MIB, stream=1)   # another stream: a segment of its own
    a.malloc(4, 1000)                # the small pool: 2 MiB pages
    assert a.reserved == 60 * MIB + 20 * MIB + 2 * MIB


def test_the_model_file_sets_the_allocator(tmp_path, capsys):
    """CUDA_ALLOC_CONF (the PYTORCH_CUDA_ALLOC_CONF the run is launched with): expandable segments leave less than a
    page of each pool unused; without, each of the stack's 8 MiB activations takes a 20 MiB segment."""
    plain = memory_of(stack(tmp_path))
    grown = memory_of(stack(tmp_path, "grown.py", extra='CUDA_ALLOC_CONF = "expandable_segments:True"\n'))
    assert grown["peak_bytes"] == plain["peak_bytes"]
    assert grown["reserved_bytes"] - grown["peak_bytes"] < 20 * MIB + 2 * MIB < \
        plain["reserved_bytes"] - plain["peak_bytes"]
    off = memory_of(stack(tmp_path, "off.py", extra='CUDA_ALLOC_CONF = "expandable_segments:False"\n'))
    assert off["reserved_bytes"] == plain["reserved_bytes"]
    for conf, says in (('"max_split_size_mb:512"', "'max_split_size_mb' is not modelled"),
                       ('"expandable_segments:yes"', "expandable_segments must be True or False, got 'yes'"),
                       ("True", "CUDA_ALLOC_CONF must be a string")):
        path = stack(tmp_path, "bad.py", extra=f"CUDA_ALLOC_CONF = {conf}\n")
        assert says in refused(capsys, path, "--topology", "4_switch")


def test_the_recording_tells_the_streams_apart():
    """An allocation made while another stream is current (FSDP2 enters torch.cpu streams on the capture's host
    device as it would CUDA's) is that stream's: a 30 MiB block the compute stream freed is not reused for it."""
    import torch
    from astra_compile.compiler.frontend.step_memory import StepMemory
    memory = StepMemory()
    a = torch.empty(30 * MIB, dtype=torch.uint8)
    memory.saw([], [a], "forward", False, False, False)
    del a
    with torch.cpu.stream(torch.cpu.Stream()):
        b = torch.empty(30 * MIB, dtype=torch.uint8)
        memory.saw([], [b], "backward", False, False, False)
    del b
    result = memory.result()
    assert result["peak_bytes"] == 30 * MIB
    assert result["reserved_bytes"] == 60 * MIB   # one stream: 30 MiB, the second allocation reusing the first


def test_the_module_and_the_tables_keep_the_memory_and_refuse_a_forged_one(tmp_path, capsys):
    path = stack(tmp_path)
    code, direct, err = cli(capsys, path, "--topology", "4_switch", "--json")
    module = tmp_path / "step.mlir"
    assert cli(capsys, path, "--topology", "4_switch", "--emit", "mlir", "-o", module)[0] == 0
    tables = tmp_path / "tables"
    assert cli(capsys, path, "--topology", "4_switch", "--emit", "tables", "-o", tables)[0] == 0
    memory = json.loads(direct)["memory"]
    for again in (module, tables):
        code, out, err = cli(capsys, again, "--json")
        assert code == 0, err
        assert json.loads(out)["memory"] == memory
    text = module.read_text()
    forged = tmp_path / "forged.mlir"
    forged.write_text(text.replace("peak_bytes = ", "peak_bytes = 1", 1))
    refused(capsys, forged, match="wl.memory: the categories' bytes do not sum to peak_bytes")
    meta = json.loads((tables / "meta.json").read_text())
    meta["programs"][0]["memory"]["reserved_bytes"] = -1
    (tables / "meta.json").write_text(json.dumps(meta))
    refused(capsys, tables, match="programs[0].memory: reserved_bytes: -1 is not a byte count")
    meta["programs"][0]["memory"]["reserved_bytes"] = memory["reserved_bytes"]
    meta["programs"][0]["memory"]["phase_peak_bytes"]["forward"] = memory["peak_bytes"] + 1
    (tables / "meta.json").write_text(json.dumps(meta))
    refused(capsys, tables, match="programs[0].memory: phase_peak_bytes: ")


def test_the_warning_names_the_stage_that_needs_most(pipelined, tmp_path):
    import warnings
    import astra_compile
    from astra_compile.network.errors import InputWarning
    gpu = tmp_path / "tiny.json"   # a 3 GB GPU: two of the four stages need more
    gpu.write_text(json.dumps({"name": "tiny", "peak_tflops": {"fp64": 1, "fp32": 2, "tf32": 3, "bf16": 4, "fp16": 4,
                                                               "fp8": 8}, "mem_bw_tb_s": 1.5, "memory_gb": 3}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = astra_compile.compile(pipelined, "8x8_torus", gpu=str(gpu))
    said = [str(w.message) for w in caught if issubclass(w.category, InputWarning)]
    stages = {r: astra_compile.compile(pipelined, "8x8_torus", rank=r).memory for r in pipelined.programs}
    needs = {r: m["reserved_bytes"] + m["nccl_bytes"] + m["cuda_context_bytes"] for r, m in stages.items()}
    over = [r for r in needs if needs[r] > 3e9]
    worst = max(over, key=needs.get)
    assert len(said) == 1 and said[0].startswith(f"rank {worst} (and {len(over) - 1} other pipeline stage") and \
        "more than the tiny's 3 GB (2.794 GiB)" in said[0], said
    assert report.memory["fits"] is (needs[0] <= 3e9)
    # the report (of rank 0) names the stage that needs the most, as a layout fits only where every rank does
    most = max(needs, key=lambda r: (needs[r], -r))
    assert most != 0 and report.memory["most"]["rank"] == most
    assert report.memory["most"]["needs_bytes"] == needs[most] and report.memory["most"]["fits"] is False
    assert f"  most          rank {most} needs " in report.format()
    assert "most" not in stages[most]   # its own report: no other stage needs more


def test_the_states_of_an_optimizer_a_file_wraps_are_optimizer_states(tmp_path):
    """Megatron's FP16 optimizer and ZeroRedundancyOptimizer hold a torch optimizer of their own (its AdamW on the
    fp32 masters, on this rank's shard): its states were counted as `other`, their wrapper's `state` being empty."""
    m = memory_of(stack(tmp_path, extra="""
        class Wrapped(torch.optim.Optimizer):
            def __init__(self, params):
                params = list(params)
                super().__init__(params, {})
                self.inner = torch.optim.AdamW(params)
            def step(self, closure=None):
                self.inner.step()
        def optimizer(parameters):
            return Wrapped(parameters)
        """))
    weight = 256 * 256 * 4
    assert m["optimizer_states_bytes"] == 2 * 8 * weight + 8 * STEP_TENSOR


SOFTMAX_LOSS = """
    import torch
    from torch import nn
    B, W, V = 1024, 64, 2048   # the logits: B x V fp32, 8 MiB

    class Softmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits):
            y = logits.clone()
            if {in_place}:
                y.sub_(y.max(dim=-1, keepdim=True).values)
                torch.exp(y, out=y)
                y.div_(y.sum(dim=-1, keepdim=True))
            else:
                y = y - y.max(dim=-1, keepdim=True).values
                y = y.exp()
                y = y / y.sum(dim=-1, keepdim=True)
            ctx.save_for_backward(y)
            return y[:, 0].sum()

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return y.mul_(grad)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(W, V, bias=False)

        def forward(self, x):
            return Softmax.apply(self.fc(x))

    def build_model():
        return M()

    def example_inputs():
        return torch.randn(B, W)
"""


def test_in_place_ops_and_out_arguments_allocate_nothing(tmp_path):
    # Megatron's vocab-parallel cross-entropy shifts, exponentiates and normalises its fp32 logits in place
    # (benchmarks/published/megatron_gpt.py): the forward's peak holds the logits and the one copy worked on.
    # Written out of place, a shifted copy and its exponentials are live together with the logits: three
    logits, small = 1024 * 2048 * 4, 2**20   # small: the per-row max and sum, the loss, in allocator blocks
    peaks = {}
    for in_place in (True, False):
        path = tmp_path / f"softmax_{in_place}.py"
        path.write_text(textwrap.dedent(SOFTMAX_LOSS.format(in_place=in_place)))
        m = memory_of(path)
        assert m["peak_phase"] == "forward"
        peaks[in_place] = m["activations_bytes"]
    assert 2 * logits < peaks[True] < 2 * logits + small
    assert 3 * logits < peaks[False] < 3 * logits + small

def test_a_damaged_memory_record_is_named_never_raised():
    # network/memory_record.problem checks every record read back (capture cache, wl.memory, meta.json): any JSON
    # value, the valid record damaged anywhere included, gives a reason or "", never an exception
    from hypothesis import given, settings, strategies as st
    from astra_compile.network.memory_record import problem
    valid = {"peak_bytes": 3072, "reserved_bytes": 4096, "peak_phase": "backward", "parameters_bytes": 1024,
             "gradients_bytes": 0, "optimizer_states_bytes": 1024, "communication_bytes": 0,
             "activations_bytes": 512, "other_bytes": 512,
             "phase_peak_bytes": {"forward": 2048, "backward": 3072, "optimizer": 2560}}
    assert problem(valid) == "" and problem({k: v for k, v in valid.items() if k != "phase_peak_bytes"}) == ""
    scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5)
    json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) |
                               st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(sorted(valid) + ["phase_peak_bytes.forward", "phase_peak_bytes.x", "extra"]), json_values)
    def damaged(key, value):
        record = json.loads(json.dumps(valid))
        if key.startswith("phase_peak_bytes."):
            record["phase_peak_bytes"][key.split(".")[1]] = value
        else:
            record[key] = value
        assert isinstance(problem(record), str)
        if key in ("extra", "phase_peak_bytes.x"):
            assert problem(record)   # an unknown key or phase is refused

    damaged()
    for value in (None, [], "x", 1, {"forward": -1}, {"forward": 2**64}, {"forward": 4096}, {"": 1}):
        assert problem({**valid, "phase_peak_bytes": value}).startswith("phase_peak_bytes: ")
