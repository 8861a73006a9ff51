"""Adding a building block is one file (docs/extend-block.md): a block file written to a temporary folder that the
blocks package searches like its own (as a file dropped into network/blocks/ would be found) is parsed in the
notation, scheduled by every kind of algorithm, timed by both runtimes, verified on data, written to tables and read
back, and listed where blocks are listed, with no edit anywhere else.

The block is a unidirectional ring, URing(k): each NPU has one link, to the next member (a ring of one-way links,
as a token ring or a ring of simplex optical links). Its one link carries the NPU's whole bandwidth B, so a ring
schedule runs one way round at B where a Ring's runs both ways at B/2 a direction; a message to the member d
ahead crosses d links, to the one behind k-1.

The CLI runs in a child process: the registry keeps every Block subclass it has seen, so the test block must not
outlive this test."""
import json
import subprocess
import sys
import textwrap

import pytest

URING = '''
"""URing(k): a ring of one-way links, each NPU linked to the next member only; its one link (slot 0) carries the
NPU's whole bandwidth in the dimension. A rotation maps the ring onto itself; XOR partners are 1 link ahead of
some members and k-1 ahead of others."""
import numpy as np

from .base import FORWARD, XOR, Block, Symmetry
from .ring import walk


class URing(Block):
    order = 6
    name = "URing"
    spellings = ("URing",)
    translatable = True   # c -> c + r maps links onto links (MultiTree may translate one tree to every root)

    def symmetry(self, relabelling, k):
        return Symmetry.NONE if relabelling == XOR and k > 2 else Symmetry.LINKS

    def link_share(self, k):
        return 1

    def default_algorithm(self, k):
        return "ring"

    def path(self, k, src, dst, lane):
        """Forward whatever the lane asked: the only way round."""
        return (dst - src) % k, np.full(len(src), FORWARD, np.int64)

    def cost_hops(self, k, distance):
        return distance % k

    def slots(self, k):
        return 1

    def route(self, k, stride, src, dst, lane, hops, representative):
        return walk(k, stride, src, np.ones(len(src), np.int64), hops, representative)

    def describe(self, d, npu, slot, k, stride):
        return f"dim{d} npu{npu}->next"

    def physical_links(self, ranks, c, base, k, stride, first_switch):
        zero = np.zeros(len(ranks), np.int64)
        return ranks, base + (c + 1) % k * stride, zero, ranks, zero, 0
'''

RUN = '''
import contextlib, io, json, sys
import astra_compile.network.blocks as blocks
blocks.__path__.append(sys.argv[1])   # searched as network/blocks/ itself: its files register by discovery
blocks.register_all()                 # (the package registers its blocks when first imported)
import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, Op, Workload
from astra_compile.compiler.main import main
out = {"cli": []}
for argv in json.loads(sys.argv[2]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    out["cli"].append([code, stdout.getvalue(), stderr.getvalue()])
# a 64 MiB all-reduce of NPUs 0-3 of URing(8) under the astra-sim step semantics: one ring over the group
group = Op("c10d.allreduce_", COLLECTIVE, [], bytes=64 * 2 ** 20, collective="all_reduce", group=(0, 1, 2, 3),
           group_name="a")
step = astra_compile.compile(Workload(8, {0: [group]}, source="one group", spmd=True), "URing(8)",
                             step_semantics="astra-sim").to_dict()
out["group"] = [step["total_time_us"], step["collectives"][0]["algorithm"]]
print(json.dumps(out))
'''

MIB = 2 ** 20
B = 50 * 2 ** 30 / 1e9   # the default 50 GB/s in bytes per ns
L = 500                  # the default latency per link, ns
AR = ["--collective", "all_reduce", "--size", "1MiB", "--topology", "URing(4)", "--verify", "--json"]
CONGESTION = ["--backend", "congestion"]
FULL = ["--execution", "full"]
TREES = ["--size", "3MiB", "--topology", "URing(3)", "--algorithm", "multitree", "--verify", "--json"]


