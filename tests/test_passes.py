"""Passes: IR text in, IR text out (expected files reviewed by hand), plus the pass infrastructure."""
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile import algorithms
from astra_compile.compiler.main import main
from astra_compile.passes import (ALL_REDUCE_SPLITS, PassError, PassManager, all_passes, parse_pipeline,
                                  pipeline_spec)
from astra_compile.passes.base import check_order
from astra_compile.network.topology import Topology

IR = os.path.join(os.path.dirname(__file__), "ir")


def compile_text(text, pipeline):
    ctx = comm.new_context()
    module = comm.parse_module(text, ctx)
    topo = Topology.from_dict(comm.get_topology(module))
    driver.run_passes(module, topo, pipeline)
    return str(module)


@pytest.mark.parametrize("pipeline,expected", [
    ("decompose-all-reduce", "all_reduce_2d.decompose.expected.mlir"),
    ("decompose-all-reduce,chunk{chunks=4},hierarchical-decompose", "all_reduce_2d.hierarchical.expected.mlir"),
    ("decompose-all-reduce,chunk{chunks=4},hierarchical-decompose,select-algorithm",
     "all_reduce_2d.select.expected.mlir"),
    # --all-reduce per-dimension: a pair per dimension on the all_reduce's buffer, each pair fused
    ("decompose-all-reduce{all-reduce=per-dimension}", "all_reduce_2d.per_dimension.expected.mlir"),
    ("decompose-all-reduce{all-reduce=per-dimension},chunk{chunks=4},hierarchical-decompose,select-algorithm",
     "all_reduce_2d.per_dimension.select.expected.mlir"),
])
def test_ir_in_ir_out(pipeline, expected):
    with open(os.path.join(IR, "all_reduce_2d.mlir")) as f:
        source = f.read()
    with open(os.path.join(IR, expected)) as f:
        assert compile_text(source, pipeline) == f.read()


HEADER = ('module attributes {comm.topology = {name = "Ring(6)_FullyConnected(4)", dims = [{block = "Ring", size = 6, '
          'bandwidth_gbps = 50.0, latency_ns = 1.0, links = 1}, {block = "FullyConnected", size = 4, '
          'bandwidth_gbps = 50.0, latency_ns = 1.0, links = 1}]}} {\n')


def phases(text):
    return [l.strip() for l in text.splitlines() if '"comm.phase"' in l]


def test_hierarchical_orders_and_sizes():
    out = compile_text(HEADER + '  %0 = "comm.reduce_scatter"() {bytes = 2400 : i64, dims = array<i64: 1, 0>, '
                       'name = "r"} : () -> !comm.token\n'
                       '  %1 = "comm.all_gather"(%0) {bytes = 2400 : i64, dims = array<i64: 0, 1>, name = "a"} : '
                       '(!comm.token) -> !comm.token\n}', "hierarchical-decompose")
    ph = phases(out)
    # reduce-scatter ascending (dim 0 with 2400 B in, then dim 1 with 400 B), all-gather descending (dim 1 gathers
    # 400 B, then dim 0 gathers the full 2400 B)
    dims = [int(p.split("dim = ")[1].split(" ")[0]) for p in ph]
    sizes = [int(p.split("{bytes = ")[1].split(" ")[0]) for p in ph]
    assert dims == [0, 1, 1, 0] and sizes == [2400, 400, 400, 2400]
    assert '"comm.phase"(%1)' in out and '"comm.phase"(%2)' in out  # chained by tokens


def test_select_algorithm_per_dimension_list_and_explicit_kept():
    src = (HEADER + '  %0 = "comm.phase"() {algorithm = "ring", bytes = 96 : i64, chunks = 1 : i64, collective = "x", '
           'dim = 1 : i64, group_bytes = 96 : i64, group_dims = array<i64: 1>, kind = "all_gather", stage = 0 : i64} '
           ': () -> !comm.token\n'
           '  %1 = "comm.phase"() {bytes = 96 : i64, chunks = 1 : i64, collective = "y", dim = 0 : i64, '
           'group_bytes = 96 : i64, group_dims = array<i64: 0>, kind = "all_gather", stage = 0 : i64} : () -> '
           '!comm.token\n}')
    out = phases(compile_text(src, "select-algorithm{algorithm=dbt,direct}"))
    assert 'algorithm = "ring"' in out[0]                 # explicit choice in the input is kept
    assert 'algorithm = "double_binary_tree"' in out[1]   # dim 0 gets the first name of the list (alias dbt)


