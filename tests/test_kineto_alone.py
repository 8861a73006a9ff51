"""A torch.profiler (Kineto) trace alone, recorded with record_shapes=True on a real 2-rank gloo DDP job (BatchNorm:
buffer broadcasts too): it imports with the collectives, groups, roots and measured compute of the execution trace
recorded alongside in the same run, and its step is never shorter (its dependencies are the recorded order)."""
import json

import pytest

import astra_compile
from astra_compile.frontend.et_import import load_traces
from astra_compile.network.errors import UserError

from helpers import run_gloo_job

WORKER = """
import os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import profile, ProfilerActivity, ExecutionTraceObserver
rank, store, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
ddp = DistributedDataParallel(model, bucket_cap_mb=4096 / 2**20)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
x = torch.randn(4, 32)
def step():
    opt.zero_grad()
    ddp(x).sum().backward()
    opt.step()
step()
step()   # DDP rebuilds its buckets in its second step
et = ExecutionTraceObserver().register_callback(f"{d}/et_rank{rank}.json")
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=et,
             on_trace_ready=lambda p: p.export_chrome_trace(f"{d}/kineto_rank{rank}.json")):
    step()
dist.barrier()
sys.stdout.flush()
os._exit(0)  # gloo's threads can abort the interpreter's teardown under load; the traces are written by now
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("kineto")
    run_gloo_job(d, WORKER, 2, lambda r: [d])
    return d


def collectives(w, rank):
    return [(op.collective, op.bytes, op.group, op.root, op.phase) for op in w.collectives(rank)]


def test_a_profiler_trace_alone_gives_the_collectives_of_the_execution_trace(recorded):
    d = recorded
    alone = load_traces([str(d / f"kineto_rank{r}.json") for r in range(2)])
    both = load_traces([str(d / f"{k}_rank{r}.json") for k in ("et", "kineto") for r in range(2)])
    assert alone.world_size == 2 and sorted(alone.programs) == [0, 1]
    for r in range(2):
        got = collectives(alone, r)
        assert got == collectives(both, r)
        # DDP's buffer broadcasts from rank 0 in forward (running stats in float32, the counter in int64), then
        # its gradient buckets in backward
        assert [c[:2] + c[3:] for c in got[:2]] == [("broadcast", 4 * 2 * 64, 0, "forward"),
                                                     ("broadcast", 8, 0, "forward")]
        assert {c[0] for c in got[2:]} == {"all_reduce"} and {c[4] for c in got[2:]} == {"backward"}
        assert sum(c[1] for c in got[2:]) == 4 * (32 * 64 + 64 + 2 * 64 + 64 * 16 + 16)


def test_its_step_is_measured_and_never_shorter(recorded):
    d = recorded
    alone = astra_compile.compile([str(d / f"kineto_rank{r}.json") for r in range(2)], "Ring(2)")
    both = astra_compile.compile([str(d / f"{k}_rank{r}.json") for k in ("et", "kineto") for r in range(2)],
                                 "Ring(2)")
    # every call is measured; the execution trace's count may be lower (the observer can lose calls under gloo)
    assert alone["measured_ops"] >= both["measured_ops"] > 0
    assert alone["compute_time_us"] == pytest.approx(alone["measured_compute_us"], rel=1e-9)
    assert alone["measured_compute_us"] >= both["measured_compute_us"] * (1 - 1e-9)
    assert [p["phase"] for p in alone["phases"]] == ["forward", "backward", "optimizer"]


def test_a_profiler_trace_without_shapes_is_refused(recorded, tmp_path):
    data = json.loads((recorded / "kineto_rank0.json").read_text())
    for e in data["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"].pop("Input Dims", None)
    p = tmp_path / "kineto_rank0.json"
    p.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"kineto_rank0.json: a profiler trace alone needs the shapes .*"
                                        r"record_shapes=True"):
        load_traces([str(p)])
