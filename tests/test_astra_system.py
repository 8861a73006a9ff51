"""--system sys.json: ASTRA-sim 2.x system configuration files read, each key mapped to
the option that means the same here, every key that cannot be honoured named in a warning line, bad files refused
in one line."""
import json
import os

import pytest

from helpers import cli, refused

HERE = os.path.dirname(__file__)
STEP = os.path.join(HERE, "ir", "step_two_ranks.mlir")
# the shape of ASTRA-sim's example system files (the keys they hold)
SYSTEM = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 2,
          "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring", "ring"],
          "all-gather-implementation": ["ring", "ring"], "reduce-scatter-implementation": ["ring", "ring"],
          "all-to-all-implementation": ["direct", "direct"], "collective-optimization": "localBWAware",
          "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 1, "peak-perf": 312}


def system(tmp_path, **changes) -> str:
    data = {**SYSTEM, **changes}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(data))
    return str(path)


def report(capsys, *argv):
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out), err


def test_each_key_sets_the_option_that_means_the_same(capsys, tmp_path):
    r, err = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus", "--system",
                    system(tmp_path))
    plain, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus",
                      "--chunks", "4", "--active-chunks", "2", "--scheduler", "baseline", "--intra", "fifo",
                      "--algorithm", "ring", "--local-mem-bw", "1600", "--endpoint-delay", "10")
    assert r == plain   # the file is the same run as its options written out
    assert r["local_mem_gbps"] == 1600
    assert r["scheduler"] == "baseline" and r["collectives"][0]["chunks"] == 4


def test_the_run_takes_its_own_kinds_implementation(capsys, tmp_path):
    sys_file = system(tmp_path, **{"all-to-all-implementation": ["halvingDoubling"]})
    r, _ = report(capsys, "--collective", "all_to_all", "--size", "16MB", "--topology", "Switch(8)", "--system",
                  sys_file)
    assert [d["algorithms"] for d in r["dims"]] == [["halving_doubling"]]
    code, _, err = cli(capsys, "--collective", "all_to_all", "--size", "16MB", "--topology", "Switch(8)", "--system",
                       sys_file)
    assert code == 0 and "ASTRA-sim refuses it" in err   # run, and said to have no ASTRA-sim figure
    r, _ = report(capsys, "--collective", "all_reduce", "--size", "16MB", "--topology", "Switch(8)", "--system",
                  system(tmp_path, **{"all-reduce-implementation": ["doubleBinaryTree"]}))
    # ASTRA-sim's, not NCCL's, its chunks as ASTRA-sim runs them
    assert [d["algorithms"] for d in r["dims"]] == [["astra_sim_double_binary_tree"]]


def test_the_command_line_wins_and_astra_sims_defaults_fill_the_rest(capsys, tmp_path):
    sys_file = system(tmp_path, **{"preferred-dataset-splits": None})
    r, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus", "--system",
                  sys_file, "--chunks", "2", "--scheduler", "themis")
    assert r["collectives"][0]["chunks"] == 2 and r["scheduler"] == "themis"
    r, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus", "--system",
                  system(tmp_path, **{"inter-dimension-scheduling": None}))
    assert r["scheduler"] == "baseline"   # ASTRA-sim's default, not this compiler's (optimal)


def test_every_key_not_honoured_is_named_once(capsys, tmp_path):
    _, err = report(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--system",
                    system(tmp_path, **{"hardware-resource-capacity": {"cpu": 1}}))
    lines = [line for line in err.splitlines() if "warning" in line]
    for key in ("scheduling-policy LIFO", "hardware-resource-capacity"):
        assert sum(key in line for line in lines) == 1, (key, lines)
    # local-mem-bw and endpoint-delay are honoured (--local-mem-bw, --endpoint-delay); localBWAware is this
    # compiler's own decomposition
    assert len(lines) == 2


@pytest.mark.parametrize("optimization, split", [("baseline", "per-dimension"), (None, "per-dimension"),
                                                  ("localBWAware", "hierarchical")])
