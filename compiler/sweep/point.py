"""One sweep point: its options read as the command line reads them, into the run's Job, checked like one, and
run in this process.

A point's options are astra-compile's long option names with values: each value is read by the command line's own
parser action (its type and choices: the same refusal lines), and the Job (core/job.from_options) goes through exactly
the command's code path (cli_rules, cli.run_job) with its report collected instead of printed, so a sweep's row is
the `--json` report `astra-compile <options> --json` prints.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

from ..cli import cli, cli_rules, parser
from ..core.job import from_options
from ..frontend import readers
from ...network.errors import AstraError, UserError, show

# options that write files, print other things than the report, or change what the report is
NOT_IN_SWEEPS = {"emit", "output", "npu", "table_format", "table_view", "json", "compare", "timeline", "plot",
                 "print_ir_after_all", "mlir_timing", "list_passes", "force", "help", "version",
                 "cache"}  # the sweep's own --cache applies to every point
FILE_SUFFIXES = (".yml", ".yaml", ".json", ".edges")   # a topology given as a file, found beside the sweep file
PARSER = parser.build_parser()


def _flags() -> dict[str, tuple[str, bool]]:
    """dest -> (its long option, whether it is an on/off switch)."""
    out = {}
    for action in PARSER._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs:
            out[action.dest] = (longs[0], action.nargs == 0)
    return out


FLAGS = _flags()
ACTIONS = {a.dest: a for a in PARSER._actions}


def options_of(options: dict, directory: str) -> tuple[dict, set[str], frozenset[str]]:
    """A point's options as parser.parse gives a command line's (`directory`: the sweep file's, for relative input,
    topology, pool and system files): every option's value (dest -> value), those given (differing from their
    defaults) and those named."""
    typed, inputs = {}, []
    for key, value in options.items():
        dest = str(key).replace("-", "_")
        if dest == "input":
            inputs = [_near(str(v), directory) for v in (value if isinstance(value, list) else [value])]
            continue
        if dest in NOT_IN_SWEEPS:
            raise UserError(f"'{key}' does not go in a sweep (every point reports; see docs/sweeps.md)")
        if dest not in FLAGS:
            raise UserError(f"unknown option '{key}' (keys are astra-compile's long option names, "
                            "or input)")
        switch = FLAGS[dest][1]
        if switch:
            if not isinstance(value, bool):
                raise UserError(f"'{key}' is on or off: give true or false, got {show(value)}")
            if value:
                typed[dest] = ACTIONS[dest].const
            continue
        if isinstance(value, bool):
            raise UserError(f"'{key}' takes a value, got {show(value)}")
        if (dest == "topology" and isinstance(value, str) and value.lower().endswith(FILE_SUFFIXES)) or \
                (dest in ("pool", "system") and isinstance(value, str)):   # files beside the sweep file
            value = _near(value, directory)
        text = ",".join(_text(v) for v in value) if isinstance(value, list) else _text(value)
        try:   # the parser's own reading: its type and choices, its message
            typed[dest] = PARSER._get_values(ACTIONS[dest], [text])
        except argparse.ArgumentError as e:
            raise UserError(str(e)) from None
    if inputs:
        typed["input"] = inputs
    values = {a.dest: PARSER.get_default(a.dest) for a in PARSER._actions if a.dest != "help"}
    values["input"] = []   # as the parser gives a positional list without items
    values.update(typed)
    given = {k for k, v in values.items() if v != PARSER.get_default(k)}
    return values, given, frozenset(typed) | given


def _text(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def _near(path: str, directory: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(directory, path))


def check(options: dict, directory: str, where: str = "") -> str:
    """Refuse what the command line itself would refuse, without running anything; returns the run's kind
    (cli.kind_of: "collective", "training step" or "table directory")."""
    job, given, _ = _job(options, directory, where)
    kind = cli.kind_of(job)
    if kind == "list-passes":
        raise UserError(f"{where}nothing to run: give input or collective")
    try:
        cli_rules.check(kind, job, given)
        _check_values(job)
        _check_complete(kind, job)
    except UserError as e:
        raise UserError(f"{where}{e}") from None
    return kind


def _job(options: dict, directory: str, where: str):
    """(the point's Job, the options given, the options named)."""
    try:
        values, given, named = options_of(options, directory)
    except UserError as e:
        raise UserError(f"{where}{e}") from None
    return from_options(values), given, named


def _check_complete(kind: str, job) -> None:
    """What every point of a kind needs, so that a sweep missing it stops before running, not at every point."""
    # a --cluster gives the topology (core/job.with_cluster, when the point runs)
    if kind == "training step" and not job.network.topology and not job.network.cluster and \
            readers.kind_of(list(job.inputs)) != readers.WORKLOAD_MODULE:
        raise UserError("--topology is required (in base, or as an axis)")
    if kind == "collective" and not job.inputs:
        for option in ("collective", "size", "topology"):
            if not job.option(option) and not (option == "topology" and job.network.cluster):
                raise UserError(f"--{option} is required with a collective (in base, or as an axis)")


def _check_values(job) -> None:
    """The values the command checks before it starts work, checked here for every point before any runs."""
    from ...network.units import parse_size
    for flag, text in (("--size", job.collective.size), ("--max-memory", job.run.max_memory)):
        if isinstance(text, str):   # a --max-memory that reads is in bytes already (job.from_options)
            try:
                nbytes = parse_size(text)
            except UserError as e:
                raise UserError(f"{flag}: {e}") from None
            if flag == "--size":
                from ..driver.driver import check_size
                check_size(nbytes)
    for flag, value in (("--chunks", job.compile.chunks), ("--ports", job.compile.ports),
                        ("--active-chunks", job.run.active_chunks)):
        if value is not None:
            parser.positive_int(value, flag)
    if job.collective.dims:
        parser.int_list(job.collective.dims, "--dims")
    from ...network.units import check_roofline
    check_roofline(job.step.peak_tflops, job.step.mem_bw_gbps)
    parser.capture_limit(job.step.capture_limit)
    net = job.network
    if net.topology:
        from ...network.parse import parse_topology
        parse_topology(net.topology, net.bandwidth, net.latency, net.links, net.endpoint_delay)


def run(options: dict, directory: str, max_memory: int | None = None) -> dict:
    """Run one point: {"status": "ok", "error": "", "report": {...}} or {"status": "error", "error": line}.
    `max_memory` (bytes) applies when the point gives no max-memory of its own."""
    from ...runtime.verifier import VerificationError
    start = time.perf_counter()
    try:
        job, given, named = _job(options, directory, "")
        if max_memory is not None and job.run.max_memory is None:
            job, given = job.replace("run", max_memory=int(max_memory)), given | {"max_memory"}
        sink = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # a model file's warnings would repeat once per point
            cli.run_job(job, given, named, sink)
        out = {"status": "ok", "error": "", "report": sink[0]}
    except VerificationError as e:
        out = {"status": "error", "error": f"verification failed: {e}"}
    except AstraError as e:
        out = {"status": "error", "error": str(e)}
    except Exception as e:  # a defect of the compiler: the point fails, the sweep goes on, the message says so
        out = {"status": "error", "error": f"internal error: {type(e).__name__}: {e}"}
    out["elapsed_s"] = time.perf_counter() - start
    return out
