"""torch.compile in a model file: on the model, around DDP, per FSDP2 block, around the FSDP2 root.

The capture runs compiled code eagerly (docs/workloads.md): the step must issue exactly the eager step's
collectives, and those of a real compiled run (default backend, inductor on CPU; gloo on loopback, two ranks,
recorded with ExecutionTraceObserver after two warm-up steps so DDP's one-time bucket rebuild is behind it).
"""
import textwrap

import pytest

from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.workload import COLLECTIVE

from helpers import gloo_worker, run_gloo_job

MODEL = """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))

class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x

def build_model():
    return Stack()

def example_inputs():
    return torch.randn(8, 64)
"""

PARALLELIZE = {
    "ddp": "return DDP(model, device_mesh=mesh)",
    "compiled_ddp": "return torch.compile(DDP(model, device_mesh=mesh))",
    "fsdp": """
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        return fully_shard(model, mesh=mesh)""",
    "compiled_fsdp_blocks": """
        for b in model.blocks:
            b.compile()
            fully_shard(b, mesh=mesh)
        return fully_shard(model, mesh=mesh)""",
    "compiled_fsdp_root": """
        for i, b in enumerate(model.blocks):
            fully_shard(b, mesh=mesh)
            model.blocks[i] = torch.compile(b)
        fully_shard(model, mesh=mesh)
        return torch.compile(model)""",
}
EAGER = {"compiled_ddp": "ddp", "compiled_fsdp_blocks": "fsdp", "compiled_fsdp_root": "fsdp"}


def model_file(tmp_path, name: str) -> str:
    body = textwrap.indent(textwrap.dedent(PARALLELIZE[name]).strip(), "    ")
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL + "\ndef parallelize(model, mesh):\n"
                    "    from torch.distributed.fsdp import fully_shard\n"
                    "    from torch.nn.parallel import DistributedDataParallel as DDP\n" + body + "\n")
    return str(path)


def sequence(ops) -> list[tuple]:
    return [(op.collective, op.bytes, op.group) for op in ops if op.kind == COLLECTIVE]


@pytest.mark.parametrize("compiled", sorted(EAGER))
def test_compiled_steps_issue_the_eager_steps_collectives(tmp_path, compiled):
    got = sequence(load_workload(model_file(tmp_path, compiled), 4).programs[0])
    eager = sequence(load_workload(model_file(tmp_path, EAGER[compiled]), 4).programs[0])
    assert got == eager and got


def test_a_compiled_model_with_the_builtin_dp_axis(tmp_path):
    path = tmp_path / "whole.py"
    path.write_text(MODEL.replace("    return Stack()", "    return torch.compile(Stack())"))
    plain = tmp_path / "plain.py"
    plain.write_text(MODEL)
    got = sequence(load_workload(str(path), 4).programs[0])
    assert got == sequence(load_workload(str(plain), 4).programs[0]) and len(got) == 1


# two warm-up steps: DDP rebuilds its buckets once, in the second step's forward (a one-time index broadcast)
WORKER = gloo_worker(2, args=("out", "path"), mesh={"dp": 2}, warmups=2)


def record(tmp_path, path: str) -> list[str]:
    run_gloo_job(tmp_path, WORKER, 2, lambda r: [tmp_path / f"trace_rank{r}.json", path], timeout=600,
                 env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    return [str(tmp_path / f"trace_rank{r}.json") for r in range(2)]


@pytest.mark.parametrize("compiled", ["compiled_ddp", "compiled_fsdp_blocks"])
def test_capture_matches_a_real_compiled_run(tmp_path, compiled):
    path = model_file(tmp_path, compiled)
    real = load_traces(record(tmp_path, path))
    assert "Torch-Compiled Region" in open(tmp_path / "trace_rank0.json").read()   # it really ran compiled
    captured = sequence(load_workload(path, 2).programs[0])
    assert captured and sequence(real.programs[0]) == captured