def test_collective_optimization_is_how_an_all_reduce_runs_over_the_dimensions(capsys, tmp_path, optimization,
                                                                                split):
    """ASTRA-sim's baseline (its default) runs a whole all-reduce on each dimension, each on the full chunk;
    localBWAware reduce-scatters up the dimensions and all-gathers back: --all-reduce per-dimension and
    hierarchical. Other kinds run alike under both."""
    sys_file = system(tmp_path, **{"collective-optimization": optimization})
    for kind in ("all_reduce", "all_gather"):
        run = ["--collective", kind, "--size", "1MB", "--topology", "4x4_torus", "--chunks", "4", "--active-chunks",
               "2", "--scheduler", "baseline", "--intra", "fifo", "--algorithm", "ring", "--endpoint-delay", "10",
               "--local-mem-bw", "1600"]
        r, err = report(capsys, *run[:6], "--system", sys_file)
        plain, _ = report(capsys, *run, *(["--all-reduce", split] if kind == "all_reduce" else []))
        assert r == plain and "collective-optimization" not in err
    per_dimension = [c["name"] for c in report(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology",
                                               "4x4_torus", "--system", sys_file)[0]["collectives"]]
    assert per_dimension == (["all_reduce.d0.rs", "all_reduce.d0.ag", "all_reduce.d1.rs", "all_reduce.d1.ag"]
                             if split == "per-dimension" else ["all_reduce.rs", "all_reduce.ag"])


def test_a_one_ring_implementation_runs_whole_under_baseline(capsys, tmp_path):
    """oneRing is one ring over every NPU in ASTRA-sim whatever collective-optimization says."""
    r, _ = report(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--system",
                  system(tmp_path, **{"collective-optimization": "baseline", "all-reduce-implementation": ["oneRing"]}))
    assert [c["name"] for c in r["collectives"]] == ["all_reduce.rs", "all_reduce.ag"]


def test_a_step_takes_peak_perf_and_all_reduces_implementation(capsys, tmp_path):
    r, err = report(capsys, STEP, "--system", system(tmp_path))
    default, _ = report(capsys, STEP)
    assert r["compute_time_us"] < default["compute_time_us"]   # 312 TFLOPS instead of 234
    assert "all-reduce-implementation's algorithms" in err     # all-to-all's direct differs: named


@pytest.mark.parametrize("content, match", [
    ("{", "is not JSON"),
    ("[1, 2]", "a JSON object of keys, got list"),
    (json.dumps({**SYSTEM, "all-reduce-implementation": ["ring", "ringo"]}), "unknown implementation 'ringo'"),
    (json.dumps({**SYSTEM, "preferred-dataset-splits": "4"}), "preferred-dataset-splits must be a whole number"),
    (json.dumps({**SYSTEM, "intra-dimension-scheduling": "RG"}), "intra-dimension-scheduling must be one of"),
    (json.dumps({**SYSTEM, "peak-perf": -1}), "peak-perf must be a number of TFLOPS between 0.001 and 1e+09, got -1"),
    # a rate so small that compute would take forever (never Infinity us with exit 0)
    (json.dumps({**SYSTEM, "peak-perf": 1e-310}), "peak-perf must be a number of TFLOPS between 0.001 and 1e+09"),
    (json.dumps({**SYSTEM, "collective-optimization": "fast"}),
     "collective-optimization must be one of baseline, localBWAware, got 'fast'"),
    (json.dumps({**SYSTEM, "endpoint-delay": "10"}), "endpoint-delay must be a number of ns from 0 to 3.6e+12, got '10'"),
    (json.dumps({**SYSTEM, "endpoint-delay": -1}), "endpoint-delay must be a number of ns from 0 to 3.6e+12, got -1"),
    (json.dumps({**SYSTEM, "local-mem-bw": 1e13}), "local-mem-bw: local memory bandwidth must be a number of GB/s "
                                                   "between 0.001 and 1e12"),
    (json.dumps({**SYSTEM, "roofline-enabled": 2}), "roofline-enabled must be 0 or 1, got 2"),
    (json.dumps({**SYSTEM, "preferred-dataset-splits": 0}),
     "preferred-dataset-splits must be a whole number from 1 to 1048576, got 0"),
    # JSON keeps the last of a key given twice: one of the user's values would be ignored without a word
    ('{"endpoint-delay": 10, "preferred-dataset-splits": 4, "endpoint-delay": 0}',
     "sys.json: key 'endpoint-delay' is given twice"),
])
def test_a_bad_system_file_is_refused_in_one_line(capsys, tmp_path, content, match):
    path = tmp_path / "sys.json"
    path.write_text(content)
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--system", str(path),
            match=match)


