"""Chakra execution traces in: per-rank protobuf ETs as ASTRA-sim 2.x runs them, written here
with the schema the reader builds (message and field numbers from the published format)."""
import json
import os

import pytest

from astra_compile.compiler.frontend.chakra import add_attr, delimited, schema

from helpers import cli, refused

MB = 1 << 20


def node(id_, name, type_, deps=(), data_deps=(), duration=0, **attrs):
    _, Node = schema()
    n = Node(id=id_, name=name, type=type_, ctrl_deps=list(deps), data_deps=list(data_deps), duration_micros=duration)
    for key, value in attrs.items():
        add_attr(n, key, value)
    return n


def write_traces(directory, prefix, per_rank, version="0.0.4", groups=None) -> str:
    GlobalMetadata, _ = schema()
    os.makedirs(directory, exist_ok=True)
    for rank, nodes in per_rank.items():
        with open(os.path.join(directory, f"{prefix}.{rank}.et"), "wb") as f:
            f.write(delimited(GlobalMetadata(version=version)))
            for n in nodes:
                f.write(delimited(n))
    if groups is not None:
        with open(os.path.join(directory, "comm_group.json"), "w") as f:
            json.dump(groups, f)
    return str(directory)


COLL, COMP, SEND_, RECV_, LOAD = 7, 4, 5, 6, 2


def microbenchmark(tmp_path, npus=4, size=MB):
    """ASTRA-sim's microbenchmark generator's shape: one all-reduce node per rank, is_cpu_op false."""
    return write_traces(tmp_path / "all_reduce", "all_reduce",
                        {r: [node(0, "COMM_COLL_NODE", COLL, is_cpu_op=False, comm_type=0, comm_size=size,
                                  involved_dim=[True])] for r in range(npus)})


def step_json(capsys, *argv):
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_an_astra_sim_microbenchmark_all_reduce_imports_and_times_as_the_collective(capsys, tmp_path):
    d = microbenchmark(tmp_path)
    step = step_json(capsys, d, "--topology", "Ring(4)")
    alone = step_json(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)")
    assert step["total_time_us"] == pytest.approx(alone["total_time_us"], rel=1e-12)
    assert [c["kind"] for c in step["collectives"]] == ["all_reduce"]
    files = sorted(str(p) for p in (tmp_path / "all_reduce").glob("*.et"))
    assert step_json(capsys, *files, "--topology", "Ring(4)")["total_time_us"] == step["total_time_us"]


def test_compute_groups_messages_and_chakras_all_gather_size(capsys, tmp_path):
    """Two ranks: a compute node (FLOPs and bytes), a memory load, an all-gather over the group of comm_group.json
    (Chakra's comm_size is each rank's input), then rank 0 sends to rank 1; a CPU op and a metadata node pass their
    dependencies on."""
    def program(rank):
        nodes = [node(1, "mm", COMP, num_ops=2 * 10 ** 12, tensor_size=4 * MB, is_cpu_op=False),
                 node(2, "cpu", COMP, deps=[1], is_cpu_op=True, num_ops=1),
                 node(3, "meta", 1, deps=[2]),
                 node(4, "load", LOAD, deps=[3], tensor_size=64 * MB),
                 node(5, "ag", COLL, data_deps=[4], comm_type=2, comm_size=MB, pg_name="g", is_cpu_op=False)]
        nodes.append(node(6, "send" if rank == 0 else "recv", SEND_ if rank == 0 else RECV_, deps=[5],
                          comm_size=2 * MB, **({"comm_dst": 1} if rank == 0 else {"comm_src": 0})))
        return nodes
    d = write_traces(tmp_path / "t", "trace", {0: program(0), 1: program(1)}, groups={"g": [0, 1]})
    step = step_json(capsys, d, "--topology", "Ring(2)", "--peak-tflops", "1000", "--mem-bw", "1000")
    # Chakra's all-gather comm_size is each rank's input: 1 MB per rank x 2 ranks gathered
    assert [(c["kind"], c["bytes"]) for c in step["collectives"]] == [("all_gather", 2 * MB), ("send", 2 * MB)]
    # 2 TFLOP at 1000 TFLOPS (2000 us); the 64 MB load (tensor_loc absent: local memory) at 1000 GB/s (62.5 us),
    # on the memory's own stream; the CPU op runs nothing
    assert step["compute_time_us"] == pytest.approx(2000.0, rel=1e-12)
    assert step["local_memory_time_us"] == pytest.approx(62.5, rel=1e-12)
    assert step["memory_summary"][0]["kind"] == "load" and step["memory_summary"][0]["location"] == "local"