def test_chunk_keeps_explicit_chunks():
    src = (HEADER + '  %0 = "comm.all_reduce"() {bytes = 4800 : i64, chunks = 3 : i64, dims = array<i64: 0>, '
           'name = "a"} : () -> !comm.token\n'
           '  %1 = "comm.all_reduce"() {bytes = 4800 : i64, dims = array<i64: 0>, name = "b"} : () -> !comm.token\n}')
    out = compile_text(src, "chunk{chunks=5}")
    lines = [l for l in out.splitlines() if "comm.all_reduce" in l]
    assert "chunks = 3" in lines[0] and "chunks = 5" in lines[1]


def test_pipeline_parsing():
    ps = parse_pipeline("builtin.module(decompose-all-reduce, chunk{chunks=8},select-algorithm{algorithm=ring,direct})")
    assert [p.name for p in ps] == ["decompose-all-reduce", "chunk", "select-algorithm"]
    # options are typed fields, parsed from the text
    assert ps[1].chunks == 8 and ps[2].algorithm == ("ring", "direct") and ps[2].ports is None
    # each pass prints itself with every option resolved; an option the pass decides per phase stays out
    assert [p.spec() for p in ps] == ["decompose-all-reduce{all-reduce=hierarchical}", "chunk{chunks=8}",
                                      "select-algorithm{algorithm=ring,direct}"]
    for bad, needle in [("chunk{chunks=8", "unbalanced"), ("chunk{size=8}", "no option 'size'"),
                        ("frobnicate", "unknown pass"), ("chunk{chunks}", "key=value"),
                        ("chunk{chunks=0}", "bad value '0'"),
                        ("select-algorithm,hierarchical-decompose", "select-algorithm must come after "
                                                                    "hierarchical-decompose"),
                        ("themis,select-algorithm", "themis must come after select-algorithm"),
                        ("hierarchical-decompose,chunk", "chunk must come before hierarchical-decompose")]:
        with pytest.raises(PassError, match=needle):
            parse_pipeline(bad)


def test_registry_has_one_pass_per_file():
    import astra_compile.passes as passes_pkg
    folder = os.path.dirname(passes_pkg.__file__)
    helpers = ("__init__.py", "base.py", "phase_cost.py", "dimension_order.py", "structure.py")  # shared, not passes
    files = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f not in helpers)
    assert sorted(n.replace("-", "_") for n in all_passes()) == files


def test_chunk_rejects_bad_values():
    src = HEADER + '  %0 = "comm.all_reduce"() {bytes = 48 : i64, dims = array<i64: 0>, name = "a"} : () -> !comm.token\n}'
    with pytest.raises(PassError, match="positive"):
        compile_text(src, "chunk{chunks=-2}")
    with pytest.raises(PassError, match="do not fit"):
        compile_text(src, "chunk{chunks=100}")


def test_module_verifier_value_checks():
    ctx = comm.new_context()
    for body, needle in [
        ('"comm.all_reduce"() {bytes = 0 : i64, dims = array<i64: 0>, name = "a"}', "bytes must be positive"),
        ('"comm.all_reduce"() {bytes = 8 : i64, dims = array<i64: 0, 0>, name = "a"}', "repeat"),
        ('"comm.all_reduce"() {bytes = 8 : i64, dims = array<i64: 5>, name = "a"}', "outside"),
        ('"comm.all_reduce"() {bytes = 8 : i64, dims = [0], name = "a"}', "dense_array"),
    ]:
        with pytest.raises(comm.IRError, match=needle):
            m = comm.parse_module(HEADER + f"  %0 = {body} : () -> !comm.token\n}}", ctx)
            comm.verify_module(m, [6, 4])


def test_switch_of_non_power_of_two_size_defaults_to_ring():
    src = ('module attributes {comm.topology = {name = "Switch(6)", dims = [{block = "Switch", size = 6, '
           'bandwidth_gbps = 50.0, latency_ns = 1.0, links = 1}]}} {\n'
           '  %0 = "comm.all_gather"() {bytes = 600 : i64, dims = array<i64: 0>, name = "a"} : () -> !comm.token\n}')
    assert 'algorithm = "ring"' in phases(compile_text(src, "hierarchical-decompose,select-algorithm"))[0]
    with pytest.raises(PassError, match="power-of-two"):
        compile_text(src, "hierarchical-decompose,select-algorithm{algorithm=halving_doubling}")


