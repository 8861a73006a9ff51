"""The execution-trace importer on a real 4-rank recording (gloo on loopback) and on bad input.

The recording runs once per session: four processes train a small model under DDP (one warm-up step), then record
one training step plus explicit all_gather_into_tensor / reduce_scatter_tensor / all_to_all_single calls (and an
all_reduce on the subgroup {0, 1}) with ExecutionTraceObserver. Expected values are computed here from the raw
JSON and from the model's sizes, not by the importer.
"""
import json
import subprocess
import sys

import pytest

import astra_compile

from astra_compile.network.errors import UserError
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, WAIT

from helpers import gloo_worker, run_gloo_job, traced

WORLD = 4
BATCH, IN, HIDDEN, OUT = 4, 32, 64, 16
PARAM_BYTES = 4 * (IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT)  # float32 weights and biases
AG, RS, A2A, PAIR_AR = 8, 2, 4, 3  # elements per rank of the explicit collectives

WORKER = gloo_worker(
    WORLD, "pair = dist.new_group([0, 1])\n" + traced(f"""
        step()
        dist.all_gather_into_tensor(torch.empty({AG} * {WORLD}), torch.ones({AG}))
        dist.reduce_scatter_tensor(torch.empty({RS}), torch.ones({RS} * {WORLD}))
        dist.all_to_all_single(torch.empty({A2A} * {WORLD}), torch.ones({A2A} * {WORLD}))
        if rank < 2:
            dist.all_reduce(torch.ones({PAIR_AR}), group=pair)""", "out"),
    ddp=f"torch.nn.Sequential(torch.nn.Linear({IN}, {HIDDEN}), torch.nn.ReLU(), torch.nn.Linear({HIDDEN}, {OUT}))",
    ddp_options="bucket_cap_mb=4096 / 2**20",   # small buckets: several all-reduces
    inputs=f"torch.randn({BATCH}, {IN})", destroy=True)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("et")
    run_gloo_job(d, WORKER, WORLD, lambda r: [d / f"trace_rank{r}.json"], timeout=180)
    return [str(d / f"trace_rank{r}.json") for r in range(WORLD)]


@pytest.fixture(scope="module")
def workload(traces):
    return load_traces(traces)


# the test's own reading of the raw JSON: c10d op -> (kind, index of the full-buffer argument)
RAW = {
    "c10d::allreduce_": ("all_reduce", 0),
    "c10d::broadcast_": ("broadcast", 0),
    "c10d::_allgather_base_": ("all_gather", 0),        # gathered output
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1),  # input before scattering
    "c10d::alltoall_base_": ("all_to_all", 1),           # input buffer
}


def raw_collectives(path):
    nodes = sorted(json.load(open(path))["nodes"], key=lambda n: n["id"])
    out = []
    for n in nodes:
        if n["name"].startswith("c10d::"):
            kind, arg = RAW[n["name"]]
            value = n["inputs"]["values"][arg]
            tensors = value if isinstance(value[0], list) else [value]
            out.append((kind, sum(t[3] * t[4] for t in tensors)))
    return out


def test_per_rank_collectives_match_the_raw_trace(workload, traces):
    assert workload.world_size == WORLD and not workload.spmd
    assert sorted(workload.programs) == list(range(WORLD))
    for rank, path in enumerate(traces):
        got = [(op.collective, op.bytes) for op in workload.collectives(rank)]
        assert got == raw_collectives(path)
        assert all(op.kind == COLLECTIVE for op in workload.collectives(rank))


def test_ddp_and_explicit_collective_sizes(workload):
    for rank in range(WORLD):
        colls = workload.collectives(rank)
        first_ag = next(i for i, op in enumerate(colls) if op.collective == "all_gather")
        ddp = [op for op in colls[:first_ag] if op.name == "c10d.allreduce_"]
        assert len(ddp) >= 2  # the small bucket cap splits the gradients
        assert sum(op.bytes for op in ddp) == PARAM_BYTES
        explicit = [(op.collective, op.bytes) for op in colls[first_ag:first_ag + 3]]
        assert explicit == [("all_gather", 4 * AG * WORLD), ("reduce_scatter", 4 * RS * WORLD),
                            ("all_to_all", 4 * A2A * WORLD)]


