"""The one configuration object (compiler/core/job.py): frozen, replaced group by group, the same Job from the command
line and from api.compile's keywords, the only configuration past the command line (no module past it reads an
argparse Namespace), and the workload report a frozen dataclass whose --json is what it was."""
import ast
import dataclasses
import json
import os

import pytest

import astra_compile
from astra_compile.compiler.api import api
from astra_compile.compiler.cli import parser
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, WAIT, Op, Workload
from astra_compile.compiler.core.job import (CompileOptions, Job, Network, RunOptions, StepOptions, from_options)
from astra_compile.compiler.sweep import point
from astra_compile.network.errors import UserError

from helpers import cli as run_cli

COMPILER = os.path.join(os.path.dirname(astra_compile.__file__), "compiler")


def step() -> Workload:
    """One SPMD program on Ring(4): compute, an all-reduce of every rank, a wait."""
    ops = [Op("aten.mm.default", COMPUTE, flops=2 ** 30, bytes=2 ** 20, phase="forward"),
           Op("c10d.allreduce_", COLLECTIVE, [0], bytes=2 ** 22, collective="all_reduce", group=(0, 1, 2, 3),
              group_name="dp", phase="backward"),
           Op("wait", WAIT, [1])]
    return Workload(4, {0: ops}, source="spmd", spmd=True)


def test_a_job_is_frozen_and_replaced_group_by_group():
    job = Job()
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.run = RunOptions(backend="congestion")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.run.backend = "congestion"
    changed = job.replace("run", backend="congestion", intra="fifo")
    assert (changed.run.backend, changed.run.intra) == ("congestion", "fifo")
    assert (job.run.backend, job.run.intra) == ("analytical", "scf")    # the original is untouched
    assert changed.compile == job.compile and changed.step == job.step
    assert job.replace(None, inputs=("a.py",)).inputs == ("a.py",)


def test_command_line_text_is_read_into_the_jobs_form_where_it_reads():
    job = Job().with_options({"chunks": "8", "active_chunks": "4", "max_memory": "8GB", "ports": "2",
                              "step_semantics": None, "local_mem_bw": 50.0, "mem_bw": 1000.0})
    assert (job.compile.chunks, job.run.active_chunks, job.run.max_memory, job.compile.ports) == (8, 4, 8 << 30, 2)
    assert (job.step.semantics, job.run.local_mem_gbps, job.step.mem_bw_gbps) == ("streams", 50.0, 1000.0)
    assert job.option("mem_bw") == 1000.0 and job.option("local_mem_bw") == 50.0
    # text that does not read stays as typed: the stage that reads it refuses it with the command's line
    bad = Job().with_options({"chunks": "08", "max_memory": "lots", "active_chunks": "x"})
    assert (bad.compile.chunks, bad.run.max_memory, bad.run.active_chunks) == ("08", "lots", "x")


def test_every_command_line_option_has_its_place_in_the_job():
    values, _, _ = parser.parse(["--collective", "all_reduce"])
    placed = set(from_options(values).__dataclass_fields__)
    assert placed == {"inputs", "system", "collective", "network", "compile", "run", "step", "outputs"}
    from astra_compile.compiler.core.job import OPTIONS
    assert set(values) - set(OPTIONS) == {"version"}   # --version prints and exits: no run has it


STEP_ARGV = ["model.py", "--topology", "Ring(4)", "--chunks", "4", "--algorithm", "ring", "--scheduler", "themis",
             "--backend", "congestion", "--switching", "store-and-forward", "--intra", "fifo",
             "--peak-tflops", "300", "--mem-bw", "1000", "--mesh", "dp=4", "--max-memory", "8GB",
             "--local-mem-bw", "50", "--mem-latency", "10", "--step-semantics", "astra-sim", "--iteration", "1",
             "--capture-limit", "60", "--bandwidth", "100", "--latency", "200", "--endpoint-delay", "5"]
STEP_KWARGS = dict(chunks=4, algorithm="ring", scheduler="themis", backend="congestion",
                   switching="store-and-forward", intra="fifo", peak_tflops=300.0, mem_bw_gbps=1000.0,
                   mesh="dp=4", max_memory=8 << 30, local_mem_gbps=50.0, mem_latency_ns=10.0,
                   step_semantics="astra-sim", iteration=1, capture_limit=60.0, bandwidth="100", latency="200",
                   endpoint_delay="5")


