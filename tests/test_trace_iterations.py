"""Execution traces holding several training iterations (gloo on loopback, two ranks, DDP): split by optimizer
step, or by torch.profiler's ProfilerStep#N ranges; `--iteration N` times one; the report times each. And the
torch.profiler (Kineto) trace recorded with them: its measured times replace the roofline for compute."""
import json
import os
import subprocess
import sys

import pytest

from astra_compile.compiler.frontend.et_import import load_traces

from helpers import gloo_worker, run_gloo_job, traced

PARAM_BYTES = 4 * (32 * 64 + 64 + 64 * 16 + 16)

WORKER = gloo_worker(
    2, traced("step()\nstep()", 'f"{d}/plain_rank{rank}.json"')
    + traced("""
        for _ in range(3):
            step()
            prof.step()""", 'f"{d}/profiled_rank{rank}.json"', kineto='f"{d}/kineto_rank{rank}.json"',
             profile="schedule=schedule(wait=0, warmup=0, active=3, repeat=1)"),
    args=("d",), ddp="torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))",
    inputs="torch.randn(4, 32)", warmups=2)   # past DDP's one-time bucket rebuild


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("iterations")
    run_gloo_job(d, WORKER, 2, lambda r: [d])
    return {kind: [str(d / f"{kind}_rank{r}.json") for r in range(2)] for kind in ("plain", "profiled", "kineto")}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "astra_compile", *args], capture_output=True, text=True)


def test_two_steps_split_at_the_optimizer_step(traces):
    w = load_traces(traces["plain"])
    assert w.iterations() == [0, 1]
    for rank, ops in w.programs.items():
        per = [[(op.collective, op.bytes, op.phase) for op in ops if op.iteration == it and op.collective]
               for it in (0, 1)]
        assert per[0] == per[1] == [("all_reduce", PARAM_BYTES, "backward")], rank
        # each iteration runs forward, backward, optimizer in that order
        for it in (0, 1):
            phases = [op.phase for op in ops if op.iteration == it]
            assert phases == sorted(phases, key=["forward", "backward", "optimizer"].index)
    one = w.only_iteration(1)
    assert all(op.iteration == 1 for ops in one.programs.values() for op in ops)
    assert all(d < i for ops in one.programs.values() for i, op in enumerate(ops) for d in op.deps)


