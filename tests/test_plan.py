"""`astra-compile plan` (compiler/plan/, frontend/layout.py): the layouts a model file supports on a cluster for
a global batch, each written as a model file of its own and run on the sweep engine, ranked by step time."""
import json
import os
import textwrap

import pytest

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.layout import checkpoint_blocks, layout_file_text
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.plan import space as space_mod

from helpers import cli, refused

W = 256


def model(tmp_path, extra: str = "", name: str = "net.py", width: int = W, blocks: int = 4) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn

        FSDP_UNITS = ["layers.*"]


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Sequential(nn.Linear({width}, {width}), nn.GELU())
                                            for _ in range({blocks}))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x


        def build_model():
            return Net()


        def example_inputs():
            return torch.randn(8, {width})
    """) + textwrap.dedent(extra))
    return str(path)


def space(tmp_path, extra=""):
    path = model(tmp_path, extra)
    spec = load_model_file(path)
    import sys
    from astra_compile.compiler.frontend.model_file import module_name
    return space_mod.space_of(spec, vars(sys.modules[module_name(path)]), path)


def test_space_follows_what_the_file_supports(tmp_path):
    s = space(tmp_path)
    assert s.axes == ("dp", "fsdp")           # FSDP_UNITS, no TP_PLAN, no pipeline_stage
    found = space_mod.layouts(s, 8, 8, 32)
    meshes = {lay.mesh for lay in found}
    assert meshes == {(("dp", 8),), (("fsdp", 8),)}   # dp and fsdp together are left to plan_space()
    # local batch 32 / 8 = 4: micro-batches of 1, 2, 4; three checkpointing choices
    assert len(found) == 2 * 3 * 3
    assert all(lay.micro_batch * lay.microbatches == 4 for lay in found)


def test_pipeline_and_tensor_parallel_layouts(tmp_path):
    s = space(tmp_path, """
        TP_PLAN = {"layers.*.0": "colwise"}
        def pipeline_stage(model, stage, num_stages):
            return model
        def plan_space():
            return {"checkpointing": ["none"]}
    """)
    assert s.axes == ("pp", "dp", "fsdp", "tp")
    found = space_mod.layouts(s, 16, 8, 16)
    assert all(lay.axes.get("tp", 1) <= 8 for lay in found)                      # within a node
    assert all(lay.microbatches >= lay.axes["pp"] for lay in found if "pp" in lay.axes)   # not mostly bubble
    assert all(lay.schedule == "1F1B" for lay in found if "pp" in lay.axes)
    assert all(16 % (lay.axes.get("dp", 1) * lay.axes.get("fsdp", 1)) == 0 for lay in found)
    assert any(set(lay.axes) == {"pp", "dp", "tp"} for lay in found)
    assert max(lay.axes.get("pp", 1) for lay in found) == 16
    # the model's 4 blocks: no stage without one
    assert max(lay.axes.get("pp", 1) for lay in space_mod.layouts(s, 16, 8, 16, blocks=4)) == 4


def test_plan_space_restricts(tmp_path):
    s = space(tmp_path, """
        def plan_space():
            return {"axes": ["fsdp"], "micro_batch": [2], "checkpointing": ["full"]}
    """)
    found = space_mod.layouts(s, 8, 8, 32)
    assert [(lay.mesh, lay.micro_batch, lay.microbatches, lay.checkpointing) for lay in found] == \
        [((("fsdp", 8),), 2, 2, "full")]


def test_layout_file_applies_its_choices(tmp_path):
    path = model(tmp_path)
    text = layout_file_text(path, "digest", 16, 4, "full", None, False, "a layout")
    file = tmp_path / "layout_0.py"
    file.write_text(text)
    ops = capture(load_model_file(str(file)), 2, {"dp": 2}).programs[0]
    forward = [op for op in ops if op.phase == "forward" and op.name == "aten.addmm.default"]
    assert len(forward) == 4 * 4 and {op.shapes.split(",")[1] for op in forward} == {f"4x{W}"}   # 4 x 4 rows
    recomputed = [op for op in ops if op.phase == "recompute" and op.name == "aten.addmm.default"]
    assert len(recomputed) == 4 * 4


def test_checkpointing_needs_repeated_blocks():
    from torch import nn
    from astra_compile.network.errors import UserError
    with pytest.raises(UserError, match="no repeated layers"):
        checkpoint_blocks(nn.Linear(4, 4), "full")


def test_plan_runs_ranks_and_resumes(tmp_path, capsys):
    path = model(tmp_path, """
        def plan_space():
            return {"axes": ["dp", "fsdp"], "micro_batch": [4], "checkpointing": ["none", "full"]}
    """)
    out_csv = str(tmp_path / "plan.csv")
    code, out, err = cli(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "32", "--workers", "1",
                         "-o", out_csv, "--json")
    assert code == 0, err
    layouts = json.loads(out)["layouts"]
    assert len(layouts) == 4 and all(lay["status"] == "ok" for lay in layouts)
    times = [lay["step_time_us"] for lay in layouts]
    assert times == sorted(times)
    # checkpointing recomputes the forward: never faster than the same layout without it
    by = {(lay["mesh"], lay["checkpointing"]): lay["step_time_us"] for lay in layouts}
    for mesh in ("dp=8", "fsdp=8"):
        assert by[(mesh, "full")] > by[(mesh, "none")]
    assert all(lay["tokens_per_s_per_gpu"] == pytest.approx(32 / (lay["step_time_us"] / 1e6) / 8) for lay in layouts)
    assert sorted(os.listdir(tmp_path / "plan.layouts")) == [f"layout_{i:04d}.py" for i in range(4)]
    code, out, err = cli(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "32", "--workers", "1",
                         "-o", out_csv)
    assert code == 0 and "4 already in" in err and "ran 0" in err
    assert out.splitlines()[0].split()[:3] == ["rank", "layout", "step"]


def test_bad_input_one_line_each(tmp_path, capsys):
    path = model(tmp_path, 'def plan_space():\n    return {"axes": ["dp"]}\n')
    refused(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "3", match="no layout")
    refused(capsys, "plan", path, "--cluster", "dgx-h200:1", "--global-batch", "8", match="unknown cluster")
    big = model(tmp_path, name="big.py", width=100_000, blocks=8)   # 80B parameters
    refused(capsys, "plan", big, "--cluster", "dgx-h100:1", "--global-batch", "8", match="too small for this model")
    bad = model(tmp_path, 'def plan_space():\n    return {"axes": ["ep"]}\n', name="bad.py")
    refused(capsys, "plan", bad, "--cluster", "dgx-h100:1", "--global-batch", "8", match="plan_space()['axes']")


def test_memory_lower_bound_counts_what_the_rank_surely_holds(tmp_path):
    from astra_compile.compiler.plan import memory
    from astra_compile.compiler.report.memory_report import CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_GROUP
    sizes = memory.sizes_of(load_model_file(model(tmp_path, width=1000, blocks=6)))
    block = (1000 * 1000 + 1000) * 4                       # one Linear(1000, 1000) in fp32
    assert (sizes.blocks, sizes.block_bytes, sizes.block_tp_bytes, sizes.other_bytes) == (6, block, 0, 0)
    assert sizes.input_bytes_per_sample == 1000 * 4 and sizes.adam_states
    fsdp = space_mod.Layout((("fsdp", 4),), 2, 1, "full", None)
    # parameters, gradients and AdamW's two states sharded 4 ways; 6 block inputs of a 2-sample micro-batch
    assert memory.lower_bound(sizes, fsdp) == 4 * 6 * block // 4 + 6 * 2 * 4000 + CUDA_CONTEXT_BYTES + \
        NCCL_BYTES_PER_GROUP
    pipe = space_mod.Layout((("pp", 4), ("dp", 2)), 1, 4, "none", "1F1B")   # a stage holds at least 6 // 4 blocks
    assert memory.lower_bound(sizes, pipe) == 4 * block + 4000 + CUDA_CONTEXT_BYTES + 2 * NCCL_BYTES_PER_GROUP
    # a file's own parallelize() may shard over "dp" (torchtitan's FSDP does): no replica is assumed
    own = memory.sizes_of(load_model_file(model(tmp_path, "def parallelize(model, mesh):\n    return model\n",
                                                name="own.py", width=1000, blocks=6)))
    dp = space_mod.Layout((("dp", 8),), 1, 1, "none", None)
    assert not sizes.own_parallelize and own.own_parallelize
    assert memory.lower_bound(sizes, dp) == 4 * 6 * block + 6 * 4000 + CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_GROUP
    assert memory.lower_bound(own, dp) == 4 * 6 * block // 8 + 6 * 4000 + CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_GROUP


def test_memory_bound_counts_the_smallest_block(tmp_path):
    # blocks of one class but not one size: each block term is the fewest bytes of any block
    from astra_compile.compiler.plan import memory
    path = tmp_path / "shrinking.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(1000, 1000), nn.Linear(1000, 10), nn.Linear(10, 10)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x


        def build_model():
            return Net()


        def example_inputs():
            return torch.randn(4, 1000)
    """))
    sizes = memory.sizes_of(load_model_file(str(path)))
    assert (sizes.blocks, sizes.block_bytes, sizes.input_bytes_per_sample) == (3, (10 * 10 + 10) * 4, 10 * 4)