@pytest.mark.parametrize("damage, match", [
    (lambda d: open(os.path.join(d, "all_reduce.1.et"), "r+b").truncate(5), "truncated"),
    (lambda d: os.remove(os.path.join(d, "all_reduce.2.et")), "the trace of rank 2 is missing"),
    (lambda d: os.rename(os.path.join(d, "all_reduce.3.et"), os.path.join(d, "all_reduce.x.et")),
     "is named <prefix>.<rank>.et"),
    (lambda d: open(os.path.join(d, "all_reduce.0.et"), "wb").write(b"\x05\xff\xff\xff\xff\xff"),
     "not Chakra's GlobalMetadata"),
    (lambda d: open(os.path.join(d, "all_reduce.0.et"), "wb").write(b""), "empty"),
])
def test_damaged_traces_are_refused_in_one_line(capsys, tmp_path, damage, match):
    d = microbenchmark(tmp_path)
    damage(d)
    refused(capsys, d, "--topology", "Ring(4)", match=match)


@pytest.mark.parametrize("nodes, version, groups, match", [
    ([node(0, "x", COLL, comm_type=0, comm_size=MB)], "1.0.0", None, "schema version '1.0.0'"),
    ([node(0, "x", COLL, comm_type=3, comm_size=MB)], "0.0.4", None, "comm_type GATHER is not supported"),
    ([node(0, "x", COLL, deps=[1], comm_type=0, comm_size=MB), node(1, "y", COLL, deps=[0], comm_type=0,
                                                                    comm_size=MB)], "0.0.4", None,
     "a dependency cycle"),
    ([node(0, "x", COLL, deps=[9], comm_type=0, comm_size=MB)], "0.0.4", None, "depends on node 9"),
    ([node(0, "x", COLL, comm_type=0, comm_size=MB, pg_name="tp")], "0.0.4", {"dp": [0, 1]}, "'tp' is not in"),
    ([node(0, "x", COLL, comm_type=0, comm_size=0)], "0.0.4", None, "comm_size must be positive"),
    ([node(0, "x", SEND_, comm_size=MB, comm_dst=7)], "0.0.4", None, "comm_dst 7 is not a rank"),
])
def test_bad_nodes_are_refused_in_one_line(capsys, tmp_path, nodes, version, groups, match):
    d = write_traces(tmp_path / "t", "t", {0: nodes, 1: nodes}, version=version, groups=groups)
    refused(capsys, d, "--topology", "Ring(2)", match=match)


# ---- out: --emit chakra, and reading it back ---------------------------------------------------------------------

def test_a_collective_written_as_chakra_reads_back_to_its_time(capsys, tmp_path):
    out = tmp_path / "ar"
    code, text, err = cli(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "2x2_torus",
                          "--emit", "chakra", "-o", str(out))
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["comm_group.json"] + [f"trace.{r}.et" for r in range(4)]
    alone = step_json(capsys, "--collective", "all_reduce", "--size", "64MB", "--topology", "2x2_torus")
    again = step_json(capsys, str(out), "--topology", "2x2_torus")
    assert again["total_time_us"] == alone["total_time_us"]
    # --dims: each group is a process group of its own in comm_group.json
    code, _, err = cli(capsys, "--collective", "all_gather", "--size", "64MB", "--topology", "2x2_torus", "--dims",
                       "1", "--emit", "chakra", "-o", str(tmp_path / "ag"))
    assert code == 0, err
    assert json.load(open(tmp_path / "ag" / "comm_group.json")) == {"1": [0, 2], "2": [1, 3]}
    alone = step_json(capsys, "--collective", "all_gather", "--size", "64MB", "--topology", "2x2_torus", "--dims",
                      "1")
    assert step_json(capsys, str(tmp_path / "ag"), "--topology", "2x2_torus")["total_time_us"] == \
        alone["total_time_us"]