def test_the_report_times_each_iteration_and_iteration_n_alone(traces):
    whole = cli(*traces["plain"], "--topology", "Ring(2)", "--json")
    assert whole.returncode == 0, whole.stderr
    report = json.loads(whole.stdout)
    its = report["iterations"]
    assert [i["iteration"] for i in its] == [0, 1] and all(i["collectives"] == 1 for i in its)
    assert its[0]["end_us"] <= its[1]["start_us"] + 1e-9 and its[1]["end_us"] == pytest.approx(
        report["total_time_us"])
    alone = cli(*traces["plain"], "--topology", "Ring(2)", "--iteration", "1", "--json")
    assert alone.returncode == 0, alone.stderr
    single = json.loads(alone.stdout)
    assert single["iterations"] == [] and len(single["collectives"]) == 1
    assert single["total_time_us"] == pytest.approx(its[1]["end_us"] - its[1]["start_us"], rel=1e-6)
    text = cli(*traces["plain"], "--topology", "Ring(2)").stdout
    assert "iteration 0" in text and "iteration 1" in text
    bad = cli(*traces["plain"], "--topology", "Ring(2)", "--iteration", "5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--iteration 5: the workload's iterations are 0, 1" in bad.stderr


def test_profiler_steps_number_the_iterations(traces):
    w = load_traces(traces["profiled"])
    numbers = w.iterations()
    assert len(numbers) == 3 and numbers == list(range(numbers[0], numbers[0] + 3))
    for it in numbers:
        assert [op.bytes for op in w.programs[0] if op.iteration == it and op.collective] == [PARAM_BYTES]


def test_a_model_file_is_one_step(tmp_path):
    refused = cli(os.path.join(os.path.dirname(__file__), "..", "examples", "mlp_dp.py"), "--topology",
                  "2x2_torus", "--iteration", "0")
    assert refused.returncode == 2 and "none: it is one step" in refused.stderr


def test_a_kineto_trace_gives_measured_compute(traces):
    w = load_traces(traces["profiled"] + traces["kineto"])
    for rank in (0, 1):
        # the test's own reading of the profiler's events: the model's linear and relu calls (always outermost,
        # two and one per step, three steps) took exactly the durations the profiler recorded for them
        events = [e for e in json.load(open(traces["kineto"][rank]))["traceEvents"] if e.get("cat") == "cpu_op"]
        compute = [op for op in w.programs[rank] if op.kind == "compute"]
        assert compute and all(op.measured_ns >= 0 for op in compute)
        for name, count in (("aten::linear", 6), ("aten::relu", 3)):
            expect = sorted(e["dur"] * 1e3 for e in events if e["name"] == name)
            got = sorted(op.measured_ns for op in compute if op.name == name.replace("::", ".") + ".default")
            assert got == expect and len(got) == count, name
        dur = [e["dur"] * 1e3 for e in events]
        assert sum(op.measured_ns for op in compute) <= sum(dur)   # outermost calls only, nested ones inside
    done = cli(*traces["profiled"], *traces["kineto"], "--topology", "Ring(2)", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    compute_ops = sum(op.kind == "compute" for op in w.programs[0])
    assert report["measured_ops"] == compute_ops
    assert report["measured_compute_us"] == pytest.approx(report["compute_time_us"])
    assert report["compute_time_us"] == pytest.approx(sum(op.measured_ns for op in w.programs[0]
                                                          if op.kind == "compute") / 1e3)
    plain = json.loads(cli(*traces["profiled"], "--topology", "Ring(2)", "--json").stdout)
    assert plain["measured_ops"] == 0 and plain["compute_time_us"] < report["compute_time_us"]   # the roofline
    assert "measured by the profiler" in cli(*traces["profiled"], *traces["kineto"], "--topology", "Ring(2)").stdout


def test_kineto_input_mistakes_are_one_line(traces, tmp_path):
    alone = cli(*traces["kineto"], "--topology", "Ring(2)")
    # recorded without record_shapes: alone it cannot say what the calls moved
    assert alone.returncode == 2 and "needs the shapes of every call" in alone.stderr
    stray = cli(traces["profiled"][0], traces["profiled"][1], traces["kineto"][0], traces["kineto"][0].replace(
        "rank0", "rank1"), traces["kineto"][0], "--topology", "Ring(2)")
    assert stray.returncode == 2 and "given twice" in stray.stderr
    data = json.load(open(traces["kineto"][1]))
    bad = next(e for e in data["traceEvents"] if e.get("cat") == "cpu_op")
    bad["dur"] = "slow"
    broken = tmp_path / "kineto_rank1.json"
    broken.write_text(json.dumps(data))
    out = cli(*traces["profiled"], traces["kineto"][0], str(broken), "--topology", "Ring(2)")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "kineto_rank1.json: event #" in out.stderr and "dur='slow'" in out.stderr


def test_a_gpu_profile_measures_the_device_work_each_call_launched():
    from astra_compile.compiler.frontend.kineto import read_kineto

    def op(name, ts, dur, rf, ext, tid=1):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                "args": {"Record function id": rf, "External id": ext}}

    def device(cat, dur, ext):
        return {"ph": "X", "cat": cat, "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": dur,
                "args": {"External id": ext, "correlation": ext + 100}}
    events = [op("aten::linear", 0, 100, 1, 10), op("aten::addmm", 10, 20, 2, 11),   # addmm inside linear
              op("aten::relu", 200, 50, 3, 12), op("aten::view", 300, 1, 4, 13),    # view: no device work
              op("aten::mm", 5, 500, 5, 14, tid=2),                                 # another thread: not nested
              device("kernel", 5, 11), device("kernel", 7, 10), device("kernel", 3, 12),
              device("gpu_memcpy", 1, 12), device("kernel", 2, 14)]
    k = read_kineto("gpu.json", {"traceEvents": events, "distributedInfo": {"rank": 3}})
    assert k.device and k.rank == 3
    assert k.measured_ns == {1: 12e3, 2: 5e3, 3: 4e3, 4: 0.0, 5: 2e3}


def test_a_device_event_with_an_unhashable_external_id_matches_no_call():
    """Found by the fuzzer (a list as External id crashed the lookup): such a kernel is nobody's work."""
    from astra_compile.compiler.frontend.kineto import read_kineto
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
               "args": {"Record function id": 1, "External id": 10}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 4,
               "args": {"External id": [10], "correlation": 1}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 6, "dur": 3,
               "args": {"External id": 10, "correlation": 2}}]
    assert read_kineto("gpu.json", {"traceEvents": events}).measured_ns == {1: 3e3}
