"""One sweep point: its options as a command line, checked like one, and run in this process.

A point goes through exactly the command's code path (parser.parse, cli_rules, cli.run_parsed) with its report
collected instead of printed, so a sweep's row is the `--json` report `astra-compile <options> --json` prints.
"""
from __future__ import annotations

import os
import time
import warnings

from ..cli import cli, cli_rules, parser
from ..frontend import readers
from ...network.errors import AstraError, UserError, show

# options that write files, print other things than the report, or change what the report is
NOT_IN_SWEEPS = {"emit", "output", "npu", "table_format", "table_view", "json", "compare", "timeline", "plot",
                 "print_ir_after_all", "mlir_timing", "list_passes", "force", "help",
                 "cache"}  # the sweep's own --cache applies to every point
FILE_SUFFIXES = (".yml", ".yaml", ".json", ".edges")   # a topology given as a file, found beside the sweep file


def _flags() -> dict[str, tuple[str, bool]]:
    """dest -> (its long option, whether it is an on/off switch)."""
    out = {}
    for action in parser.build_parser()._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs:
            out[action.dest] = (longs[0], action.nargs == 0)
    return out


FLAGS = _flags()


def argv(options: dict, directory: str) -> list[str]:
    """The command line of a point (`directory`: the sweep file's, for relative input, topology, pool and system
    files)."""
    out, inputs = [], []
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
        flag, switch = FLAGS[dest]
        if switch:
            if not isinstance(value, bool):
                raise UserError(f"'{key}' is on or off: give true or false, got {show(value)}")
            out += [flag] if value else []
            continue
        if isinstance(value, bool):
            raise UserError(f"'{key}' takes a value, got {show(value)}")
        if (dest == "topology" and isinstance(value, str) and value.lower().endswith(FILE_SUFFIXES)) or \
                (dest in ("pool", "system") and isinstance(value, str)):   # files beside the sweep file
            value = _near(value, directory)
        text = ",".join(_text(v) for v in value) if isinstance(value, list) else _text(value)
        out.append(f"{flag}={text}")
    return out + (["--"] + inputs if inputs else [])


def _text(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def _near(path: str, directory: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(directory, path))


def check(options: dict, directory: str, where: str = "") -> str:
    """Refuse what the command line itself would refuse, without running anything; returns the run's kind
    (cli._kind: "collective", "training step" or "table directory")."""
    args, given = _parse(options, directory, where)
    kind = cli._kind(args)
    if kind == "list-passes":
        raise UserError(f"{where}nothing to run: give input or collective")
    try:
        cli_rules.check(kind, args, given)
        _check_values(args)
        _check_complete(kind, args)
    except UserError as e:
        raise UserError(f"{where}{e}") from None
    return kind


def _parse(options: dict, directory: str, where: str):
    try:
        return parser.parse(argv(options, directory), raising=True)
    except UserError as e:
        raise UserError(f"{where}{e}") from None


def _check_complete(kind: str, args) -> None:
    """What every point of a kind needs, so that a sweep missing it stops before running, not at every point."""
    if kind == "training step" and not args.topology and readers.kind_of(args.input) != readers.WORKLOAD_MODULE:
        raise UserError("--topology is required (in base, or as an axis)")
    if kind == "collective" and not args.input:
        for option in ("collective", "size", "topology"):
            if not getattr(args, option):
                raise UserError(f"--{option} is required with a collective (in base, or as an axis)")


def _check_values(args) -> None:
    """The values the command checks before it starts work, checked here for every point before any runs."""
    from ...network.units import parse_size
    for flag, text in (("--size", args.size), ("--max-memory", args.max_memory)):
        if text is not None:
            try:
                nbytes = parse_size(text)
            except UserError as e:
                raise UserError(f"{flag}: {e}") from None
            if flag == "--size":
                from ..driver.driver import check_size
                check_size(nbytes)
    for flag, text in (("--chunks", args.chunks), ("--ports", args.ports), ("--active-chunks", args.active_chunks)):
        if text is not None:
            parser.positive_int(text, flag)
    if args.dims:
        parser.int_list(args.dims, "--dims")
    from ...network.units import check_roofline
    check_roofline(args.peak_tflops, args.mem_bw)
    parser.capture_limit(args.capture_limit)
    if args.topology:
        from ...network.parse import parse_topology
        parse_topology(args.topology, args.bandwidth, args.latency, args.links, args.endpoint_delay)


def run(options: dict, directory: str, max_memory: int | None = None) -> dict:
    """Run one point: {"status": "ok", "error": "", "report": {...}} or {"status": "error", "error": line}.
    `max_memory` (bytes) applies when the point gives no max-memory of its own."""
    from ...runtime.verifier import VerificationError
    start = time.perf_counter()
    try:
        args, given = _parse(options, directory, "")
        if max_memory is not None and args.max_memory is None:
            args.max_memory, given = f"{int(max_memory)}B", given | {"max_memory"}
        args.report_sink = sink = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # a model file's warnings would repeat once per point
            cli.run_parsed(args, given)
        out = {"status": "ok", "error": "", "report": sink[0]}
    except VerificationError as e:
        out = {"status": "error", "error": f"verification failed: {e}"}
    except AstraError as e:
        out = {"status": "error", "error": str(e)}
    except Exception as e:  # a defect of the compiler: the point fails, the sweep goes on, the message says so
        out = {"status": "error", "error": f"internal error: {type(e).__name__}: {e}"}
    out["elapsed_s"] = time.perf_counter() - start
    return out