def test_a_missing_system_file_is_named(capsys, tmp_path):
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--system",
            str(tmp_path / "none.json"), match="cannot read system file")


def network_file(tmp_path, block, size, bandwidth=50.0):
    path = tmp_path / f"{block}_{size}.yml"
    path.write_text(f"topology: [ {block} ]\nnpus_count: [ {size} ]\nbandwidth: [ {bandwidth} ]\nlatency: [ 500.0 ]\n")
    return str(path)


@pytest.mark.parametrize("block, implementation, per_npu", [
    ("FullyConnected", "direct", 150.0),   # per link x 3 links
    ("FullyConnected", "ring", 150.0),     # the same links, whatever the algorithm
    ("Ring", "direct", 100.0),             # every message at the full bandwidth: both directions here
    ("Ring", "halvingDoubling", 100.0),
    ("Ring", "ring", 50.0),                # the ring algorithm already agrees
])
def test_a_run_from_astra_sim_files_reads_the_network_as_astra_sim(capsys, tmp_path, block, implementation,
                                                                    per_npu):
    """ASTRA-sim's .yml bandwidth is per link (FC: k-1 links per NPU, all used at once) and a Ring gives every message
    the full bandwidth; with --system both become this compiler's per-NPU bandwidth, said in a note line."""
    size = 4
    sys_file = system(tmp_path, **{"all-reduce-implementation": [implementation]})
    r, err = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology",
                    network_file(tmp_path, block, size), "--system", sys_file)
    plain, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", f"{block}({size})",
                      "--bandwidth", str(per_npu), "--chunks", "4", "--active-chunks", "2", "--scheduler", "baseline",
                      "--intra", "fifo", "--algorithm", sys_algorithm(implementation), "--endpoint-delay", "10")
    assert r["total_time_us"] == plain["total_time_us"]
    assert ("note:" in err) == (per_npu != 50.0)


def sys_algorithm(name):
    from astra_compile.compiler.interop.astra_system import IMPLEMENTATIONS
    return IMPLEMENTATIONS[name]


def test_a_notation_topology_keeps_this_compilers_conventions(capsys, tmp_path):
    sys_file = system(tmp_path, **{"all-reduce-implementation": ["direct"]})
    r, err = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "FC(4)", "--system",
                    sys_file)
    plain, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "FC(4)", "--chunks", "4",
                      "--active-chunks", "2", "--scheduler", "baseline", "--intra", "fifo", "--algorithm", "direct",
                      "--endpoint-delay", "10")
    assert r["total_time_us"] == plain["total_time_us"] and "note:" not in err


@pytest.mark.parametrize("changes", [
    {"local-mem-bw": 1000000000},   # ASTRA-sim's "fast memory": no local-memory term, not refused
    {"endpoint-delay": 0},          # ASTRA-sim's own default, as --endpoint-delay 0, not refused
])
def test_the_values_astra_sims_own_files_use_are_valid(capsys, tmp_path, changes):
    r, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus", "--system",
                  system(tmp_path, **changes))
    key, value = next(iter(changes.items()))
    flag = {"local-mem-bw": "--local-mem-bw", "endpoint-delay": "--endpoint-delay"}[key]
    plain, _ = report(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus",
                      "--system", system(tmp_path, **{key: None}), flag, str(value))
    assert r == plain


