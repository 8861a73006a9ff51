"""Adding an algorithm is one file (docs/extend-algorithm.md): algorithm files written to a temporary folder that
the algorithms package searches like its own (as a file dropped into algorithms/ would be found) run end to end
through the CLI with --verify, with no edit anywhere else. The lowering asks each for its template and its
symmetry; nothing outside algorithms/ knows their names.

The CLI runs in a child process: the registry keeps every Algorithm subclass it has seen, so the test algorithms
must not outlive this test."""
import json
import subprocess
import sys
import textwrap

import pytest

# direct spread over k-1 steps, one partner a step: a new per-dimension algorithm
PAIRWISE = '''
from ..network.blocks import ROTATION
from .base import ALL_GATHER, REDUCE_SCATTER, Algorithm, Transfers, same_units


class Pairwise(Algorithm):
    name = "pairwise"
    kinds = (REDUCE_SCATTER, ALL_GATHER)
    relabelling = ROTATION   # member m's partners are member 0's, moved by m

    def template(self, kind, k, bidirectional=False):
        rows = []
        for s in range(1, k):   # in step s-1 member m sends to member m+s
            for m in range(k):
                to = (m + s) % k
                block = to if kind == REDUCE_SCATTER else m   # the receiver's block, or the sender's own
                rows.append(same_units(s - 1, m, to, block, block + 1))
        return Transfers.build(k, rows, reduce=kind == REDUCE_SCATTER)

    def cost_steps(self, kind, block, k, link, hop, region):
        return [(hop(s), region / k / link) for s in range(1, k)]
'''

# the same over every NPU by rank, each message routed: a new whole-network algorithm over ranks
FLAT_PAIRWISE = '''
from .over_ranks import OverRanks


class FlatPairwise(OverRanks):
    name = "flat_pairwise"
    over = "pairwise"
'''

# a ring one way round the Hamiltonian cycle find-cycle records: a new whole-network algorithm over chosen links,
# whose template the lowering asks for (it assumed MultiTree's trees for any such algorithm but flat_ring before)
CYCLE_ONE_WAY = '''
from . import ring
from .base import NETWORK, REDUCE_SCATTER, Algorithm, Transfers
from .flat_ring import FlatRing


class CycleOneWay(Algorithm):
    name = "cycle_one_way"
    scope = NETWORK
    planned_by = "find-cycle"
    label = "ring one way along a Hamiltonian cycle"

    def plan(self, topology):
        return FlatRing().plan(topology)

    def read_plan(self, topology, attributes, links):
        return attributes["order"]

    def network_template(self, kind, topology, cycle, links):
        graph = links()
        link = {}
        for i, pair in enumerate(zip(graph.src.tolist(), graph.dst.tolist())):
            link.setdefault(pair, i)
        base = ring.template(kind, len(cycle))   # position p of the cycle is rank cycle[p], its block too
        rows = [(t, cycle[s], cycle[d], cycle[b], cycle[b] + 1, cycle[b], cycle[b] + 1, 1, link[cycle[s], cycle[d]])
                for t, s, d, b in zip(base.step.tolist(), base.src.tolist(), base.dst.tolist(), base.src_lo.tolist())]
        return Transfers.build(len(cycle), rows, reduce=kind == REDUCE_SCATTER)
'''

RUN = '''
import contextlib, io, json, sys
import astra_compile.algorithms as algorithms
algorithms.__path__.append(sys.argv[1])   # searched as algorithms/ itself: its files register by discovery
from astra_compile.compiler.main import main
out = []
for argv in json.loads(sys.argv[2]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    out.append([code, stdout.getvalue(), stderr.getvalue()])
print(json.dumps(out))
'''

MB = 2 ** 20
GBPS = 2 ** 30 / 1e9   # bytes per ns of 1 GB/s
AR = ["--collective", "all_reduce", "--size", "1MB", "--verify", "--json"]
COMMANDS = {
    "switch": AR + ["--topology", "Switch(4)", "--algorithm", "pairwise"],
    "ring": AR + ["--topology", "Ring(4)", "--algorithm", "pairwise", "--backend", "congestion"],
    "hypercube": AR + ["--topology", "HC(4)", "--algorithm", "pairwise"],
    "over ranks": AR + ["--topology", "Switch(4)", "--algorithm", "flat_pairwise"],
    "cycle": AR + ["--topology", "4x4_torus", "--algorithm", "cycle_one_way"],
    "listed": ["--collective", "all_reduce", "--size", "1MB", "--topology", "Switch(4)", "--algorithm", "nonesuch"],
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("more_algorithms")
    for name, source in (("pairwise", PAIRWISE), ("flat_pairwise", FLAT_PAIRWISE), ("cycle_one_way", CYCLE_ONE_WAY)):
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    done = subprocess.run([sys.executable, "-c", RUN, str(folder), json.dumps(list(COMMANDS.values()))],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return dict(zip(COMMANDS, json.loads(done.stdout)))


def _report(reports, name) -> dict:
    code, out, err = reports[name]
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] is True   # every NPU's buffer holds the all-reduce's result
    return report


def test_a_dimension_algorithm_in_one_file_runs_and_is_timed(reports):
    r = _report(reports, "switch")
    assert r["dims"][0]["algorithms"] == ["pairwise"]
    # 2 x 3 steps, each a quarter of the buffer up to the switch and down (2 hops of 500 ns) at 50 GB/s
    assert r["total_time_us"] * 1e3 == pytest.approx(6 * (2 * 500 + MB / 4 / (50 * GBPS)), rel=1e-12)
    assert r["execution"] == "symmetric"   # its rotation keeps a switch's links: NPU 0 stands for all


def test_its_relabelling_decides_symmetry_with_each_block(reports):
    # a rotation maps a ring's links onto links: the congestion runtime runs NPU 0 alone too
    assert _report(reports, "ring")["execution"] == "symmetric"
    # but not a hypercube's (c -> c+1 is one link from even c, two from odd c): every NPU runs
    assert _report(reports, "hypercube")["execution"] == "full"


def test_a_whole_network_algorithm_over_ranks_in_one_file(reports):
    r = _report(reports, "over ranks")
    # on one switch dimension the routed messages are the per-dimension ones
    assert r["total_time_us"] == _report(reports, "switch")["total_time_us"]
    assert r["execution"] == "full"


def test_a_whole_network_algorithm_over_links_gives_its_own_template(reports):
    r = _report(reports, "cycle")
    assert r["scheduler"] == "ring one way along a Hamiltonian cycle"
    # 2 x 15 steps round the 16-NPU cycle, each a 16th of the buffer over one link (half of 50 GB/s) and one hop
    assert r["total_time_us"] * 1e3 == pytest.approx(30 * (500 + MB / 16 / (25 * GBPS)), rel=1e-12)


def test_the_new_algorithms_are_listed_with_the_others(reports):
    code, _, err = reports["listed"]
    assert code == 2 and err.count("\n") == 1
    assert "pairwise" in err and "flat_pairwise" in err and "cycle_one_way" in err and "multitree" in err
