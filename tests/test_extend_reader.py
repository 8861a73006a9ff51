"""Adding an input format is one file (docs/extend-reader.md): a reader written to a temporary folder that the reader
registry searches like its own (as a file dropped into compiler/frontend/readers/ would be found) is taken by the
command line and by the Python API alike, its step timed end to end and its format named where an input no reader
takes is refused, with no edit anywhere else. And the registry is the one place a run's input is told apart: the
bundled inputs of every kind are read by the reader of their format.

The runs are in a child process: the registry keeps the readers it has found, so the test reader must not outlive
this test."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# a step as lines, each after the one before, run by every rank: a format of its own, in one file
STEP_LIST = '''
from ....network.errors import UserError
from ..workload import COLLECTIVE, COMPUTE, Op, Workload
from .base import Reader


class StepList(Reader):
    name = "step list"
    order = 35
    expects = "step lists (.steps)"

    def sniff(self, paths):
        return len(paths) == 1 and paths[0].endswith(".steps")

    def load(self, paths, world_size, mesh, capture_limit, topology=None, max_memory=None):
        ops = []
        with open(paths[0]) as f:
            for n, line in enumerate(f, 1):
                words = line.split()
                deps = [len(ops) - 1] if ops else []
                if words[:1] == ["compute"] and len(words) == 2:
                    ops.append(Op(f"op{n}", COMPUTE, deps, flops=int(words[1])))
                elif words[:1] == ["all_reduce"] and len(words) == 2:
                    ops.append(Op(f"op{n}", COLLECTIVE, deps, bytes=int(words[1]), collective="all_reduce",
                                  group=tuple(range(world_size)), group_name="world"))
                else:
                    raise UserError(f"{paths[0]}:{n}: expected `compute FLOPS` or `all_reduce BYTES`")
        return Workload(world_size, {0: ops}, source=paths[0], spmd=True)
'''

RUN = '''
import contextlib, io, json, sys
from astra_compile.compiler.frontend import readers
readers.__path__.append(sys.argv[1])   # searched as readers/ itself: its files register by discovery
import astra_compile
from astra_compile.compiler.main import main
from astra_compile.network.errors import UserError
out = {"cli": []}
for argv in json.loads(sys.argv[2]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    out["cli"].append([code, stdout.getvalue(), stderr.getvalue()])
out["api"] = astra_compile.compile(sys.argv[3], topology="Switch(4)").total_time_us
try:
    astra_compile.compile(["a.txt", "b.txt"], topology="Switch(4)")
except UserError as e:
    out["refused"] = str(e)
print(json.dumps(out))
'''

MB = 2 ** 20


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("more_readers")
    (folder / "step_list.py").write_text(textwrap.dedent(STEP_LIST))
    step = folder / "step.steps"
    step.write_text(f"compute {234 * 10 ** 9}\nall_reduce {MB}\n")   # 1 ms at the default 234 TFLOPS, then 1 MB
    bad = folder / "bad.steps"
    bad.write_text("compute 1\nbroadcast 1\n")
    commands = [[str(step), "--topology", "Switch(4)", "--json"],
                ["--collective", "all_reduce", "--size", "1MB", "--topology", "Switch(4)", "--json"],
                [str(bad), "--topology", "Switch(4)"]]
    done = subprocess.run([sys.executable, "-c", RUN, str(folder), json.dumps(commands), str(step)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_reader_in_one_file_is_taken_by_the_command_line_and_timed(runs):
    (code, out, err), (ccode, cout, cerr) = runs["cli"][:2]
    assert code == 0 and ccode == 0, err + cerr
    step, collective = json.loads(out), json.loads(cout)
    assert step["source"].endswith("step.steps")
    # the compute (1 ms on the roofline), then the all-reduce, timed as the collective on its own is
    assert step["total_time_us"] == pytest.approx(1000 + collective["total_time_us"], rel=1e-12)


def test_the_python_api_takes_it_through_the_same_registry(runs):
    assert runs["api"] == json.loads(runs["cli"][0][1])["total_time_us"]


def test_its_refusal_is_one_line_and_its_format_is_named_among_those_expected(runs):
    code, out, err = runs["cli"][2]
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("astra-compile: error: ") and "bad.steps:2: expected `compute FLOPS`" in err
    assert runs["refused"] == ("cannot compile a.txt, b.txt: expected one model .py file, execution-trace .json "
                               "files, Chakra .et files or step lists (.steps)")


@pytest.mark.parametrize("inputs, kind, run", [
    (["examples/mlp_dp.py"], "workload", "training step"),
    (["tests/ir/step_two_ranks.mlir"], "workload module", "training step"),
    (["examples/all_reduce_3d_switch.mlir"], "comm module", "collective"),
    (["rank0.json", "rank1.json"], "workload", "training step"),
    (["t.0.et", "t.1.et"], "workload", "training step"),
    (["a.json", "b.et"], None, "collective"),   # no reader takes them: the collective path refuses them by name
    ([], None, "collective"),
])
def test_the_bundled_inputs_are_read_by_the_reader_of_their_format(inputs, kind, run):
    from astra_compile.compiler.cli import cli
    from astra_compile.compiler.cli.parser import parse
    from astra_compile.compiler.core.job import from_options
    from astra_compile.compiler.frontend import readers
    paths = [os.path.join(REPO, p) if os.path.exists(os.path.join(REPO, p)) else p for p in inputs]
    assert readers.kind_of(paths) == kind
    values, _, _ = parse(paths + ["--topology", "Switch(4)"])
    assert cli.kind_of(from_options(values)) == run


def test_directories_are_told_apart_by_what_they_hold(tmp_path):
    from astra_compile.compiler.frontend import readers
    traces, tables, empty = tmp_path / "traces", tmp_path / "tables", tmp_path / "empty"
    for d in (traces, tables, empty):
        d.mkdir()
    (traces / "t.0.et").write_bytes(b"")
    (traces / "comm_group.json").write_text("{}")
    (tables / "meta.json").write_text("{}")
    assert readers.pick([str(traces)]).name == "directory of execution traces"
    assert readers.trace_files([str(traces)]) == [str(traces / "t.0.et")]   # comm_group.json is no trace
    assert readers.kind_of([str(tables)]) == readers.kind_of([str(empty)]) == "table directory"