def test_process_groups_and_ranks_from_file_names(traces):
    shuffled = [traces[i] for i in (2, 0, 3, 1)]
    w = load_traces(shuffled)
    for rank in range(WORLD):
        colls = w.collectives(rank)
        pair = [op for op in colls if op.group == (0, 1)]
        assert [(op.collective, op.bytes, op.group_name) for op in pair] == \
            ([("all_reduce", 4 * PAIR_AR, "1")] if rank < 2 else [])
        assert all(op.group == tuple(range(WORLD)) and op.group_name == "0" for op in colls if op not in pair)


def test_single_file_stands_for_every_rank(traces, workload):
    w = load_traces(traces[:1])
    assert w.spmd and w.world_size == WORLD and list(w.programs) == [0]
    assert [(o.collective, o.bytes) for o in w.collectives(0)] == \
        [(o.collective, o.bytes) for o in workload.collectives(0)]
    assert load_traces(traces[:1], world_size=WORLD).world_size == WORLD


def raw_mm_flops(path):
    """2 m k n of every aten::mm call in the raw trace, in call order."""
    nodes = sorted(json.load(open(path))["nodes"], key=lambda n: n["id"])
    return [2 * a[0] * a[1] * b[1] for n in nodes if n["name"] == "aten::mm"
            for a, b in [n["inputs"]["shapes"][:2]]]


def test_compute_ops_have_flops_from_torch_formulas(workload, traces):
    ops = workload.programs[0]
    linear = [op for op in ops if op.name == "aten.linear.default"]
    assert [op.flops for op in linear] == [2 * BATCH * IN * HIDDEN, 2 * BATCH * HIDDEN * OUT]
    # first linear reads x, W, b and writes y (float32)
    assert linear[0].bytes == 4 * (BATCH * IN + IN * HIDDEN + HIDDEN + BATCH * HIDDEN)
    mms = [op.flops for op in ops if op.name == "aten.mm.default"]
    # the observer can lose a call that runs while gloo's worker thread records a bucket's all-reduce (layer 1's
    # dW = dH^T @ x does), so the expectation is the raw trace's own mm calls
    raw = raw_mm_flops(traces[0])
    assert mms == raw
    # layer 2's backward (dH = dY @ W2, dW2 = dY^T @ H) runs before any all-reduce is in flight
    assert raw.count(2 * BATCH * OUT * HIDDEN) == 2 and set(raw) <= {2 * BATCH * OUT * HIDDEN, 2 * HIDDEN * BATCH * IN}
    assert all(op.kind == COMPUTE for op in ops if op.name.startswith("aten."))
    views = [op for op in ops if op.name in ("aten.t.default", "aten.view.default", "aten.detach.default")]
    assert views and all(op.bytes == 0 and op.flops == 0 for op in views)


def test_deps_point_backwards_and_follow_data(workload):
    for rank, ops in workload.programs.items():
        for i, op in enumerate(ops):
            assert all(0 <= d < i for d in op.deps), (rank, i, op)
        for op in workload.collectives(rank):
            # every collective's buffer was produced by an earlier op of the step
            assert op.deps, op
        relu = next(i for i, op in enumerate(ops) if op.name == "aten.relu.default")
        first_linear = next(i for i, op in enumerate(ops) if op.name == "aten.linear.default")
        assert first_linear in ops[relu].deps


# ---------------------------------------------------------------------------------------------- bad input


def one_line_error(paths, match, **kw):
    with pytest.raises(UserError) as e:
        load_traces(paths, **kw)
    msg = str(e.value)
    assert "\n" not in msg and match in msg, msg
    return msg


@pytest.mark.parametrize("name,content,problem", [
    ("empty.json", "", "empty"),
    ("text.json", "this is not json", "not JSON"),
    ("list.json", "[1, 2, 3]", "not a PyTorch ExecutionTraceObserver trace"),
    ("kineto.json", '{"traceEvents": []}', "the profiler trace holds no operator calls"),
    ("other.json", '{"schema": "1.1.1", "foo": 1}', "no 'nodes'"),
    ("nonodes.json", '{"schema": "1.1.1", "nodes": []}', "no nodes"),
    ("badnodes.json", '{"schema": "1.1.1", "nodes": [{"id": 1, "name": "x", "inputs": {"values": [1]},'
                      ' "outputs": {}}]}', "malformed"),
])
def test_bad_files_raise_one_line(tmp_path, name, content, problem):
    p = tmp_path / name
    p.write_text(content)
    assert name in one_line_error([str(p)], problem)