def test_per_rank_programs_with_waits_roots_and_measured_compute_round_trip(tmp_path):
    import astra_compile
    from test_step_module import two_ranks
    workload = two_ranks()
    workload.programs[1][0].measured_ns = 12345.678   # a profiler's time, kept to the nanosecond
    direct = astra_compile.compile(workload, "Ring(2)")
    direct.chakra(str(tmp_path / "t"))
    again = astra_compile.compile(str(tmp_path / "t"), "Ring(2)")
    assert again.total_time_us == direct.total_time_us
    assert again["compute_time_us"] == direct["compute_time_us"]
    assert [c["kind"] for c in again["collectives"]] == [c["kind"] for c in direct["collectives"]]


def test_the_gpt_examples_step_written_as_chakra_reads_back_identically(capsys, tmp_path):
    """The SPMD capture expanded to every rank with its own tp and dp groups (4x4_torus, dp=4 x tp=4)."""
    argv = ["examples/gpt_tp_dp.py", "--topology", "4x4_torus", "--mesh", "dp=4,tp=4"]
    direct = step_json(capsys, *argv)
    code, text, err = cli(capsys, *argv, "--emit", "chakra", "-o", str(tmp_path / "gpt"))
    assert code == 0, err
    groups = json.load(open(tmp_path / "gpt" / "comm_group.json"))
    assert sorted(len(r) for r in groups.values()) == [4] * 8   # 4 tp groups and 4 dp groups of 4
    again = step_json(capsys, str(tmp_path / "gpt"), "--topology", "4x4_torus")
    assert again["total_time_us"] == direct["total_time_us"]
    # compute is a sum over the ops, and the read-back step holds its waits as compute nodes of no work: numpy's
    # pairwise sum over a longer array may round the last bit otherwise
    assert again["exposed_comm_time_us"] == pytest.approx(direct["exposed_comm_time_us"], rel=1e-14)


def test_emit_chakra_refusals(capsys, tmp_path):
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--emit", "chakra",
            match="needs -o DIR")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--emit", "chakra",
            "-o", str(tmp_path / "mine"), match="did not write (notes.txt)")
    refused(capsys, os.path.join(os.path.dirname(__file__), "ir", "step_two_ranks.mlir"), "--emit", "chakra", "-o",
            str(tmp_path / "x"), match="holds a lowered step")


def _pipeline_written_as_chakra(capsys, tmp_path) -> dict:
    """A 1F1B pipeline of 4 stages x dp 2 timed directly, then written as Chakra traces to tmp_path/et: the
    direct report."""
    import textwrap
    from test_pipeline import MODEL
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(MODEL % ("1F1B", 8, 4)).replace('{"pp": 4}', '{"pp": 4, "dp": 2}'))
    argv = [str(path), "--topology", "Ring(2)_Ring(4)", "--mesh", "pp=4,dp=2"]
    direct = step_json(capsys, *argv)
    code, _, err = cli(capsys, *argv, "--emit", "chakra", "-o", str(tmp_path / "et"))
    assert code == 0, err
    return direct


def test_a_pipeline_capture_is_written_per_rank_and_reads_back_identically(capsys, tmp_path):
    """A 1F1B pipeline of 4 stages x dp 2 (one program per stage, standing for its 2 ranks): every rank gets its
    stage's program on its own dp group, its messages paired with the rank at the same place in the next stage."""
    from astra_compile.compiler.frontend.chakra import load
    direct = _pipeline_written_as_chakra(capsys, tmp_path)
    w = load(sorted(str(p) for p in (tmp_path / "et").glob("trace.*.et")))
    assert sorted(w.programs) == list(range(8))
    peers = {r: {(op.kind, op.peer) for op in w.programs[r] if op.kind in ("send", "recv")} for r in range(8)}
    assert peers[3] == {("send", 5), ("recv", 5), ("send", 1), ("recv", 1)}   # stage 1, dp 1: stages 0 and 2
    assert peers[0] == {("send", 2), ("recv", 2)} and peers[7] == {("send", 5), ("recv", 5)}
    groups = {op.group for op in w.programs[3] if op.kind == "collective"}
    assert groups == {(2, 3)}   # its stage's dp group
    again = step_json(capsys, str(tmp_path / "et"), "--topology", "Ring(2)_Ring(4)")
    assert again["total_time_us"] == direct["total_time_us"]
    assert again["exposed_comm_time_us"] == direct["exposed_comm_time_us"]


# ---- sizes named at their node, ranks that disagree --------------------------------------------------------------

