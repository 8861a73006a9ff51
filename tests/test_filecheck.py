"""FileCheck tests of the passes: tests/filecheck/ holds one `.mlir` file per registered pass, named after it,
written as LLVM's lit tests are: `// RUN:` lines (the command, %s the file itself) and CHECK lines that the
`filecheck` tool (PyPI's Python FileCheck, as xDSL uses) matches against the output. This file is the small lit
that runs them: each RUN line in bash with pipefail, `astra-compile` and `filecheck` the ones of this Python, and
`not` inverting a command's status, as lit's. docs/extend-pass.md says how to write one.
"""
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from astra_compile.passes import all_passes

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck")
# the tools a RUN line may name, as lit's substitutions: this interpreter's, whatever PATH holds; `cli` is the
# command astra-compile stands for (a test's own, tests/test_extend_pass.py, where the pass is in a temporary folder)
CLI = '"$PYTHON" -m astra_compile'


def prelude(cli: str = CLI) -> str:
    return (f'astra-compile() {{ {cli} "$@"; }}\n'
            'filecheck() { "$PYTHON" -m filecheck "$@"; }\n'
            'not() { ! "$@"; }\n')


FILES = sorted(f for f in os.listdir(FOLDER) if f.endswith(".mlir"))


def run_lines(path: str) -> list[str]:
    """The file's RUN commands (a line ending in a backslash goes on in the next RUN line), %s substituted."""
    lines, current = [], ""
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*//\s*RUN:(.*)$", line)
            if not m:
                continue
            current += m.group(1).strip()
            if current.endswith("\\"):
                current = current[:-1] + " "
            else:
                lines.append(current.replace("%s", shlex.quote(path)))
                current = ""
    return lines


def run(path: str, cli: str = CLI) -> list[str]:
    """Run every RUN line of the file; the failures, each with its command and what it printed."""
    if importlib.util.find_spec("filecheck") is None:
        pytest.fail("the filecheck tool is missing: pip install '.[test]'")
    failures = []
    for command in run_lines(path):
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", prelude(cli) + command], capture_output=True,
                              text=True, env={**os.environ, "PYTHON": sys.executable}, cwd=FOLDER, timeout=300)
        if proc.returncode != 0:
            failures.append(f"RUN: {command}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return failures


@pytest.mark.parametrize("name", FILES)
def test_filecheck(name):
    failures = run(os.path.join(FOLDER, name))
    assert not failures, "\n\n".join(failures)


def test_every_pass_has_its_filecheck_file():
    assert [f[:-len(".mlir")] for f in FILES] == sorted(all_passes())


def test_each_file_checks_its_pass():
    """Real FileCheck files: RUN lines that pipe into filecheck, CHECK lines of the prefixes they use, and the
    checks of the pass's own IR dump (a label on its --print-ir-after-all header)."""
    for name in FILES:
        path = os.path.join(FOLDER, name)
        commands = run_lines(path)
        with open(path) as f:
            text = f.read()
        assert commands and all("| filecheck " in c for c in commands), name
        for c in commands:
            prefix = re.search(r"--check-prefix[= ](\w+)", c)
            assert re.search(rf"^// {prefix.group(1) if prefix else 'CHECK'}(-\w+)?:", text, re.M), (name, c)
        assert f"IR Dump After {name[:-len('.mlir')]}:" in text, name


def test_a_check_that_does_not_hold_fails(tmp_path):
    """The runner is not a rubber stamp: a wrong CHECK line, or a command that fails, fails the file."""
    with open(os.path.join(FOLDER, "chunk.mlir")) as f:
        text = f.read()
    wrong = tmp_path / "chunk.mlir"
    wrong.write_text(text.replace("chunks = 4 : i64, dims = array<i64: 0, 1>", "chunks = 5 : i64, dims = "
                                                                                 "array<i64: 0, 1>"))
    failures = run(str(wrong))
    assert len(failures) == 1 and "chunks = 5" in failures[0]
    broken = tmp_path / "broken.mlir"
    broken.write_text("// RUN: astra-compile %s --topology 'Ring(4)' | filecheck %s\n// CHECK: total time\nmodule {\n")
    assert len(run(str(broken))) == 1