def test_missing_file(tmp_path):
    one_line_error([str(tmp_path / "nope_rank0.json")], "no such file")
    one_line_error([], "no execution trace")


def edited(src, dst, edit):
    data = json.load(open(src))
    edit(data["nodes"])
    dst.write_text(json.dumps(data))
    return str(dst)


def test_unsupported_collective_is_named(traces, tmp_path):
    def renamed(name, schema):
        def edit(nodes):
            n = next(n for n in nodes if n["name"] == "c10d::broadcast_")
            n["name"] = name
            for a in n["attrs"]:
                if a["name"] == "op_schema":
                    a["value"] = schema
        return edit
    p = edited(traces[0], tmp_path / "trace_rank0.json",
               renamed("c10d::gather_", "c10d::gather_(Tensor[][] output, Tensor[] input, int root) -> ()"))
    one_line_error([p], "c10d::gather_ is not supported")
    # every rank's broadcast made a send to its root argument, rank 0: nobody receives them
    sends = [edited(t, tmp_path / f"send_rank{r}.json",
                    renamed("c10d::send", "c10d::send(Tensor[] tensors, int dst, int tag) -> ()"))
             for r, t in enumerate(traces)]
    one_line_error(sends, "matches no peer")


def test_world_size_disagreements(traces, tmp_path):
    def eight(nodes):
        n = next(n for n in nodes if n["name"] == "## process_group:init ##")
        groups = json.loads(n["inputs"]["values"][0])
        groups[0]["group_size"] = 8
        n["inputs"]["values"][0] = json.dumps(groups)
    p = edited(traces[1], tmp_path / "trace_rank1.json", eight)
    one_line_error([traces[0], p, traces[2], traces[3]], "records world size 8")
    one_line_error(traces[:3], "3 trace files for world size 4")
    one_line_error(traces[:1], "records world size 4: it runs on a topology of 4 NPUs or more, not 2", world_size=2)
    assert load_traces(traces[:1], world_size=8).placement.startswith("recorded on 4 ranks: runs on NPUs 0-3 of 8")
    one_line_error([traces[0], traces[0], traces[2], traces[3]], "given twice")


def _copies(traces, tmp_path, names):
    out = []
    for t, name in zip(traces, names):
        (tmp_path / name).write_text(open(t).read())
        out.append(str(tmp_path / name))
    return out


@pytest.mark.parametrize("pattern", ["et_r{}.json", "trace-{}.json", "host_a_{}.json", "RANK{}.json"])
def test_ranks_from_other_file_namings_and_never_from_argument_order(traces, workload, tmp_path, pattern):
    names = [pattern.format(r) for r in range(WORLD)]
    copies = _copies(traces, tmp_path, names)
    w = load_traces([copies[i] for i in (3, 1, 0, 2)])   # shuffled: the names say the ranks
    assert {r: [(o.collective, o.bytes) for o in w.collectives(r)] for r in range(WORLD)} == \
        {r: [(o.collective, o.bytes) for o in workload.collectives(r)] for r in range(WORLD)}


def test_traces_whose_rank_cannot_be_told_or_that_repeat_are_refused(traces, tmp_path):
    anonymous = _copies(traces, tmp_path, ["a.json", "b.json", "c.json", "d.json"])
    one_line_error(anonymous, "cannot tell its rank")
    one_line_error([traces[0], traces[1], traces[2], traces[1]], "given twice")
    link = tmp_path / "alias_rank9.json"
    link.symlink_to(traces[1])
    one_line_error([traces[0], traces[1], traces[2], str(link)], "given twice")


