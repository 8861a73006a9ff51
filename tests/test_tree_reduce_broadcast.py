"""tree_reduce_broadcast, ASTRA-sim's doubleBinaryTree all-reduce on a dimension: each chunk whole up ASTRA-sim's
binary tree (member 0 at the root with one child, the in-order tree over 1..k-1 below) and back down, run as one
pass per chunk; verified on data and timed by hand. A system file's doubleBinaryTree runs it with ASTRA-sim's
conventions for several chunks (tests/test_astra_sim_double_binary_tree.py)."""
import json
import math

import pytest

from astra_compile.algorithms.tree_reduce_broadcast import tree
from astra_compile.network.units import gbps_to_bytes_per_ns

from helpers import cli


def test_the_tree_is_astra_sims():
    # k = 8, read in ASTRA-sim's BinaryTree (RootMin): 0 -> 4; 4 -> 2, 6; 2 -> 1, 3; 6 -> 5, 7
    parent, height, depth = tree(8)
    assert parent == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert height[0] == 3 == max(depth)   # log2 k steps up, as many down
    for k in range(2, 40):
        parent, height, depth = tree(k)
        assert parent[0] == -1 and sum(p == 0 for p in parent) == 1 and all(0 <= p < k for p in parent[1:])
        assert all(height[parent[m]] > height[m] and depth[m] == depth[parent[m]] + 1 for m in range(1, k))
        if k & (k - 1) == 0:
            assert height[0] == int(math.log2(k))


def report(capsys, *argv):
    code, out, err = cli(capsys, "--collective", "all_reduce", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_a_chunk_takes_two_log_k_whole_messages(capsys, k):
    """On a Switch every message is NPU-switch-NPU (two latencies) at the NPU's bandwidth, whole: 2 log2 k of them
    one after the other (the analytical model, as ASTRA-sim's, lets a member receive from both children at once)."""
    size, latency, bandwidth = 1 << 20, 500.0, 50.0
    r = report(capsys, "--size", str(size), "--topology", f"Switch({k})", "--algorithm", "tree_reduce_broadcast",
               "--latency", str(latency), "--bandwidth", str(bandwidth))
    message_ns = 2 * latency + size / gbps_to_bytes_per_ns(bandwidth)
    assert r["total_time_us"] * 1e3 == pytest.approx(2 * math.log2(k) * message_ns, rel=1e-12)


@pytest.mark.parametrize("argv", [
    ["--topology", "Switch(8)"],
    ["--topology", "Ring(6)", "--chunks", "3"],
    ["--topology", "FC(5)", "--chunks", "2"],
    ["--topology", "4x4_torus", "--chunks", "4", "--all-reduce", "per-dimension"],
    ["--topology", "Ring(3)_Switch(4)", "--chunks", "2", "--all-reduce", "per-dimension", "--algorithm",
     "tree_reduce_broadcast,ring"],
    ["--topology", "4x4_torus", "--chunks", "2"],   # over both dimensions: NCCL's double binary tree halves
    ["--topology", "4x8_bigraph", "--scheduler", "baseline"],
])
@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_verified_on_data_and_symmetric_equals_full(capsys, argv, backend):
    algorithm = [] if "--algorithm" in argv else ["--algorithm", "tree_reduce_broadcast"]
    run = ["--size", "48KB", *argv, *algorithm, "--backend", backend]
    code, out, err = cli(capsys, "--collective", "all_reduce", *run, "--verify")
    assert code == 0 and "verified" in out, err
    assert report(capsys, *run)["total_time_us"] == report(capsys, *run, "--execution", "full")["total_time_us"]
