"""--emit msccl-xml: every all-reduce, reduce-scatter, all-gather and all-to-all
algorithm, on small topologies, written as an MSCCL algorithm file that an independent interpreter
(tests/msccl_interpreter.py) loads and executes on data as MSCCL runs the file's `coll`: every rank must end with
what NCCL's collective of that name defines (all-reduce: the sum of every input). The interpreter itself must catch
a broken file."""
import re

import pytest

from astra_compile import algorithms

from astra_compile.compiler.interop import msccl_xml

from helpers import cli, refused
from msccl_interpreter import InvalidAlgorithm, check, parse

TOPOLOGIES = ["Ring(4)", "Ring(2)_Ring(4)", "4x4_torus", "Switch(8)", "4x8_bigraph"]
KINDS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]
COLL = {"all_reduce": "allreduce", "reduce_scatter": "reducescatter", "all_gather": "allgather",
        "all_to_all": "alltoall"}


def emitted(capsys, topology, *extra, size="1MB", kind="all_reduce") -> str:
    code, out, err = cli(capsys, "--collective", kind, "--size", size, "--topology", topology,
                         "--emit", "msccl-xml", *extra)
    assert code == 0, err
    return out


def check_sums(text: str, seed: int = 0, orders: int = 3) -> dict:
    """Execute in `orders` random step orders; every rank must end with what the file's `coll` defines (for an
    all-reduce: the sum of all inputs) each time."""
    algo = parse(text)
    check(algo, seed, orders)
    return algo


def applicable(capsys, topology, name, kind="all_reduce"):
    """Does the compiler accept this algorithm on this topology (a report, exit 0)?"""
    code, _, _ = cli(capsys, "--collective", kind, "--size", "1MB", "--topology", topology,
                     "--algorithm", name, "--scheduler", "baseline")
    return code == 0


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_algorithm_passes_the_interpreters_data_check(capsys, topology):
    ran = []
    for name in algorithms.all_algorithms():
        if not applicable(capsys, topology, name):
            continue
        if name == "in_switch":   # in-network reduction has no MSCCL form: refused in one line
            refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", topology, "--algorithm",
                    name, "--emit", "msccl-xml", match="reduces in the switch")
            continue
        for chunks in ("1", "4"):
            text = emitted(capsys, topology, "--algorithm", name, "--chunks", chunks, "--scheduler", "baseline")
            check_sums(text, seed=len(ran))
            ran.append((name, chunks))
    assert len(ran) >= 6, ran   # ring, direct, halving_doubling, trees, multitree, flat_* at least somewhere


@pytest.mark.parametrize("kind", KINDS[1:])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_collective_passes_the_interpreters_data_check(capsys, topology, kind):
    """Every collective, not only all-reduce: each algorithm that schedules it, 1 and 4 chunks, under baseline and
    optimal orders, checked against NCCL's definition."""
    ran = []
    for name in algorithms.all_algorithms():
        if name == "in_switch" or not applicable(capsys, topology, name, kind):
            continue
        for chunks, scheduler in (("1", "baseline"), ("4", "optimal")):
            text = emitted(capsys, topology, "--algorithm", name, "--chunks", chunks, "--scheduler", scheduler,
                           kind=kind, size="768KB")
            # in place, as MSCCL's own files of these colls; an all-to-all out of place, as msccl-tools writes it
            place = 'inplace="0" outofplace="1"' if kind == "all_to_all" else 'inplace="1" outofplace="0"'
            assert f'coll="{COLL[kind]}" {place}' in text.splitlines()[0]
            check_sums(text, seed=len(ran))
            ran.append((name, chunks))
    assert len(ran) >= 4, ran


def test_shards_are_relabelled_to_msccls_rank_order(capsys, monkeypatch):
    """On Ring(2)_Ring(4) an NPU's all-gather shard is not at rank x K of the buffer (the shards nest dimension 0
    inside dimension 1 per chunk), so a file written with our offsets as they are gives the ranks' inputs in the
    wrong places; the interpreter sees it."""
    args = ("Ring(2)_Ring(4)", "--chunks", "2")
    text = emitted(capsys, *args, kind="all_gather")
    check_sums(text)
    monkeypatch.setattr(msccl_xml, "_layout", lambda meta, kind: [(0, meta.collectives[0].bytes, 0)])
    with pytest.raises(AssertionError, match="every rank's input in rank order"):
        check_sums(emitted(capsys, *args, kind="all_gather"))


def test_an_in_place_all_gather_works_in_the_output_buffer(capsys):
    """As MSCCL's own in-place all-gather files: every step on `o`, i_chunks 0, rank r's input at o[r K]."""
    text = emitted(capsys, "Ring(4)", kind="all_gather")
    algo = parse(text)
    steps = [st for g in algo["gpus"].values() for t in g["tbs"] for st in t["steps"]]
    assert {st["srcbuf"] for st in steps} == {st["dstbuf"] for st in steps} == {"o"}
    assert algo["gpus"][0]["size"] == {"i": 0, "o": algo["nchunks"], "s": 0}
    rs = parse(emitted(capsys, "Ring(4)", kind="reduce_scatter"))
    assert {st["srcbuf"] for g in rs["gpus"].values() for t in g["tbs"] for st in t["steps"]} == {"i"}
    assert rs["gpus"][0]["size"] == {"i": rs["nchunks"], "o": 0, "s": 0}