def test_a_directory_of_traces_is_read_as_traces(traces, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    _copies(traces, d, [f"trace_rank{r}.json" for r in range(WORLD)])
    direct = subprocess.run([sys.executable, "-m", "astra_compile", *traces, "--topology", "Ring(2)_Ring(2)",
                             "--json"], capture_output=True, text=True)
    from_dir = subprocess.run([sys.executable, "-m", "astra_compile", str(d), "--topology", "Ring(2)_Ring(2)",
                               "--json"], capture_output=True, text=True)
    assert from_dir.returncode == 0, from_dir.stderr
    strip = lambda r: {k: v for k, v in json.loads(r.stdout).items() if k != "source"}   # noqa: E731
    assert strip(from_dir) == strip(direct)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    bad = subprocess.run([sys.executable, "-m", "astra_compile", str(empty), "--topology", "Ring(4)"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def test_rank_traces_that_do_not_match(traces, tmp_path):
    # rank 3 "missed" its all-to-all: the ranks' collectives no longer line up with any process group
    def drop_all_to_all(nodes):
        nodes[:] = [n for n in nodes if n["name"] != "c10d::alltoall_base_"]
    p = edited(traces[3], tmp_path / "trace_rank3.json", drop_all_to_all)
    one_line_error(traces[:3] + [p], "matches no process group")


# ---------------------------------------------------------------------------------------------- hand-made traces


def node(id_, name, parent, inputs=(), types=(), outputs=(), out_types=(), schema=""):
    shapes = lambda vs: [[v[3]] if isinstance(v, list) and len(v) == 6 else [] for v in vs]  # noqa: E731
    return {"id": id_, "name": name, "ctrl_deps": parent,
            "inputs": {"values": list(inputs), "shapes": shapes(inputs), "types": list(types)},
            "outputs": {"values": list(outputs), "shapes": shapes(outputs), "types": list(out_types)},
            "attrs": [{"name": "op_schema", "type": "string", "value": schema}]}


def pg_init(id_, parent):
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4},
              {"pg_name": "1", "pg_desc": "tp", "ranks": [0, 1], "group_size": 2}]
    return node(id_, "## process_group:init ##", parent, [json.dumps(groups)], ["String"])


def test_functional_collective_carries_its_group_and_wait(tmp_path):
    x, y = [10, 11, 0, 6, 4, "cpu"], [12, 13, 0, 6, 4, "cpu"]
    nodes = [
        node(1, "[pytorch|profiler|execution_trace|thread]", 1),
        pg_init(2, 1),
        node(3, "aten::ones", 1, [[6]], ["GenericList[Int]"], [x], ["Tensor(float)"],
             "aten::ones(SymInt[] size, *, ScalarType? dtype=None) -> Tensor"),
        # the observer writes a call when it ends: the nested c10d op before the functional op around it
        node(5, "c10d::allreduce_", 4, [[y]], ["GenericList[Tensor(float)]"], [[y]], ["GenericList[Tensor(float)]"],
             "c10d::allreduce_(Tensor[] tensors) -> Tensor[]"),  # nested in the functional op: not a second one
        node(4, "_c10d_functional::all_reduce", 1, [x, "sum", "1"], ["Tensor(float)", "String", "String"],
             [y], ["Tensor(float)"], "_c10d_functional::all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor"),
        node(6, "_c10d_functional::wait_tensor", 1, [y], ["Tensor(float)"], [y], ["Tensor(float)"],
             "_c10d_functional::wait_tensor(Tensor tensor) -> Tensor"),
        node(7, "aten::relu", 1, [y], ["Tensor(float)"], [x], ["Tensor(float)"], "aten::relu(Tensor self) -> Tensor"),
    ]
    p = tmp_path / "fc.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    w = load_traces([str(p)])
    assert w.spmd and w.world_size == 4
    ops = w.programs[0]
    assert [(op.name, op.kind) for op in ops] == [
        ("aten.ones.default", COMPUTE), ("_c10d_functional.all_reduce", COLLECTIVE),
        ("_c10d_functional.wait_tensor", WAIT), ("aten.relu.default", COMPUTE)]
    ar = ops[1]
    assert (ar.collective, ar.bytes, ar.group, ar.group_name, ar.deps) == ("all_reduce", 24, (0, 1), "1", [0])
    assert ops[2].deps == [1] and ops[3].deps == [2]  # compute after the wait, the wait after the collective


def test_compute_ops_take_their_dtype_from_the_recorded_types(tmp_path):
    """A matmul computes in its inputs' dtype (an fp8 scaled matmul writes bf16 but runs in fp8), any other op in
    its output's; fp32 stays fp32 (the trace does not say whether TF32 was allowed), integers read as fp32."""
    a, b, c, d = ([i, i + 1, 0, 16, s, "cpu"] for i, s in ((10, 2), (12, 2), (14, 4), (16, 1)))
    mm = "aten::mm(Tensor self, Tensor mat2) -> Tensor"
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1),
             node(2, "aten::mm", 1, [a, b], ["Tensor(c10::BFloat16)"] * 2, [a], ["Tensor(c10::BFloat16)"], mm),
             node(3, "aten::mm", 1, [c, c], ["Tensor(float)"] * 2, [c], ["Tensor(float)"], mm),
             node(4, "aten::_scaled_mm", 1, [d, d], ["Tensor(c10::Float8_e4m3fn)"] * 2, [a],
                  ["Tensor(c10::BFloat16)"], "aten::_scaled_mm(Tensor self, Tensor mat2) -> Tensor"),
             node(5, "aten::_to_copy", 1, [c], ["Tensor(float)"], [b], ["Tensor(c10::Half)"],
                  "aten::_to_copy(Tensor self) -> Tensor"),
             node(6, "aten::cat", 1, [[c, c]], ["GenericList[Tensor(double),Tensor(double)]"], [a], ["Tensor(double)"],
                  "aten::cat(Tensor[] tensors) -> Tensor"),
             node(7, "aten::eq", 1, [d, d], ["Tensor(long int)"] * 2, [d], ["Tensor(bool)"],
                  "aten::eq.Tensor(Tensor self, Tensor other) -> Tensor")]
    p = tmp_path / "dt.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    ops = load_traces([str(p)]).programs[0]
    assert [(op.name, op.dtype) for op in ops] == [
        ("aten.mm.default", "bf16"), ("aten.mm.default", "fp32"), ("aten._scaled_mm.default", "fp8"),
        ("aten._to_copy.default", "fp16"), ("aten.cat.default", "fp64"), ("aten.eq.Tensor", "fp32")]