@pytest.mark.parametrize("nodes, match", [
    ([node(0, "ar", COLL, comm_type=0, comm_size=float("nan"))], "node 0 (ar): comm_size must be a whole number of "
                                                                 "at least 0, got nan"),
    ([node(0, "ar", COLL, comm_type=0, comm_size=float("inf"))], "node 0 (ar): comm_size must be a whole number of "
                                                                 "at least 0, got inf"),
    ([node(3, "mm", COMP, num_ops=float("nan"), tensor_size=8)], "node 3 (mm): num_ops must be a whole number"),
    ([node(3, "mm", COMP, num_ops=8, tensor_size=2.5)], "node 3 (mm): tensor_size must be a whole number"),
    ([node(4, "", LOAD, tensor_size=-1)], "node 4: tensor_size must be a whole number"),
    ([node(5, "bc", COLL, comm_type=5, comm_size=MB, comm_root=3)], "node 5 (bc): comm_root 3 is not a member"),
    ([node(6, "ag", COLL, comm_type=2, comm_size=2 ** 61)], "node 6 (ag): comm_size gives 4611686018427387904 bytes, "
                                                            "more than the largest"),
    ([node(7, "ld", LOAD, tensor_size=2 ** 62)], "node 7 (ld): tensor_size gives 4611686018427387904 bytes"),
])
def test_a_bad_size_names_the_file_the_node_and_the_field(capsys, tmp_path, nodes, match):
    d = write_traces(tmp_path / "t", "t", {0: nodes, 1: nodes})
    err = refused(capsys, d, "--topology", "Ring(2)", match=match)
    assert os.path.join(d, "t.0.et") in err


@pytest.mark.parametrize("rank1, match", [
    ([node(0, "ar", COLL, comm_type=0, comm_size=2 * MB)],
     "collective 1 of process group 'world' [0,1]: {d}/t.0.et: node 0 (ar) is all_reduce of 1048576 bytes, "
     "{d}/t.1.et: node 0 (ar) is all_reduce of 2097152 bytes"),
    ([node(0, "rs", COLL, comm_type=7, comm_size=MB)],
     "collective 1 of process group 'world' [0,1]: {d}/t.0.et: node 0 (ar) is all_reduce of 1048576 bytes, "
     "{d}/t.1.et: node 0 (rs) is reduce_scatter of 1048576 bytes"),
    ([node(0, "ar", COLL, comm_type=0, comm_size=MB), node(1, "again", COLL, deps=[0], comm_type=0, comm_size=MB)],
     "process group 'world' [0,1]: {d}/t.0.et runs 1 collectives on it, {d}/t.1.et 2; {d}/t.1.et: node 1 (again) "
     "is the first without a partner"),
    ([node(0, "bc", COLL, comm_type=5, comm_size=MB, comm_root=1)],
     "collective 1 of process group 'world' [0,1]: {d}/t.0.et: node 0 (ar) is all_reduce of 1048576 bytes, "
     "{d}/t.1.et: node 0 (bc) is broadcast of 1048576 bytes rooted at rank 1"),
])
def test_ranks_that_disagree_on_a_collective_are_refused_naming_both_nodes(capsys, tmp_path, rank1, match):
    d = write_traces(tmp_path / "t", "t", {0: [node(0, "ar", COLL, comm_type=0, comm_size=MB)], 1: rank1})
    refused(capsys, d, "--topology", "Ring(2)", match="Chakra ranks disagree on " + match.format(d=d))


def test_a_rank_outside_a_group_it_runs_on_and_a_member_that_skips_it_are_refused(capsys, tmp_path):
    ar = node(0, "ar", COLL, comm_type=0, comm_size=MB, pg_name="g")
    d = write_traces(tmp_path / "a", "t", {0: [ar], 1: [ar], 2: [ar]}, groups={"g": [0, 1]})
    refused(capsys, d, "--topology", "Ring(3)", match="t.2.et: node 0 (ar): rank 2 is not a member of process group "
                                                      "'g' [0,1]")
    # files alike but for their node ids (numbered by rank, as Chakra's microbenchmark does) are read once; the
    # error still names the rank's own node
    d = write_traces(tmp_path / "c", "t", {r: [node(r, "ar", COLL, comm_type=0, comm_size=MB, pg_name="g")]
                                           for r in range(3)}, groups={"g": [0, 1]})
    refused(capsys, d, "--topology", "Ring(3)", match="t.2.et: node 2 (ar): rank 2 is not a member")
    d = write_traces(tmp_path / "b", "t", {0: [ar], 1: []}, groups={"g": [0, 1]})
    refused(capsys, d, "--topology", "Ring(2)", match="t.0.et: node 0 (ar) is all_reduce of 1048576 bytes on it; "
                                                      f"{d}/t.1.et (rank 1) runs no collective on it")


