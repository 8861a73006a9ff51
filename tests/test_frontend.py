"""PyTorch frontend: model files captured under a fake process group with DDP, DTensor TP and FSDP2.

The collective counts and sizes are checked against what the parallelism APIs define, computed here from the
model itself (parameter bytes, activation shapes, FSDP2's padded shards), not against recorded numbers.
"""
import math
import textwrap

import pytest

from astra_compile.compiler.api.api import load_workload
from astra_compile.network.errors import UserError
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

DIM, HIDDEN, LAYERS, BATCH, SEQ = 64, 256, 3, 2, 16


def model_file(tmp_path, body: str, name="model.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


BLOCKS = f"""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear({DIM}, {HIDDEN})
            self.fc2 = nn.Linear({HIDDEN}, {DIM})
            self.attn_in = nn.Linear({DIM}, {DIM})
            self.attn_out = nn.Linear({DIM}, {DIM})

        def forward(self, x):
            x = x + self.attn_out(torch.tanh(self.attn_in(x)))
            return x + self.fc2(torch.relu(self.fc1(x)))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, {DIM})
            self.blocks = nn.ModuleList(Block() for _ in range({LAYERS}))

        def forward(self, tokens):
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x)
            return x

    def build_model():
        return Stack()

    def example_inputs():
        return torch.randint(0, 100, ({BATCH}, {SEQ}))
"""

TP_PLAN = """
    TP_PLAN = {"blocks.*.attn_in": "colwise", "blocks.*.attn_out": "rowwise",
               "blocks.*.fc1": "colwise", "blocks.*.fc2": "rowwise"}
"""


def param_bytes_of(path) -> int:
    spec = load_model_file(path)
    return sum(p.numel() * p.element_size() for p in spec.build_model().parameters())


def collectives(workload, kind=None, group=None):
    return [op for op in workload.programs[0] if op.kind == "collective"
            and (kind is None or op.collective == kind) and (group is None or op.group_name == group)]


def test_ddp_gradient_all_reduce_bytes_equal_parameter_bytes(tmp_path):
    path = model_file(tmp_path, """
        import torch
        from torch import nn
        def build_model():   # 3 x 2.25M parameters: DDP needs several 25 MB buckets after its rebuild
            return nn.Sequential(nn.Linear(1500, 1500), nn.ReLU(), nn.Linear(1500, 1500), nn.ReLU(),
                                 nn.Linear(1500, 1500))
        def example_inputs():
            return torch.randn(8, 1500)
    """)
    w = capture(load_model_file(path), 8)
    ars = collectives(w, "all_reduce")
    assert sum(op.bytes for op in ars) == param_bytes_of(path)
    # DDP's rebuilt buckets, from DDP's own assignment function over the gradients in the order they became ready
    # (last layer first) with its default caps: 1 MB for the first bucket, then 25 MB
    import torch.distributed as dist
    params = list(reversed(list(load_model_file(path).build_model().parameters())))
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * 2 ** 20])
    expected = [sum(params[i].numel() * 4 for i in b) for b in buckets]
    assert [op.bytes for op in ars] == expected and len(expected) == 2
    assert all(op.group == tuple(range(8)) and op.phase == "backward" for op in ars)
    assert not collectives(w, "all_gather") and not collectives(w, "reduce_scatter")


def test_tensor_parallelism_alone_says_why_the_optimizer_fails_and_how_to_train_it(tmp_path):
    # tp with neither dp nor fsdp leaves the embedding a plain parameter beside the DTensors: AdamW's foreach
    # kernels refuse the mix, as on a GPU; the one line says what a training script does about it, and that works
    path = model_file(tmp_path, BLOCKS + TP_PLAN)
    with pytest.raises(UserError, match=r"mixed torch.Tensor and DTensor.* in separate param groups\)$"):
        capture(load_model_file(path), 4, {"tp": 4})
    grouped = model_file(tmp_path, BLOCKS + TP_PLAN + """
    def optimizer(parameters):
        from torch.distributed.tensor import DTensor
        parameters = list(parameters)
        tp = [p for p in parameters if isinstance(p, DTensor)]
        return torch.optim.AdamW([{"params": tp}, {"params": [p for p in parameters if not isinstance(p, DTensor)]}])
    """, "grouped.py")
    assert len(collectives(capture(load_model_file(grouped), 4, {"tp": 4}), "all_reduce", "tp")) == 4 * LAYERS