def test_calls_filed_under_a_finished_collective_still_count(tmp_path):
    """gloo's record of an asynchronous collective ends on its worker thread and pops the calling thread's stack
    in the observer, so later calls name the finished collective as their parent (seen in real 4-rank DDP
    recordings): a broadcast and a relu written after the broadcast before them ended are calls of their own."""
    b1, b2, x, y = [10, 11, 0, 6, 4, "cpu"], [12, 13, 0, 2, 8, "cpu"], [14, 15, 0, 6, 4, "cpu"], [16, 17, 0, 6, 4, "cpu"]
    schema = ("c10d::broadcast_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
              "int root_rank, int root_tensor, bool async_op=True, int timeout=-1) -> (Tensor[], "
              "__torch__.torch.classes.c10d.Work)")
    types = ["GenericList[Tensor(float)]", "Object", "Int", "Int", "Bool", "Int"]
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1), pg_init(2, 1),
             node(3, "c10d::broadcast_", 1, [[b1], "<Object>", 0, 0, True, -1], types, [[b1]], ["GenericList"],
                  schema),
             node(4, "gloo:broadcast", 3, [b1], ["Tensor(float)"]),
             node(5, "c10d::broadcast_", 3, [[b2], "<Object>", 1, 0, True, -1], types, [[b2]], ["GenericList"],
                  schema),
             node(6, "aten::relu", 5, [x], ["Tensor(float)"], [y], ["Tensor(float)"],
                  "aten::relu(Tensor self) -> Tensor")]
    p = tmp_path / "trace_rank2.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    w = load_traces([str(p)], world_size=4)
    ops = w.programs[2]
    assert [(op.name, op.collective, op.bytes, op.root) for op in ops] == [
        ("c10d.broadcast_", "broadcast", 24, 0), ("c10d.broadcast_", "broadcast", 16, 1),
        ("aten.relu.default", "", 48, -1)]


