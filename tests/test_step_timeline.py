"""`--timeline FILE.json` on a training step: a Chrome trace (Perfetto) with one process per accelerator, one track
for its compute stream and one per process-group stream, checked against the trace format's JSON Schema and
against the step report it was timed with."""
import json
import os
import subprocess
import sys

import jsonschema
import pytest

import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, WAIT, Op, Workload

SCHEMA = json.load(open(os.path.join(os.path.dirname(__file__), "chrome_trace.schema.json")))
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "gpt_tp_dp.py")


def tracks(trace: dict) -> dict:
    """(pid, tid) -> track name, from the metadata events."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def slices(trace: dict) -> dict:
    out = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            out.setdefault((e["pid"], e["tid"]), []).append(e)
    return out


def check_streams_run_in_order(trace: dict) -> None:
    """Every X event sits on a named track, and a track's slices (one stream) never overlap."""
    named = tracks(trace)
    for track, events in slices(trace).items():
        assert track in named, track
        events.sort(key=lambda e: e["ts"])
        for a, b in zip(events, events[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, (named[track], a["name"], b["name"])


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("timeline") / "gpt.json"
    r = subprocess.run([sys.executable, "-m", "astra_compile", EXAMPLE, "--topology", "8x8_torus", "--json",
                        "--timeline", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), json.loads(path.read_text())


def test_gpt_step_timeline_is_a_chrome_trace(gpt):
    report, trace = gpt
    jsonschema.validate(trace, SCHEMA)
    check_streams_run_in_order(trace)
    # an SPMD step: rank 0's program stands for every accelerator; compute plus the tp and dp streams
    assert sorted(tracks(trace).values()) == ["compute", "group dp (8 ranks)", "group tp (8 ranks)"]
    assert trace["otherData"]["total_us"] == report["total_time_us"]


def test_every_op_is_a_slice_with_its_figures(gpt):
    report, trace = gpt
    per_track = slices(trace)
    names = {v: k for k, v in tracks(trace).items()}
    compute = per_track[names["compute"]]
    assert sum(e["args"]["flops"] for e in compute) == report["flops"]
    assert sum(e["dur"] for e in compute) == pytest.approx(report["compute_time_us"], rel=1e-9)
    colls = [e for k, v in per_track.items() if k != names["compute"] for e in v]
    assert sorted((e["name"], e["args"]["bytes"], round(e["ts"], 6)) for e in colls) == sorted(
        (c["kind"], c["bytes"], round(c["start_us"], 6)) for c in report["collectives"])
    assert {e["args"]["phase"] for e in compute} == {"forward", "backward", "optimizer"}


def test_per_rank_programs_get_one_process_each():
    """A workload of two different rank programs (as traces give): two accelerators, each with its streams."""
    def program(extra_flops):
        return [Op("aten.mm.default", COMPUTE, flops=2 ** 30 + extra_flops, bytes=2 ** 20, phase="forward"),
                Op("c10d.allreduce_", COLLECTIVE, [0], bytes=2 ** 20, collective="all_reduce", group=(0, 1),
                   group_name="0", phase="backward"),
                Op("wait", WAIT, [1]),
                Op("aten.add.default", COMPUTE, [2], flops=2 ** 20, bytes=2 ** 20, phase="optimizer")]
    w = Workload(2, {0: program(0), 1: program(2 ** 32)}, source="two ranks")
    report = astra_compile.compile(w, "Ring(2)")
    trace = report.timeline()
    jsonschema.validate(trace, SCHEMA)
    check_streams_run_in_order(trace)
    assert sorted(tracks(trace).items()) == [((0, 0), "compute"), ((0, 1), "group 0 (2 ranks)"),
                                             ((1, 0), "compute"), ((1, 1), "group 0 (2 ranks)")]
    per_track = slices(trace)
    # the all-reduce starts on both ranks when the slower rank 1 reaches it
    assert per_track[0, 1][0]["ts"] == per_track[1, 1][0]["ts"] == per_track[1, 0][0]["dur"]
    assert trace["otherData"]["total_us"] == report["total_time_us"]


def test_timeline_goes_with_a_timed_step_only(tmp_path):
    r = subprocess.run([sys.executable, "-m", "astra_compile", "examples/mlp_dp.py", "--topology", "4_ring",
                        "--emit", "mlir", "--timeline", str(tmp_path / "t.json")], capture_output=True, text=True,
                       cwd=os.path.join(os.path.dirname(__file__), ".."))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--timeline applies" in r.stderr
    assert not (tmp_path / "t.json").exists()
