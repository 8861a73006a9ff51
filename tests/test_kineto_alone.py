"""A torch.profiler (Kineto) trace alone, recorded with record_shapes=True on a real 2-rank gloo DDP job (BatchNorm:
buffer broadcasts too): it imports with the collectives, groups, roots and measured compute of the execution trace
recorded alongside in the same run, and its compute is measured as with the execution trace."""
import json

import pytest

import astra_compile
from astra_compile.frontend.et_import import load_traces
from astra_compile.network.errors import UserError

from helpers import gloo_worker, run_gloo_job, traced

WORKER = gloo_worker(
    2, traced("step()", 'f"{d}/et_rank{rank}.json"', kineto='f"{d}/kineto_rank{rank}.json"',
              profile="record_shapes=True"),
    args=("d",), ddp="torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(), "
                     "torch.nn.Linear(64, 16))",
    ddp_options="bucket_cap_mb=4096 / 2**20", inputs="torch.randn(4, 32)",
    warmups=2)   # DDP rebuilds its buckets in its second step


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


def test_its_step_is_measured_as_with_the_execution_trace(recorded):
    d = recorded
    alone = astra_compile.compile([str(d / f"kineto_rank{r}.json") for r in range(2)], "Ring(2)")
    both = astra_compile.compile([str(d / f"{k}_rank{r}.json") for k in ("et", "kineto") for r in range(2)],
                                 "Ring(2)")
    # every call is measured. The profiler alone gives the same count on every run (61 here); the execution
    # trace's varies by a few between runs of the same job (58 to 65 seen: under gloo's threads the observer loses
    # calls, or files a view or narrow as a call of its own), so the two agree only within that
    assert alone["measured_ops"] > 0 and abs(alone["measured_ops"] - both["measured_ops"]) <= 0.1 * alone["measured_ops"]
    assert alone["compute_time_us"] == pytest.approx(alone["measured_compute_us"], rel=1e-9)
    assert alone["measured_compute_us"] == pytest.approx(both["measured_compute_us"], rel=0.1)
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
