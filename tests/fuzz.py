"""The fuzz harness: hostile inputs for every parser, run through the CLI in this process, held to the contract of
docs/reliability.md.

The contract, checked on every input: the run ends with exit 0 and finite, non-negative figures, or with exit 2
and exactly one line `astra-compile: error: ...`; never another exception (a traceback), never longer than
TIMEOUT seconds (a hang), never a file written outside the output the command names.

Each parser has a hypothesis strategy that draws its hostile inputs: mutations of a valid input (characters
deleted, inserted or replaced, numbers swapped for extreme ones, JSON values replaced or removed), random bytes and
extreme numbers. tests/test_fuzz.py runs each for a few examples (CI); run it longer here:

    python tests/fuzz.py --minutes 30      # every parser in turn, then the number of inputs tried per parser
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import traceback
from collections import Counter

from hypothesis import strategies as st

from astra_compile.compiler.main import main
from astra_compile.network import user_files

# a FIFO nobody writes to is refused after this wait (10 s in a real run): the harness meets hundreds of them
user_files.NONREGULAR_WAIT_S = 0.5

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
TIMEOUT = 60            # seconds one input may take before it counts as a hang
COUNTS: Counter = Counter()  # inputs tried per parser (this process)

EXTREME_NUMBERS = ["0", "-0", "-1", "1e308", "-1e308", "1e-310", "nan", "inf", "-inf", "1e400", str(2**63),
                   str(2**64 + 1), str(-2**63), "9" * 40, "0.5", "1.5", "00", "0x10", "1_000", "\u0662", "\u00b2",
                   "", " ", "1,2", "3.0", "2147483648", "65537"]
EXTREME_VALUES = [0, -1, 1, 0.5, 1e308, -1e308, 1e-310, math.inf, -math.inf, math.nan, 2**63, 2**64 + 1, -2**63,
                  10**30, "", "x", "1", None, True, False, [], {}, [1, 2, 3], {"a": 1}, [[]], "\u0000"]


class ContractBreach(AssertionError):
    pass


class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _listing(root: str) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def _finite_figures(value, key: str = "") -> None:
    """Every number of a JSON report is finite; times, bytes and counts are not negative."""
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_figures(v, str(k))
    elif isinstance(value, list):
        for v in value:
            _finite_figures(v, key)
    elif isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        if not math.isfinite(value):
            raise ContractBreach(f"non-finite figure {key} = {value}")
        if value < 0 and re.search(r"(time|_us|_ns|bytes|busy|npus|chunks)", key):
            raise ContractBreach(f"negative figure {key} = {value}")


def run(parser: str, argv: list, workdir: str, outputs: tuple[str, ...] = (),
        also_ok: tuple[int, ...] = ()) -> tuple[int, str, str]:
    """Run the CLI on `argv` in `workdir` and check the contract; (exit status, stdout, stderr). `also_ok`: other
    exit statuses the command documents (a sweep with failed points exits 1)."""
    COUNTS[parser] += 1
    argv = [str(a) for a in argv]
    before = _listing(workdir)
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    cwd = os.getcwd()
    fd_err = tempfile.TemporaryFile()  # what reaches file descriptor 2 past sys.stderr (loggers bound to it early)
    saved = os.dup(2)
    try:
        os.chdir(workdir)
        sys.__stderr__.flush()
        os.dup2(fd_err.fileno(), 2)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 1
    except _Hang:
        raise ContractBreach(f"{parser}: no answer within {TIMEOUT} s: {argv}") from None
    except Exception as e:  # noqa: BLE001 - any other exception is a traceback for the user
        where = traceback.extract_tb(e.__traceback__)[-1]
        raise ContractBreach(f"{parser}: {type(e).__name__}: {str(e)[:200]} at {where.filename}:{where.lineno} "
                             f"on {argv}") from e
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
        sys.__stderr__.flush()
        os.dup2(saved, 2)
        os.close(saved)
    fd_err.seek(0)
    stdout, stderr = out.getvalue(), fd_err.read().decode(errors="replace") + err.getvalue()
    fd_err.close()
    if code == 2:
        if stderr.count("\n") != 1 or not stderr.startswith("astra-compile: error: "):
            raise ContractBreach(f"{parser}: exit 2 without one error line: {stderr!r} on {argv}")
    elif code == 0:
        if "--json" in argv and stdout.strip():
            try:
                report = json.loads(stdout)
            except ValueError:
                raise ContractBreach(f"{parser}: --json printed no JSON: {stdout[:200]!r} on {argv}") from None
            try:
                _finite_figures(report)
            except ContractBreach as e:
                raise ContractBreach(f"{parser}: {e} on {argv}") from None
    elif code not in also_ok:
        raise ContractBreach(f"{parser}: exit {code}: {stderr[-300:]!r} on {argv}")
    added = _listing(workdir) - before
    allowed = {a for a in added if any(a == o or a.startswith(o.rstrip("/") + os.sep) for o in outputs)}
    if added - allowed:
        raise ContractBreach(f"{parser}: wrote {sorted(added - allowed)} outside its output on {argv}")
    return code, stdout, stderr


# ---- mutations -----------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


@st.composite
def mutated_text(draw, text: str, edits: int = 3) -> str:
    """`text` with a few edits: a span deleted, random characters inserted, a number swapped for an extreme one, a
    line repeated, or the end cut off."""
    for _ in range(draw(st.integers(1, edits))):
        op = draw(st.sampled_from(["delete", "insert", "number", "number", "repeat", "truncate"]))
        n = len(text)
        at = draw(st.integers(0, max(n - 1, 0)))
        if op == "delete" and n:
            text = text[:at] + text[at + draw(st.integers(1, 8)):]
        elif op == "insert":
            text = text[:at] + draw(st.text(max_size=6)) + text[at:]
        elif op == "number":
            spans = [m.span() for m in _NUMBER.finditer(text)]
            if spans:
                a, b = draw(st.sampled_from(spans))
                text = text[:a] + draw(st.sampled_from(EXTREME_NUMBERS)) + text[b:]
        elif op == "repeat":
            lines = text.splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines.insert(i, lines[i])
                text = "".join(lines)
        else:
            text = text[:at]
    return text


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_json(draw, obj, edits: int = 2):
    """A JSON value with a few of its values replaced by extreme ones (wrong types, huge, NaN) or removed."""
    obj = json.loads(json.dumps(obj))
    for _ in range(draw(st.integers(1, edits))):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            return copy.deepcopy(draw(st.sampled_from(EXTREME_VALUES)))
        path = draw(st.sampled_from(paths))
        parent = obj
        for k in path[:-1]:
            parent = parent[k]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(EXTREME_VALUES)))  # never the shared one
    return obj


def hostile_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=64), st.just(b"\xff\xfe\x00\x01" * 8), st.just(b"\x00" * 32))


# ---- hostile shapes of a whole file: alias bombs, deep nesting, keys that are lists, keys given twice, values
# Python cannot build, and files that are not files (a FIFO nobody writes, /dev/zero, /dev/null, a directory) ----

def alias_bomb(levels: int) -> str:
    """A YAML flow list whose last item expands to 9^levels strings (billion laughs at 9)."""
    names = "abcdefghij"
    items = ["&a [" + ",".join(['"lol"'] * 9) + "]"]
    items += [f"&{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


HOSTILE_YAML_VALUES = st.one_of(
    st.integers(3, 9).map(alias_bomb),
    st.sampled_from([63, 64, 65, 400, 5000]).map(lambda n: "[" * n + "]" * n),
    st.just("&self [1, *self]"), st.just("9" * 5000), st.just("2024-13-45"), st.just("!!binary aGVsbG8="),
    st.just("!!set {a, b}"), st.just("!!python/object/apply:os.system [true]"), st.just(".nan"), st.just("-.inf"),
    st.just("{<<: [{a: 1}, {a: 2}]}"), st.just("!!timestamp 2024-01-01"))
_YAML_KEY = re.compile(r"^(\s*)([A-Za-z_][\w-]*):(.*)$")


@st.composite
def hostile_yaml(draw, text: str) -> str:
    """`text` (YAML) with one `key: value` line made hostile: its value an alias bomb, a deep nest, a value that
    holds itself or that Python cannot build; the key given twice; or the key a list or a mapping."""
    lines = text.splitlines()
    keyed = [i for i, line in enumerate(lines) if _YAML_KEY.match(line)]
    if not keyed:
        return text + "\n" + "x: " + draw(HOSTILE_YAML_VALUES)
    i = draw(st.sampled_from(keyed))
    indent, key, value = _YAML_KEY.match(lines[i]).groups()
    how = draw(st.sampled_from(["value", "value", "twice", "list key", "map key"]))
    if how == "value":
        lines[i] = f"{indent}{key}: {draw(HOSTILE_YAML_VALUES)}"
    elif how == "twice":
        lines.insert(i, lines[i])
    elif how == "list key":
        lines[i] = f"{indent}[{key}]:{value}"
    else:
        lines[i] = f"{indent}? {{{key}: 1}}\n{indent}:{value}"
    return "\n".join(lines) + "\n"


HOSTILE_JSON_VALUES = st.one_of(
    st.sampled_from([100, 990, 5000, 200000]).map(lambda n: "[" * n + "]" * n),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "9" * 5000, "1e400", '"\\ud800"']))


@st.composite
def hostile_json(draw, obj) -> str:
    """`obj` as JSON text with one value made hostile (a deep nest, NaN, a 5000-digit number) or one key of an
    object given twice."""
    paths = [p for p in _paths(obj) if p and isinstance(p[-1], str)]
    if not paths:
        return json.dumps(obj)
    path = draw(st.sampled_from(paths))
    marker = "\u0000HOSTILE\u0000"
    obj = json.loads(json.dumps(obj))
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    if draw(st.booleans()):
        parent[path[-1]] = marker
        return json.dumps(obj).replace(json.dumps(marker), draw(HOSTILE_JSON_VALUES), 1)
    text = json.dumps(parent, sort_keys=False)
    twice = json.dumps({path[-1]: parent[path[-1]]})[1:-1]
    return json.dumps(obj).replace(text, "{" + twice + ", " + text[1:], 1) if text.startswith("{") else json.dumps(obj)


SPECIAL_FILES = ["fifo", "/dev/zero", "/dev/urandom", "/dev/null", "directory"]


def hostile_file(draw, path: str, data) -> str:
    """Write `data` at `path`, or (one time in five) put a file that is not a regular file there: a FIFO nobody
    writes to, a link to a device that never ends or to /dev/null, a directory."""
    if draw(st.integers(0, 4)):
        return write(path, data)
    kind = draw(st.sampled_from(SPECIAL_FILES))
    if os.path.lexists(path):
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        os.symlink(kind, path)
    return path


def write(path: str, data) -> str:
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8", "errors": "surrogatepass"})) as f:
        f.write(data)
    return path


# ---- the parsers' inputs -------------------------------------------------------------------------------------

TOPOLOGY_WORDS = ["x", "_", "(", ")", ",", "Ring", "FC", "FullyConnected", "Switch", "Mesh", "Hypercube", "torus",
                  "ring", "switch", "mesh", "dgx1", "bigraph", "Graph", "fc", " "]
SMALL = st.integers(0, 40).map(str)
HUGE = st.sampled_from(["0", "1", "99999999999", str(2**64), "1000000000", "65536", "4096", "00", "-4", "1e3"])
SIZES = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"\A-?[0-9]{0,22}(\.[0-9]{0,4})?\s?(B|KB|MB|GB|TB|KiB|GiB|k|M|b|xB|)\Z"),
    st.sampled_from(EXTREME_NUMBERS))
TOPOLOGIES = st.one_of(
    st.text(max_size=16),
    st.lists(st.one_of(st.sampled_from(TOPOLOGY_WORDS), SMALL, HUGE), min_size=1, max_size=8).map("".join))
OPTIONS = ["--bandwidth", "--latency", "--links", "--chunks", "--active-chunks", "--dims", "--max-memory",
           "--algorithm", "--npu", "--scheduler", "--intra", "--execution", "--emit"]
OPTION_VALUES = st.one_of(st.sampled_from(EXTREME_NUMBERS), st.text(max_size=8),
                          st.lists(st.sampled_from(EXTREME_NUMBERS + ["4", "50"]), min_size=2, max_size=4).map(",".join))

NETWORK_YML = "topology: [ Ring, FullyConnected, Switch ]\nnpus_count: [ 4, 2, 8 ]\nbandwidth: [ 50.0, 25.0, 12.5 ]\n" \
              "latency: [ 500.0, 500.0, 500.0 ]\n"
NETWORK_JSON = {"topology-name": "Hierarchical", "topologies-per-dim": ["Ring", "FullyConnected", "Switch"],
                "dimension-type": ["N", "N", "N"], "dimensions-count": 3, "units-count": [4, 2, 8],
                "links-count": [2, 1, 1], "link-latency": [500, 500, 500], "link-bandwidth": [50, 25, 12.5]}
EDGES = "# a ring of four through a switch\n0 1 50 500\n1 2\n2 3 25\n3 0\n0 sw 100 100\n2 sw\n"


def mlir_sources() -> list[str]:
    texts = []
    for d, names in ((os.path.join(HERE, "ir"), ("all_reduce_2d.mlir", "themis_2d.mlir")),
                     (EXAMPLES, ("torus_two_collectives.mlir", "all_reduce_3d_switch.mlir"))):
        for name in names:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                texts.append(f.read())
    return texts


def trace_nodes() -> dict:
    """A small, valid one-file execution trace: a tensor made, all-reduced in a group of 2, waited on, used."""
    def node(id_, name, parent, inputs=(), types=(), outputs=(), out_types=(), schema=""):
        shapes = [[v[3]] if isinstance(v, list) and len(v) == 6 else [] for v in inputs]
        out_shapes = [[v[3]] if isinstance(v, list) and len(v) == 6 else [] for v in outputs]
        return {"id": id_, "name": name, "ctrl_deps": parent,
                "inputs": {"values": list(inputs), "shapes": shapes, "types": list(types)},
                "outputs": {"values": list(outputs), "shapes": out_shapes, "types": list(out_types)},
                "attrs": [{"name": "op_schema", "type": "string", "value": schema}]}
    x, y = [10, 11, 0, 6, 4, "cpu"], [12, 13, 0, 6, 4, "cpu"]
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4},
              {"pg_name": "1", "pg_desc": "tp", "ranks": [0, 1], "group_size": 2}]
    nodes = [
        node(1, "[pytorch|profiler|execution_trace|thread]", 1),
        node(2, "## process_group:init ##", 1, [json.dumps(groups)], ["String"]),
        node(3, "aten::ones", 1, [[6]], ["GenericList[Int]"], [x], ["Tensor(float)"],
             "aten::ones(SymInt[] size, *, ScalarType? dtype=None) -> Tensor"),
        node(4, "_c10d_functional::all_reduce", 1, [x, "sum", "1"], ["Tensor(float)", "String", "String"],
             [y], ["Tensor(float)"],
             "_c10d_functional::all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor"),
        node(5, "_c10d_functional::wait_tensor", 1, [y], ["Tensor(float)"], [y], ["Tensor(float)"],
             "_c10d_functional::wait_tensor(Tensor tensor) -> Tensor"),
        node(6, "aten::relu", 1, [y], ["Tensor(float)"], [x], ["Tensor(float)"], "aten::relu(Tensor self) -> Tensor"),
    ]
    return {"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}


def kineto_events() -> dict:
    """A small profiler (Kineto) trace for trace_nodes(): its two compute calls, one launching a kernel."""
    def op(name, ts, dur, rf):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"Record function id": rf, "External id": rf + 100}}
    kernel = {"ph": "X", "cat": "kernel", "name": "relu_kernel", "pid": 0, "tid": 7, "ts": 60, "dur": 3.5,
              "args": {"External id": 106, "correlation": 1}}
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 4},
            "traceEvents": [op("aten::ones", 0, 12.5, 3), op("aten::relu", 50, 20.0, 6), kernel]}


def kineto_alone_events() -> dict:
    """A profiler trace recorded with shapes: a matmul, a gloo all-reduce (its backend record has the call's
    record-function id + 1) and the process groups, enough to import without an execution trace."""
    mm = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10.0,
          "args": {"Record function id": 3, "Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"],
                   "Concrete Inputs": ["", ""]}}
    ar = {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": 20, "dur": 5.0,
          "args": {"Record function id": 7, "Input Dims": [[[64]], [], [], [], [], []],
                   "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
                   "Concrete Inputs": ["", "", "", "", "True", "-1"]}}
    gloo = {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 21,
            "dur": 30.0, "args": {"Record function id": 8, "Input Dims": [[64]], "Input type": ["float"]}}
    add = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 60, "dur": 2.0,
           "args": {"Record function id": 9, "Input Dims": [[64], [64], []],
                    "Input type": ["float", "float", "Scalar"], "Concrete Inputs": ["", "", "1"]}}
    return {"schemaVersion": 1, "traceEvents": [mm, ar, gloo, add],
            "distributedInfo": {"rank": 0, "world_size": 4, "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]}]}}


def traced_with_rf_ids() -> dict:
    trace = trace_nodes()
    for n in trace["nodes"]:
        n["attrs"].append({"name": "rf_id", "type": "uint64", "value": n["id"]})
    return trace


def model_source() -> str:
    with open(os.path.join(EXAMPLES, "mlp_dp.py"), encoding="utf-8") as f:
        return f.read()


# ---- one case per parser: draw an input, run it, check the contract --------------------------------------------

COLLECTIVE = ["--collective", "all_reduce", "--size", "1MB"]


def case_size(draw, workdir):
    run("sizes", ["--collective", "all_reduce", "--topology", "4x4_torus", "--size", draw(SIZES), "--json"],
        workdir)


def case_topology(draw, workdir):
    run("topology notation", [*COLLECTIVE, "--topology", draw(TOPOLOGIES), "--json"], workdir)


def case_options(draw, workdir):
    argv = [*COLLECTIVE, "--topology", draw(st.sampled_from(["4x4_torus", "Ring(4)_Switch(8)", "8_switch"]))]
    for _ in range(draw(st.integers(1, 3))):
        argv += [draw(st.sampled_from(OPTIONS)), draw(OPTION_VALUES)]
    run("command-line numbers", argv + ["--json"], workdir)


CLUSTER_NAMES = ["dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72", "mi300x"]


def case_cluster(draw, workdir):
    """--cluster NAME:NODES[xGPUS] (docs/clusters.md): a preset or any text, counts or any text, beside a collective
    and sometimes the options that override the cluster's parts."""
    name = draw(st.one_of(st.sampled_from(CLUSTER_NAMES), st.text(max_size=12)))
    count = st.one_of(SMALL, HUGE, st.text(max_size=6))
    spec = draw(st.one_of(st.builds(lambda n, k: f"{n}:{k}", st.just(name), count),
                          st.builds(lambda n, k, g: f"{n}:{k}x{g}", st.just(name), count, count),   # part of a node
                          st.just(name)))
    argv = [*COLLECTIVE, "--cluster", spec]
    for _ in range(draw(st.integers(0, 2))):
        argv += [draw(st.sampled_from(["--bandwidth", "--latency", "--topology"])), draw(OPTION_VALUES)]
    run("cluster presets", argv + ["--json"], workdir)


