"""A torch.profiler (Kineto) trace alone, recorded with record_shapes=True on a real 2-rank gloo DDP job (BatchNorm:
buffer broadcasts too): it imports with the collectives, groups, roots and measured compute of the execution trace
recorded alongside in the same run, and its compute is measured as with the execution trace."""
import json
import os
import re
import warnings

import pytest

import astra_compile
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.kineto import read_kineto
from astra_compile.network.errors import InputWarning, UserError

from helpers import cli, gloo_worker, run_gloo_job, traced

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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        both = astra_compile.compile([str(d / f"{k}_rank{r}.json") for k in ("et", "kineto") for r in range(2)],
                                     "Ring(2)")
    # every call is measured once. The profiler alone gives the same count on every run (61 here); the execution
    # trace's varies by a few between runs of the same job (58 to 65 seen: under gloo's threads its observer files
    # a call under the wrong parent), so the op counts agree only within that, but the measured time is the same
    # to the nanosecond: a call filed under another is counted in it, a nested one filed beside its parent is not
    # counted twice. Only a call the observer lost outright is left out, and said
    assert alone["measured_ops"] > 0 and abs(alone["measured_ops"] - both["measured_ops"]) <= 0.1 * alone["measured_ops"]
    assert alone["compute_time_us"] == pytest.approx(alone["measured_compute_us"], rel=1e-9)
    lost = [float(m.group(1)) for w in caught if issubclass(w.category, InputWarning)
            for m in [re.search(r"operator call\(s\) \(([0-9.]+) us\) that the execution trace", str(w.message))] if m]
    assert len(lost) == len([w for w in caught if issubclass(w.category, InputWarning)])
    assert both["measured_compute_us"] + sum(lost) == pytest.approx(alone["measured_compute_us"], abs=1e-3 * (1 + len(lost)))
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


def _measured(paths):
    """(rank 0's measured compute ops, {profiler file: (calls, us)} of the lost-call warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = load_traces(paths)
    ops = [op for op in w.programs[0] if op.kind == "compute" and op.measured_ns is not None]
    said = {}
    for c in caught:
        if issubclass(c.category, InputWarning):
            m = re.match(r"(\S+): the profiler measured (\d+) operator call\(s\) \(([0-9.]+) us\)", str(c.message))
            assert m, str(c.message)
            said[os.path.basename(m.group(1))] = (int(m.group(2)), float(m.group(3)))
    return ops, said


def test_calls_the_observer_files_under_the_wrong_parent_are_measured_once(recorded, tmp_path, capsys):
    """The observer's misfilings, made on purpose in rank 0's recorded execution trace: the measured time of the
    step does not change when a call is filed under the call before it (which is undone), or a nested call beside
    its parent; a call lost outright is left out and said, with its measured time. (Compared with the recording as
    it came: a run of the job may have misfiled or lost calls of its own.)"""
    d = recorded
    et = json.loads((d / "et_rank0.json").read_text())
    paths = [str(tmp_path / "et_rank0.json"), str(d / "et_rank1.json"), *(str(d / f"kineto_rank{r}.json")
                                                                          for r in range(2))]
    base, base_said = _measured([str(d / "et_rank0.json"), *paths[1:]])
    total = sum(op.measured_ns for op in base)
    kids = {}
    for n in et["nodes"]:
        kids.setdefault(n["ctrl_deps"], []).append(n)
    order = sorted(et["nodes"], key=lambda n: n["id"])
    first = next(n for n in order if n["name"] == "aten::linear")        # forward's first Linear: t, addmm in it
    # the next call beside it (the ReLU, or the next Linear): an aten call the profiler measured
    rf_of = {n["id"]: next((a["value"] for a in n.get("attrs", []) if a["name"] == "rf_id"), None) for n in order}
    profile = read_kineto("k", json.loads((d / "kineto_rank0.json").read_text()))
    second = next(n for n in order if n["id"] > first["id"] and n["ctrl_deps"] == first["ctrl_deps"]
                  and n["name"].startswith("aten::") and rf_of[n["id"]] in profile.measured_ns)

    def run(edit):
        data = json.loads(json.dumps(et))
        edit({n["id"]: n for n in data["nodes"]}, data)
        (tmp_path / "et_rank0.json").write_text(json.dumps(data))
        return _measured(paths)

    # a later call filed under the one before it, which was written (ended) before it: read as a call of its own
    # (et_import._Builder._caller), the same ops and the same time
    ops, said = run(lambda n, _: n[second["id"]].update(ctrl_deps=first["id"]))
    assert [op.name for op in ops] == [op.name for op in base] and said == base_said
    assert sum(op.measured_ns for op in ops) == pytest.approx(total, rel=1e-12)
    # a nested call filed beside its parent: one op more, measured inside its parent (0 of its own)
    child = kids[first["id"]][0]
    ops, said = run(lambda n, _: n[child["id"]].update(ctrl_deps=first["ctrl_deps"]))
    assert len(ops) == len(base) + 1 and said == base_said
    assert sum(op.measured_ns for op in ops) == pytest.approx(total, rel=1e-12)
    # a call lost outright: left out, and the warning line names the files and its time
    gone = {second["id"]}
    while True:
        more = {n["id"] for n in et["nodes"] if n["ctrl_deps"] in gone} - gone
        if not more:
            break
        gone |= more
    lost_us = profile.measured_ns[rf_of[second["id"]]] / 1e3
    ops, said = run(lambda _, data: data.update(nodes=[n for n in data["nodes"] if n["id"] not in gone]))
    calls, us = base_said.get("kineto_rank0.json", (0, 0.0))
    assert said["kineto_rank0.json"][0] == calls + 1
    assert said["kineto_rank0.json"][1] == pytest.approx(us + lost_us, abs=2e-3)
    assert sum(op.measured_ns for op in ops) == pytest.approx(total - lost_us * 1e3, rel=1e-12)
    code, out, err = cli(capsys, *paths, "--topology", "Ring(2)")
    lines = err.splitlines()
    assert code == 0 and "step time" in out and len(lines) == len(said)
    assert all(line.startswith("astra-compile: warning: ") and "et_rank" in line and "lacks" in line for line in lines)


def test_a_profiler_trace_alone_gives_its_calls_shapes(recorded):
    """"Input Dims" of the calls whose "Input type" is a tensor's dtype, in order: Linear(32, 64) on a batch of 4."""
    from astra_compile.compiler.frontend.workload import COMPUTE
    alone = load_traces([str(recorded / f"kineto_rank{r}.json") for r in range(2)])
    shapes = {}
    for op in alone.programs[0]:
        if op.kind == COMPUTE:
            shapes.setdefault(op.name, set()).add(op.shapes)
    assert shapes["aten.linear.default"] == {"4x32,64x32,64", "4x64,16x64,16"}   # input, weight, bias
    assert shapes["aten.mm.default"] == {"4x16,16x64", "16x4,4x64", "64x4,4x32"}  # the backward's gradients
    assert "[64;64]" in shapes["aten.flatten_dense_tensors.default"]   # a tensor list: DDP's BatchNorm buffers