SELECT = "pass select-algorithm failed after decompose-all-reduce, chunk, hierarchical-decompose: "


@pytest.mark.parametrize("topology, changes, match", [
    # an implementation the topology cannot take: the file's key and value, not a --algorithm never typed
    ("Ring(8)_Ring(4)", {"all-reduce-implementation": ["oneRing", "ring"]},
     'sys.json: all-reduce-implementation ["oneRing", "ring"]: ' + SELECT +
     'flat_ring schedules the whole network at once'),
    ("Ring(8)_Ring(4)_Ring(2)", {"all-reduce-implementation": ["ring", "direct"]},
     'sys.json: all-reduce-implementation ["ring", "direct"]: ' + SELECT +
     '--algorithm lists 2 algorithms for 3 dimensions'),
    ("Ring(6)", {"all-reduce-implementation": ["halvingDoubling"]},
     'sys.json: all-reduce-implementation ["halvingDoubling"]: ' + SELECT + 'halving_doubling needs a power-of-two group'),
])
def test_a_refusal_the_system_file_causes_names_its_key(capsys, tmp_path, topology, changes, match):
    # the file's warnings (scheduling-policy LIFO) are not shown: a refused run says its one line only
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", topology, "--system",
            system(tmp_path, **changes), match=match)


def test_a_refusal_of_a_typed_option_is_not_blamed_on_the_file(capsys, tmp_path):
    err = refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(6)", "--system",
                  system(tmp_path), "--algorithm", "halving_doubling")
    assert "sys.json" not in err


def warnings_of(capsys, tmp_path, topology, changes, *extra, collective="all_reduce"):
    _, err = report(capsys, "--collective", collective, "--size", "64MB", "--topology", topology, "--system",
                    system(tmp_path, **changes), *extra)
    return [line for line in err.splitlines() if "warning" in line]


@pytest.mark.parametrize("topology, changes, extra, collective, expected", [
    # ASTRA-sim alternates its two trees and moves on once a chunk is sent down: so does the run, unwarned
    ("Switch(8)", {"all-reduce-implementation": ["doubleBinaryTree"]}, (), "all_reduce", None),
    ("Switch(8)", {"all-reduce-implementation": ["doubleBinaryTree"], "preferred-dataset-splits": 1}, (),
     "all_reduce", None),
    # another algorithm under the name ring
    ("Ring(8)", {"all-to-all-implementation": ["ring"]}, (), "all_to_all", "ring all-to-all: ASTRA-sim's is another"),
    ("Ring(8)", {"all-to-all-implementation": ["direct"]}, (), "all_to_all", None),
    # ASTRA-sim's Themis weighs an FC dimension by one link
    ("Ring(4)_FC(4)", {"inter-dimension-scheduling": "themis"}, (), "all_reduce",
     "themis with FullyConnected dimension(s) 1: ASTRA-sim's Themis weighs an FC dimension by one link"),
    ("Ring(4)_Ring(4)", {"inter-dimension-scheduling": "themis"}, (), "all_reduce", None),
    ("Ring(4)_FC(4)", {}, ("--scheduler", "themis"), "all_reduce", None),   # not the file's Themis
    # a doubleBinaryTree all-reduce on one dimension has no reduce-scatter or all-gather phase to warn about
    ("Switch(8)", {"all-reduce-implementation": ["doubleBinaryTree"], "preferred-dataset-splits": 1}, (),
     "all_reduce", None),
    ("Switch(4)_Switch(4)", {"all-reduce-implementation": ["doubleBinaryTree"], "preferred-dataset-splits": 1}, (),
     "all_reduce", "doubleBinaryTree under localBWAware"),
])
def test_where_astra_sim_differs_one_line_says_so(capsys, tmp_path, topology, changes, extra, collective, expected):
    lines = [line for line in warnings_of(capsys, tmp_path, topology, changes, *extra, collective=collective)
             if "scheduling-policy LIFO" not in line]
    if expected is None:
        assert lines == []
    else:
        assert len(lines) == 1 and expected in lines[0], lines