def case_network_file(draw, workdir):
    kind = draw(st.sampled_from(["yml", "json", "edges"]))
    base = {"yml": NETWORK_YML, "json": json.dumps(NETWORK_JSON, indent=1), "edges": EDGES}[kind]
    data = draw(st.one_of(mutated_text(base), hostile_bytes())) if kind != "json" or draw(st.booleans()) else \
        json.dumps(draw(mutated_json(NETWORK_JSON)))
    if kind != "edges" and draw(st.booleans()):
        data = draw(hostile_yaml(base)) if kind == "yml" else draw(hostile_json(NETWORK_JSON))
    path = hostile_file(draw, os.path.join(workdir, f"net.{kind}"), data)
    run(f"network .{kind}", [*COLLECTIVE, "--topology", path, "--json"], workdir)


def case_mlir(draw, workdir):
    data = draw(st.one_of(mutated_text(draw(st.sampled_from(mlir_sources())), edits=4), hostile_bytes()))
    path = hostile_file(draw, os.path.join(workdir, "m.mlir"), data)
    extra = draw(st.sampled_from([[], ["--topology", "4x8_torus"], ["--chunks", "4"], ["--verify"]]))
    run(".mlir modules", [path, *extra, "--json"], workdir)


STEP_MODULES = ("step_two_ranks.mlir", "step_shapes.mlir")   # tests/ir/: the second with wl.dtype and wl.shapes


