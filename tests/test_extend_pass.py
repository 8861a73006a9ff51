"""Adding a pass is one file (docs/extend-pass.md), and its FileCheck file: a pass written to a temporary folder that
the passes package searches like its own (as a file dropped into passes/ would be found: a pipeline imports the
module named after the pass) runs in `--pass-pipeline` with its option, prints its resolved spec in
`--print-ir-after-all`, writes its decision into the IR and changes the result, is listed by `--list-passes` and in
the unknown-pass error, and its FileCheck file, beside it, passes with the runner of tests/filecheck/. No other file
is touched.

The pass is chunk-by-size: every collective gets one chunk per `chunk-bytes` of its size (rounded up), so a large
collective pipelines through its phases in many chunks while a small one stays whole; the chunk pass gives every
collective the same count.

The CLI runs in child processes: the registry keeps every pass it has imported, so the test pass must not outlive
this test."""
import json
import shlex
import subprocess
import sys
import textwrap

import pytest

from test_filecheck import run as filecheck

CHUNK_BY_SIZE = '''
"""chunk-by-size: chunk every collective by its size, one chunk per `chunk-bytes` rounded up (a collective that
already has a chunk count keeps it), so a large collective pipelines through its phases and a small one stays
whole. It runs where chunk does: before the decompositions copy each collective's count to its phases."""
from __future__ import annotations

from dataclasses import dataclass

from ..dialects import comm
from .base import Pass, option, positive_int, register


@register
@dataclass(frozen=True)
class ChunkBySize(Pass):
    name = "chunk-by-size"
    summary = "chunk every collective by its size: one chunk per chunk-bytes, rounded up"
    before = ("hierarchical-decompose", "flat-decompose")
    chunk_bytes: int | None = option(positive_int, 1 << 20, "bytes per chunk")

    def apply(self, module, ctx) -> None:
        size = self.value("chunk_bytes")
        for op in comm.ops(module):
            v = comm.view(op)
            if v.opname in comm.COLLECTIVES and v.chunks is None:
                v.set(chunks=-(-v.bytes // size))
'''

# its FileCheck file, named after the pass as its file in tests/filecheck/ would be
FILECHECK = '''
// chunk-by-size: every collective without a chunk count gets one chunk per chunk-bytes of its size, rounded up:
// 1 MiB in 256 KiB chunks is 4, 64 KiB is 1; 1 MiB at the default 1 MiB is 1. The phases copy their collective's.
// RUN: astra-compile %s --topology "Ring(4)_Switch(2)" --pass-pipeline "decompose-all-reduce,chunk-by-size{chunk-bytes=262144},hierarchical-decompose,select-algorithm" --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// RUN: astra-compile %s --topology "Ring(4)_Switch(2)" --pass-pipeline "decompose-all-reduce,chunk-by-size,hierarchical-decompose,select-algorithm" --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=DEFAULT
// RUN: not astra-compile %s --topology "Ring(4)_Switch(2)" --pass-pipeline "decompose-all-reduce,chunk-by-size{chunk-bytes=0},hierarchical-decompose,select-algorithm" 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not astra-compile %s --topology "Ring(4)_Switch(2)" --pass-pipeline "decompose-all-reduce,hierarchical-decompose,chunk-by-size,select-algorithm" 2>&1 | filecheck %s --check-prefix=ORDER

module {
  %0 = "comm.all_reduce"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "big"} : () -> !comm.token
  %1 = "comm.all_gather"(%0) {bytes = 65536 : i64, dims = array<i64: 0>, name = "small"} : (!comm.token) -> !comm.token
}

// CHECK-LABEL: IR Dump After decompose-all-reduce
// CHECK-NOT:   chunks =
// CHECK-LABEL: IR Dump After chunk-by-size: chunk-by-size{chunk-bytes=262144}
// CHECK:       %[[RS:.+]] = "comm.reduce_scatter"() {bytes = 1048576 : i64, chunks = 4 : i64, {{.*}}name = "big.rs"
// CHECK-NEXT:  %[[AG:.+]] = "comm.all_gather"(%[[RS]]) {bytes = 1048576 : i64, chunks = 4 : i64, {{.*}}name = "big.ag"
// CHECK-NEXT:  "comm.all_gather"(%[[AG]]) {bytes = 65536 : i64, chunks = 1 : i64, dims = array<i64: 0>, name = "small"}
// CHECK-LABEL: IR Dump After hierarchical-decompose
// CHECK-COUNT-4: "comm.phase"({{.*}}) {bytes = {{[0-9]+}} : i64, chunks = 4 : i64, collective = "big
// CHECK:       "comm.phase"({{.*}}) {bytes = 65536 : i64, chunks = 1 : i64, collective = "small"

// the option unset: its default, resolved in the header
// DEFAULT-LABEL: IR Dump After chunk-by-size: chunk-by-size{chunk-bytes=1048576}
// DEFAULT:       chunks = 1 : i64, {{.*}}name = "big.rs"

// BAD: astra-compile: error: {{.*}}chunk-by-size.mlir: pass 'chunk-by-size': bad value '0' for option 'chunk-bytes' (must be a positive integer)
// ORDER: astra-compile: error: {{.*}}chunk-by-size.mlir: pipeline order: chunk-by-size must come before hierarchical-decompose
'''