def test_the_command_line_and_the_api_keywords_give_the_same_job():
    values, _, _ = parser.parse(STEP_ARGV)
    from_cli = from_options(values)
    from_api = api.job_of(None, "Ring(4)", **STEP_KWARGS)
    assert from_cli.inputs == ("model.py",)
    assert dataclasses.replace(from_cli, inputs=()) == from_api
    # and job= with no keyword is that Job itself; a keyword overrides one field of it
    assert api.job_of(from_api) == from_api
    assert api.job_of(from_api, chunks=8) == from_api.replace("compile", chunks=8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunk'"):
        api.job_of(None, chunk=4)


def test_the_command_line_hands_api_compile_that_job(tmp_path, capsys, monkeypatch):
    """A training step on the command line is api.compile(source, job=<the command line's Job>)."""
    model = tmp_path / "model.py"
    model.write_text("")
    seen = []

    def compile_(source, topology=..., *, job=None, use_recorded=True, **overrides):
        seen.append((source, topology, job, use_recorded, overrides))
        raise UserError("stop here")
    monkeypatch.setattr(api, "compile", compile_)
    code, _, err = run_cli(capsys, str(model), *STEP_ARGV[1:])
    assert (code, err) == (2, "astra-compile: error: stop here\n")
    ((source, topology, job, use_recorded, overrides),) = seen
    assert (source, topology, use_recorded, overrides) == (str(model), ..., False, {})
    assert dataclasses.replace(job, inputs=()) == api.job_of(None, "Ring(4)", **STEP_KWARGS)


def test_job_and_keywords_give_the_same_report():
    by_keywords = astra_compile.compile(step(), "Ring(4)", chunks=2, intra="fifo", peak_tflops=100.0)
    job = Job(network=Network("Ring(4)"), compile=CompileOptions(chunks=2), run=RunOptions(intra="fifo"),
              step=StepOptions(peak_tflops=100.0))
    by_job = astra_compile.compile(step(), job=job)
    assert by_job.to_dict() == by_keywords.to_dict()
    assert by_job.peak_tflops == 100.0 and by_job.total_time_us > 0
    # a keyword beside job= wins over the job's field; topology= over the job's network
    assert astra_compile.compile(step(), job=job, peak_tflops=234.0).to_dict() == \
        astra_compile.compile(step(), "Ring(4)", chunks=2, intra="fifo").to_dict()
    assert astra_compile.compile(step(), "Switch(4)", job=job).topology == "Switch(4)"


def test_the_workload_report_is_frozen_and_its_json_keeps_its_keys_in_order(tmp_path):
    report = astra_compile.compile(step(), "Ring(4)", backend="congestion", keep_tables=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.total_time_us = 0.0
    data = report.to_dict()
    assert list(data)[:10] == ["source", "topology", "npus", "mesh", "backend", "scheduler", "peak_tflops",
                               "switching", "mem_bw_gbps", "mem_latency_ns"]
    assert list(data)[-3:] == ["iterations", "collectives", "collective_summary"]
    assert "placement" not in data and "pool" not in data and "endpoint_delay_ns" not in data
    assert report["switching"] == report.switching == "cut-through"
    data["collectives"].clear()   # a copy: the report is not changed through it
    assert report.collectives and report.to_dict()["collectives"] == report.collectives
    assert json.loads(json.dumps(report.to_dict())) == report.to_dict()
    # what the report makes when asked is its methods, each given when it was made
    assert report.timeline()["traceEvents"]
    assert report.step_tables("csv").meta["npus"] == 4
    assert report.writes_chakra and report.chakra(str(tmp_path / "et")) == 4
    plain = astra_compile.compile(step(), "Ring(4)")
    with pytest.raises(UserError, match="keep_tables=True"):
        plain.step_tables("csv")


def test_a_sweep_point_is_read_as_the_command_line_reads_it_without_a_command_line(tmp_path):
    options = {"collective": "all_reduce", "size": "1MB", "topology": "Ring(4)", "chunks": 4,
               "peak-tflops": 300, "verify": True, "intra": "scf"}
    values, given, named = point.options_of(options, str(tmp_path))
    argv = ["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--chunks", "4",
            "--peak-tflops", "300", "--verify", "--intra", "scf"]
    assert (values, given, named) == parser.parse(argv)
    assert from_options(values).compile.chunks == 4
    # the parser's own refusal lines, its type and its choices
    with pytest.raises(UserError, match=r"^argument --backend: invalid choice: 'fast' \(choose from "
                                        r"'analytical', 'congestion'\)$"):
        point.options_of({"backend": "fast"}, str(tmp_path))
    with pytest.raises(UserError, match=r"^argument --peak-tflops: invalid float value: 'x'$"):
        point.options_of({"peak_tflops": "x"}, str(tmp_path))
    # --version prints and exits: it is no option of a point
    with pytest.raises(UserError, match="'version' does not go in a sweep"):
        point.options_of({"version": True}, str(tmp_path))


def _reads_of_args(tree: ast.AST) -> list[int]:
    """Lines where a function reads a parameter named `args` as a namespace: an attribute of it, or getattr,
    setattr or vars on it."""
    lines = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if "args" not in {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
                lines.append(node.lineno)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "setattr", "vars") and node.args and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id == "args":
                lines.append(node.lineno)
    return lines


def test_no_module_past_the_command_line_reads_an_argparse_namespace():
    """The Job is the only configuration past the command line: the modules that build a parser (the command
    lines: astra-compile, its sweep, plan, calibrate and calibrate-compute commands) read what they parsed; no other
    module reads a parameter named args as a namespace, nor imports argparse but to read a value as the parser
    does."""
    found, front_ends = [], []
    for folder, _, names in os.walk(COMPILER):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            where = os.path.relpath(path, COMPILER)
            if any(isinstance(n, ast.FunctionDef) and n.name == "build_parser" for n in tree.body):
                front_ends.append(where)
                continue
            found += [f"{where}:{line}" for line in _reads_of_args(tree)]
    assert sorted(front_ends) == ["cli/calibrate.py", "cli/calibrate_compute.py", "cli/parser.py",
                                  "plan/command.py", "sweep/command.py"], front_ends
    assert not found, found


def test_the_check_finds_a_namespace_read():
    assert _reads_of_args(ast.parse("def f(args):\n    return args.topology\n")) == [2]
    assert _reads_of_args(ast.parse("def f(x, args):\n    setattr(args, 'a', 1)\n")) == [2]
    assert _reads_of_args(ast.parse("def f(job):\n    return job.network.topology\n")) == []