def case_step_module(draw, workdir):
    with open(os.path.join(HERE, "ir", draw(st.sampled_from(STEP_MODULES))), encoding="utf-8") as f:
        valid = f.read()
    data = draw(st.one_of(mutated_text(valid, edits=4), hostile_bytes()))
    path = write(os.path.join(workdir, "step.mlir"), data)
    extra = draw(st.sampled_from([[], ["--topology", "Ring(2)"], ["--topology", "Switch(2)", "--chunks", "2"]]))
    run("workload modules", [path, *extra, "--json"], workdir)


def case_table_dir(draw, workdir, valid_dir: str):
    d = os.path.join(workdir, "tables")
    shutil.copytree(valid_dir, d)
    target = draw(st.sampled_from(["meta.json", "npu_0.csv", "npu_5.csv"]))
    path = os.path.join(d, target)
    if target == "meta.json" and draw(st.booleans()):
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        data = draw(st.one_of(st.builds(json.dumps, mutated_json(meta, edits=2)), hostile_json(meta)))
    else:
        with open(path, encoding="utf-8") as f:
            data = draw(st.one_of(mutated_text(f.read()), hostile_bytes()))
    hostile_file(draw, path, data)
    extra = draw(st.sampled_from([[], ["--execution", "full"], ["--verify"], ["--backend", "congestion"]]))
    run("table directories", [d, *extra, "--json"], workdir)