def test_a_call_filed_under_a_finished_call_is_its_own(tmp_path):
    """The wrong pop of gloo's worker thread (above) can leave any finished call on top of the calling thread's
    stack: a relu filed under an aten::mm written (ended) before it is a call of its own, while a call written
    before its parent (a linear's nested addmm) stays inside it."""
    a, b, c = [10, 11, 0, 6, 4, "cpu"], [12, 13, 0, 6, 4, "cpu"], [14, 15, 0, 4, 4, "cpu"]
    y, w, z = [16, 17, 0, 4, 4, "cpu"], [18, 19, 0, 6, 4, "cpu"], [20, 21, 0, 4, 4, "cpu"]
    mm = node(3, "aten::mm", 1, [a, b], ["Tensor(float)"] * 2, [c], ["Tensor(float)"],
              "aten::mm(Tensor self, Tensor mat2) -> Tensor")
    addmm = node(6, "aten::addmm", 5, [c, a, w], ["Tensor(float)"] * 3, [z], ["Tensor(float)"],
                 "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor")
    linear = node(5, "aten::linear", 1, [a, w, c], ["Tensor(float)"] * 3, [z], ["Tensor(float)"],
                  "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")
    for n, ins, outs in ((mm, [[2, 3], [3, 2]], [[2, 2]]), (addmm, [[2, 2], [2, 3], [3, 2]], [[2, 2]]),
                         (linear, [[2, 3], [2, 3], [2]], [[2, 2]])):
        n["inputs"]["shapes"], n["outputs"]["shapes"] = ins, outs
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1), mm,
             node(4, "aten::relu", 3, [c], ["Tensor(float)"], [y], ["Tensor(float)"],
                  "aten::relu(Tensor self) -> Tensor"),
             addmm, linear]   # the observer writes a call when it ends: the addmm before the linear around it
    p = tmp_path / "trace_rank0.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    ops = load_traces([str(p)]).programs[0]
    assert [op.name for op in ops] == ["aten.mm.default", "aten.relu.default", "aten.linear.default"]
    assert [op.flops for op in ops] == [2 * 2 * 3 * 2, 0, 2 * 2 * 3 * 2]


def test_a_reduce_keeps_its_root(tmp_path):
    """c10d::reduce_ (tensors, group, op, root rank, ...): a reduce to the group's rank 1 (the group here is the
    world: one file stands for every rank and takes the largest group), lowered as a reduce, not an all-reduce."""
    t = [10, 11, 0, 6, 4, "cpu"]
    schema = ("c10d::reduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
              "__torch__.torch.classes.c10d.ReduceOp reduce_op, int root_rank, int root_tensor, bool async_op=True, "
              "int timeout=-1) -> __torch__.torch.classes.c10d.Work")
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1), pg_init(2, 1),
             node(3, "c10d::reduce_", 1, [[t], "<Object>", "<Object>", 1, 0, False, -1],
                  ["GenericList[Tensor(float)]", "Object", "Object", "Int", "Int", "Bool", "Int"], [], [], schema)]
    p = tmp_path / "trace_rank0.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    w = load_traces([str(p)], world_size=4)
    [op] = w.programs[0]
    assert (op.collective, op.bytes, op.root) == ("reduce", 24, 1)
    report = astra_compile.compile(w, "Ring(4)")
    assert [c["kind"] for c in report.collectives] == ["reduce"]


def test_all_gather_group_from_size_ratio(tmp_path):
    # a c10d all-gather does not record its group; 24 gathered bytes from 12 means a group of 2
    part, full = [10, 11, 0, 3, 4, "cpu"], [12, 13, 0, 6, 4, "cpu"]
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1), pg_init(2, 1),
             node(3, "c10d::_allgather_base_", 1, [full, part, "<Object>"], ["Tensor(float)", "Tensor(float)", "Object"],
                  [full], ["Tensor(float)"], "c10d::_allgather_base_(Tensor output_tensor, Tensor input_tensor) -> Tensor")]
    p = tmp_path / "trace_rank1.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    w = load_traces([str(p)])
    (op,) = w.collectives(1)
    assert (op.collective, op.bytes, op.group, op.group_name) == ("all_gather", 24, (0, 1), "1")


