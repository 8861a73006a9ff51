"""--all-reduce per-dimension (decompose-all-reduce{all-reduce=per-dimension}): an all-reduce over several dimensions
runs as a whole all-reduce on each dimension in turn, each on the full buffer, as ASTRA-sim's baseline collective
optimization does (Sys.cc generate_collective); chunk c of a dimension starts once chunk c of the previous
dimension is done. Verified on data, timed against its parts, and through the system file's key (its IR in and
out: tests/test_passes.py)."""
import json
import os

import pytest

from astra_compile import compile as compile_step

from helpers import cli, refused

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def total_us(capsys, *argv):
    code, out, err = cli(capsys, "--collective", "all_reduce", *argv, "--json")
    assert code == 0, err
    return json.loads(out)["total_time_us"]


@pytest.mark.parametrize("topology, algorithm", [("Ring(4)_Ring(8)", "ring"), ("4x4_torus", "direct"),
                                                 ("Ring(4)_FC(4)_Switch(2)", "ring,direct,halving_doubling")])
def test_one_chunk_takes_the_sum_of_each_dimensions_whole_all_reduce(capsys, topology, algorithm):
    run = ["--size", "3MB", "--topology", topology, "--algorithm", algorithm, "--scheduler", "baseline"]
    ndims = len(algorithm.split(",")) if "," in algorithm else topology.count("_") + 1 if "_" in topology else 2
    parts = [total_us(capsys, *run, "--dims", str(d)) for d in range(ndims)]
    assert total_us(capsys, *run, "--all-reduce", "per-dimension") == pytest.approx(sum(parts), rel=1e-12)
    assert total_us(capsys, *run) < sum(parts)   # hierarchical moves less: later dimensions see a shard


def test_chunks_pipeline_through_the_dimensions_one_chunk_behind(capsys):
    """Without latency a dimension's all-reduce of one chunk in 4 takes T/4: the second dimension starts a chunk
    behind the first and never waits again, so 5T/4 in all (2T if it waited for the whole first dimension)."""
    run = ["--size", "4MB", "--topology", "Ring(4)_Ring(4)", "--latency", "0", "--scheduler", "baseline"]
    whole = total_us(capsys, *run, "--dims", "0")
    assert total_us(capsys, *run, "--chunks", "4", "--all-reduce", "per-dimension") == pytest.approx(5 * whole / 4,
                                                                                                     rel=1e-9)


@pytest.mark.parametrize("argv", [
    ["--topology", "4x4_torus", "--chunks", "3"],
    ["--topology", "4x4_torus", "--chunks", "4", "--scheduler", "themis"],
    ["--topology", "Ring(4)_FC(4)_Switch(2)", "--chunks", "2", "--algorithm", "ring,direct,halving_doubling"],
    ["--topology", "Switch(4)_Ring(3)", "--algorithm", "in_switch,ring"],
    ["--topology", "2x4x2_torus", "--algorithm", "double_binary_tree", "--chunks", "2"],
])
@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_verified_on_data_and_symmetric_equals_full(capsys, argv, backend):
    if backend == "congestion" and "in_switch,ring" in argv:
        pytest.skip("the congestion backend does not model a reducing switch")
    run = ["--collective", "all_reduce", "--size", "96KB", *argv, "--all-reduce", "per-dimension", "--backend",
           backend]
    code, out, err = cli(capsys, *run, "--verify")
    assert code == 0 and "verified" in out, err
    times = [total_us(capsys, *run[2:], "--execution", e) for e in ("auto", "full")]
    assert times[0] == times[1]


def test_a_training_steps_all_reduces_run_per_dimension(capsys):
    step = os.path.join(EXAMPLES, "mlp_dp.py")
    hierarchical = compile_step(step, "2x2_torus")
    per_dimension = compile_step(step, "2x2_torus", all_reduce="per-dimension")
    assert per_dimension.total_time_us > hierarchical.total_time_us
    code, out, err = cli(capsys, step, "--topology", "2x2_torus", "--all-reduce", "per-dimension")
    assert code == 0 and "ring@0,ring@1" in out, err


def test_where_it_does_not_apply_it_is_refused(capsys):
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--algorithm",
            "multitree", "--all-reduce", "per-dimension", match="runs one phase over the whole network")
    refused(capsys, "--collective", "all_gather", "--size", "1MB", "--topology", "4x4_torus", "--all-reduce",
            "per-dimension", match="--all-reduce applies to all-reduces")
    with pytest.raises(SystemExit) as caught:   # argparse's own errors leave through sys.exit, in one line
        cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--all-reduce", "flat")
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "--all-reduce: invalid choice: 'flat'" in err
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--pass-pipeline",
            "decompose-all-reduce{all-reduce=flat},chunk,hierarchical-decompose,select-algorithm",
            match="must be one of hierarchical, per-dimension")


@pytest.mark.parametrize("topology, algorithm, npus", [("Ring(2)_Ring(4)", "ring", 8), ("4x4_torus", "direct", 16),
                                                       ("2x4_torus", "double_binary_tree", 8)])
def test_its_msccl_file_passes_the_interpreters_data_check(capsys, topology, algorithm, npus):
    from test_msccl_xml import check_sums, emitted
    algo = check_sums(emitted(capsys, topology, "--algorithm", algorithm, "--chunks", "2", "--all-reduce",
                              "per-dimension"))
    assert algo["ngpus"] == npus


def test_its_chakra_traces_hold_one_all_reduce_over_every_npu(capsys, tmp_path):
    """ASTRA-sim decides the split itself: the trace says all-reduce over the group, not the pairs."""
    code, _, err = cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "2x4_torus",
                       "--all-reduce", "per-dimension", "--emit", "chakra", "-o", tmp_path / "ch")
    assert code == 0, err
    code, out, err = cli(capsys, tmp_path / "ch", "--topology", "2x4_torus", "--json")
    assert code == 0, err
    (entry,) = json.loads(out)["collectives"]
    assert entry["kind"] == "all_reduce" and entry["group_size"] == 8 and entry["dims"] == [0, 1]


def test_the_ideal_is_the_all_reduces_whatever_the_split(capsys):
    """The lower bound belongs to the all-reduce over its whole group, not to one dimension's pair."""
    run = ["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)_FC(2)", "--json"]
    reports = [json.loads(cli(capsys, *run, "--all-reduce", split)[1]) for split in ("hierarchical", "per-dimension")]
    assert reports[0]["ideal_time_us"] == reports[1]["ideal_time_us"]
    assert reports[0]["ideal_bytes_per_npu"] == reports[1]["ideal_bytes_per_npu"] == 2 * 7 / 8 * 2 ** 20