def test_a_message_stored_and_forwarded_pays_each_links_time(capsys, tmp_path):
    """Rank 0 sends 8 MB to rank 3 of a 2x2 torus (two links, 500 ns each): cut through it takes
    2 x 500 ns + bytes / bandwidth; stored and forwarded at each hop, 2 x (500 ns + bytes / bandwidth)."""
    programs = {r: [] for r in range(4)}
    programs[0] = [node(1, "send", SEND_, comm_size=8 * MB, comm_dst=3)]
    programs[3] = [node(1, "recv", RECV_, comm_size=8 * MB, comm_src=0)]
    d = write_traces(tmp_path / "t", "t", programs)
    took = {s: step_json(capsys, d, "--topology", "2x2_torus", "--backend", "congestion", "--switching",
                         s)["total_time_us"] for s in ("cut-through", "store-and-forward")}
    one_link = took["cut-through"] - 1.0
    assert one_link == pytest.approx(8 * MB / (25 * 2 ** 30) * 1e6, rel=1e-9)   # a Ring(2) link: half of 50 GB/s
    assert took["store-and-forward"] == pytest.approx(2 * (0.5 + one_link), rel=1e-12)


# ---- written traces run on ASTRA-sim as written; group names come back -------------------------------------------

def _astra_checked(directory, report):
    """The directory passes ASTRA-sim's rules (tests/astrasim_rules.py) at the report's roofline, and ASTRA-sim's
    compute time of the report's rank lies within 1 ns per compute node of the report's."""
    import astrasim_rules
    times = astrasim_rules.check(str(directory), report["peak_tflops"], report["mem_bw_gbps"])
    mine = times[report["rank"]]
    assert abs(sum(mine.values()) - report["compute_time_us"] * 1e3) <= len(mine) + 1e-6 * sum(mine.values())
    return times


def test_the_gpt_step_written_as_chakra_runs_on_astra_sim_and_keeps_its_group_names(capsys, tmp_path):
    argv = ["examples/gpt_tp_dp.py", "--topology", "4x4_torus", "--mesh", "dp=4,tp=4"]
    direct = step_json(capsys, *argv)
    code, _, err = cli(capsys, *argv, "--emit", "chakra", "-o", str(tmp_path / "gpt"))
    assert code == 0, err
    _astra_checked(tmp_path / "gpt", direct)
    again = step_json(capsys, str(tmp_path / "gpt"), "--topology", "4x4_torus")
    assert [(c["kind"], c["group"]) for c in again["collectives"]] == \
        [(c["kind"], c["group"]) for c in direct["collectives"]]
    assert {c["group"] for c in again["collectives"]} == {"tp", "dp"}


def test_measured_compute_roots_and_a_reduce_run_on_astra_sim_and_read_back(tmp_path):
    """Per-rank programs: a measured compute op (ASTRA-sim's roofline gets 1 FLOP and the bytes memory moves in the
    measured time), a broadcast (ASTRA-sim replays its duration), a reduce (which ASTRA-sim refuses: written as
    such a broadcast), a wait (no work: 1 ns there), all read back to the identical step."""
    import dataclasses
    import astra_compile
    from test_step_module import two_ranks
    workload = two_ranks()
    for rank, ops in workload.programs.items():
        ops[0].measured_ns = 12345.678 + rank
        ops.append(dataclasses.replace(ops[1], name="c10d.reduce_", collective="reduce", root=0, deps=[4]))
    direct = astra_compile.compile(workload, "Ring(2)")
    direct.chakra(str(tmp_path / "t"))
    times = _astra_checked(tmp_path / "t", direct)
    assert times[0][1] == 12345 and times[1][1] == 12346   # the measured ops, truncated to whole ns
    again = astra_compile.compile(str(tmp_path / "t"), "Ring(2)")
    assert again.total_time_us == direct.total_time_us
    assert again["compute_time_us"] == direct["compute_time_us"]
    assert [(c["kind"], c["group"]) for c in again["collectives"]] == \
        [(c["kind"], c["group"]) for c in direct["collectives"]]
    from astra_compile.compiler.frontend.chakra import NODE_TYPES, messages, schema
    _, Node = schema()
    data = open(tmp_path / "t" / "trace.0.et", "rb").read()
    nodes = [Node.FromString(raw) for _, raw in list(messages("t", data))[1:]]
    broadcast, reduce_ = nodes[1], nodes[5]
    took = {c["kind"]: c["time_us"] for c in direct["collectives"]}
    assert broadcast.duration_micros == round(took["broadcast"]) and reduce_.duration_micros == round(took["reduce"])
    assert {a.name: a.string_val for a in reduce_.attr}["astra_comm_type"] == "REDUCE"
    assert NODE_TYPES[nodes[3].type] == "COMP_NODE" and nodes[3].duration_micros == 0   # the wait


