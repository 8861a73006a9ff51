"""Hostile files given to the readers (network/user_files.py under every one): alias bombs, deep nesting, keys that
are lists, keys given twice, FIFOs and devices that never end. Each is refused in one line naming the file, at a
cost that does not grow with what the file expands to, and never hangs."""
import os
import re
import threading
import time

import pytest

from astra_compile.network import user_files
from astra_compile.network.errors import UserError, one_line, show
from astra_compile.compiler.sweep import spec
from helpers import refused

COLLECTIVE = ["--collective", "all_reduce", "--size", "1MB"]


def bomb(levels: int) -> str:
    """A YAML flow list whose last item expands to 9^levels strings in a few hundred bytes (billion laughs)."""
    names = "abcdefghijk"
    items = ["&a [" + ",".join(['"lol"'] * 9) + "]"]
    items += [f"&{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def finishes(fn, seconds: float):
    """fn()'s result or exception, failing the test if it has not returned within `seconds` (a hang)."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:   # noqa: BLE001 (handed to the test)
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---- bounded quotation of a user's value ----------------------------------------------------------------------------

def test_show_quotes_any_value_in_bounded_work():
    big = ["lol"] * 9
    for _ in range(9):   # 9^10 strings if walked
        big = [big] * 9
    start = time.monotonic()
    for value in (big, 10 ** 5000, -(10 ** 5000), b"x" * 10 ** 6, "a\nb" * 10 ** 6, {"k" * 999: [1, {2: 3}]}):
        text = show(value)
        assert len(text) <= 80 and "\n" not in text
    assert time.monotonic() - start < 1
    assert show(10 ** 5000) == "<integer of about 5001 digits>"
    assert show("x") == "'x'" and show(1.5) == "1.5" and show([1, 2]) == "[1, 2]"


def test_one_line_is_bounded():
    assert len(one_line("x" * 10 ** 7)) == 2000
    assert one_line("a\nb") == "a\\nb"


# ---- alias bombs ----------------------------------------------------------------------------------------------------

def test_an_alias_bomb_in_a_network_file_is_refused_cheaply(capsys, tmp_path):
    # topology's first entry holds all the anchors: quoting it whole would be 4.8 million strings (9^7), 34 MB of repr
    path = tmp_path / "net.yml"
    path.write_text(f"topology: [{bomb(7)}]\nnpus_count: 4\n")
    err = refused(capsys, *COLLECTIVE, "--topology", path, match="alias bomb")
    assert str(path) in err and len(err) < 300


def test_an_alias_bomb_in_a_pool_file_is_refused_cheaply(tmp_path):
    from astra_compile.network import pool_file
    path = tmp_path / "pool.yml"
    path.write_text(f"design: {bomb(7)}\n")
    with pytest.raises(UserError, match="alias bomb") as e:
        pool_file.load(str(path))
    assert str(path) in str(e.value) and len(str(e.value)) < 300


def test_an_alias_bomb_in_a_sweep_file_is_refused_cheaply(tmp_path):
    path = tmp_path / "sweep.yml"
    path.write_text(f"base: {{collective: all_reduce, topology: 4_ring}}\naxes:\n  size: [{bomb(7)}]\n")
    with pytest.raises(UserError, match="alias bomb") as e:
        spec.load(str(path))
    assert str(path) in str(e.value) and len(str(e.value)) < 300


def test_a_billion_laughs_costs_nothing(tmp_path):
    path = tmp_path / "sweep.yml"
    path.write_text(f"axes:\n  size: {bomb(9)}\n")   # 9^9 strings, 3 GB to quote
    start = time.monotonic()
    with pytest.raises(UserError, match="line 2: this value expands to more than 1000000 values"):
        spec.load(str(path))
    assert time.monotonic() - start < 2


def test_aliases_that_stay_small_are_read():
    assert user_files.parse_yaml("a: &x [1, 2]\nb: *x\n", "f.yml") == {"a": [1, 2], "b": [1, 2]}


def test_a_value_that_contains_itself_is_refused():
    with pytest.raises(UserError, match="f.yml line 1: a value that contains itself"):
        user_files.parse_yaml("a: &x [1, *x]\n", "f.yml")


# ---- nesting, keys, values Python cannot build ------------------------------------------------------------------------

@pytest.mark.parametrize("text,match", [
    ("axes: " + "[" * 2000 + "]" * 2000, "nests too deeply"),
    ("axes: " + "[" * 70 + "]" * 70, "line 1: values nest more than 64 levels deep"),
    ("axes:\n  [size]: [1MB]\n", "line 2: a key must be a plain value (a name or a number), got a list"),
    ("axes:\n  {size: 1}: [1MB]\n", "line 2: a key must be a plain value (a name or a number), got a dict"),
    ("axes:\n  size: [1MB]\n  size: [2MB]\n", "line 3: key 'size' is given twice"),
    ("base: {size: 1MB, size: 2MB}\naxes: {chunks: [1]}\n", "line 1: key 'size' is given twice"),
    ("axes:\n  chunks: [" + "1" * 5000 + "]\n", "a value cannot be read"),
    ("axes:\n  when: [2024-13-45]\n", "a value cannot be read (month must be in 1..12)"),
    ("axes:\n  chunks: {from: 0, to: 1.0e+300, step: 1.0e-300}\n", "the range has more than 100000 values"),
    ("axes:\n  size: [1MB]\n\x00\x00", "malformed YAML at line 3: character 0x0 is not allowed"),
])
def test_hostile_sweep_files_are_one_line(tmp_path, text, match):
    path = tmp_path / "sweep.yml"
    path.write_text(text)
    with pytest.raises(UserError, match=re.escape(match)) as e:
        spec.load(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name,text,match", [
    ("deep.yml", "topology: " + "[" * 3000 + "]" * 3000 + "\n", "nests too deeply"),
    ("deep.json", '{"topologies-per-dim": ' + "[" * 100000 + "]" * 100000 + "}", "nests too deeply"),
    ("listkey.yml", "topology: [Ring]\n[npus_count]: [4]\n", "line 2: a key must be a plain value"),
    ("dictkey.yml", "topology: [Ring]\n? {a: 1}\n: 4\n", "line 2: a key must be a plain value"),
    ("nan.json", '{"topologies-per-dim": ["Ring"], "units-count": [4], "link-bandwidth": [NaN]}',
     "NaN is not a JSON number"),
    ("huge.yml", "topology: [Ring]\nnpus_count: [" + "9" * 5000 + "]\n", "a value cannot be read"),
])
def test_hostile_network_files_are_one_line(capsys, tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    err = refused(capsys, *COLLECTIVE, "--topology", path, match=match)
    assert str(path) in err


@pytest.mark.parametrize("text,match", [
    ("[design]: hiermem\n", "line 1: a key must be a plain value"),
    ("nodes: 4\nnodes: 8\n", "line 2: key 'nodes' is given twice"),
    ("design: " + "[" * 3000 + "]" * 3000 + "\n", "nests too deeply"),
])
def test_hostile_pool_files_are_one_line(tmp_path, text, match):
    from astra_compile.network import pool_file
    path = tmp_path / "pool.yml"
    path.write_text(text)
    with pytest.raises(UserError, match=match) as e:
        pool_file.load(str(path))
    assert str(path) in str(e.value)


# ---- files that are not regular files ---------------------------------------------------------------------------------

@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(user_files, "NONREGULAR_WAIT_S", 0.3)


def test_a_fifo_nobody_writes_is_refused_not_waited_on(tmp_path, quick):
    fifo = tmp_path / "sweep.yml"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="is not a regular file and gave no data within 0.3 s"):
        finishes(lambda: spec.load(str(fifo)), 20)


def test_a_fifo_as_an_edge_list_is_refused_not_waited_on(tmp_path, quick):
    fifo = tmp_path / "net.edges"
    os.mkfifo(fifo)
    from astra_compile.network.parse import parse_topology
    with pytest.raises(UserError, match="net.edges is not a regular file"):
        finishes(lambda: parse_topology(str(fifo)), 20)


def test_a_fifo_that_is_written_is_read(tmp_path):
    fifo = tmp_path / "sweep.yml"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "w") as f:
            f.write("base: {collective: all_reduce, topology: 4_ring}\naxes: {size: [1MB, 2MB]}\n")

    threading.Thread(target=writer, daemon=True).start()
    assert len(finishes(lambda: spec.load(str(fifo)), 20).points) == 2


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_that_never_ends_is_refused_at_the_cap(tmp_path, device):
    link = tmp_path / "sweep.yml"
    os.symlink(device, link)
    with pytest.raises(UserError, match="gave more than 16777216 bytes"):
        finishes(lambda: spec.load(str(link)), 20)


def test_an_endless_device_as_a_network_file_is_refused(capsys, tmp_path):
    link = tmp_path / "net.edges"
    os.symlink("/dev/zero", link)
    refused(capsys, *COLLECTIVE, "--topology", link, match="is not a regular file and gave more than")


def test_a_regular_file_past_the_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "sweep.yml"
    with open(path, "wb") as f:
        f.truncate((16 << 20) + 1)   # sparse: nothing to read, only its size
    with pytest.raises(UserError, match=f"{(16 << 20) + 1} bytes; a sweep file is read whole, at most"):
        spec.load(str(path))


def test_dev_null_reads_as_empty(tmp_path):
    assert user_files.read_bytes("/dev/null") == b""


def test_a_gzip_file_reads_as_the_text_it_holds_within_the_limit(tmp_path):
    """torch.profiler writes a trace.json.gz as gzip: it reads as its JSON. A file that inflates past the limit
    (a gzip bomb: 64 MiB of zeros in some 64 KiB) stops one byte past it, and a truncated or damaged one is one
    line."""
    import gzip
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert user_files.read_json(str(path), "a trace") == {"traceEvents": []}
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b"0" * (64 << 20)))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(UserError, match="more than 1048576 bytes once decompressed; a profile is read whole"):
        user_files.read_json(str(bomb), "a trace", "profile ", limit=1 << 20)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(UserError, match="cut.json.gz: a damaged gzip file"):
        user_files.read_json(str(cut), "a trace")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not deflate at all")
    with pytest.raises(UserError, match="bad.json.gz: a damaged gzip file"):
        user_files.read_json(str(bad), "a trace")


# ---- table and step directories ----------------------------------------------------------------------------------------

from astra_compile.compiler.main import main   # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _edit_meta(folder, **changes):
    import json
    path = os.path.join(folder, "meta.json")
    with open(path) as f:
        meta = json.load(f)
    for key, value in changes.items():
        meta[key] = value(meta) if callable(value) else value
    with open(path, "w") as f:
        json.dump(meta, f)
    return meta


@pytest.fixture
def tables(capsys, tmp_path):
    out = tmp_path / "tables"
    assert main([*COLLECTIVE, "--topology", "4_ring", "--emit", "tables", "-o", str(out)]) == 0
    capsys.readouterr()
    return out


def test_a_fifo_in_a_table_directory_is_refused_not_waited_on(capsys, tables):
    os.remove(tables / "npu_1.csv")
    os.mkfifo(tables / "npu_1.csv")
    code = finishes(lambda: main([str(tables)]), 30)
    err = capsys.readouterr().err
    assert code == 2 and "npu_1.csv is not a regular file" in err and err.count("\n") == 1


def test_a_key_given_twice_in_meta_json_is_refused(capsys, tables):
    text = (tables / "meta.json").read_text()
    (tables / "meta.json").write_text(text.replace('"npus": 4,', '"npus": 4, "npus": 4,', 1))
    refused(capsys, tables, match="key 'npus' is given twice")


def _huge(meta):
    meta["topology"]["dims"][0]["size"] = 2 ** 31 - 1
    return meta["topology"]


def test_a_table_directory_of_2_31_npus_is_refused_before_any_allocation(capsys, tables):
    _edit_meta(tables, npus=2 ** 31 - 1, topology=_huge, representative=True, shards=None)
    for extra in ([], ["--backend", "congestion"], ["--execution", "full"]):
        refused(capsys, tables, "--max-memory", "8GB", *extra,
                match=f"would need about 400GB of memory (2147483647 NPUs in {tables})")


@pytest.fixture(scope="module")
def step_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("step") / "step"
    assert main([os.path.join(EXAMPLES, "mlp_dp.py"), "--topology", "4_ring", "--emit", "tables", "-o", str(out)]) == 0
    return out


@pytest.fixture
def step(step_dir, tmp_path):
    import shutil
    copy = tmp_path / "step"
    shutil.copytree(step_dir, copy)
    return copy


def test_a_step_directory_of_2_31_npus_is_refused_before_any_allocation(capsys, step):
    _edit_meta(step, npus=2 ** 31 - 1, topology=_huge)
    _edit_meta(step / "collective_0", npus=2 ** 31 - 1, topology=_huge, representative=True, shards=None)
    for extra in ([], ["--backend", "congestion"]):
        refused(capsys, step, "--max-memory", "8GB", *extra,
                match=f"would need about 400GB of memory (a step of 2147483647 NPUs in {step})")


def test_a_step_group_that_is_not_its_collectives_is_refused(capsys, step):
    def halve(meta):
        meta["programs"][0]["groups"]["dp"] = [0, 1]
        return meta["programs"]
    _edit_meta(step, programs=halve)
    refused(capsys, step, match="group dp lists 2 ranks but collective 0 (all_reduce over dims [0]) runs on groups "
                                "of 4")


# ---- comm modules written by hand -----------------------------------------------------------------------------------

@pytest.fixture
def phases(capsys, tmp_path):
    """A baseline all-reduce on Ring(4) as phases (--emit mlir): line 1 the reduce-scatter, line 2 the all-gather."""
    path = tmp_path / "ar.mlir"
    assert main([*COLLECTIVE, "--topology", "4_ring", "--scheduler", "baseline", "--emit", "mlir", "-o",
                 str(path)]) == 0
    capsys.readouterr()
    return path


def _edit_module(path, edit):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")


@pytest.mark.parametrize("edit,match", [
    # the lowering times group_bytes: a phase whose own bytes disagree would be timed as 1 MB whatever it said
    (lambda ls: [ls[0], ls[1].replace("bytes = 1048576 : i64, chunks", "bytes = 4 : i64, chunks"), *ls[2:]],
     "phase 0 of 'all_reduce.rs' (dim 0): bytes 4, but its reduce_scatter of 1048576 B (group_bytes) over dims [0] "
     "in 1 chunk(s) gives it 1048576"),
    # an all-reduce missing a half ran as its reduce-scatter alone, exit 0
    (lambda ls: [ls[0], ls[1], *ls[3:]], "the phases part_of 'all_reduce' are all_reduce.rs (reduce_scatter): an "
                                         "all-reduce's halves are a reduce_scatter then an all_gather"),
    (lambda ls: [ls[0], ls[1], ls[2].replace('kind = "all_gather"', 'kind = "reduce_scatter"'), *ls[3:]],
     "are all_reduce.rs (reduce_scatter), all_reduce.ag (reduce_scatter)"),
    (lambda ls: [ls[0], ls[1].replace('part_of = "all_reduce"', 'part_of = "other"'), *ls[2:]],
     "the phases part_of 'other' are all_reduce.rs (reduce_scatter)"),
    (lambda ls: [ls[0], ls[1], ls[2].replace("group_bytes = 1048576", "group_bytes = 2097152"), *ls[3:]],
     "the halves of all-reduce 'all_reduce' disagree on group_bytes or chunks"),
])
def test_hand_written_phases_that_contradict_their_collective_are_refused(capsys, phases, edit, match):
    _edit_module(phases, edit)
    refused(capsys, phases, "--scheduler", "baseline", match=match)


def test_emitted_phases_compile_again_to_the_same_time(capsys, phases):
    for scheduler in ("baseline", "themis", "optimal"):
        assert main([str(phases), "--scheduler", scheduler, "--json"]) == 0
        import json
        assert json.loads(capsys.readouterr().out)["total_time_us"] == pytest.approx(32.296875)


def test_a_size_split_to_nothing_says_so(capsys):
    refused(capsys, "--collective", "all_reduce", "--size", "1", "--topology", "8x8x8_torus",
            match="all_reduce.rs: 1 bytes are too small for a reduce_scatter over dims 0,1,2 of Ring(8)_Ring(8)_Ring(8)")


# ---- numbers that would make a figure non-finite -----------------------------------------------------------------------

@pytest.mark.parametrize("flag,value,match", [
    ("--peak-tflops", "1e-310", "--peak-tflops must be a number of TFLOPS between 0.001 and 1e+09, got 1e-310"),
    ("--peak-tflops", "1e308", "--peak-tflops must be a number of TFLOPS between 0.001 and 1e+09, got 1e+308"),
    ("--mem-bw", "1e-310", "--mem-bw must be a number of GB/s between 0.001 and 1e+09, got 1e-310"),
    ("--mem-bw", "1e300", "--mem-bw must be a number of GB/s between 0.001 and 1e+09, got 1e+300"),
])
def test_a_roofline_outside_its_range_is_refused(capsys, flag, value, match):
    # --peak-tflops 1e-310 printed "total_time_us": Infinity with exit 0
    refused(capsys, os.path.join(EXAMPLES, "mlp_dp.py"), "--topology", "4_ring", flag, value, match=match)


def test_the_roofline_range_takes_its_ends(capsys, step_dir):
    import json
    for flag, value in (("--peak-tflops", "0.001"), ("--peak-tflops", "1e9"), ("--mem-bw", "0.001"),
                        ("--mem-bw", "1e9")):
        assert main([str(step_dir), flag, value, "--json"]) == 0
        assert 0 < json.loads(capsys.readouterr().out)["total_time_us"] < 1e30


def test_a_measured_time_past_its_range_in_a_step_table_is_refused(capsys, step):
    # three compute rows of 1e308 ns summed to Infinity, exit 0
    lines = (step / "program_0.csv").read_text().splitlines()
    head = lines[0].split(",")
    for i in (1, 2, 3):
        cells = lines[i].split(",")
        cells[head.index("measured_ns")] = "1e308"
        lines[i] = ",".join(cells)
    (step / "program_0.csv").write_text("\n".join(lines) + "\n")
    refused(capsys, step, match="row 0: measured_ns: '1e308' is not empty or a time in ns from 0 to 1e+18")


def test_no_report_prints_a_figure_that_is_not_finite():
    from astra_compile.compiler.cli import cli
    with pytest.raises(UserError, match=r"the run's collectives\[1\].us came out as inf"):
        cli._check_finite({"total_time_us": 1.0, "collectives": [{"us": 2.0}, {"us": float("inf")}]})
    cli._check_finite({"total_time_us": 1.0, "name": "x", "n": 3, "none": None})


def test_a_network_file_of_more_npus_than_32_bits_names_the_file(capsys, tmp_path):
    # the refusal of the count names the file it came from
    path = tmp_path / "net.json"
    path.write_text('{"topologies-per-dim": ["Ring", "Ring", "Ring"], "units-count": [65536, 65536, 65536]}')
    refused(capsys, *COLLECTIVE, "--topology", path,
            match=f"topology file '{path}': a topology of 281474976710656 NPUs")


def test_a_sweep_size_past_the_largest_collective_is_refused_before_any_point(capsys, tmp_path):
    # each point past 1 TB failed on its own after the others had run (exit 1)
    path = tmp_path / "sweep.yml"
    path.write_text("base: {collective: all_reduce, topology: 4_ring}\naxes: {size: [1MB, 100TB]}\n")
    refused(capsys, "sweep", path, "-o", tmp_path / "out.csv",
            match="point 1 (size=100TB): collective size 100TB exceeds the largest collective")
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("source", ["ir/step_two_ranks.mlir", "../examples/all_reduce_3d_switch.mlir"])
def test_an_attribute_the_bindings_cannot_read_is_one_line(capsys, tmp_path, source):
    # MLIR parses array<i0: 0>; the Python bindings raised TypeError wherever it was first read (found by the fuzz)
    text = open(os.path.join(os.path.dirname(__file__), source), encoding="utf-8").read()
    path = tmp_path / "m.mlir"
    path.write_text(re.sub(r"array<i64: 0[0-9, ]*>", "array<i0: 0>", text, count=1))
    assert "array<i0: 0>" in path.read_text()
    err = refused(capsys, path, match=f"{path}: ")
    assert "is of a kind astra-compile cannot read" in err   # in a mapping (wl.groups) it aborted the process