def test_layouts_over_memory_by_their_bound_do_not_run(tmp_path, capsys):
    # 5B fp32 parameters: DDP's copy with gradients and AdamW states (80 GB) cannot fit an 80 GB H100, FSDP over 8 can
    path = model(tmp_path, """
        def plan_space():
            return {"axes": ["dp", "fsdp"], "micro_batch": [8], "checkpointing": ["none"]}
    """, width=25_000, blocks=8)
    out_csv = str(tmp_path / "plan.csv")
    code, out, err = cli(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "64", "--workers", "1",
                         "-o", out_csv, "--json")
    assert code == 0, err
    by = {lay["mesh"]: lay for lay in json.loads(out)["layouts"]}
    assert set(by) == {"dp=8", "fsdp=8"}
    assert by["dp=8"]["memory_estimated"] and not by["dp=8"]["fits"] and by["dp=8"]["step_time_us"] == 0
    assert by["dp=8"]["peak_memory_bytes"] > 4 * 25_000 * 25_000 * 4 * 8
    assert by["fsdp=8"]["status"] == "ok" and not by["fsdp=8"]["memory_estimated"] and by["fsdp=8"]["fits"]
    assert by["fsdp=8"]["step_time_us"] > 0
    assert len(os.listdir(tmp_path / "plan.layouts")) == 1   # only the layout that ran was written
    code, out, err = cli(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "64", "--workers", "1")
    assert "2 layouts: 1 ran and fit, 1 over a GPU's memory (1 of them by their lower bound, not run)" in out
    # no layout can fit: one line, nothing runs
    ddp = model(tmp_path, 'def plan_space():\n    return {"axes": ["dp"]}\n', name="ddp.py", width=25_000, blocks=8)
    refused(capsys, "plan", ddp, "--cluster", "dgx-h100:1", "--global-batch", "64",
            match="none of its 12 layouts on 8 GPUs fits")


