"""The Python API for profiling flows: an nn.Module object, a script that already initialised torch.distributed,
and `astra_compile.record()` around the step a training script really runs (gloo on loopback, two ranks)."""
import json

import pytest
import torch

import astra_compile
from astra_compile.network.errors import UserError

from helpers import run_gloo_job

MODEL_FILE = """
import torch
def build_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
def example_inputs():
    return torch.randn(8, 64)
def parallelize(module, mesh):
    from torch.distributed.fsdp import fully_shard
    fully_shard(module[0], mesh=mesh)
    return fully_shard(module, mesh=mesh)
"""


def fsdp(module, mesh):
    from torch.distributed.fsdp import fully_shard
    fully_shard(module[0], mesh=mesh)
    return fully_shard(module, mesh=mesh)


def without_source(report):
    return {k: v for k, v in report.to_dict().items() if k != "source"}


def test_a_module_object_compiles_as_its_model_file_would(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    before = [p.detach().clone() for p in model.parameters()]
    got = astra_compile.compile(model, "4_ring", example_inputs=torch.randn(8, 64), parallelize=fsdp)
    assert without_source(got) == without_source(astra_compile.compile(str(path), "4_ring"))
    assert got["source"] == "<Sequential object>" and {c["kind"] for c in got.collectives} == {"all_gather",
                                                                                                "reduce_scatter"}
    # the caller's module is untouched: same class, real parameters with their values, not sharded
    assert type(model) is torch.nn.Sequential and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_module_on_the_meta_device_larger_than_this_machine():
    with torch.device("meta"):   # 4 x 2^32 parameters: 64 GB of float32 that are never allocated
        model = torch.nn.Sequential(*(torch.nn.Linear(65536, 65536, bias=False) for _ in range(4)))
    report = astra_compile.compile(model, "8x8_torus", example_inputs=torch.empty(2, 65536, device="meta"))
    (bucket, *rest) = [c["bytes"] for c in report.collectives]
    assert sum([bucket, *rest]) == 4 * 65536 * 65536 * 4   # DDP's buckets hold every gradient once


def test_module_api_mistakes_are_one_line_errors():
    model = torch.nn.Linear(4, 4)
    with pytest.raises(UserError, match="needs example_inputs"):
        astra_compile.compile(model, "4_ring")
    with pytest.raises(UserError, match="go with an nn.Module source"):
        astra_compile.compile("examples/mlp_dp.py", "4_ring", example_inputs=torch.randn(2, 4))
    with pytest.raises(UserError, match="parallelize must be callable"):
        astra_compile.compile(model, "4_ring", example_inputs=torch.randn(2, 4), parallelize="fsdp")

    class Locked(torch.nn.Linear):   # holds something that cannot be copied (as a wrapped module holds groups)
        def __init__(self):
            super().__init__(4, 4)
            import threading
            self.lock = threading.Lock()
    with pytest.raises(UserError, match="cannot copy the module.*before DDP"):
        astra_compile.compile(Locked(), "4_ring", example_inputs=torch.randn(2, 4))
    with pytest.raises(UserError, match="nothing recorded yet"):
        from astra_compile.compiler.api.record import Recording
        Recording().report("4_ring")


WORKER = """
import json, os, sys, torch, torch.distributed as dist
import astra_compile
from astra_compile.network.errors import UserError
rank, store = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
x = torch.randn(8, 64)
from torch.nn.parallel import DistributedDataParallel as DDP
# inside the initialised job, as a profiling flow calls it: the script's own groups are set aside meanwhile
api = astra_compile.compile(model, "Ring(2)", example_inputs=x, parallelize=lambda m, mesh: DDP(m, device_mesh=mesh))
ddp = DDP(model)
opt = torch.optim.AdamW(ddp.parameters(), foreach=True)   # as torch.optim runs on a GPU, and the capture models
def step():
    ddp(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
with astra_compile.record() as first:   # DDP's one-time bucket rebuild broadcasts in the second step's forward
    step()
    step()
try:
    early = [c["kind"] for c in first.report(topology="Ring(2)").collectives]
except UserError as e:
    early = str(e)
with astra_compile.record() as rec:
    step()
report = rec.report(topology="Ring(2)")
t = torch.full((2,), float(rank))
dist.all_reduce(t)          # the script's group still works after all of it
out = {"api": [[c["kind"], c["bytes"], c["group_size"]] for c in api.collectives], "api_ops": api["ops"],
       "rec": [[c["kind"], c["bytes"], c["group_size"]] for c in report.collectives], "rec_ops": report["ops"],
       "phases": {p["phase"]: p["collectives"] for p in report["phases"]}, "sum": t.tolist(), "early": early,
       "params": sum(p.numel() * 4 for p in model.parameters())}
print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
os._exit(0)  # gloo's threads can abort the interpreter's teardown under load
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    logs = run_gloo_job(tmp_path_factory.mktemp("record"), WORKER, 2)
    return [json.loads(next(line for line in log.splitlines() if line.startswith("RESULT "))[7:]) for log in logs]


def test_the_api_inside_an_initialised_job_and_record_agree(job):
    for out in job:
        # the API's capture and the recording of the real step: one DDP bucket with every gradient
        assert out["api"] == out["rec"] == [["all_reduce", out["params"], 2]]
        assert out["api_ops"] == out["rec_ops"]
        assert out["phases"] == {"forward": 0, "backward": 1, "optimizer": 0}
        assert out["sum"] == [1.0, 1.0]           # 0 + 1 over the script's own gloo group
        # the early steps hold DDP's bucket-layout broadcasts besides the two steps' all-reduces
        assert "broadcast" in out["early"] and out["early"].count("all_reduce") == 2, out["early"]
