"""Published reference figures (the ASTRA-sim tutorial's and ASTRA-sim 2.0's) reproduced by the analytical runtime.

Tolerances: 1% for the tutorial's figures, 2% for ASTRA-sim 2.0's Table III times; Table III message sizes exactly.
"""
import pytest

from astra_compile.compiler.driver import driver
from astra_compile.compiler.report.report import ideal_time_ns, make_report
from astra_compile.runtime import analytical
from helpers import compile_collective

GB = 2 ** 30
MB = 2 ** 20


def run(sched):
    result = analytical.run(sched)
    return result, make_report(sched, result, "baseline", driver.RunOptions(intra="fifo")).to_json()


def test_seed000_baseline_3d_switch():
    # 1GB all-reduce, Switch(8)_Switch(8)_Switch(8), 50 GB/s and 1 ns per dim, halving-doubling, 64 chunks
    sched = compile_collective("Switch(8)_Switch(8)_Switch(8)", "all_reduce", GB, chunks=64,
                               algorithm="halving_doubling", bandwidth="50,50,50", latency="1,1,1")
    result, report = run(sched)
    assert report["total_time_us"] == pytest.approx(35008.129, rel=0.01)
    assert report["ideal_time_us"] == pytest.approx(13307.292, rel=1e-6)   # 2044 MB / 150 GB/s
    assert report["bw_utilization"] == pytest.approx(0.3801, abs=0.004)
    assert sum(report["per_dim_bytes"]) == 2044 * MB                     # the tutorial's "Total Message Size"
    assert report["npus"] == 512


def test_seed000_direct_switch64_analytical():
    sched = compile_collective("Switch(64)", "all_reduce", GB, chunks=4, algorithm="direct",
                               bandwidth="50", latency="500")
    _, report = run(sched)
    assert report["total_time_us"] == pytest.approx(633.217, rel=0.01)


# ASTRA-sim 2.0 Table III: Ring_FC_Ring_Switch, 1000/200/100/50 GB/s, 1GB all-reduce
TABLE_III = [
    ("2x8x8x4", 512, (1024, 896, 112, 12), 4392.85),
    ("2x8x8x8", 1024, (1024, 896, 112, 14), 4392.85),
    ("2x8x8x16", 2048, (1024, 896, 112, 15), 4392.85),
    ("2x8x8x32", 4096, (1024, 896, 112, 15.5), 4392.85),
    ("4x8x8x4", 1024, (1536, 448, 56, 6), 2212.60),
    ("8x8x8x4", 2048, (1792, 224, 28, 3), 1753.48),
    ("16x8x8x4", 4096, (1920, 112, 14, 1.5), 1879.17),
]


@pytest.mark.parametrize("shape,npus,sizes_mb,time_us", TABLE_III)
def test_seed002_table3(shape, npus, sizes_mb, time_us):
    # latency is not published for Table III; 1 ns per hop (as in the tutorial's demo) is assumed, 64 chunks
    sched = compile_collective(f"Ring_FC_Ring_Switch:{shape}", "all_reduce", GB, chunks=64,
                               bandwidth="1000,200,100,50", latency="1")
    result, report = run(sched)
    assert report["npus"] == npus
    assert [b / MB for b in report["per_dim_bytes"]] == list(sizes_mb)
    assert report["total_time_us"] == pytest.approx(time_us, rel=0.02)


def test_baseline_pipeline_is_bound_by_busiest_dimension():
    # the FIFO pipeline can never beat the busiest dimension's own work
    sched = compile_collective("Ring(4)_FC(4)_Switch(4)", "all_reduce", 64 * MB, chunks=16,
                               bandwidth="100,100,100", latency="10")
    result, report = run(sched)
    assert report["total_time_us"] >= max(report["per_dim_busy_us"]) - 1e-9
    assert report["total_time_us"] >= report["ideal_time_us"]