def test_a_pipelines_messages_are_tagged_alike_on_both_ends(capsys, tmp_path):
    direct = _pipeline_written_as_chakra(capsys, tmp_path)
    _astra_checked(tmp_path / "et", direct)


# ---- --emit chakra at scale --------------------------------------------------------------------------------------

def test_each_ranks_group_is_found_once_per_group_shape_not_once_per_rank(capsys, tmp_path, monkeypatch):
    """Every rank's group of one shape is labelled at once: the group's span is read once per shape, whatever the
    ranks (a pass over every NPU per rank, n^2, would hang on 262144 ranks)."""
    from astra_compile.compiler.core import step_keys
    calls = []
    span = step_keys.group_span
    monkeypatch.setattr(step_keys, "group_span", lambda *a: calls.append(a[1]) or span(*a))
    code, _, err = cli(capsys, "--collective", "all_gather", "--size", "64MB", "--topology", "8x8_torus", "--dims",
                       "1", "--emit", "chakra", "-o", str(tmp_path / "ag"))
    assert code == 0, err
    assert len(calls) == 1
    groups = json.load(open(tmp_path / "ag" / "comm_group.json"))
    assert sorted(groups.values()) == [list(range(c, 64, 8)) for c in range(8)]   # a group per column
    import astrasim_rules
    astrasim_rules.check(str(tmp_path / "ag"), 234, 1896)


def test_traces_the_disk_has_no_room_for_are_refused_before_writing(capsys, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 ** 6, 10 ** 6 - 1000, 1000))
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "8x8_torus", "--emit", "chakra",
            "-o", str(tmp_path / "big"), match="--emit chakra: 64 traces of about")
    assert not os.path.exists(tmp_path / "big") and os.listdir(tmp_path) == []


# ---- ranks alike are read once and run as one program ------------------------------------------------------------