def valid_step_dir(root: str, module: str = STEP_MODULES[0]) -> str:
    """The two-rank step of a tests/ir module (STEP_MODULES) written as step tables, once per fuzz root."""
    d = os.path.join(root, "valid_step_" + module.split(".")[0])
    if not os.path.isdir(d):
        with contextlib.redirect_stdout(io.StringIO()):
            code = main([os.path.join(HERE, "ir", module), "--peak-tflops", "300", "--intra", "fifo",
                         "--emit", "tables", "-o", d])   # with a `run` record to mutate
        assert code == 0
    return d


def case_step_dir(draw, workdir):
    d = os.path.join(workdir, "step")
    shutil.copytree(valid_step_dir(os.path.dirname(workdir), draw(st.sampled_from(STEP_MODULES))), d)
    target = draw(st.sampled_from(["meta.json", "program_0.csv", "program_1.csv", "collective_1/meta.json",
                                   "collective_1/npu_0.csv"]))
    path = os.path.join(d, target)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if target.endswith("meta.json") and draw(st.booleans()):
        data = draw(st.one_of(st.builds(json.dumps, mutated_json(json.loads(text), edits=2)),
                              hostile_json(json.loads(text))))
    else:
        data = draw(st.one_of(mutated_text(text), hostile_bytes()))
    hostile_file(draw, path, data)
    extra = draw(st.sampled_from([[], ["--backend", "congestion"], ["--emit", "tables", "--npu", "1"]]))
    run("step table directories", [d, *extra, "--json"], workdir)


def case_trace(draw, workdir):
    data = draw(st.one_of(st.builds(json.dumps, mutated_json(trace_nodes(), edits=2)),
                          mutated_text(json.dumps(trace_nodes(), indent=1)), hostile_bytes()))
    path = write(os.path.join(workdir, "rank0.json"), data)
    run("execution traces", [path, "--topology", "4_ring", "--json"], workdir)


