"""ASTRA-sim 2.x's remote memory configuration (its --remote-memory-configuration JSON) as --pool: an access of S
bytes takes remote-mem-latency + S / remote-mem-bw (decimal GB/s), accesses sharing a memory served one at a time
(one per NPU, per node, or one pool), NO_MEMORY_EXPANSION refusing remote accesses, bad files refused in one line."""
import json

import pytest

from helpers import cli, refused
from test_memory_workload import step_file

GIB = 1 << 30


def remote(tmp_path, **config) -> str:
    path = tmp_path / "remote_memory.json"
    path.write_text(json.dumps(config))
    return str(path)


def remote_us(capsys, tmp_path, **config) -> float:
    code, out, err = cli(capsys, step_file(tmp_path), "--pool", remote(tmp_path, **config), "--json")
    assert code == 0, err
    return json.loads(out)["remote_memory_time_us"]


@pytest.mark.parametrize("kind, extra, sharers", [
    ("PER_NPU_MEMORY_EXPANSION", {}, 1),
    ("PER_NODE_MEMORY_EXPANSION", {"num-nodes": 2, "num-npus-per-node": 2}, 2),
    ("MEMORY_POOL", {}, 4),   # the step file runs on 4 NPUs, every one loading 1 GiB at once
])
def test_each_memory_type_serves_its_sharers_one_at_a_time(capsys, tmp_path, kind, extra, sharers):
    got = remote_us(capsys, tmp_path, **{"memory-type": kind, "remote-mem-latency": 100, "remote-mem-bw": 2,
                                         **extra})
    assert got == pytest.approx(sharers * (100 + GIB / 2) / 1e3, rel=1e-12)   # 2 GB/s = 2 bytes per ns


def test_the_report_names_the_memory(capsys, tmp_path):
    path = remote(tmp_path, **{"memory-type": "PER_NODE_MEMORY_EXPANSION", "num-nodes": 2, "num-npus-per-node": 2,
                               "remote-mem-bw": 2})
    code, out, err = cli(capsys, step_file(tmp_path), "--pool", path, "--json")
    assert code == 0, err
    assert json.loads(out)["pool"] == "astra-sim PER_NODE_MEMORY_EXPANSION, 2 nodes x 2 NPUs, 1.86265 GB/s, 0 ns per access"


def test_a_key_astra_sim_does_not_read_is_named_and_the_run_goes_on(capsys, tmp_path):
    path = remote(tmp_path, **{"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-bw": 2, "npu-ids": [0, 1]})
    code, out, err = cli(capsys, step_file(tmp_path), "--pool", path)
    assert code == 0 and "step time" in out
    assert err.count("\n") == 1 and err.startswith("astra-compile: warning: pool file ") and "'npu-ids' is not read" in err


@pytest.mark.parametrize("config, match", [
    ({"memory-type": "NO_MEMORY_EXPANSION"}, "NO_MEMORY_EXPANSION has no remote memory, but the step loads or stores"),
    ({"memory-type": "FAST_MEMORY", "remote-mem-bw": 2}, "field 'memory-type' is 'FAST_MEMORY'; expected one of"),
    ({"memory-type": ["MEMORY_POOL"], "remote-mem-bw": 2}, "field 'memory-type' is ['MEMORY_POOL']"),
    ({"memory-type": "MEMORY_POOL"}, "field 'remote-mem-bw' is missing"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-bw": "2"}, "field 'remote-mem-bw' is '2'"),
    ({"memory-type": "MEMORY_POOL", "remote-mem-bw": 2, "remote-mem-latency": -5}, "field 'remote-mem-latency'"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-bw": 2, "num-nodes": 2}, "num-npus-per-node"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-bw": 2, "num-nodes": 3, "num-npus-per-node": 2},
     "num-nodes x num-npus-per-node is 3 x 2 = 6 GPUs but"),
])
def test_bad_files_are_refused_in_one_line(capsys, tmp_path, config, match):
    refused(capsys, step_file(tmp_path), "--pool", remote(tmp_path, **config), match=match)


def test_no_memory_expansion_is_fine_for_a_step_without_remote_accesses(capsys, tmp_path):
    path = step_file(tmp_path)
    text = open(path).read().replace('location = "remote"', 'location = "local"')
    open(path, "w").write(text)
    code, out, err = cli(capsys, path, "--pool", remote(tmp_path, **{"memory-type": "NO_MEMORY_EXPANSION"}), "--json")
    assert code == 0, err
    assert json.loads(out)["remote_memory_time_us"] == 0