@pytest.mark.parametrize("scheduler", ["themis", "optimal"])
def test_themis_and_optimal_schedules_run_too(capsys, scheduler):
    text = emitted(capsys, "4x4_torus", "--chunks", "8", "--scheduler", scheduler)
    algo = check_sums(text)
    assert algo["ngpus"] == 16


def test_the_file_states_what_msccl_needs(capsys):
    text = emitted(capsys, "Ring(4)")
    head = text.splitlines()[0]
    assert re.search(r'coll="allreduce".*inplace="1"', head) and 'ngpus="4"' in head
    assert 'nchunksperloop="8"' in head   # a bidirectional ring: each direction's 4 shards
    algo = parse(text)
    # one thread block per (peer, direction): ring neighbours 1 and 3, both ways
    assert [(t["send"], t["recv"]) for t in algo["gpus"][0]["tbs"]] == [(-1, 1), (-1, 3), (1, -1), (3, -1)]


def test_a_long_schedule_spreads_its_chunks_over_channels(capsys):
    text = emitted(capsys, "Ring(8)", "--chunks", "64", "--scheduler", "baseline", size="64MB")
    algo = check_sums(text)
    assert int(re.search(r'nchannels="(\d+)"', text).group(1)) > 1
    assert max(len(t["steps"]) for g in algo["gpus"].values() for t in g["tbs"]) <= 256


def test_the_interpreter_catches_a_broken_file(capsys):
    text = emitted(capsys, "Ring(4)")
    # a receive that overwrites instead of reducing: the data check fails
    broken = text.replace('type="rrc"', 'type="r"', 1)
    with pytest.raises(AssertionError, match="sum"):
        check_sums(broken)
    # an in-place all-gather whose steps name the input buffer (MSCCL's loader: no such chunks there)
    gather = emitted(capsys, "Ring(4)", kind="all_gather")
    with pytest.raises(InvalidAlgorithm, match="outside"):
        check_sums(gather.replace('srcbuf="o"', 'srcbuf="i"').replace('dstbuf="o"', 'dstbuf="i"'))
    # a dependency dropped: the send may read a chunk before its reduction arrives
    no_dep = re.sub(r'(type="s"[^/]*?)depid="\d+" deps="\d+"', r'\1depid="-1" deps="-1"', text, count=3)
    with pytest.raises((AssertionError, InvalidAlgorithm)):   # in one of enough random orders
        check_sums(no_dep, orders=20)
    # a receive's thread block moved to another channel: the sender's data is never received
    with pytest.raises(InvalidAlgorithm):
        check_sums(text.replace('<tb id="0" send="-1" recv="1" chan="0">', '<tb id="0" send="-1" recv="1" chan="1">'))
    # a step gone: its partner waits forever
    with pytest.raises(InvalidAlgorithm, match="deadlock|out of order|never"):
        check_sums(re.sub(r'\n\s*<step s="5" type="r"[^\n]*', "", text, count=1))


@pytest.mark.parametrize("argv, match", [
    (["--collective", "broadcast", "--size", "1MB", "--topology", "Ring(4)"], "not by root"),
    (["--collective", "reduce", "--size", "1MB", "--topology", "Ring(2)_Ring(4)", "--root", "3"],
     "reduce scheduled for root 3"),
    (["--collective", "reduce_scatter", "--size", "1001", "--topology", "Ring(4)"], "the same count"),
    (["--collective", "all_reduce", "--size", "1MB", "--topology", "Switch(8)", "--algorithm", "in_switch"],
     "reduces in the switch"),
    (["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--json"], "--json applies to"),
    (["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(2)_Ring(4)", "--dims", "1"],
     "runs in groups"),
])
def test_what_cannot_be_written_is_refused_in_one_line(capsys, argv, match):
    refused(capsys, *argv, "--emit", "msccl-xml", match=match)


def test_a_training_step_is_refused(capsys):
    refused(capsys, "examples/gpt_tp_dp.py", "--topology", "8x8_torus", "--emit", "msccl-xml",
            match="one collective's schedule")


def test_output_file_is_written_whole(capsys, tmp_path):
    out = tmp_path / "algo.xml"
    code, stdout, _ = cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)",
                          "--emit", "msccl-xml", "-o", str(out))
    assert code == 0 and stdout == ""
    check_sums(out.read_text())


def test_a_file_too_large_is_refused_before_it_is_built(capsys, monkeypatch):
    from astra_compile.compiler.interop import msccl_xml
    monkeypatch.setattr(msccl_xml, "MAX_ROWS", 10)
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--emit", "msccl-xml",
            match="transfers over 4 GPUs")