def test_cli_times_the_recorded_ranks_on_a_topology(traces, workload):
    # 4 ranks on Ring(2)_Ring(2): the world group spans both dimensions, the subgroup {0,1} dimension 0
    out = subprocess.run([sys.executable, "-m", "astra_compile", *traces, "--topology", "Ring(2)_Ring(2)",
                          "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    calls = report["collectives"]
    assert [(c["kind"], c["bytes"]) for c in calls] == [(op.collective, op.bytes) for op in workload.collectives(0)]
    assert {tuple(c["dims"]) for c in calls if c["group_size"] == 2} == {(0,)}
    assert report["exposed_comm_time_us"] == pytest.approx(report["total_time_us"] - report["compute_time_us"])
    bad = subprocess.run([sys.executable, "-m", "astra_compile", *traces, "--topology", "Ring(2)"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "world size 4: it runs on a topology of 4 NPUs or more, not 2" in bad.stderr
    # on more NPUs than the job had ranks: its ranks are the first NPUs, its groups as recorded
    wider = subprocess.run([sys.executable, "-m", "astra_compile", *traces, "--topology", "Ring(4)_Ring(2)",
                            "--json"], capture_output=True, text=True)
    assert wider.returncode == 0, wider.stderr
    wide = json.loads(wider.stdout)
    assert wide["placement"].startswith("recorded on 4 ranks: runs on NPUs 0-3 of 8 as recorded")
    assert [(c["kind"], c["bytes"], c["dims"]) for c in wide["collectives"]] == \
        [(c["kind"], c["bytes"], [0]) for c in calls]   # every group now inside dimension 0


@pytest.mark.parametrize("field,value", [("group_size", "1e400"), ("group_size", '"4"'), ("group_size", "-2"),
                                         ("ranks", "[1e400]"), ("ranks", f"[{2 ** 64}]"), ("ranks", '"0,1"')])
def test_process_group_records_with_numbers_past_range(tmp_path, field, value):
    # found by the fuzz harness: JSON reads 1e400 as infinity, which no rank or group size can be
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4},
              {"pg_name": "1", "pg_desc": "tp", "ranks": [0, 1], "group_size": 2}]
    text = json.dumps(groups).replace(f'"{field}": {json.dumps(groups[1][field])}', f'"{field}": {value}', 1)
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1),
             node(2, "## process_group:init ##", 1, [text], ["String"])]
    p = tmp_path / "pg.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    one_line_error([str(p)], "unreadable process-group record")


def test_a_trace_runs_on_the_congestion_backend_stored_and_forwarded(tmp_path, capsys):
    """--switching store-and-forward (ASTRA-sim's congestion-aware backend) applies to a trace's
    step as to a collective: a 4 MB all-reduce over every rank, flat_direct on a 2x2 torus, whose messages to the
    opposite corner cross two links, each stored whole before the next."""
    from helpers import cli
    t = [10, 11, 0, 1 << 20, 4, "cpu"]
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1), pg_init(2, 1),
             node(3, "c10d::allreduce_", 1, [[t]], ["GenericList[Tensor(float)]"], [[t]],
                  ["GenericList[Tensor(float)]"], "c10d::allreduce_(Tensor[] tensors) -> Tensor[]")]
    p = tmp_path / "trace_rank0.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    net = ["--topology", "2x2_torus", "--algorithm", "flat_direct", "--backend", "congestion"]
    times = {}
    for switching in ("cut-through", "store-and-forward"):
        code, out, err = cli(capsys, p, *net, "--switching", switching, "--json")
        assert code == 0, err
        step = json.loads(out)
        assert step["switching"] == switching
        code, out, err = cli(capsys, "--collective", "all_reduce", "--size", "4MB", *net, "--switching", switching,
                             "--json")
        assert code == 0, err
        assert step["total_time_us"] == pytest.approx(json.loads(out)["total_time_us"], rel=1e-12)
        times[switching] = step["total_time_us"]
    assert times["store-and-forward"] == pytest.approx(236.375, abs=1e-3)
    assert times["cut-through"] == pytest.approx(158.25, abs=1e-3)
    code, out, err = cli(capsys, p, "--topology", "2x2_torus", "--switching", "store-and-forward")
    assert code == 2 and "--switching applies to --backend congestion" in err


@pytest.mark.parametrize("numel, shown", [("NaN", "nan"), ("1e400", "inf"), ("-4", "-4"), ('"4"', "'4'"),
                                          ("2.5", "2.5"), ("true", "True"), (str(2 ** 70), str(2 ** 70))])
