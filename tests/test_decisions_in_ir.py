"""Every decision the compiler makes is in its IR: MultiTree's trees, the flat ring's cycle, HDRM's placement and
the schedule `optimal` keeps are recorded by passes (allocate-trees, find-cycle, place-ranks, choose-schedule);
the lowering only expands what the module says, and --print-ir-after-all ends with the module that is emitted."""
import json
import os
import re

import numpy as np
import pytest

from astra_compile.compiler.driver import driver
from astra_compile.compiler.main import main
from astra_compile.dialects import comm
from astra_compile.network import graphs
from astra_compile.network.parse import parse_topology


@pytest.fixture(autouse=True)
def _fd(capfd):
    global CAPFD
    CAPFD = capfd


def cli(*argv):
    """Run the CLI in-process; MLIR's pass manager prints the IR dumps from C++, so capture at the descriptors."""
    CAPFD.readouterr()
    code = main([str(a) for a in argv])
    out, err = CAPFD.readouterr()
    return code, out, err


def dumps(err: str) -> dict:
    """--print-ir-after-all output: pass name -> the module printed after it."""
    parts = re.split(r"// -----// IR Dump After (\S+): .*? //----- //\n", err)   # name: spec (options, spaces)
    return dict(zip(parts[1::2], parts[2::2]))


def test_multitree_trees_appear_after_their_pass():
    code, out, err = cli("--collective", "all_reduce", "--size", "1GB", "--topology", "8x8_torus", "--algorithm",
                         "multitree", "--print-ir-after-all", "--emit", "mlir")
    ir = dumps(err)
    assert code == 0 and list(ir)[-1] == "allocate-trees"
    assert '"comm.trees"' not in ir["select-algorithm"] and '"comm.trees"' in ir["allocate-trees"]
    trees = re.search(r'"comm.trees"\(\) \{(.*?)\} :', ir["allocate-trees"]).group(1)
    # the link-count bound: 64 x 63 tree edges over 256 directed links take 16 steps
    assert 'method = "translated"' in trees and "npus = 64" in trees and "steps = 16" in trees
    parent = [int(x) for x in re.search(r"parent = array<i64: ([^>]*)>", trees).group(1).split(",")]
    assert len(parent) == 64 * 64 and parent[0] == -1 and parent.count(-1) == 64  # one root per tree
    # every whole-network phase runs on them: it takes the trees' token
    assert all("%0" in line.split("{")[0] for line in ir["allocate-trees"].splitlines() if '"comm.phase"' in line)
    assert out == ir["allocate-trees"].rstrip("\n") + "\n"  # the emitted module is the last one printed


def test_the_lowering_expands_the_recorded_trees_not_its_own(tmp_path):
    """A module that carries trees is compiled on them: edit them and the tables follow, break them and the module
    is refused."""
    code, text, _ = cli("--collective", "all_gather", "--size", "64KB", "--topology", "2x2_torus", "--algorithm",
                        "multitree", "--emit", "mlir")
    assert code == 0 and text.count('"comm.trees"') == 1
    module = write(tmp_path, "m.mlir", text)
    code, again, _ = cli(module, "--algorithm", "multitree", "--emit", "mlir", "--verify")
    assert code == 0 and again.count('"comm.trees"') == 1  # kept, not allocated twice
    # a trees op whose link does not join a node to its parent is refused, in one line
    broken = re.sub(r"link = array<i64: -1, (\d+)", lambda m: f"link = array<i64: -1, {int(m.group(1)) + 2}", text)
    code, _, err = cli(write(tmp_path, "bad.mlir", broken), "--algorithm", "multitree")
    assert code == 2 and "does not join it to its parent" in err and err.count("\n") == 1


def test_a_whole_network_phase_without_its_structure_is_refused():
    code, _, err = cli("--collective", "all_reduce", "--size", "64KB", "--topology", "2x2_torus", "--pass-pipeline",
                       "decompose-all-reduce,chunk,flat-decompose,select-algorithm{algorithm=multitree}")
    assert code == 2 and "run allocate-trees first" in err and err.count("\n") == 1