def case_profile(draw, workdir):
    data = draw(st.one_of(st.builds(json.dumps, mutated_json(kineto_events(), edits=2)),
                          mutated_text(json.dumps(kineto_events(), indent=1)), hostile_bytes()))
    trace = write(os.path.join(workdir, "rank0.json"), json.dumps(traced_with_rf_ids()))
    profile = write(os.path.join(workdir, "kineto_rank0.json"), data)
    run("profiler traces", [trace, profile, "--topology", "2x2_torus", "--json"], workdir)


def case_profile_alone(draw, workdir):
    data = draw(st.one_of(st.builds(json.dumps, mutated_json(kineto_alone_events(), edits=2)),
                          mutated_text(json.dumps(kineto_alone_events(), indent=1)), hostile_bytes()))
    profile = write(os.path.join(workdir, "kineto_rank0.json"), data)
    run("profiler traces alone", [profile, "--topology", "2x2_torus", "--json"], workdir)


def gpu_profile() -> dict:
    """A GPU profile for calibrate-compute: three matmuls and three adds, each with its kernel."""
    events = []
    for i, (name, dims, types) in enumerate([("aten::mm", [[64, 128], [128, 256]], ["float", "float"]),
                                             ("aten::mm", [[256, 512], [512, 64]], ["float", "float"]),
                                             ("aten::mm", [[1024, 1024], [1024, 1024]], ["float", "float"]),
                                             ("aten::add", [[4096], [4096], []], ["float", "float", "Scalar"]),
                                             ("aten::add", [[65536], [65536], []], ["float", "float", "Scalar"]),
                                             ("aten::add", [[8], [8], []], ["float", "float", "Scalar"])], 1):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5.0,
                       "args": {"External id": i, "Input Dims": dims, "Input type": types,
                                "Concrete Inputs": [""] * (len(dims) - 1) + ["1" if name == "aten::add" else ""]}})
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 * i + 1,
                       "dur": 1.0 + i, "args": {"External id": i}})
    return {"deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}], "traceEvents": events}


def case_gpu_profile(draw, workdir):
    data = draw(st.one_of(st.builds(json.dumps, mutated_json(gpu_profile(), edits=2)),
                          mutated_text(json.dumps(gpu_profile(), indent=1)), hostile_bytes()))
    profile = write(os.path.join(workdir, "gpu_kineto.json"), data)
    args = draw(st.sampled_from([["--gpu-name", "h200", "-o", "fit.yaml"], ["--gpu", "h200"]]))
    run("GPU profiles (calibrate-compute)", ["calibrate-compute", profile, *args], workdir, outputs=("fit.yaml",))


def case_model_file(draw, workdir):
    data = draw(mutated_text(model_source(), edits=2))
    path = write(os.path.join(workdir, "model.py"), data)
    # a mutated layer count can make a model that never finishes building: the capture limit ends it in one line
    run("model files", [path, "--topology", "4_ring", "--capture-limit", "20", "--json"], workdir)


def case_output(draw, workdir):
    """-o targets: an existing user file or directory, a file where a directory goes, odd names, a named pipe
    nobody reads, links to a device and to the user's file (special files must keep what they are)."""
    workdir_file = write(os.path.join(workdir, "thesis.txt"), "mine")
    os.mkfifo(os.path.join(workdir, "pipe"))
    os.symlink(os.devnull, os.path.join(workdir, "null"))   # never /dev/null itself: as root a rename replaces it
    os.symlink("thesis.txt", os.path.join(workdir, "link"))
    target = draw(st.sampled_from(["out", "thesis.txt", ".", "..", "out/deeper", "", "x" * 300, "nul\u0000l",
                                   "pipe", "null", "link", "null/x", "pipe/"]))
    emit = draw(st.sampled_from(["tables", "mlir", "msccl-xml", "chakra", "timeline"]))
    argv = ["--timeline", target] if emit == "timeline" else ["--emit", emit, "-o", target]
    run("-o outputs", [*COLLECTIVE, "--topology", "4_ring", *argv], workdir,
        outputs=(target,) if target not in ("thesis.txt", ".", "..", "link") else ())
    named = emit not in ("tables", "chakra") and target in ("thesis.txt", "link")  # replaced, as compilers do
    with open(workdir_file, encoding="utf-8") as f:
        if f.read() != "mine" and not named:
            raise ContractBreach(f"-o {target!r} changed the user's file")
    if not (os.path.islink(os.path.join(workdir, "null")) and os.path.islink(os.path.join(workdir, "link")) and
            os.path.exists(os.path.join(workdir, "pipe")) and
            stat.S_ISFIFO(os.lstat(os.path.join(workdir, "pipe")).st_mode)):
        raise ContractBreach(f"-o {target!r} ({emit}) replaced a link or a named pipe")


SWEEP = {"base": {"collective": "all_reduce", "size": "64KB", "topology": "4_ring"},
         "axes": {"chunks": {"from": 1, "to": 2, "step": 1}, "zip": {"scheduler": ["baseline", "themis"],
                                                                    "intra": ["fifo", "scf"]}}}
SWEEP_YML = """base: {collective: all_reduce, size: 64KB, topology: 4_ring}
axes:
  chunks: {from: 1, to: 2, step: 1}
  zip:
    scheduler: [baseline, themis]
    intra: [fifo, scf]
"""


def case_sweep_file(draw, workdir):
    data = draw(st.one_of(mutated_text(SWEEP_YML, edits=2), st.builds(json.dumps, mutated_json(SWEEP, edits=2)),
                          hostile_yaml(SWEEP_YML), hostile_json(SWEEP), hostile_bytes()))
    path = hostile_file(draw, os.path.join(workdir, "sweep.yml"), data)
    code, _, _ = run("sweep files", ["sweep", path, "-o", "r.csv", "--workers", "1"], workdir, outputs=("r.csv",),
                     also_ok=(1,))
    if code in (0, 1) and not os.path.exists(os.path.join(workdir, "r.csv")):
        raise ContractBreach(f"sweep files: exit {code} without a results file on {data!r}")


NCCL_LOG = """# Collective test starting: all_reduce_perf
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid 1 on host device  0 [0x01] GPU
#  Rank  1 Group  0 Pid 1 on host device  1 [0x02] GPU
#  Rank  2 Group  0 Pid 1 on host device  2 [0x03] GPU
#  Rank  3 Group  0 Pid 1 on host device  3 [0x04] GPU
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576        262144     float     sum      -1    60.10   17.45   26.17      0    59.80   17.53   26.30      0
     2097152        524288     float     sum      -1    80.40   26.08   39.12      0    81.00   25.89   38.84    N/A
     4194304       1048576     float     sum      -1   130.20   32.21   48.32      0   129.90   32.29   48.43      0
"""


def case_nccl_log(draw, workdir):
    data = draw(st.one_of(mutated_text(NCCL_LOG, edits=2), hostile_bytes()))
    path = hostile_file(draw, os.path.join(workdir, "all_reduce_perf.log"), data)
    # --hold over a two-dimension topology of the same 4 ranks: any text, or indices in and out of range
    hold = draw(st.one_of(st.none(), st.sampled_from(["0", "1", "0,1", "0,0", "2", " 1 "]), st.text(max_size=6)))
    topology = ["--topology", "Switch(4)"] if hold is None else ["--topology", "Switch(2)_Switch(2)", "--hold", hold]
    run("nccl-tests logs", ["calibrate", path, *topology, "-o", "net.yml"], workdir, outputs=("net.yml",))


SYSTEM_JSON = {"scheduling-policy": "FIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
               "preferred-dataset-splits": 2, "all-reduce-implementation": ["ring", "direct"],
               "all-to-all-implementation": ["direct", "direct"], "collective-optimization": "baseline",
               "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 1, "peak-perf": 900}


def case_system_file(draw, workdir):
    data = draw(st.one_of(st.builds(json.dumps, mutated_json(SYSTEM_JSON, edits=2)), hostile_bytes()))
    path = write(os.path.join(workdir, "sys.json"), data)
    run("system files", [*COLLECTIVE, "--topology", "Ring(2)_FC(2)", "--system", path, "--json"], workdir)


POOL_YAML = ("version: 1\ndesign: hiermem\nnodes: 2\ngpus_per_node: 2\nin_node_gbps: 256\nout_node_switches: 2\n"
             "remote_groups: 4\nremote_group_gbps: 100\ngpu_side_out_gbps: 400\nmem_side_out_gbps: 200\n"
             "chunk: 2MB\nlatency_ns: 100\n")
MEMORY_STEP = """module attributes {comm.topology = {dims = [{bandwidth_gbps = 5.0e+01 : f64, block = "Ring", latency_ns = 5.0e+02 : f64, links = 1 : i64, size = 4 : i64}], name = "Ring(4)"}, wl.mesh = "", wl.source = "memory", wl.spmd = true, wl.world_size = 4 : i64} {
  module attributes {wl.groups = {}, wl.rank = 0 : i64} {
    %0 = "wl.load"() {bytes = 67108864 : i64, location = "remote", name = "w", wl.in_switch = 4 : i64} : () -> !comm.token
    %1 = "wl.compute"(%0) {bytes = 0 : i64, flops = 1000000 : i64, name = "mm"} : (!comm.token) -> !comm.token
    %2 = "wl.store"(%1) {bytes = 1048576 : i64, location = "local", name = "out"} : (!comm.token) -> !comm.token
  }
}
"""


ASTRA_SIM_REMOTE = json.dumps({"memory-type": "PER_NODE_MEMORY_EXPANSION", "num-nodes": 2, "num-npus-per-node": 2,
                               "remote-mem-latency": 100, "remote-mem-bw": 50})


def case_pool_file(draw, workdir):
    """A mutated pool file under a step that loads from the pool, or a mutated step with a valid pool."""
    base = draw(st.sampled_from([POOL_YAML, ASTRA_SIM_REMOTE]))   # this compiler's pool file, or ASTRA-sim's JSON
    pool, step = base, MEMORY_STEP
    if draw(st.booleans()):
        pool = draw(st.one_of(mutated_text(base, edits=3), st.builds(json.dumps, mutated_json(json.loads(
            ASTRA_SIM_REMOTE), edits=2)), hostile_yaml(POOL_YAML), hostile_json(json.loads(ASTRA_SIM_REMOTE)),
            hostile_bytes()))
    else:
        step = draw(st.one_of(mutated_text(MEMORY_STEP, edits=3), hostile_bytes()))
    pool_path = hostile_file(draw, os.path.join(workdir, "pool.yaml"), pool)
    step_path = write(os.path.join(workdir, "step.mlir"), step)
    extra = draw(st.sampled_from([[], ["--mem-latency", "50"], ["--backend", "congestion"]]))
    run("pool files", [step_path, "--pool", pool_path, *extra, "--json"], workdir)


DEVICE = {"version": 1, "name": "mine", "description": "a GPU of my own",
          "peak_tflops": {"fp64": 30, "fp32": 60, "tf32": 400, "bf16": 900, "fp16": 900, "fp8": 1800},
          "mem_bw_tb_s": 3.0, "memory_gb": 96, "sources": {"memory_gb": "my datasheet"}, "efficiency": {"matmul": 0.7}}


def case_device_file(draw, workdir):
    """A mutated GPU device file (--gpu FILE, YAML or JSON) under a small step."""
    name = draw(st.sampled_from(["gpu.yaml", "gpu.json"]))
    text = json.dumps(DEVICE)
    data = draw(st.one_of(mutated_text(text, edits=3), st.builds(json.dumps, mutated_json(DEVICE, edits=2)),
                          hostile_yaml(text), hostile_json(DEVICE), hostile_bytes()))
    path = hostile_file(draw, os.path.join(workdir, name), data)
    extra = draw(st.sampled_from([[], ["--peak-tflops", "100"], ["--mem-bw", "1000"]]))
    run("GPU device files", [os.path.join(HERE, "ir", "step_two_ranks.mlir"), "--gpu", path, *extra, "--json"],
        workdir)


def chakra_trace() -> bytes:
    """One rank's Chakra trace: the metadata, a compute node and an all-reduce depending on it."""
    from test_chakra import COLL, COMP, node
    from astra_compile.compiler.frontend.chakra import delimited, schema
    return (delimited(schema()[0](version="0.0.4")) + delimited(node(1, "mm", COMP, num_ops=10 ** 9)) +
            delimited(node(2, "ar", COLL, deps=[1], comm_type=0, comm_size=1 << 20)))


def case_chakra(draw, workdir):
    good = chakra_trace()
    data = draw(st.one_of(st.builds(lambda cut, flip: good[:cut] + bytes([good[cut] ^ flip]) + good[cut + 1:]
                                    if cut < len(good) else good, st.integers(0, len(good)), st.integers(1, 255)),
                          st.builds(lambda cut: good[:cut], st.integers(0, len(good))), hostile_bytes()))
    write(os.path.join(workdir, "t.0.et"), good)
    write(os.path.join(workdir, "t.1.et"), data)
    run("Chakra traces", [workdir, "--topology", "Ring(2)", "--json"], workdir)


# Chakra nodes drawn field by field: a valid program per rank (compute, a load, an all-reduce on a group of
# comm_group.json, a message between ranks 0 and 1), then attributes set to extreme values of any protobuf type,
# removed, node types and dependencies changed, comm_group.json damaged; read as a step (each run option) or
# written back with --emit chakra.
CHAKRA_FIELDS = ["num_ops", "tensor_size", "comm_type", "comm_size", "pg_name", "pg_desc", "comm_src", "comm_dst",
                 "comm_root", "comm_tag", "tensor_loc", "is_cpu_op", "involved_dim", "astra_flops", "astra_bytes",
                 "astra_measured_ns", "astra_comm_type", "astra_in_switch", "astra_phase", "astra_iteration"]


@st.composite
def chakra_value(draw):
    """(AttributeProto field, value) of any type a trace may hold there."""
    return draw(st.one_of(
        st.tuples(st.just("int64_val"), st.one_of(st.sampled_from([0, -1, 1, 2 ** 40, 2 ** 62, 2 ** 63 - 1, -2 ** 63]),
                                                  st.integers(-8, 2 ** 24))),
        st.tuples(st.just("uint64_val"), st.sampled_from([0, 1, 7, 2 ** 32, 2 ** 63, 2 ** 64 - 1])),
        st.tuples(st.just("double_val"), st.sampled_from([0.0, -1.0, 0.5, 1e308, 1e-310, math.inf, -math.inf,
                                                          math.nan, 1048576.0])),
        st.tuples(st.just("string_val"), st.one_of(st.sampled_from(["", "0", "1", "2", "REDUCE", "GATHER", "x",
                                                                      "\u0662", "-1", "1e9"]), st.text(max_size=6))),
        st.tuples(st.just("bool_val"), st.booleans()),
        st.tuples(st.just("bool_list"), st.lists(st.booleans(), max_size=3))))


def chakra_rank(rank: int, world: int) -> list:
    from test_chakra import COLL, COMP, LOAD, RECV_, SEND_, node
    out = [node(1, "mm", COMP, num_ops=10 ** 9, tensor_size=1 << 20, is_cpu_op=False),
           node(2, "ld", LOAD, data_deps=[1], tensor_size=1 << 16),
           node(3, "ar", COLL, deps=[1], comm_type=0, comm_size=1 << 20, pg_name="1", pg_desc="dp")]
    if rank == 0:
        out.append(node(4, "send", SEND_, deps=[3], comm_size=1 << 16, comm_src=0, comm_dst=1, comm_tag=1 << 30))
    elif rank == 1:
        out.append(node(4, "recv", RECV_, deps=[3], comm_size=1 << 16, comm_src=0, comm_dst=1, comm_tag=1 << 30))
    return out


def case_chakra_nodes(draw, workdir):
    from astra_compile.compiler.frontend.chakra import delimited, schema
    world = draw(st.sampled_from([2, 4]))
    programs = {r: chakra_rank(r, world) for r in range(world)}
    for _ in range(draw(st.integers(1, 4))):
        rank = draw(st.integers(0, world - 1))
        n = draw(st.sampled_from(programs[rank]))
        op = draw(st.sampled_from(["set", "set", "set", "remove", "type", "dep", "id"]))
        if op == "set":
            name = draw(st.sampled_from(CHAKRA_FIELDS))
            kind, value = draw(chakra_value())
            for a in [a for a in n.attr if a.name == name]:
                n.attr.remove(a)
            a = n.attr.add(name=name)
            if kind == "bool_list":
                a.bool_list.values.extend(value)
            else:
                setattr(a, kind, value)
        elif op == "remove" and len(n.attr):
            del n.attr[draw(st.integers(0, len(n.attr) - 1))]
        elif op == "type":
            n.type = draw(st.integers(0, 12))
        elif op == "dep":
            n.ctrl_deps.append(draw(st.sampled_from([0, 1, 2, 3, 4, 9, 2 ** 64 - 1])))
        else:
            n.id = draw(st.sampled_from([0, 1, 2, 3, 4, 2 ** 64 - 1]))
    head = delimited(schema()[0](version="0.0.4"))
    for r, nodes in programs.items():
        write(os.path.join(workdir, f"t.{r}.et"), head + b"".join(delimited(n) for n in nodes))
    groups = {"1": list(range(world))}
    text = json.dumps(groups)
    if draw(st.integers(0, 3)) == 0:
        text = draw(st.one_of(mutated_text(text, edits=2), st.builds(json.dumps, mutated_json(groups, edits=2))))
    write(os.path.join(workdir, "comm_group.json"), text)
    topology = draw(st.sampled_from([f"Ring({world})", f"{world}_switch"] + (["2x2_torus"] if world == 4 else [])))
    extra = draw(st.sampled_from([[], ["--backend", "congestion"],
                                  ["--backend", "congestion", "--switching", "store-and-forward"],
                                  ["--max-memory", "300MB"], ["--emit", "chakra", "-o", "out"]]))
    argv = [workdir, "--topology", topology, *extra] + ([] if "--emit" in extra else ["--json"])
    run("Chakra nodes", argv, workdir, outputs=("out",))


def case_chakra_written(draw, workdir):
    """A directory --emit chakra wrote (a 2x2 torus all-reduce or a per-rank step with a broadcast, a reduce and
    measured compute), one file or comm_group.json damaged, read back."""
    import astra_compile
    from test_step_module import two_ranks
    src = os.path.join(workdir, "src")
    if draw(st.booleans()):
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["--collective", "all_reduce", "--size", "1MB", "--topology", "2x2_torus", "--emit", "chakra",
                         "-o", src]) == 0
        topology = "2x2_torus"
    else:
        w = two_ranks()
        w.programs[0][0].measured_ns = 1234.5
        astra_compile.compile(w, "Ring(2)").chakra(src)
        topology = "Ring(2)"
    name = draw(st.sampled_from(sorted(os.listdir(src))))
    path = os.path.join(src, name)
    good = open(path, "rb").read()
    data = draw(st.one_of(st.builds(lambda cut, flip: good[:cut] + bytes([good[cut] ^ flip]) + good[cut + 1:]
                                    if cut < len(good) else good, st.integers(0, len(good)), st.integers(1, 255)),
                          st.builds(lambda cut: good[:cut], st.integers(0, len(good))), hostile_bytes()))
    write(path, data)
    run("Chakra traces written", [src, "--topology", topology, "--json"], workdir)


CASES = {"sizes": case_size, "topology notation": case_topology, "command-line numbers": case_options,
         "network files": case_network_file, ".mlir modules": case_mlir, "workload modules": case_step_module,
         "table directories": case_table_dir,
         "step table directories": case_step_dir,
         "execution traces": case_trace, "profiler traces": case_profile, "profiler traces alone": case_profile_alone,
         "model files": case_model_file,
         "-o outputs": case_output,
         "sweep files": case_sweep_file,
         "nccl-tests logs": case_nccl_log,
         "system files": case_system_file,
         "pool files": case_pool_file,
         "GPU device files": case_device_file,
         "cluster presets": case_cluster,
         "GPU profiles (calibrate-compute)": case_gpu_profile,
         "Chakra traces": case_chakra,
         "Chakra nodes": case_chakra_nodes,
         "Chakra traces written": case_chakra_written}


def valid_table_dir(root: str) -> str:
    d = os.path.join(root, "valid_tables")
    if not os.path.isdir(d):
        with contextlib.redirect_stdout(io.StringIO()):
            # with run options, so that its meta.json's `run` record is mutated too
            code = main([*COLLECTIVE, "--topology", "4x4_torus", "--chunks", "2", "--intra", "fifo", "--local-mem-bw",
                         "1600", "--emit", "tables", "-o", d])
        assert code == 0
    return d


def checked(case, root: str, tables: str, examples: int, derandomize: bool = False, shrink: bool = True):
    """A hypothesis test running `case` on `examples` drawn inputs, each in a fresh folder under `root`
    (`derandomize`: the same inputs on every run, as the test suite wants; `shrink`: look for a smaller input
    that breaks the contract too, which can take minutes)."""
    from hypothesis import HealthCheck, Phase, given, settings

    phases = list(Phase) if shrink else [Phase.explicit, Phase.generate]
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              derandomize=derandomize, phases=phases)
    @given(st.data())
    def check(data):
        with tempfile.TemporaryDirectory(dir=root) as workdir:
            case(data.draw, workdir, *((tables,) if case is case_table_dir else ()))
    return check


