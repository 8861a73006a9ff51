"""astra_sim_double_binary_tree: ASTRA-sim's doubleBinaryTree all-reduce as ASTRA-sim runs several chunks.

Read in its source: DoubleBinaryTreeTopology::get_topology hands its two trees out chunk by chunk (RootMax, rooted at
member k-1, first; then RootMin, rooted at 0), and DoubleBinaryTreeAllReduce exits as soon as a member has sent the
chunk down, so the member takes up the next chunk at once (the runtimes: meta.json's ends_on_send). What a system
file's doubleBinaryTree runs; verified on data, timed by hand, both congestion engines alike."""
import json
import math

import numpy as np
import pytest

from astra_compile.runtime import analytical, congestion
from astra_compile.runtime.meta import Meta, TableError
from astra_compile.runtime.tables import SEND
from astra_compile.network.units import gbps_to_bytes_per_ns

from helpers import cli, compile_collective

ALG = "astra_sim_double_binary_tree"


def report(capsys, *argv):
    code, out, err = cli(capsys, "--collective", "all_reduce", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def peers(table, flow):
    """(sent to, received from) of one NPU's rows of chunk `flow`."""
    rows = table["flow"] == flow
    send = rows & (table["op"] == SEND)
    return sorted(table["peer"][send].tolist()), sorted(table["peer"][rows & ~send[...]].tolist())


def test_chunks_take_the_two_trees_in_turn():
    # k = 8: RootMax 7 -> 3; 3 -> 1, 5; 1 -> 0, 2; 5 -> 4, 6. RootMin (its mirror) 0 -> 4; 4 -> 2, 6; ...
    sched = compile_collective("Switch(8)", "all_reduce", 8 * 1024, chunks=3, algorithm=ALG)
    assert peers(sched.table(7), 0) == ([3], [3]) and peers(sched.table(0), 1) == ([4], [4])   # the roots
    assert peers(sched.table(7), 1) == ([6], [6]) and peers(sched.table(0), 0) == ([1], [1])   # leaves there
    assert peers(sched.table(3), 0) == ([1, 5, 7], [1, 5, 7]) and peers(sched.table(3), 2) == peers(sched.table(3), 0)
    assert peers(sched.table(4), 1) == ([0, 2, 6], [0, 2, 6])


@pytest.mark.parametrize("k", [4, 8, 16])
@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_a_member_moves_on_once_it_has_sent_a_chunk_down(capsys, k, chunks):
    """On Switch(k), every message whole over NPU-switch-NPU: T = 2 x latency + chunk / bandwidth. One chunk takes
    2 log2 k messages one after the other. Then each member starts the next chunk as soon as it has sent this one
    down, in the other tree, where a member that ended as a leaf (the last to get the chunk back) is a leaf again
    or an inner member whose children have sent already: each further chunk adds 2 log2 k - 1 messages, so
    (chunks (2 log2 k - 1) + 1) T in all; 4 chunks on Switch(32) give 37, ASTRA-sim's figure. The same tree for
    every chunk, held until its messages arrive (tree_reduce_broadcast), takes chunks x 2 log2 k."""
    size, latency, bandwidth = 1 << 20, 500.0, 50.0
    message_ns = 2 * latency + size / chunks / gbps_to_bytes_per_ns(bandwidth)
    run = ("--size", str(size), "--topology", f"Switch({k})", "--latency", str(latency), "--bandwidth",
           str(bandwidth), "--chunks", str(chunks))
    levels = int(math.log2(k))
    ours = report(capsys, *run, "--algorithm", ALG)["total_time_us"] * 1e3
    assert ours == pytest.approx((chunks * (2 * levels - 1) + 1) * message_ns, rel=1e-12)
    one_tree = report(capsys, *run, "--algorithm", "tree_reduce_broadcast")["total_time_us"] * 1e3
    assert one_tree == pytest.approx(chunks * 2 * levels * message_ns, rel=1e-12)


@pytest.mark.parametrize("argv", [
    ["--topology", "Switch(8)", "--chunks", "3"],
    ["--topology", "Ring(6)", "--chunks", "4"],
    ["--topology", "FC(5)", "--chunks", "2"],
    ["--topology", "4x4_torus", "--chunks", "3", "--all-reduce", "per-dimension"],
    ["--topology", "Ring(3)_Switch(4)", "--chunks", "2", "--all-reduce", "per-dimension", "--algorithm",
     f"{ALG},ring"],
    ["--topology", "4x4_torus", "--chunks", "2"],   # over both dimensions: its halves as NCCL's double binary tree
])
@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_verified_on_data(capsys, argv, backend):
    algorithm = [] if "--algorithm" in argv else ["--algorithm", ALG]
    code, out, err = cli(capsys, "--collective", "all_reduce", "--size", "48KB", *argv, *algorithm, "--backend",
                         backend, "--verify")
    assert code == 0 and "verified" in out, err


@pytest.mark.parametrize("switching", congestion.SWITCHING)
@pytest.mark.parametrize("spec, chunks", [("Switch(8)", 4), ("Ring(5)_FC(3)", 3)])
def test_both_congestion_engines_agree(spec, chunks, switching):
    sched = compile_collective(spec, "all_reduce", 30 * 1024, chunks=chunks, algorithm=ALG, bandwidth="40",
                               latency="250", endpoint_delay=7.0)
    py = congestion.run(sched, engine="python", switching=switching, timeline=True)
    c = congestion.run(sched, engine="compiled", switching=switching, timeline=True)
    assert c.total_ns == py.total_ns and c.transfers == py.transfers and c.links == py.links
    for key in py.phases:
        assert np.array_equal(c.phases[key], py.phases[key]), key


def test_meta_marks_its_phases_and_a_table_directory_keeps_it(capsys, tmp_path):
    sched = compile_collective("Switch(8)", "all_reduce", 64 * 1024, chunks=2, algorithm=ALG)
    assert [s.ends_on_send for c in sched.meta.collectives for s in c.stages] == [True, True]
    plain = compile_collective("Switch(8)", "all_reduce", 64 * 1024, chunks=2, algorithm="tree_reduce_broadcast")
    assert "ends_on_send" not in json.dumps(plain.meta.to_json())   # other meta.json files read as before
    run = ("--collective", "all_reduce", "--size", "64KB", "--topology", "Switch(8)", "--chunks", "2",
           "--algorithm", ALG)
    code, _, err = cli(capsys, *run, "--emit", "tables", "-o", tmp_path / "t")
    assert code == 0, err
    assert Meta.read(str(tmp_path / "t")).collectives[0].stages[0].ends_on_send is True
    again = json.loads(cli(capsys, tmp_path / "t", "--json")[1])["total_time_us"]
    assert again == report(capsys, *run[2:])["total_time_us"] == \
        pytest.approx(analytical.run(sched).total_ns / 1e3, rel=1e-12)


def test_a_meta_json_with_a_wrong_ends_on_send_is_refused():
    sched = compile_collective("Switch(4)", "all_reduce", 4096, chunks=2, algorithm=ALG)
    data = sched.meta.to_json()
    data["collectives"][0]["stages"][0]["ends_on_send"] = "yes"
    with pytest.raises(TableError, match=r"stages\[0\]\.ends_on_send must be true or false, got 'yes'"):
        Meta.from_json(data)
    data["collectives"][0]["stages"][0]["ends_on_sent"] = data["collectives"][0]["stages"][0].pop("ends_on_send")
    with pytest.raises(TableError, match=r"stages\[0\]: unknown key 'ends_on_sent'"):
        Meta.from_json(data)


def test_a_system_files_double_binary_tree_runs_it(capsys, tmp_path):
    path = tmp_path / "sys.json"
    path.write_text(json.dumps({"all-reduce-implementation": ["doubleBinaryTree", "doubleBinaryTree"],
                                "preferred-dataset-splits": 2}))
    code, out, err = cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--system",
                         path, "--json")
    # baseline (no key): a whole all-reduce per dimension, each chunk whole up and down its tree, as ASTRA-sim
    assert code == 0 and err == "", err
    plain = report(capsys, "--size", "1MB", "--topology", "4x4_torus", "--chunks", "2", "--scheduler", "baseline",
                   "--intra", "fifo", "--algorithm", ALG, "--all-reduce", "per-dimension")
    assert json.loads(out) == plain
    path.write_text(json.dumps({"all-reduce-implementation": ["doubleBinaryTree", "doubleBinaryTree"],
                                "collective-optimization": "localBWAware"}))
    code, _, err = cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--system",
                       path)
    assert code == 0 and "doubleBinaryTree under localBWAware" in err
