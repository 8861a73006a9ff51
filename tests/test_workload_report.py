"""The text report of a training step: its figures agree with --json, idle time is not called communication, and
different sizes or small FLOP counts never print alike."""
import re

import pytest

import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, RECV, SEND, Op, Workload
from astra_compile.compiler.report.workload_report import format_flops, format_report, size_labels

STAGE_FLOPS = int(234e12 * 1e-3)   # 1 ms at the default 234 TFLOPS


def figure(text: str, label: str) -> float:
    return float(re.search(rf"^{label}\s+([0-9.]+) us", text, re.M).group(1))


def two_stages() -> Workload:
    """Rank 0 computes 1 ms, then sends 1 MB to rank 1, which computes 1 ms after it: rank 1 has nothing to do for
    the first millisecond (a pipeline bubble), then waits on the message, then computes."""
    first = [Op("aten.mm", COMPUTE, flops=STAGE_FLOPS), Op("send", SEND, [0], bytes=1 << 20, peer=1)]
    second = [Op("recv", RECV, bytes=1 << 20, peer=0), Op("aten.mm", COMPUTE, [0], flops=STAGE_FLOPS)]
    return Workload(2, {0: first, 1: second}, source="two stages")


def test_the_text_report_splits_exposed_communication_from_idle_time_as_json_does():
    report = astra_compile.compile(two_stages(), "Ring(2)", rank=1)
    text, b = report.format(), report["breakdown_us"]
    message = report.collectives[0]["time_us"]
    assert b["idle"] == pytest.approx(1000.0) and b["exposed_comm"] == pytest.approx(message)
    assert figure(text, "exposed comm") == pytest.approx(message, abs=1e-3)     # not idle + message (step - compute)
    assert figure(text, "idle") == pytest.approx(1000.0, abs=1e-3)
    assert figure(text, "compute") + figure(text, "exposed comm") + figure(text, "idle") == \
        pytest.approx(figure(text, "step time"), abs=3e-3)
    # --json keeps its meaning: exposed_comm_time_us is the step time not covered by compute, breakdown_us splits it
    assert report.exposed_comm_time_us == pytest.approx(report.total_time_us - report.compute_time_us)


def test_sizes_that_differ_never_print_alike():
    close = [33587200, 33583104, 33554432, 33554433]   # 32.03MB, 32.03MB, 32MB, 32MB + 1 B at two decimals
    labels = size_labels(close + [160, 2 ** 30])
    assert len(set(labels.values())) == len(labels)
    assert labels[33554432] == "32MB" and labels[160] == "160B" and labels[2 ** 30] == "1GB"
    assert labels[33587200] == "32.031MB" and labels[33583104] == "32.027MB"
    assert labels[33554433] == "32.000001MB"   # one byte apart
    assert len(set(size_labels([2 ** 40, 2 ** 40 + 1]).values())) == 2     # beyond 12 decimals: exact bytes
    assert size_labels([33587200]) == {33587200: "32.03MB"}   # alone, it keeps the short form


def test_flops_print_in_a_unit_that_keeps_small_steps_readable():
    assert format_flops(2_951_234_567_890) == "2.951 TFLOP"
    assert format_flops(341_000_000_000) == "341.000 GFLOP"
    assert format_flops(41_943_040) == "41.943 MFLOP"     # not 0.000 TFLOP
    assert format_flops(999) == "999 FLOP" and format_flops(0) == "0 FLOP"


def test_the_collective_table_tells_close_sizes_apart():
    ops = [Op("c10d", COLLECTIVE, bytes=n, collective="all_reduce", group=(0, 1, 2, 3), group_name="dp")
           for n in (33587200, 33583104)]
    report = astra_compile.compile(Workload(4, {0: ops}, source="close sizes", spmd=True), "Ring(4)")
    rows = [line.split() for line in format_report(report.to_dict()).splitlines() if line.startswith("all_reduce")]
    assert [r[4] for r in rows] == ["32.031MB", "32.027MB"]
    assert "(2 ops, 0 FLOP per rank)" in report.format()
