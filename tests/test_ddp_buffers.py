"""DDP on a model with buffers (BatchNorm), with DDP's default broadcast_buffers=True: before every forward rank 0
broadcasts the buffers, and the capture lowers that as a broadcast from rank 0 (not an all-reduce).

The broadcasts are derived here by hand: DDP coalesces the buffers by dtype, so the float32 running means and
variances go in one broadcast and the int64 num_batches_tracked counters in another. The same file is run for
real on 4 gloo ranks under ExecutionTraceObserver and the trace imported: the same collectives, sizes and roots.
"""
import textwrap

from astra_compile import compile as compile_step
from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.frontend.et_import import load_traces

from helpers import run_gloo_job
from test_moe_routing import WORKER

WORLD, C1, C2 = 4, 8, 16
F32, I64 = 4, 8
# conv1 (3->C1, 3x3, no bias), bn1 (C1), conv2 (C1->C2, 3x3, no bias), bn2 (C2), fc (C2 -> 10)
PARAMS = F32 * (3 * C1 * 9 + 2 * C1 + C1 * C2 * 9 + 2 * C2 + C2 * 10 + 10)
BUFFERS = F32 * 2 * (C1 + C2)   # running_mean and running_var of both batch norms
COUNTERS = I64 * 2              # num_batches_tracked of both

MODEL = f"""
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

def build_model():
    return nn.Sequential(nn.Conv2d(3, {C1}, 3, padding=1, bias=False), nn.BatchNorm2d({C1}), nn.ReLU(),
                         nn.Conv2d({C1}, {C2}, 3, padding=1, bias=False), nn.BatchNorm2d({C2}), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear({C2}, 10))

def parallelize(model, mesh):
    return DistributedDataParallel(model)   # broadcast_buffers=True, as DDP defaults

def example_inputs():
    return torch.randn(2, 3, 8, 8)
"""


def collectives(program):
    return [(op.collective, op.bytes, op.root, op.phase) for op in program if op.kind == "collective"]


def expected():
    return [("broadcast", BUFFERS, 0, "forward"), ("broadcast", COUNTERS, 0, "forward"),
            ("all_reduce", PARAMS, -1, "backward")]


def test_buffers_broadcast_from_rank_0_every_step(tmp_path):
    path = tmp_path / "bn_ddp.py"
    path.write_text(textwrap.dedent(MODEL))
    assert collectives(load_workload(str(path), WORLD).programs[0]) == expected()
    report = compile_step(str(path), "Ring(4)", mesh={"dp": WORLD})
    kinds = [(c["kind"], c["bytes"]) for c in report.data["collectives"]]
    assert kinds == [("broadcast", BUFFERS), ("broadcast", COUNTERS), ("all_reduce", PARAMS)]
    assert all(c["time_us"] > 0 for c in report.data["collectives"])


def test_the_built_in_dp_axis_broadcasts_buffers_too(tmp_path):
    path = tmp_path / "bn.py"
    path.write_text(textwrap.dedent(MODEL).replace("def parallelize", "def _unused"))
    assert collectives(load_workload(str(path), WORLD, {"dp": WORLD}).programs[0]) == expected()


def test_matches_a_real_gloo_run(tmp_path):
    path = tmp_path / "bn_ddp.py"
    path.write_text(textwrap.dedent(MODEL))
    captured = collectives(load_workload(str(path), WORLD).programs[0])
    # two warm-up steps: DDP rebuilds its buckets in the second, with broadcasts of their layout
    worker = WORKER.replace('mesh_dim_names=("ep",)', 'mesh_dim_names=("dp",)').replace("step()\net =",
                                                                                          "step()\nstep()\net =")
    assert "step()\nstep()\net =" in worker
    run_gloo_job(tmp_path, worker, WORLD, lambda r: [tmp_path / f"trace_rank{r}.json", path])
    real = load_traces([str(tmp_path / f"trace_rank{r}.json") for r in range(WORLD)])
    for r in range(WORLD):
        assert collectives(real.programs[r]) == captured, f"rank {r}"
