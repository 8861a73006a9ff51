"""Broadcast and reduce through the whole compiler: IR in / IR out, every schedule executed on data from (to) a
random root over random topologies, algorithms, chunks and sizes, the closed-form times of one dimension, and bad
input."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology
from astra_compile.network.units import gbps_to_bytes_per_ns
from astra_compile.compiler.report.report import ideal_time_ns
from astra_compile.runtime import analytical, congestion, verifier
from astra_compile.runtime.meta import Meta
from astra_compile.runtime.errors import TableError
from astra_compile.runtime.tables import RECV_COPY, RECV_REDUCE, SEND, SWITCH

from test_passes import IR, compile_text
from test_properties import BLOCKS, SETTINGS, applicable

PIPELINE = "chunk{chunks=2},hierarchical-decompose,select-algorithm"


def test_ir_in_ir_out():
    """One phase per dimension, ascending, each with the whole buffer and the root; the Switch's default
    (halving-doubling, which has no broadcast) gives way to direct."""
    with open(os.path.join(IR, "broadcast_2d.mlir")) as f:
        source = f.read()
    with open(os.path.join(IR, "broadcast_2d.select.expected.mlir")) as f:
        assert compile_text(source, PIPELINE) == f.read()


def compile_broadcast(spec, size, root, chunks=1, algorithm=None, dims=None, kind="broadcast", **net):
    topo = parse_topology(spec, net.get("bandwidth"), net.get("latency"))
    module = driver.build_module(comm.new_context(), topo, kind, size, dims, root)
    defaults = {"chunks": chunks, **({"algorithm": algorithm} if algorithm else {})}
    driver.run_passes(module, topo, None, defaults)
    return driver.lower(module, topo)


@st.composite
def cases(draw):
    dims = []
    for _ in range(draw(st.integers(1, 3))):
        block = draw(st.sampled_from(BLOCKS))
        dims.append((block, draw(st.sampled_from([2, 4, 8] if block == "HC" else [2, 3, 4, 5]))))
    kind = draw(st.sampled_from(["broadcast", "reduce"]))
    algos = [draw(st.sampled_from(applicable(kind, k, b))) for b, k in dims]
    npus = math.prod(k for _, k in dims)
    chunks = draw(st.integers(1, 4))
    size = chunks * npus * 4 * draw(st.integers(1, 3)) + draw(st.integers(0, npus * chunks))
    group = sorted(draw(st.sets(st.integers(0, len(dims) - 1), min_size=1)))
    spec = "_".join(f"{b}({k})" for b, k in dims)
    return kind, spec, dims, algos, chunks, size, draw(st.integers(0, npus - 1)), group


@settings(max_examples=120, **SETTINGS)
@given(cases())
def test_every_schedule_broadcasts_or_reduces_on_data(case):
    """Broadcast: only the roots start with data; every NPU of every group must end with its root's bytes.
    Reduce: every group's root must end with the group's sum."""
    kind, spec, dims, algos, chunks, size, root, group = case
    sched = compile_broadcast(spec, size, root, chunks, ",".join(algos), group, kind)
    order = group if kind == "broadcast" else group[::-1]
    assert [(s.kind, s.algorithm) for s in sched.plans[0].stages] == [(kind, algos[d]) for d in order]
    assert not sched.meta.symmetric
    verifier.verify(sched)
    for npu in range(math.prod(k for _, k in dims)):
        t = sched.table(npu)
        in_switch = t["peer"] == SWITCH  # the switch sums: its members copy what comes back
        assert set(t["op"][~in_switch].tolist()) <= ({SEND, RECV_COPY} if kind == "broadcast" else
                                                     {SEND, RECV_REDUCE})
        assert np.all(t["bytes"] >= 1) and np.all((t["peer"] != npu) & (t["peer"] >= SWITCH))
    result = analytical.run(sched)
    assert result.total_ns >= ideal_time_ns(sched)[0] * (1 - 1e-9)


def test_roots_own_group_only_sends_along_the_first_dimension():
    """On Ring(4) x Ring(3) rooted at NPU 5 (coordinates 1, 1): the dim-0 phase runs on the root's row alone,
    the dim-1 phase on every column; NPU 0 receives nothing before dim 1."""
    sched = compile_broadcast("Ring(4)_Ring(3)", 4 * 3 * 64, 5)
    for npu in range(12):
        y = npu // 4  # the coordinate on dimension 1
        t = sched.table(npu)
        in_first = t["stage"] == 0
        assert bool(in_first.any()) == (y == 1)
        assert (t["stage"] == 1).any()
        assert not (t["op"][in_first] != SEND).any() or npu != 5  # the root only sends
    verifier.verify(sched)


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_ring_chain_time_is_closed_form(k, kind):
    """A ring broadcast on one Ring(k), no latency: 2k-2 steps of one slice (region / 2k per direction at half the
    NPU's bandwidth): (2k-2)/k x size / bandwidth, the bound of a scatter plus an all-gather."""
    size, gbps = 2 * k * 2**16, 100.0
    sched = compile_broadcast(f"Ring({k})", size, 1, bandwidth=[gbps], latency=0.0, kind=kind)
    expected = (2 * k - 2) / k * size / gbps_to_bytes_per_ns(gbps)
    assert analytical.run(sched).total_ns == pytest.approx(expected, rel=1e-12)
    assert congestion.run(sched).total_ns == pytest.approx(expected, rel=1e-12)


def test_in_switch_multicasts_once():
    """in_switch: the root's region goes up once and comes down to everyone: latency x 2 + size / bandwidth."""
    size = 8 * 2**16
    sched = compile_broadcast("Switch(8)", size, 3, algorithm="in_switch", bandwidth=[50.0], latency=100.0)
    t = sched.table(3)
    assert t["peer"].tolist() == [SWITCH] and t["op"].tolist() == [SEND]
    assert analytical.run(sched).total_ns == pytest.approx(2 * 100.0 + size / gbps_to_bytes_per_ns(50.0), rel=1e-12)
    verifier.verify(sched)


def test_in_switch_reduce_sums_in_the_switch():
    size = 8 * 2**16
    sched = compile_broadcast("Switch(8)", size, 3, algorithm="in_switch", bandwidth=[50.0], latency=100.0,
                              kind="reduce")
    assert sched.table(3)["peer"].tolist() == [SWITCH, SWITCH] and sched.table(0)["op"].tolist() == [SEND]
    assert analytical.run(sched).total_ns == pytest.approx(2 * 100.0 + size / gbps_to_bytes_per_ns(50.0), rel=1e-12)
    verifier.verify(sched)


def test_the_verifier_catches_a_reduce_that_drops_contributions(monkeypatch):
    """The same transfers received by copying instead of adding: the root ends with one member's data."""
    from astra_compile.algorithms import direct
    from astra_compile.algorithms.base import Transfers
    real = Transfers.mirrored
    monkeypatch.setattr(Transfers, "mirrored", lambda t: dataclasses.replace(real(t), reduce=real(t).reduce & False))
    direct.template.cache_clear()
    try:
        sched = compile_broadcast("FC(4)", 4 * 64, 2, algorithm="direct", kind="reduce")
        with pytest.raises(verifier.VerificationError, match="reduce 'reduce' root: NPU 2 differs"):
            verifier.verify(sched)
    finally:
        direct.template.cache_clear()


def test_written_tables_keep_the_root(tmp_path):
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, "-m", "astra_compile", "--collective", "broadcast", "--size", "6KB",
                        "--topology", "Ring(4)_Switch(2)", "--root", "6", "--emit", "tables", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["collectives"][0]["root"] == 6 and meta["collectives"][0]["kind"] == "broadcast"
    r = subprocess.run([sys.executable, "-m", "astra_compile", str(out), "--verify"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "verified" in r.stdout, r.stderr


def test_meta_refuses_a_missing_or_misplaced_root(tmp_path):
    sched = compile_broadcast("Ring(4)", 64, 0)
    good = sched.export_meta().to_json()
    Meta.from_json(good)
    bad = json.loads(json.dumps(good))
    del bad["collectives"][0]["root"]
    with pytest.raises(TableError, match=r"collectives\[0\] lacks key 'root'"):
        Meta.from_json(bad)
    bad["collectives"][0]["root"] = 4
    with pytest.raises(TableError, match=r"collectives\[0\]\.root must be in 0\.\.3, got 4"):
        Meta.from_json(bad)
    other = compile_broadcast("Ring(4)", 64, 0).export_meta().to_json()
    other["collectives"][0]["kind"] = "all_gather"
    with pytest.raises(TableError, match="a all_gather has no root"):
        Meta.from_json(other)


@pytest.mark.parametrize("args,message", [
    (["--root", "16"], "--root must be an NPU of 4x4_torus (0..15), got '16'"),
    (["--root", "x"], "--root must be an NPU of 4x4_torus (0..15), got 'x'"),
    (["--algorithm", "halving_doubling"], "pass select-algorithm failed after decompose-all-reduce, chunk, "
                                          "hierarchical-decompose: halving_doubling has no broadcast schedule"),
    (["--algorithm", "multitree"], "pass flat-decompose failed after decompose-all-reduce, chunk: no graph "
                                   "algorithm for broadcast"),
])
def test_bad_broadcast_options_fail_in_one_line(args, message):
    r = subprocess.run([sys.executable, "-m", "astra_compile", "--collective", "broadcast", "--size", "1KB",
                        "--topology", "4x4_torus", *args], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"astra-compile: error: {message}"]


def test_root_applies_to_broadcast_and_reduce_only():
    r = subprocess.run([sys.executable, "-m", "astra_compile", "--collective", "all_reduce", "--size", "1KB",
                        "--topology", "4x4_torus", "--root", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == \
        "astra-compile: error: --root applies to --collective broadcast or reduce"


def test_phase_ir_needs_its_root():
    text = open(os.path.join(IR, "broadcast_2d.select.expected.mlir")).read()
    with pytest.raises(comm.IRError, match="a broadcast or reduce phase needs a root"):
        m = comm.parse_module(text.replace(", root = 13 : i64", ""), comm.new_context())
        comm.verify_module(m, [4, 8])


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_the_json_reports_of_a_rooted_collective_and_of_a_step_holding_one_follow_their_schemas(kind):
    import jsonschema
    import astra_compile.compiler.report
    from astra_compile.compiler.frontend.workload import COLLECTIVE, Op, Workload
    here = os.path.dirname(astra_compile.compiler.report.__file__)
    done = subprocess.run([sys.executable, "-m", "astra_compile", "--collective", kind, "--size", "1MB",
                           "--root", "5", "--topology", "4x4_torus", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(here, "report.schema.json")) as f:
        jsonschema.validate(json.loads(done.stdout), json.load(f))
    step = Workload(16, {0: [Op("c10d", COLLECTIVE, bytes=2 ** 20, collective=kind, group=tuple(range(16)),
                                group_name="world", root=5)]}, source="rooted", spmd=True)
    with open(os.path.join(here, "workload_report.schema.json")) as f:
        jsonschema.validate(astra_compile.compile(step, "4x4_torus").to_dict(), json.load(f))