def _batch(job: tuple[str, str, str, int]) -> tuple[Counter, list[str]]:
    """One parser's batch of inputs in a process of its own (a long run's memory stays that of one batch)."""
    name, root, tables, examples = job
    COUNTS.clear()
    try:
        checked(CASES[name], root, tables, examples, shrink=False)()
        return COUNTS, []
    except Exception as e:  # noqa: BLE001 - a breach, or several (hypothesis groups distinct failures)
        found = e.exceptions if isinstance(e, BaseExceptionGroup) else [e]
        return COUNTS, [str(x) for x in found]


def main_long(minutes: float, only: list[str] | None = None) -> None:
    """Every parser in turn (or those named in `only`), a batch of inputs at a time (each batch in a fresh process),
    until `minutes` are up; then the number of inputs tried per parser and the breaches."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    deadline = time.monotonic() + minutes * 60
    root = tempfile.mkdtemp(prefix="astra-fuzz-")
    tables = valid_table_dir(root)
    counts: Counter = Counter()
    breaches: list[str] = []
    rounds = 0
    while time.monotonic() < deadline:
        rounds += 1
        for name in only or CASES:
            if time.monotonic() >= deadline:
                break
            # a fresh process per batch, and not a daemon: a sweep under test starts worker processes of its own
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
                done, found = pool.submit(_batch, (name, root, tables, 10 if name == "model files" else 60)).result()
            counts.update(done)
            breaches += found
            for x in found:
                print("BREACH", x, file=sys.stderr, flush=True)
    shutil.rmtree(root, ignore_errors=True)
    print(f"{'parser':28s} {'inputs':>8s}")
    for name, n in sorted(counts.items()):
        print(f"{name:28s} {n:8d}")
    print(f"{'total':28s} {sum(counts.values()):8d}   {rounds} rounds over {len(only or CASES)} input kinds, "
          f"{len(breaches)} contract breach(es)")
    sys.exit(1 if breaches else 0)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="run the fuzz harness for a while")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--parsers", help="comma-separated input kinds to fuzz (default: all): " + ", ".join(CASES))
    a = ap.parse_args()
    chosen = [n.strip() for n in a.parsers.split(",")] if a.parsers else None
    if chosen and set(chosen) - set(CASES):
        ap.error(f"unknown input kind(s): {', '.join(sorted(set(chosen) - set(CASES)))}")
    main_long(a.minutes, chosen)