def test_flat_ring_records_its_cycle():
    code, out, err = cli("--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--algorithm",
                         "flat_ring", "--print-ir-after-all", "--json")
    ir = dumps(err)
    assert code == 0 and list(ir)[-1] == "find-cycle"
    order = [int(x) for x in re.search(r'"comm.cycle"\(\) \{order = array<i64: ([^>]*)>', ir["find-cycle"])
             .group(1).split(",")]
    assert sorted(order) == list(range(16))
    topo = parse_topology("4x4_torus")
    assert all(sum(a != b for a, b in zip(topo.coords(u), topo.coords(v))) == 1  # neighbours along a link
               for u, v in zip(order, order[1:] + order[:1]))


def test_hdrm_places_ranks_on_any_bigraph_even_an_edge_list(tmp_path):
    """HDRM recognises a BiGraph by its links, not its name: the same network written as an edge list gets the
    same placement and the same time."""
    g = graphs.bigraph(4, 8, 50, 500)
    lines = [f"{g.names[a] if a < g.npus else 's' + str(a)} {g.names[b] if b < g.npus else 's' + str(b)}"
             for a, b in zip(g.src.tolist(), g.dst.tolist()) if a < b]
    edges = write(tmp_path, "bigraph.edges", "\n".join(l.replace("npu", "") for l in lines) + "\n")
    runs = []
    for topology in ("4x8_bigraph", edges):
        code, out, err = cli("--collective", "all_reduce", "--size", "64MB", "--topology", topology, "--algorithm",
                             "hdrm", "--print-ir-after-all", "--json")
        assert code == 0, err
        assert '"comm.placement"' in dumps(err)["place-ranks"]
        runs.append(json.loads(out)["total_time_us"])
    assert runs[0] == runs[1]


def test_optimal_records_which_schedule_won():
    code, out, err = cli("--collective", "all_reduce", "--size", "1GB", "--topology", "Switch(8)_Switch(8)_Switch(8)",
                         "--bandwidth", "50", "--latency", "1", "--chunks", "64", "--print-ir-after-all",
                         "--emit", "mlir")
    ir = dumps(err)
    assert code == 0 and list(ir)[-2:] == ["optimal-balance", "choose-schedule"]
    assert "comm.schedule =" not in ir["optimal-balance"] and 'comm.scheduler = "optimal"' in ir["optimal-balance"]
    assert 'comm.schedule = "cp-sat"' in ir["choose-schedule"] and "comm.themis_time_ns" in ir["choose-schedule"]
    assert out == ir["choose-schedule"].rstrip("\n") + "\n"  # what is emitted is what the last pass printed


def test_optimal_keeps_themis_when_themis_is_faster():
    """Where Themis's orders run faster than CP-SAT's on the cost model (here by 1.5 us), the module keeps Themis's
    orders and says so; the lowered schedule is then Themis's to the byte."""
    args = ["--collective", "all_reduce", "--size", "64MB", "--topology", "Ring(4)_Ring(4)_Switch(4)",
            "--bandwidth", "100,25,100", "--chunks", "4"]
    code, text, _ = cli(*args, "--emit", "mlir")
    assert code == 0 and 'comm.schedule = "themis"' in text
    r = json.loads(cli(*args, "--json")[1])
    themis = json.loads(cli(*args, "--scheduler", "themis", "--json")[1])
    assert r["optimal_choice"] == "themis"
    assert r["total_time_us"] == themis["total_time_us"] == r["themis_time_us"] < r["cp_sat_time_us"]
    tables = [cli(*args, *extra, "--emit", "tables", "--npu", "5", "--json")[1] for extra in ([], ["--scheduler",
                                                                                                "themis"])]
    assert tables[0] == tables[1]


def write(folder, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path