@pytest.mark.parametrize("where", ["collective", "compute"])
def test_a_bad_tensor_size_names_the_file_the_node_and_the_field(tmp_path, numel, shown, where):
    """A tensor's numel that is no whole number (or past 1 TiB of bytes) is refused naming the file, the node and
    the field: never dropped as no tensor (0 bytes: 'collective size must be positive'), read as 1 (true) or passed
    on negative or overflowing."""
    t, x, y = [10, 11, 0, 8, 4, "cpu"], [12, 13, 0, 8, 4, "cpu"], [14, 15, 0, 8, 4, "cpu"]
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1), pg_init(2, 1),
             node(3, "c10d::allreduce_", 1, [[t]], ["GenericList[Tensor(float)]"], [[t]],
                  ["GenericList[Tensor(float)]"], "c10d::allreduce_(Tensor[] tensors) -> Tensor[]"),
             node(4, "aten::relu", 1, [x], ["Tensor(float)"], [y], ["Tensor(float)"],
                  "aten::relu(Tensor self) -> Tensor")]
    bad = 10 if where == "collective" else 14
    text = json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}).replace(f"[{bad}, {bad + 1}, 0, 8,",
                                                                                  f"[{bad}, {bad + 1}, 0, {numel},")
    p = tmp_path / "trace_rank0.json"
    p.write_text(text)
    at = "node 3 (c10d::allreduce_): inputs[0]" if where == "collective" else "node 4 (aten::relu): outputs"
    msg = one_line_error([str(p)], f"{p}: {at}: tensor {bad} has numel {shown} and element size 4", world_size=4)
    assert "each must be a whole number of at least 0" in msg


def test_a_call_cuda_runs_as_its_nested_calls_is_those_calls(tmp_path):
    """logsumexp and an out-of-place masked_fill launch no kernel of their own on CUDA: the calls nested in them do
    (gpu_composites.RUN_AS_CHILDREN; the H200 GPT example's trace: logsumexp over amax, sub, exp_, sum, log_,
    add_). Those are the ops, as a capture records them; a logsumexp recorded without its nested calls stays one."""
    x, m, r = [10, 11, 0, 4096, 4, "cpu"], [12, 13, 0, 64, 4, "cpu"], [14, 15, 0, 64, 4, "cpu"]
    y = [16, 17, 0, 4096, 4, "cpu"]
    t = ["Tensor(float)"]
    lse = "aten::logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"
    # written as the observer writes them, each call when it ends: its nested calls first
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1),
             node(3, "aten::amax", 2, [x, [-1], True], t + ["GenericList[Int]", "Bool"], [m], t,
                  "aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"),
             node(4, "aten::sub", 2, [x, m], t * 2, [y], t,
                  "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"),
             node(5, "aten::sum", 2, [x, [-1], False], t + ["GenericList[Int]", "Bool"], [r], t,
                  "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
                  "-> Tensor"),
             node(2, "aten::logsumexp", 1, [x, [-1], False], t + ["GenericList[Int]", "Bool"], [r], t, lse),
             node(6, "aten::logsumexp", 1, [x, [-1], False], t + ["GenericList[Int]", "Bool"], [r], t, lse)]
    p = tmp_path / "lse.json"
    p.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    ops = load_traces([str(p)]).programs[0]
    assert [op.name for op in ops] == ["aten.amax.default", "aten.sub.Tensor", "aten.sum.dim_IntList",
                                       "aten.logsumexp.default"]
    assert ops[1].bytes == (4096 + 64 + 4096) * 4   # the scores and the maxima read, the difference written


def test_softmax_backward_is_its_multiply_then_its_own_kernel(tmp_path):
    """CUDA's softmax backward multiplies the gradient by the output (a nested aten::mul, its own kernel) and then
    runs its kernel (gpu_composites.RUN_WITH_CHILDREN): two ops, the multiply first, as the capture records them."""
    g, o, p, q = ([i, i + 1, 0, 4096, 4, "cpu"] for i in (10, 12, 14, 16))
    t = ["Tensor(float)"]
    nodes = [node(1, "[pytorch|profiler|execution_trace|thread]", 1),   # the nested call written first
             node(3, "aten::mul", 2, [g, o], t * 2, [p], t,
                  "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"),
             node(2, "aten::_softmax_backward_data", 1, [g, o, -1, 6], t * 2 + ["Int", "Int"], [q], t,
                  "aten::_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) "
                  "-> Tensor")]
    path = tmp_path / "softmax.json"
    path.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    ops = load_traces([str(path)]).programs[0]
    assert [(op.name, op.bytes) for op in ops] == [("aten.mul.Tensor", 3 * 4096 * 4),
                                                   ("aten._softmax_backward_data.default", 3 * 4096 * 4)]