def test_megatron_tensor_parallel_two_all_reduces_forward_two_backward_per_layer(tmp_path):
    path = model_file(tmp_path, BLOCKS + TP_PLAN)
    w = capture(load_model_file(path), 8, {"dp": 2, "tp": 4})
    tp = collectives(w, "all_reduce", "tp")
    activation = BATCH * SEQ * DIM * 4
    assert [op.phase for op in tp].count("forward") == 2 * LAYERS
    assert [op.phase for op in tp].count("backward") == 2 * LAYERS
    assert {op.bytes for op in tp} == {activation}
    assert all(op.group == (0, 1, 2, 3) for op in tp)     # the last mesh axis: consecutive ranks
    # DDP over dp reduces this rank's parameter shard: TP splits each block's linear weights four ways
    dp = collectives(w, "all_reduce", "dp")
    assert all(op.group == (0, 4) for op in dp)
    sharded = 0
    spec = load_model_file(path)
    for name, p in spec.build_model().named_parameters():
        split = name.startswith("blocks.") and not name.endswith(("attn_out.bias", "fc2.bias"))
        sharded += p.numel() * 4 // (4 if split else 1)
    assert sum(op.bytes for op in dp) == sharded


def test_fsdp2_gathers_and_scatters_the_padded_sharded_parameters(tmp_path):
    # 3 ranks do not divide 64, 256 or 100: FSDP2 pads dim 0 of every parameter to a multiple of the world size
    path = model_file(tmp_path, BLOCKS + '\n    FSDP_UNITS = ["blocks.*"]\n')
    world = 3
    w = capture(load_model_file(path), world, {"fsdp": world})
    spec = load_model_file(path)
    model = spec.build_model()

    def unit_bytes(params):
        return sum(math.ceil(p.shape[0] / world) * world * (p.numel() // p.shape[0]) * p.element_size()
                   for p in params)
    blocks = [unit_bytes(b.parameters()) for b in model.blocks]
    root = unit_bytes(model.embed.parameters())
    gathers = collectives(w, "all_gather")
    scatters = collectives(w, "reduce_scatter")
    # forward gathers every unit; backward gathers the blocks again (resharded after forward), root stays
    assert sorted(op.bytes for op in gathers if op.phase == "forward") == sorted(blocks + [root])
    assert sorted(op.bytes for op in gathers if op.phase == "backward") == sorted(blocks)
    assert sorted(op.bytes for op in scatters) == sorted(blocks + [root])
    assert all(op.phase == "backward" for op in scatters)


def test_builtin_fsdp_by_tp_mesh_shards_the_tp_shards(tmp_path):
    """--mesh fsdp=2,tp=2 without a parallelize(): FSDP2 over TP-sharded parameters (PyTorch joins the two
    meshes, which the capture builds outside fake mode). Each unit gathers its TP shards, padded over fsdp."""
    path = model_file(tmp_path, BLOCKS + TP_PLAN + '\n    FSDP_UNITS = ["blocks.*"]\n')
    w = capture(load_model_file(path), 4, {"fsdp": 2, "tp": 2})
    model = load_model_file(path).build_model()

    def tp_shard_rows(name, p):   # colwise: weight and bias split on dim 0; rowwise: weight split on dim 1
        if name.endswith(("attn_in.weight", "attn_in.bias", "fc1.weight", "fc1.bias")):
            return p.shape[0] // 2, p.numel() // p.shape[0]
        if name.endswith(("attn_out.weight", "fc2.weight")):
            return p.shape[0], p.shape[1] // 2
        return p.shape[0], p.numel() // p.shape[0]

    def unit_bytes(module):
        return sum(math.ceil(rows / 2) * 2 * cols * 4
                   for rows, cols in (tp_shard_rows(n, p) for n, p in module.named_parameters()))
    blocks = [unit_bytes(b) for b in model.blocks]
    assert sorted(op.bytes for op in collectives(w, "all_gather", "fsdp")) == sorted(2 * blocks + [
        unit_bytes(model.embed)])
    assert sorted(op.bytes for op in collectives(w, "reduce_scatter", "fsdp")) == sorted(blocks + [
        unit_bytes(model.embed)])
    assert all(op.group == (0, 2) for op in collectives(w, group="fsdp"))
    assert len(collectives(w, "all_reduce", "tp")) == 4 * LAYERS


def test_hsdp_with_mixed_precision_and_no_reshard(tmp_path):
    """HSDP (replicate x shard mesh) with MixedPrecisionPolicy(bf16 params, fp32 reduce) and
    reshard_after_forward=False: gathers in bf16, once per layer (not again for backward); gradients
    reduce-scattered in fp32 over shard, then the shard all-reduced over replicate."""
    path = model_file(tmp_path, """
        import torch
        from torch import nn
        def build_model():
            return nn.Sequential(*(nn.Linear(256, 256) for _ in range(4)))
        def example_inputs():
            return torch.randn(8, 256)
        def parallelize(model, mesh):
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in model:
                fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
            return fully_shard(model, mesh=mesh, mp_policy=mp)
    """)
    w = capture(load_model_file(path), 16, {"replicate": 4, "shard": 4})
    layer = 256 * 256 + 256
    assert [op.bytes for op in collectives(w, "all_gather", "shard")] == [layer * 2] * 4
    assert [op.bytes for op in collectives(w, "reduce_scatter", "shard")] == [layer * 4] * 4
    assert [op.bytes for op in collectives(w, "all_reduce", "replicate")] == [layer * 4 // 4] * 4
    assert {op.group for op in collectives(w, group="replicate")} == {(0, 4, 8, 12)}
    assert all(op.phase == "forward" for op in collectives(w, "all_gather"))
    # the layers compute in the policy's bf16, on the fp32 inputs FSDP2 casts; AdamW updates the fp32 shards
    by_phase = {(op.name, op.phase, op.dtype) for op in w.programs[0] if op.kind == "compute"}
    assert {d for n, p, d in by_phase if n in ("aten.addmm.default", "aten.mm.default")} == {"bf16"}
    assert {d for n, p, d in by_phase if p == "optimizer" and n == "aten._foreach_lerp_.Scalar"} == {"fp32"}


def test_compute_ops_carry_flop_counter_flops(tmp_path):
    path = model_file(tmp_path, """
        import torch
        from torch import nn
        def build_model():
            return nn.Linear(32, 48, bias=False)
        def example_inputs():
            return torch.randn(16, 32)
    """)
    w = capture(load_model_file(path), 2)
    mms = [op for op in w.programs[0] if op.name == "aten.mm.default"]
    forward = [op for op in mms if op.phase == "forward"]
    assert [op.flops for op in forward] == [2 * 16 * 32 * 48]
    assert all(op.kind == "compute" and op.bytes > 0 for op in mms)
    assert all(d < i for i, op in enumerate(w.programs[0]) for d in op.deps)


def test_a_model_file_imports_its_own_modules_beside_it(tmp_path):
    # as `python model.py` would: the file's folder is importable, at its top and when the capture calls it
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "my_layers_e1.py").write_text("import torch\nWIDTH = 32\n"
                                            "def block():\n    return torch.nn.Linear(WIDTH, 48)\n")
    (folder / "my_inputs_e1.py").write_text("import torch\ndef batch():\n    return torch.randn(16, 32)\n")
    path = folder / "model.py"
    path.write_text(textwrap.dedent("""
        from my_layers_e1 import block
        def build_model():
            return block()
        def example_inputs():
            import my_inputs_e1   # imported only when the capture calls example_inputs()
            return my_inputs_e1.batch()
    """))
    w = capture(load_model_file(str(path)), 2)
    assert [op.flops for op in w.programs[0] if op.name == "aten.addmm.default" and op.phase == "forward"] == \
        [2 * 16 * 32 * 48]


@pytest.mark.parametrize("body, message", [
    ("raise RuntimeError('broken file')", "failed to import: RuntimeError: broken file"),
    ("def build_model(): pass", "defines no example_inputs()"),
    ("import torch\ndef build_model():\n    return torch.nn.Linear(4, 4)\n"
     "def example_inputs():\n    return torch.randn(2, 5)", "the warm-up training step failed"),
    ("import torch\ndef build_model():\n    return torch.nn.Linear(4, 4)\n"
     "def example_inputs():\n    return torch.randn(2, 4)\n"
     "def parallelize(module, mesh):\n    raise ValueError('no plan for this layer')",
     "parallelize(module, mesh) failed: ValueError: no plan for this layer"),
])
def test_bad_model_files_raise_one_line(tmp_path, body, message):
    path = model_file(tmp_path, body)
    with pytest.raises(UserError) as e:
        load_workload(path, 4)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_mesh_must_cover_the_world(tmp_path):
    path = model_file(tmp_path, BLOCKS + TP_PLAN)
    with pytest.raises(UserError, match="mesh dp=2,tp=2 has 4 ranks but the topology has 8 NPUs"):
        load_workload(path, 8, {"dp": 2, "tp": 2})