# the CLI with the folder searched as passes/ itself: its files register by discovery
CLI = '''
import sys
import astra_compile.passes as passes
passes.__path__.append(sys.argv.pop(1))
from astra_compile.compiler.main import main
sys.exit(main(sys.argv[1:]))
'''

MIB = 2 ** 20
B = 50 * 2 ** 30 / 1e9   # the default 50 GB/s in bytes per ns
L = 500                  # the default latency per link, ns
AR = ["--collective", "all_reduce", "--size", "64MiB", "--topology", "Ring(4)_Switch(2)", "--json", "--pass-pipeline"]


def pipeline(chunking: str) -> str:
    return f"decompose-all-reduce,{chunking},hierarchical-decompose,select-algorithm"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    base = tmp_path_factory.mktemp("extend_pass")
    folder = base / "passes"   # every module here is a pass (all_passes imports them all): the CLI lives beside it
    folder.mkdir()
    (folder / "chunk_by_size.py").write_text(textwrap.dedent(CHUNK_BY_SIZE))
    (folder / "chunk-by-size.mlir").write_text(FILECHECK.lstrip())
    (base / "cli.py").write_text(CLI)
    return folder


def command(folder) -> list[str]:
    return [sys.executable, str(folder.parent / "cli.py"), str(folder)]


def cli(folder, *argv) -> tuple[int, str, str]:
    done = subprocess.run(command(folder) + list(argv), capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def report(folder, *argv) -> dict:
    code, out, err = cli(folder, *argv)
    assert code == 0, err
    return json.loads(out)


def test_its_filecheck_file_passes(folder):
    runner = " ".join(['"$PYTHON"'] + [shlex.quote(a) for a in command(folder)[1:]])
    failures = filecheck(str(folder / "chunk-by-size.mlir"), runner)
    assert not failures, "\n\n".join(failures)


def test_its_decision_is_in_the_result(folder):
    """64 MiB all-reduce on Ring(4)_Switch(2): chunk-by-size{chunk-bytes=16777216} makes it 4 chunks, the schedule
    chunk{chunks=4} gives, and not the one of a single chunk: 2 (3 (L + 16 MiB / B) + 2L + 8 MiB / B), the ring's
    3 steps of a quarter (halves both ways at B/2) and the switch's one step of half of that, up and down."""
    code, out, timing = cli(folder, *AR, pipeline("chunk-by-size{chunk-bytes=16777216}"), "--mlir-timing")
    assert code == 0, timing
    by_size = json.loads(out)
    assert any(line.split()[-1:] == ["chunk-by-size"] for line in timing.splitlines())   # MLIR's timing names it
    assert [c["chunks"] for c in by_size["collectives"]] == [4, 4]   # the reduce-scatter and the all-gather
    assert "chunk-by-size{chunk-bytes=16777216}" in by_size["pass_pipeline"]
    assert by_size["total_time_us"] == report(folder, *AR, pipeline("chunk{chunks=4}"))["total_time_us"]
    whole = report(folder, *AR, pipeline("chunk"))
    assert whole["total_time_us"] == pytest.approx(2 * (3 * (L + 16 * MIB / B) + 2 * L + 8 * MIB / B) / 1e3,
                                                   rel=1e-12)
    assert by_size["total_time_us"] < 0.9 * whole["total_time_us"]   # the chunks pipeline over the two dimensions


def test_it_is_listed_with_the_others(folder):
    code, out, _ = cli(folder, "--list-passes")
    assert code == 0
    assert "chunk-by-size            chunk every collective by its size: one chunk per chunk-bytes, rounded up  " \
           "[chunk-bytes=<bytes per chunk>]" in out.splitlines()
    code, _, err = cli(folder, *AR, "nonesuch")
    assert code == 2 and err.count("\n") == 1
    assert "unknown pass 'nonesuch'" in err and "chunk-by-size" in err and "select-algorithm" in err