def test_cache_gives_a_later_plan_its_captures(tmp_path, capsys):
    # without -o the layout files would go to a scratch folder of each plan, and the cache (which keys a capture by
    # its file's path) would capture every layout again
    path = model(tmp_path, 'def plan_space():\n    return {"axes": ["dp", "fsdp"], "micro_batch": [8], '
                           '"checkpointing": ["none"]}\n')
    cache = str(tmp_path / "cache")
    args = ("plan", path, "--global-batch", "64", "--workers", "1", "--cache", cache, "--json")
    code, out, err = cli(capsys, *args, "--cluster", "dgx-h100:1")
    assert code == 0 and "captured 2 workload(s)" in err, err
    h100 = {lay["mesh"]: lay["step_time_us"] for lay in json.loads(out)["layouts"]}
    code, out, err = cli(capsys, *args, "--cluster", "dgx-a100:1")   # another cluster of the same shape
    assert code == 0 and "captured 0 workload(s)" in err, err
    a100 = {lay["mesh"]: lay["step_time_us"] for lay in json.loads(out)["layouts"]}
    assert set(a100) == set(h100) == {"dp=8", "fsdp=8"} and all(a100[m] > h100[m] for m in a100)   # slower GPUs
    assert len(os.listdir(tmp_path / "cache" / "plan-layouts")) == 1


def test_capture_limit_reaches_each_layout(tmp_path, capsys):
    path = model(tmp_path, 'def plan_space():\n    return {"axes": ["dp"], "micro_batch": [8], '
                           '"checkpointing": ["none"]}\n', blocks=64)
    refused(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "64", "--capture-limit", "0",
            match="--capture-limit must be a positive number of seconds, got 0.0")
    code, out, err = cli(capsys, "plan", path, "--cluster", "dgx-h100:1", "--global-batch", "64", "--workers", "1",
                         "--capture-limit", "0.01")
    assert code == 1, err   # the one layout ran out of CPU time: listed, none fit
    assert "1 layouts: 0 ran and fit, 0 over a GPU's memory, 1 failed" in out
    assert "used more than 0.01 s of CPU without finishing" in out, out
