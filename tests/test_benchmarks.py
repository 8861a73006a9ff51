"""The benchmark scripts still run against the current API (their tables are measured by hand, not here)."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, BENCH)


@pytest.mark.parametrize("script", sorted(f for f in os.listdir(BENCH) if f.endswith(".py") and not f.startswith("_")))
def test_benchmark_script_starts(script):
    done = subprocess.run([sys.executable, os.path.join(BENCH, script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_themis_chunks_measures_one_network():
    import themis_chunks
    base = themis_chunks.utilisation("Switch(4)_Switch(2)", "100,25", "0", 8, "baseline", "fifo", 1)
    themis = themis_chunks.utilisation("Switch(4)_Switch(2)", "100,25", "0", 8, "themis", "scf", 2)
    assert 0 < base < themis <= 1


def test_multitree_compare_measures_and_plots(tmp_path):
    import multitree_compare
    results = multitree_compare.measure("4x4_torus", "100", "500", ["64KB", "1MB"])
    for times in results.values():
        assert set(times) == {name for name, _ in multitree_compare.ALGOS}  # 16 NPUs: halving-doubling applies
        # contention-free schedules time the same on both backends; congestion never beats the analytical bound
        for name in ("multitree", "ring (Hamiltonian)", "2D-ring", "rank-order ring (routed)"):
            assert times[name][0] == pytest.approx(times[name][1], rel=1e-9)
        assert all(c >= a * (1 - 1e-9) for c, a in times.values())
    out = tmp_path / "plot.png"
    multitree_compare.plot(results, "4x4 torus", str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("pipeline", [False, True])
def test_llama7b_rewrites_its_example_with_the_7b_sizes(tmp_path, pipeline):
    import llama7b
    text = open(llama7b.model_file(str(tmp_path), pipeline)).read()
    assert llama7b.SIZES.format(batch=8 if pipeline else 1) in text
    assert ("def pipeline_stage" in text) == pipeline


def test_hiermem_study_reproduces_seed_002s_findings(tmp_path):
    """ASTRA-sim 2.0, IV-B: ZeRO-Infinity and HierMem baseline within 1 % (published: 0.1 %), the swept optimum is
    Table IV's HierMem (opt) and beats the baseline (published 4.6x; here 3.87x, docs/memory.md says why)."""
    import hiermem_study as h
    from astra_compile.compiler.core import reuse
    step = h.moe_step()
    with reuse.using(reuse.Reuse()):
        zi = h.run(step, h.zero_infinity())["total_time_us"]
        base = h.run(step, h.hiermem(256, 100))["total_time_us"]
        points = h.sweep(step)
    assert abs(base / zi - 1) < 0.01
    assert base / zi - 1 == pytest.approx(0.000752, abs=2e-5)        # today's exact figures
    best = h.cheapest_best(points)
    assert best[:2] == (512, 500)
    assert base / best[2] == pytest.approx(3.868, abs=0.002)
    from astra_compile.compiler.report import breakdown_plot
    out = tmp_path / "fig4.png"
    breakdown_plot.write(str(out), [("a", {"compute": 1.0, "idle": 2.0}), ("b", {"exposed_comm": 3.0})])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