def commands(tables: str, network: str) -> dict:
    return {
        "ring": AR,
        "ring congestion": AR + CONGESTION,
        "ring full": AR + FULL,
        "ring congestion full": AR + CONGESTION + FULL,
        "direct": AR + ["--algorithm", "direct"],
        "direct congestion": AR + ["--algorithm", "direct"] + CONGESTION,
        "direct congestion full": AR + ["--algorithm", "direct"] + CONGESTION + FULL,
        "hd": AR + ["--algorithm", "halving_doubling"],
        "hd symmetric": AR + ["--algorithm", "halving_doubling", "--execution", "symmetric"],
        "trees rs": ["--collective", "reduce_scatter"] + TREES,
        "trees rs full": ["--collective", "reduce_scatter"] + TREES + FULL,
        "trees ag": ["--collective", "all_gather"] + TREES,
        "stacked": ["--collective", "all_reduce", "--size", "1MiB", "--topology", "URing(4)_Switch(2)",
                    "--algorithm", "ring,direct", "--verify", "--json"],
        "shorthand": ["--collective", "all_gather", "--size", "1MiB", "--topology", "4x2_uring", "--verify",
                      "--json"],
        "network file": ["--collective", "all_reduce", "--size", "1MiB", "--topology", network, "--algorithm",
                         "ring,direct", "--json"],
        "write tables": AR[:6] + ["--emit", "tables", "-o", tables],
        "read tables": [tables, "--json"],
        "unknown": ["--collective", "all_reduce", "--size", "1MiB", "--topology", "Nonesuch(4)"],
        "cycle": AR[:6] + ["--algorithm", "flat_ring"],
    }


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("more_blocks")
    (folder / "uring.py").write_text(textwrap.dedent(URING))
    tables = tmp_path_factory.mktemp("tables") / "out"
    network = tmp_path_factory.mktemp("network") / "network.yml"   # an ASTRA-sim network file names the block
    network.write_text("topology: [ URing, Switch ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50, 50 ]\n"
                       "latency: [ 500, 500 ]\n")
    runs = commands(str(tables), str(network))
    done = subprocess.run([sys.executable, "-c", RUN, str(folder), json.dumps(list(runs.values()))],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return dict(zip(runs, out["cli"]), tables=tables, group=out["group"])


def _report(reports, name, verified=True) -> dict:
    code, out, err = reports[name]
    assert code == 0, err
    report = json.loads(out)
    assert report.get("verified") is (True if verified else None)   # every NPU's buffer holds the result
    return report


def _us(ns: float) -> float:
    return ns / 1e3


def test_the_notation_names_the_new_block(reports):
    r = _report(reports, "ring")
    assert r["topology"] == "URing(4)" and r["dims"][0]["block"] == "URing" and r["npus"] == 4
    assert r["dims"][0]["algorithms"] == ["ring"]   # its default_algorithm
    assert _report(reports, "shorthand")["topology"] == "URing(4)_URing(2)"   # '4x2_uring' as '8x8_mesh'
    stacked = _report(reports, "stacked")
    assert [d["block"] for d in stacked["dims"]] == ["URing", "Switch"] and stacked["npus"] == 8
    from_file = _report(reports, "network file", verified=False)
    assert from_file["topology"] == "URing(4)_Switch(2)" and from_file["total_time_us"] == stacked["total_time_us"]


def test_a_ring_runs_one_way_round_at_the_whole_bandwidth(reports):
    """1 MiB all-reduce on URing(4): 2(k-1) = 6 steps, each a quarter of the buffer over the NPU's one link at the
    whole 50 GB/s, one hop: 6 (L + MiB/4 / B). (A Ring(4) moves halves both ways at B/2: the same figure.)"""
    r = _report(reports, "ring")
    assert r["total_time_us"] == pytest.approx(_us(6 * (L + MIB / 4 / B)), rel=1e-12)
    assert r["per_dim_bytes"] == [3 * MIB // 2]   # 2 x 3 quarters sent per NPU


def test_both_runtimes_agree_where_no_link_is_shared(reports):
    # each ring step puts one message on every link: nothing to contend for
    assert _report(reports, "ring congestion")["total_time_us"] == _report(reports, "ring")["total_time_us"]


def test_both_runtimes_differ_where_messages_share_the_one_link(reports):
    """direct: every member sends a quarter to each of the 3 others at once. The analytical runtime gives each
    message a whole link, the farthest 3 links ahead: 2 (3L + MiB/4 / B). In the congestion runtime the link
    c -> c+1 carries the messages of c (3), c-1 (2) and c-2 (1): 6 quarters a half, plus at most 3 hops' latency."""
    assert _report(reports, "direct")["total_time_us"] == pytest.approx(_us(2 * (3 * L + MIB / 4 / B)), rel=1e-12)
    shared = _report(reports, "direct congestion")["total_time_us"]
    bound = _us(2 * 6 * MIB / 4 / B)
    assert bound <= shared <= bound + _us(2 * 3 * L)


def test_symmetric_execution_where_its_symmetry_says_links_map_onto_links(reports):
    # a rotation (ring) and member 0 treating every other member alike (direct) keep the ring's links: NPU 0 runs
    # alone in both runtimes, and every NPU running gives the same figure
    for name in ("ring", "ring congestion", "direct congestion"):
        assert _report(reports, name)["execution"] == "symmetric", name
    for name in ("ring full", "ring congestion full", "direct congestion full"):
        r = _report(reports, name)
        assert r["execution"] == "full"
        assert r["total_time_us"] == _report(reports, name[:-len(" full")])["total_time_us"], name


def test_full_execution_where_it_says_they_do_not(reports):
    """halving-doubling's partner c XOR 2 is 2 links ahead of every member, but c XOR 1 is 1 link ahead of an even c
    and 3 of an odd one: the block says NONE for XOR, every NPU runs, and the steps last 2 + 3 hops:
    2 (5L + (1/2 + 1/4) MiB / B)."""
    r = _report(reports, "hd")
    assert r["execution"] == "full"
    assert r["total_time_us"] == pytest.approx(_us(2 * (5 * L + 0.75 * MIB / B)), rel=1e-12)
    code, _, err = reports["hd symmetric"]
    assert code == 2 and err.count("\n") == 1 and "NPU 0 cannot stand for them: use --execution full" in err


def test_trees_reduce_back_up_their_links_the_long_way_round(reports):
    """MultiTree on URing(3): tree r is the chain r -> r+1 -> r+2 over the one-way links, each carrying a third of
    3 MiB. The all-gather runs down the links, 2 steps of one hop: 2 (L + MiB / B). Its reduce-scatter sends each
    child's sum back to its parent, which no link does: forward the rest of the way round, 2 links:
    2 (2L + MiB / B) (the lowering used to charge one hop on a link the block does not have)."""
    assert _report(reports, "trees ag")["total_time_us"] == pytest.approx(_us(2 * (L + MIB / B)), rel=1e-12)
    rs = _report(reports, "trees rs")
    assert rs["total_time_us"] == pytest.approx(_us(2 * (2 * L + MIB / B)), rel=1e-12)
    assert rs["execution"] == "symmetric"   # translated trees: the same steps from every member
    assert _report(reports, "trees rs full")["total_time_us"] == rs["total_time_us"]


def test_tables_name_the_block_and_run_again(reports):
    assert reports["write tables"][0] == 0, reports["write tables"][2]
    meta = json.loads((reports["tables"] / "meta.json").read_text())
    assert [d["block"] for d in meta["topology"]["dims"]] == ["URing"]
    again = _report(reports, "read tables", verified=False)   # the runtime reads the block from meta.json
    assert again["execution"] == "symmetric" and again["total_time_us"] == _report(reports, "ring")["total_time_us"]


def test_the_new_block_is_listed_with_the_others(reports):
    code, _, err = reports["unknown"]
    assert code == 2 and err.count("\n") == 1
    assert "unknown topology block 'Nonesuch(4)'" in err and "Ring(k)" in err and "or URing(k)" in err


def test_a_sub_world_group_as_astra_sim_wraps_forward_round_the_ring(reports):
    """Under the astra-sim step semantics a group smaller than the world runs one ring over its members
    (network/astra_network.py), each step's latency the mean of its pairs' hops: NPUs 0-3 of URing(8) have three
    1-link pairs, and the wrap 3 -> 0 goes forward 5 links: (3 + 5) / 4 = 2 hops. 64 MiB, 2 x 3 steps of a quarter
    at the one link's 50 GB/s: 6 (2L + 16 MiB / B) (the wrap was charged 3 hops back before: 1.5)."""
    took, algorithm = reports["group"]
    assert algorithm == "ring over the group (as ASTRA-sim)"
    assert took == pytest.approx(_us(6 * (2 * L + 16 * MIB / B)), rel=1e-12)


def test_a_ring_both_ways_round_a_cycle_is_refused_on_one_way_links(reports):
    code, _, err = reports["cycle"]   # flat_ring needs each link of its cycle both ways
    assert code == 2 and err.count("\n") == 1 and "no Hamiltonian ring found in URing(4)" in err
