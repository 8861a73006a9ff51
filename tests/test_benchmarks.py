"""The benchmark scripts still run against the current API (their tables are measured by hand, not here)."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, BENCH)


@pytest.mark.parametrize("script", sorted(f for f in os.listdir(BENCH) if f.endswith(".py")))
def test_benchmark_script_starts(script):
    done = subprocess.run([sys.executable, os.path.join(BENCH, script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_themis_chunks_measures_one_network():
    import themis_chunks
    base = themis_chunks.utilisation("Switch(4)_Switch(2)", "100,25", "0", 8, "baseline", "fifo", 1)
    themis = themis_chunks.utilisation("Switch(4)_Switch(2)", "100,25", "0", 8, "themis", "scf", 2)
    assert 0 < base < themis <= 1