def test_spec_resolves_every_option():
    ps = parse_pipeline("decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm{ports=2},"
                        "optimal-balance{latency=false},choose-schedule")
    assert pipeline_spec(ps) == ("decompose-all-reduce{all-reduce=hierarchical},chunk{chunks=1},hierarchical-decompose,"
                                 "select-algorithm{ports=2},optimal-balance{latency=false active=1 time-limit=5.0},"
                                 "choose-schedule{latency=true active=1}")
    # command-line flags fill what the text left unset, and the spec shows them
    filled = [p.with_unset({"chunks": 8, "algorithm": "dbt", "active": 4}) for p in ps]
    assert pipeline_spec(filled).split(",")[1:5] == ["chunk{chunks=8}", "hierarchical-decompose",
                                                      "select-algorithm{algorithm=double_binary_tree ports=2}",
                                                      "optimal-balance{latency=false active=4 time-limit=5.0}"]
    # the manager runs the resolved passes: what runs is what the spec says
    assert PassManager(ps).passes == [p.resolved() for p in ps] and PassManager(ps).spec() == pipeline_spec(ps)


# option text per option type, for the round trip below (a new option type needs its strategy here)
OPTION_TEXT = {
    "int | None": st.integers(-10**6, 10**6).map(str),
    "float | None": st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    "bool | None": st.sampled_from(["true", "false", "1", "0", "yes", "no", "on", "off", "True"]),
    "tuple[str, ...] | None": st.lists(st.sampled_from(sorted({*algorithms.all_algorithms(), "dbt", "hd"})),
                                       min_size=1, max_size=4).map(",".join),
}
# options whose type admits values the option does not (a str of a few choices)
OPTION_CHOICES = {("decompose-all-reduce", "all-reduce"): st.sampled_from(ALL_REDUCE_SPLITS)}


def option_text(cls, key, f):
    strategy = OPTION_CHOICES.get((cls.name, key), OPTION_TEXT.get(f.type))
    assert strategy is not None, f"no strategy for option {key} of {cls.name} ({f.type}): add one to OPTION_TEXT"
    return strategy


@st.composite
def passes_with_options(draw):
    cls = draw(st.sampled_from(sorted(all_passes().values(), key=lambda c: c.name)))
    given = {k: draw(option_text(cls, k, f)) for k, f in cls.options().items() if draw(st.booleans())}
    try:
        return cls.from_text(given)
    except PassError:  # a value the option refuses (chunks=0): refused the same way whatever the spec says
        return None


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(passes_with_options(), min_size=1, max_size=5))
def test_spec_round_trip(drawn):
    """Every registered pass, every option, any value it accepts: the spec parses back to the same pipeline (every
    option resolved), and printing that gives the same text."""
    passes = [p for p in drawn if p is not None]
    try:
        check_order(passes)
    except PassError:
        return
    spec = pipeline_spec(passes)
    again = parse_pipeline(spec)
    assert again == [p.resolved() for p in passes]
    assert pipeline_spec(again) == spec
    for p, q in zip(passes, again):  # and the values the pass acts on are the same
        assert all(p.value(f.name) == q.value(f.name) for f in p.options().values())


def test_every_option_has_a_strategy():
    for cls in all_passes().values():
        for key, f in cls.options().items():
            option_text(cls, key, f)


def test_a_failing_pass_says_after_which_passes():
    src = (HEADER + '  %0 = "comm.all_gather"() {bytes = 48 : i64, dims = array<i64: 0>, name = "a"} : () -> '
           '!comm.token\n}')
    with pytest.raises(PassError) as e:
        compile_text(src, "chunk,hierarchical-decompose,select-algorithm{algorithm=halving_doubling}")
    assert str(e.value) == ("pass select-algorithm failed after chunk, hierarchical-decompose: halving_doubling "
                            "needs a power-of-two group, dimension 0 has 6 NPUs")
    with pytest.raises(PassError) as e:
        compile_text(src, "chunk{chunks=100}")
    assert str(e.value) == "pass chunk failed as the first pass: comm.all_gather 'a': 100 chunks do not fit in 48 bytes"


def test_a_failing_pass_on_the_command_line(capsys):
    code = main(["--collective", "all_gather", "--size", "600", "--topology", "Switch(6)", "--algorithm",
                 "halving_doubling"])
    err = capsys.readouterr().err
    assert code == 2 and err == ("astra-compile: error: pass select-algorithm failed after decompose-all-reduce, "
                                 "chunk, hierarchical-decompose: halving_doubling needs a power-of-two group, "
                                 "dimension 0 has 6 NPUs\n")


@pytest.mark.parametrize("flags", [["--chunks", "4"], ["--scheduler", "themis", "--algorithm", "ring,direct"],
                                   ["--algorithm", "multitree", "--ports", "2"]])
def test_json_reports_the_pipeline_that_ran(capsys, flags):
    """--json's pass_pipeline is the resolved spec actually run: given back as --pass-pipeline, the same figures."""
    base = ["--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus", "--json"]
    assert main(base + flags) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(base + ["--pass-pipeline", first["pass_pipeline"]]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["pass_pipeline"] == first["pass_pipeline"] and again["total_time_us"] == first["total_time_us"]
    assert again["collectives"] == first["collectives"]