def test_ranks_alike_up_to_their_groups_become_one_spmd_program_with_the_same_step(capsys, tmp_path):
    """Chakra's microbenchmark shape over 16 ranks (node id = rank), and tp x dp traces whose files differ by their
    groups' ids: each is one program standing for every rank, and times as the per-rank programs do."""
    import astra_compile
    from astra_compile.compiler.frontend.chakra import load
    from astra_compile.network.parse import parse_topology
    d = write_traces(tmp_path / "ar", "ALL_REDUCE", {r: [node(r, "ALL_REDUCE", COLL, is_cpu_op=False, comm_type=0,
                                                               comm_size=MB, involved_dim=[True])] for r in range(16)})
    files = sorted(str(p) for p in (tmp_path / "ar").glob("*.et"))
    topo = parse_topology("4x4_torus")
    one = load(files, 16, topo)
    assert one.spmd and list(one.programs) == [0]
    per_rank = load(files, 16)
    assert not per_rank.spmd and len(per_rank.programs) == 16
    assert astra_compile.compile(one, "4x4_torus").to_dict() == astra_compile.compile(per_rank, "4x4_torus").to_dict()
    assert step_json(capsys, d, "--topology", "4x4_torus")["total_time_us"] == \
        step_json(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus")["total_time_us"]
    # groups by shape: tp along dimension 0, dp along dimension 1 of a 4x4 torus
    code, _, err = cli(capsys, "examples/gpt_tp_dp.py", "--topology", "4x4_torus", "--mesh", "dp=4,tp=4", "--emit",
                       "chakra", "-o", str(tmp_path / "gpt"))
    assert code == 0, err
    files = sorted(str(p) for p in (tmp_path / "gpt").glob("*.et"))
    one, per_rank = load(files, 16, topo), load(files, 16)
    assert one.spmd and list(one.programs) == [0] and not per_rank.spmd
    a, b = astra_compile.compile(one, "4x4_torus").to_dict(), astra_compile.compile(per_rank, "4x4_torus").to_dict()
    assert (a["total_time_us"], a["exposed_comm_time_us"], a["collectives"]) == \
        (b["total_time_us"], b["exposed_comm_time_us"], b["collectives"])


def test_ranks_that_differ_stay_programs_of_their_own(tmp_path):
    from astra_compile.compiler.frontend.chakra import load
    from astra_compile.network.parse import parse_topology
    ar = node(1, "ar", COLL, comm_type=0, comm_size=MB)
    mm = node(2, "mm", COMP, deps=[1], num_ops=10 ** 9, tensor_size=MB)
    d = write_traces(tmp_path / "a", "t", {0: [ar], 1: [ar, mm], 2: [ar], 3: [ar]})
    assert not load([os.path.join(d, f"t.{r}.et") for r in range(4)], 4, parse_topology("Ring(4)")).spmd
    # the same ops on groups of one size, each mapping onto Ring(8), but not all of rank 0's shape (a block):
    # {2,6} and {3,7} take every 4th NPU
    groups = {"1": [0, 1], "2": [4, 5], "3": [2, 6], "4": [3, 7]}
    of = {r: g for g, ranks in groups.items() for r in ranks}
    d = write_traces(tmp_path / "b", "t", {r: [node(1, "ar", COLL, comm_type=0, comm_size=MB, pg_name=of[r])]
                                           for r in range(8)}, groups=groups)
    files = [os.path.join(d, f"t.{r}.et") for r in range(8)]
    w = load(files, 8, parse_topology("Ring(8)"))
    assert not w.spmd and len(w.programs) == 8
    groups = {"1": [0, 1], "2": [2, 3], "3": [4, 5], "4": [6, 7]}   # every pair a block: one program
    of = {r: g for g, ranks in groups.items() for r in ranks}
    d = write_traces(tmp_path / "c", "t", {r: [node(1, "ar", COLL, comm_type=0, comm_size=MB, pg_name=of[r])]
                                           for r in range(8)}, groups=groups)
    assert load([os.path.join(d, f"t.{r}.et") for r in range(8)], 8, parse_topology("Ring(8)")).spmd


# ---- memory estimated before the nodes are built -----------------------------------------------------------------

def _chain(n, flops=10 ** 9):
    """n nodes: a chain of compute with an all-reduce every 100th."""
    return [node(i + 1, "ar", COLL, data_deps=[i] if i else [], comm_type=0, comm_size=MB) if i % 100 == 99 else
            node(i + 1, "mm", COMP, data_deps=[i] if i else [], num_ops=flops, tensor_size=MB) for i in range(n)]


def test_a_trace_too_large_for_memory_is_refused_before_its_nodes_are_built(capsys, tmp_path, monkeypatch):
    from astra_compile.compiler.frontend import chakra, trace_memory
    d = write_traces(tmp_path / "t", "t", {0: _chain(20000), 1: _chain(20000, 10 ** 9 + 1)})
    built = []
    nodes = chakra._nodes
    monkeypatch.setattr(chakra, "_nodes", lambda *a: built.append(a[0]) or nodes(*a))
    reading = trace_memory.STEP_BASE + 20001 * trace_memory.PER_TRACE_NODE
    err = refused(capsys, d, "--topology", "Ring(2)", "--max-memory", str(reading - 1),
                  match="(reading 2e+04 nodes of")
    assert f"{d}/t.0.et, 0 ops kept), more than" in err and "give fewer ranks or a shorter trace" in err
    assert built == []
    # read, but the step's two programs of 20000 ops would not fit
    step = trace_memory.STEP_BASE + 40000 * (trace_memory.PER_KEPT_OP + trace_memory.PER_STEP_OP) + 2 * 2 * \
        trace_memory.PER_GROUP_MEMBER
    refused(capsys, d, "--topology", "Ring(2)", "--max-memory", str(step - 1), match="(4e+04 ops in 2 program(s))")
    assert built == [f"{d}/t.0.et", f"{d}/t.1.et"]
    assert step_json(capsys, d, "--topology", "Ring(2)", "--max-memory", str(step))["total_time_us"] > 0
