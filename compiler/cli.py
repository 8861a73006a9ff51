"""astra-compile command line. Bad input ends with one `astra-compile: error: ...` line and exit status 2."""
from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import json
import math
import os
import signal
import stat
import sys
import threading
import warnings

from . import interrupt
from ..runtime import atomic
from ..network.errors import InputWarning, UserError, one_line

VERIFIED = "verified: every NPU's buffer matches the collective's definition"
EPILOG = """examples:
  astra-compile --collective all_reduce --size 1GB --topology "Switch(8)_Switch(8)_Switch(8)" \\
      --bandwidth 50,50,50 --latency 1,1,1 --algorithm halving_doubling --chunks 64
  astra-compile --collective all_reduce --size 1GB --topology 4x4x4_torus --emit mlir --print-ir-after-all
  astra-compile examples/all_reduce_3d_switch.mlir --emit tables --npu 0
  astra-compile --collective all_to_all --size 64MB --topology "Ring(4)_FC(2)_Switch(8)" --emit tables -o out/
  astra-compile out/            (execute tables written earlier)
  astra-compile examples/gpt_tp_dp.py --topology 8x8_torus          (a PyTorch training step)
  astra-compile trace_rank*.json --topology "Switch(4)" --json       (PyTorch execution traces)
  astra-compile sweep sweep.yml -o results.csv      (many runs from one file: docs/sweeps.md)
  astra-compile calibrate LOG... --topology T       (bandwidth and latency fitted to nccl-tests logs:
                                                    docs/calibrate.md)

sizes: B, KB/MB/GB (powers of 2, as ASTRA-sim), KiB/MiB/GiB; bandwidth in GB/s (2^30 B/s); latency in ns."""


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line naming the option and what it accepts, not the whole usage block."""

    raising = False  # a sweep point's options (sweep/point.py) raise UserError instead of ending the process

    def error(self, message: str):
        hint = " (astra-compile --help lists them)" if message.startswith("unrecognized arguments") else ""
        if self.raising:
            raise UserError(message + hint)
        sys.exit(_fail(message + hint))


def build_parser() -> _Parser:
    from ..passes import ALL_REDUCE_SPLITS   # here, not at the top: a Ctrl-C while it loads finds main's handler
    p = _Parser(prog="astra-compile", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Compile collectives to per-accelerator schedule tables and time them.")
    p.add_argument("input", nargs="*",
                   help="a model .py file, PyTorch execution-trace .json files (one per rank), a .mlir comm module, "
                        "or a directory of tables written with -o")
    g = p.add_argument_group("workload")
    g.add_argument("--collective", choices=("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                                            "reduce"),
                   help="one collective over the whole topology (or --dims)")
    g.add_argument("--size", help="collective size (full buffer, as nccl-tests count it), e.g. 1GB")
    g.add_argument("--dims", help="topology dimensions of the collective's groups, e.g. 0,1 (default: all)")
    g.add_argument("--root", help="a broadcast's or reduce's root NPU (default 0); every group sends from (reduces "
                                  "to) its member at the root's coordinates on --dims")
    g = p.add_argument_group("training step (model .py files and execution traces)")
    g.add_argument("--mesh", help="device mesh of a model file, outermost axis first, e.g. dp=8,tp=8 (the last axis "
                                  "takes topology dimension 0); axes dp, fsdp and tp apply DDP, FSDP2 and the "
                                  "file's TP_PLAN; default: the file's mesh_axes(), else dp over every NPU")
    g.add_argument("--capture-limit", type=float, default=600.0, metavar="SECONDS",
                   help="CPU seconds a model file may take to load and capture (default 600); a model that takes "
                        "longer ends with an error, not a hang")
    g.add_argument("--cache", metavar="DIR",
                   help="keep the captured step (by the file's content, world size and mesh) and each compiled "
                        "collective in DIR, and reuse them on later runs: a second run of the same model skips "
                        "capture (docs/workloads.md)")
    g.add_argument("--iteration", type=int, metavar="N",
                   help="an execution trace of several training iterations: time iteration N alone (the report "
                        "otherwise times them all and lists each)")
    g.add_argument("--step-semantics", choices=("streams", "astra-sim"),
                   help="how a step runs: streams (default: a stream per process group, a message meets its receive) "
                        "or astra-sim (ASTRA-sim's: one collective or send in flight per NPU, eager sends, its view of "
                        "messages and sub-world groups; a --system file selects it; docs/astra-sim.md)")
    g.add_argument("--peak-tflops", type=float, default=234.0,
                   help="compute roofline: peak TFLOPS per NPU (default 234, seed 002's A100 figure)")
    g.add_argument("--mem-bw", type=float, default=1896.0,
                   help="compute roofline: memory bandwidth per NPU in GB/s of 2^30 B (default 1896 = A100-80GB's "
                        "2039 decimal GB/s)")
    g.add_argument("--mem-latency", type=float, default=0.0, metavar="NS",
                   help="local memory access latency in ns (default 0): a local load or store of S bytes takes it "
                        "plus S / --mem-bw (docs/memory.md)")
    g.add_argument("--pool", metavar="POOL.yaml",
                   help="the remote memory pool remote loads and stores use: seed 002's HierMem or ZeRO-Infinity "
                        "(docs/memory.md)")
    g.add_argument("--offload", metavar="STATES",
                   help="keep these training states in the remote pool and move them as the step needs them "
                        "(ZeRO-Infinity style): params, grads, optimizer, comma-separated; needs --pool")
    g.add_argument("--in-switch", action="store_true",
                   help="with offloaded states (--offload, or the model file's OFFLOAD) on a hiermem pool: the pool's "
                        "switches all-gather parameters while they are loaded and reduce-scatter gradients while "
                        "they are stored (seed 002's in-switch collectives), in place of those collectives")
    g = p.add_argument_group("network")
    g.add_argument("--topology", help='e.g. "Ring(4)_FC(2)_Switch(8)", 8x8_torus, 64_switch, an ASTRA-sim .yml/.json, '
                                         'or a graph: 4x8_bigraph, dgx1, 2_dgx1, a .edges file')
    g.add_argument("--bandwidth", help="GB/s per dimension, e.g. 50,50,50 (one value: every dimension)")
    g.add_argument("--latency", help="ns per hop per dimension, e.g. 500,500,500")
    g.add_argument("--links", help="links-count per dimension (multiplies bandwidth)")
    g.add_argument("--endpoint-delay", help="ns every message spends at its endpoints besides the links' latency, "
                                            "once per message (ASTRA-sim's endpoint-delay; default 0)")
    g = p.add_argument_group("compilation")
    g.add_argument("--algorithm", help="per dimension: ring, direct, halving_doubling, double_binary_tree, "
                                       "tree_reduce_broadcast (one, or one per dimension, comma-separated; "
                                       "default: the building block's own); "
                                       "over the whole network: multitree, multitree_optimal (<= 16 NPUs), "
                                       "flat_ring (Hamiltonian cycle); routed over ranks: rank_ring, flat_direct, "
                                       "flat_halving_doubling, flat_double_binary_tree; hdrm (all-reduce on a "
                                       "BiGraph: halving-doubling with EFLOPS's rank mapping)")
    g.add_argument("--system", metavar="SYS.json",
                   help="an ASTRA-sim system configuration: scheduling, chunks, implementations, peak-perf mapped to "
                        "these options (options given here win); keys not modelled are named (docs/astra-sim.md)")
    g.add_argument("--chunks", help="chunks per collective (ASTRA-sim preferred-dataset-splits; default 1)")
    g.add_argument("--all-reduce", choices=ALL_REDUCE_SPLITS,
                   help="an all-reduce over several dimensions: hierarchical (default: reduce-scatter up the "
                        "dimensions, all-gather back; ASTRA-sim's localBWAware) or per-dimension (a whole "
                        "all-reduce on each dimension in turn on the full buffer; ASTRA-sim's baseline)")
    g.add_argument("--ports", help="multitree: new tree edges an NPU may start per step (injection ports; default: "
                                   "one per link)")
    g.add_argument("--pass-pipeline", help="passes to run, e.g. 'decompose-all-reduce,chunk{chunks=8},"
                                           "hierarchical-decompose,select-algorithm'")
    g.add_argument("--print-ir-after-all", action="store_true",
                   help="print the module after every pass (stderr, from MLIR's pass manager)")
    g.add_argument("--mlir-timing", action="store_true", help="print MLIR's pass timing report (stderr)")
    g.add_argument("--list-passes", action="store_true", help="list the registered passes and exit")
    g = p.add_argument_group("output")
    g.add_argument("--emit", choices=("report", "mlir", "tables", "msccl-xml", "chakra"), default="report",
                   help="msccl-xml: an all-reduce, reduce-scatter, all-gather or all-to-all schedule as an MSCCL "
                        "algorithm file (docs/msccl.md); chakra: the "
                        "step (or collective) as Chakra execution traces, one per rank, into -o DIR")
    g.add_argument("--npu", help="with --emit tables: print this accelerator's table")
    g.add_argument("-o", "--output", help="with --emit tables: directory for every table; with --emit mlir or "
                                          "msccl-xml: file")
    g.add_argument("--table-format", choices=("csv", "json"), default="csv")
    g.add_argument("--table-view", choices=("rows", "trees"), default="rows",
                   help="with --emit tables --npu: every row, or (multitree) seed 003's Reduce/Gather commands")
    g.add_argument("--json", action="store_true", help="print the report as one JSON object")
    g.add_argument("--scheduler", choices=("baseline", "themis", "optimal"),
                   help="inter-dimension chunk scheduling: baseline (every chunk RS ascending, AG descending), "
                        "themis (per chunk, least-loaded dimension first) or optimal (default: CP-SAT split of the "
                        "chunks over dimension orders, never slower than themis or baseline); a .mlir module that "
                        "records its scheduler keeps its orders unless this is given")
    g.add_argument("--intra", choices=("fifo", "scf"), default="scf",
                   help="intra-dimension queue policy: first-in first-out or smallest chunk first (default)")
    g.add_argument("--compare", action="store_true",
                   help="run every scheduler (baseline with fifo, themis and optimal with scf) side by side")
    g.add_argument("--active-chunks", default="1",
                   help="phases a dimension works on at once (ASTRA-sim active-chunks-per-dimension; default 1); "
                        "themis and optimal weigh step latency by it")
    g.add_argument("--local-mem-bw", type=float, metavar="GB/S",
                   help="ASTRA-sim's local-mem-bw: every received chunk a reduction adds into the buffer costs 3 x "
                        "its bytes / this (decimal GB/s) of local memory time before it moves on (default: off; "
                        "docs/memory.md)")
    g.add_argument("--backend", choices=("analytical", "congestion"), default="analytical",
                   help="cost model: analytical (no contention) or congestion (every link a FIFO resource)")
    g.add_argument("--max-memory", metavar="SIZE",
                   help="refuse a run estimated to need more memory than this, e.g. 8GB (default: this machine's "
                        "available memory; docs/reliability.md)")
    g.add_argument("--switching", choices=("cut-through", "store-and-forward"), default="cut-through",
                   help="congestion backend: how a node forwards a message (store-and-forward: as ASTRA-sim)")
    g.add_argument("--execution", choices=("auto", "symmetric", "full"), default="auto",
                   help="NPU 0 stands for all when the schedule's symmetry allows (symmetric), or every NPU (full)")
    g.add_argument("--timeline", metavar="FILE.json",
                   help="write a Chrome trace (chrome://tracing, Perfetto): for a collective, phases per NPU and "
                        "transfers per link; for a training step, compute and each process group's stream per "
                        "accelerator")
    g.add_argument("--plot", metavar="FILE.png", help="a collective: link utilisation over time; a training step: its "
                                                      "time broken down as seed 002's Fig. 4 (needs matplotlib)")
    g.add_argument("--verify", action="store_true",
                   help="also execute the schedule on symbols (which NPU's piece every byte holds, any size) and check "
                        "the collective's result on every NPU")
    g.add_argument("--version", action=_Version, nargs=0,
                   help="print astra-compile's version and those of the libraries that shape its answers")
    g.add_argument("--force", action="store_true",
                   help="with --emit tables -o DIR: replace DIR when it holds an earlier table directory (a "
                        "directory holding anything else is never replaced)")
    return p


class _Version(argparse.Action):
    """`--version`: this package's version and the pinned libraries' that shape its answers, read from their
    metadata when asked (importing them takes seconds; reading it on every parse would slow each sweep point)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata
        from . import __version__
        libs = []
        for name in ("torch", "torch-mlir", "ortools"):
            try:
                libs.append(f"{name} {metadata.version(name)}")
            except metadata.PackageNotFoundError:
                libs.append(f"{name} not installed")
        sys.stdout.write(f"astra-compile {__version__} ({', '.join(libs)})\n")
        parser.exit(0)


def _join_dashed_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--size -1MB` -> `--size=-1MB`: a value that starts with '-' would otherwise be read as a missing argument,
    and the size's own check names the real problem."""
    takes_value = {o for a in parser._actions for o in a.option_strings if a.nargs is None and a.const is None}
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in takes_value and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] != "--" \
                and argv[i + 1] not in parser._option_string_actions:
            out.append(f"{a}={argv[i + 1]}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def _fail(message: str) -> int:
    sys.stderr.write(f"astra-compile: error: {one_line(message)}\n")
    return 2


def parse(argv: list[str], raising: bool = False) -> tuple[argparse.Namespace, set[str]]:
    """The parsed command line and the options given (those that differ from their defaults). `args.named` holds
    the options typed, at their defaults too: a value recorded in a table directory or module gives way to those
    only (recorded_run.py), so `--intra scf` on tables written with --intra fifo is taken as typed."""
    parser = build_parser()
    parser.raising = raising
    argv = _join_dashed_values(parser, argv)
    args = parser.parse_args(argv)
    given = {k for k, v in vars(args).items() if v != parser.get_default(k)}
    for action in parser._actions:   # parsed again with no defaults: what is left was typed
        action.default = argparse.SUPPRESS
    args.named = frozenset(vars(parser.parse_args(argv))) | given
    return args, given


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv`; its exit status. Without `argv` this is the process's own command (the console
    script, `python -m`), and the process ends with it (`_end`). A Ctrl-C anywhere ends the run with one line and
    status 130, as shells expect."""
    command = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with interrupt.watched():
            code = _main(argv)
    except KeyboardInterrupt:   # the user's (a model file's own is its error: frontend/model_code.py)
        sys.stderr.write("astra-compile: interrupted\n")
        code = 130
    if command:
        _end(code)
    return code


def _end(code: int) -> None:
    """The command is done (its report printed, its outputs written). A Ctrl-C from here on ends the process at
    once, status 130, where Python's handler would print a traceback from the interpreter's teardown (PyTorch's
    and MLIR's destructors take a second). The process ends now, with `code`, after the exit handlers, when a
    thread a model file left running (not a daemon) would keep it alive for ever after the report, or when the run
    was interrupted: Python then kills itself with SIGINT at exit if the KeyboardInterrupt passed through code that
    a library ran with PyRun_* (seen once in a few runs: status -2 after the one-line message)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    stray = any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate())
    if stray or code == 130:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["sweep"]:  # `astra-compile sweep ...`: many runs from one file (sweep/command.py)
        from .sweep.command import main as sweep_main
        return sweep_main(argv[1:])
    if argv[:1] == ["calibrate"]:  # `astra-compile calibrate LOG...`: the network fitted to nccl-tests logs
        from .calibrate import main as calibrate_main
        return calibrate_main(argv[1:])
    args, given = parse(argv)
    # imported here so --help stays instant and argument errors need no MLIR
    from ..dialects.comm import IRError
    from ..passes import PassError
    from ..runtime.atomic import OutputError
    from ..runtime.tables import TableError
    from ..runtime.verifier import VerificationError
    # warnings (a model file's, torch's) are shown after a run that ends; a refused run says its one line only
    with warnings.catch_warnings(record=True) as caught:
        try:
            code = run_parsed(args, given)
        except (UserError, IRError, PassError, TableError, OutputError) as e:
            return _fail(str(e))
        except VerificationError as e:  # a wrong schedule is the compiler's fault, not the input's
            sys.stderr.write(f"astra-compile: verification failed: {e}\n")
            return 1
        except BrokenPipeError:
            return 0
    for w in caught:
        if issubclass(w.category, InputWarning):
            sys.stderr.write(f"astra-compile: warning: {one_line(str(w.message))}\n")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return code


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{what} must be comma-separated integers, got '{text}'") from None
    for v in values:
        if not 0 <= v < 2**31:
            raise UserError(f"{what}: {v} is not a dimension (0, 1, ...)")
    return values


def _positive_int(text: str, what: str) -> int:
    """A count given on the command line: 1 .. 2^31-1 (tables number chunks, steps and NPUs in 32 bits)."""
    try:
        v = int(text)
    except ValueError:
        raise UserError(f"{what} must be a positive integer, got '{text}'") from None
    if not 0 < v < 2**31:
        raise UserError(f"{what} must be a positive integer below 2^31, got {v}")
    return v


def _capture_limit(seconds: float) -> float:
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"--capture-limit must be a positive number of seconds, got {seconds!r}")
    return seconds


def _is_workload(inputs: list[str]) -> bool:
    return bool(inputs) and (inputs[0].endswith(".py") or all(p.endswith(".json") for p in inputs) or
                             all(p.endswith(".et") for p in inputs) or _is_trace_dir(inputs) or
                             _is_step_module(inputs))


def _is_step_module(inputs: list[str]) -> bool:
    """One .mlir file holding a workload module (--emit mlir of a step), not a comm module of collectives."""
    if len(inputs) != 1 or not inputs[0].endswith(".mlir"):
        return False
    try:
        if not stat.S_ISREG(os.stat(inputs[0]).st_mode):
            return False  # a FIFO is not opened to peek (no writer: it would wait); read whole as a comm module
        with open(inputs[0], encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 16)
    except (OSError, ValueError):
        return False  # the collective path reads it and names the problem
    from ..dialects.workload import is_workload_text
    return is_workload_text(head)


def _is_trace_dir(inputs: list[str]) -> bool:
    """One directory of execution traces (.json or Chakra .et files, no meta.json: that is a table directory)."""
    if len(inputs) != 1 or not os.path.isdir(inputs[0]) or os.path.exists(os.path.join(inputs[0], "meta.json")):
        return False
    try:
        return any(name.endswith((".json", ".et")) for name in os.listdir(inputs[0]))
    except OSError:
        return False


def _run_workload(args, max_memory: int | None, given: set[str], step_dir: bool = False) -> int:
    """model.py, execution traces, a workload module or a step table directory -> the step report (or the workload
    MLIR, or the step's tables)."""
    from . import driver, reuse
    from .api import compile as compile_workload
    if args.emit == "tables" and args.output is None and args.npu is None:
        raise UserError("--emit tables needs --npu K (print one accelerator's step table) or -o DIR (write them all)")
    if args.emit == "msccl-xml":
        raise UserError("--emit msccl-xml writes one collective's schedule (--collective, or a comm .mlir module), "
                        "not a training step")
    if step_dir:
        if args.emit == "mlir":
            raise UserError(f"--emit mlir: {args.input[0]} holds the step's tables, not its workload module")
        # the options the directory records are in args already (run_parsed): each as given or as recorded
        report = compile_workload(args.input[0], None, backend=args.backend, intra=args.intra,
                                  peak_tflops=args.peak_tflops, mem_bw_gbps=args.mem_bw, max_memory=max_memory,
                                  local_mem_gbps=_local_mem(args), mem_latency_ns=args.mem_latency, pool=args.pool,
                                  switching=args.switching, step_semantics=_step_semantics(args), use_recorded=False)
    else:
        if not args.topology and not _is_step_module(args.input):
            raise UserError("--topology is required")
        chunks = _positive_int(args.chunks, "--chunks") if args.chunks is not None else None
        with reuse.using(reuse.open_dir(args.cache) if args.cache else reuse.current()):
            report = compile_workload(args.input if len(args.input) > 1 else args.input[0], args.topology,
                                      bandwidth=args.bandwidth, latency=args.latency, links=args.links,
                                      endpoint_delay=args.endpoint_delay, mesh=args.mesh,
                                      scheduler=args.scheduler or driver.DEFAULT_SCHEDULER,
                                      chunks=chunks, algorithm=args.algorithm, all_reduce=args.all_reduce,
                                      backend=args.backend, switching=args.switching, intra=args.intra,
                                      peak_tflops=args.peak_tflops, mem_bw_gbps=args.mem_bw, max_memory=max_memory,
                                      capture_limit=_capture_limit(args.capture_limit), iteration=args.iteration,
                                      keep_tables=args.emit == "tables", local_mem_gbps=_local_mem(args),
                                      mem_latency_ns=args.mem_latency, pool=args.pool, offload=args.offload,
                                      in_switch=args.in_switch, step_semantics=_step_semantics(args),
                                      use_recorded=False)
    _check_step_options(report, given)
    if args.emit == "tables":
        return _emit_step_tables(args, report)
    if args.emit == "chakra":
        if report.chakra is None:
            raise UserError(f"--emit chakra: {args.input[0]} holds a lowered step, not its workload: give the model "
                            "file or traces it came from")
        n = report.chakra(_chakra_dir(args), args.force)
        print(f"wrote {n} Chakra traces and comm_group.json to {args.output}; step time "
              f"{report.total_time_us:.3f} us")
        return 0
    if args.emit == "mlir":
        if args.output:
            atomic.write_text(args.output, report.mlir)
        else:
            sys.stdout.write(report.mlir)
        return 0
    if args.timeline:
        from ..runtime.trace import write_chrome
        write_chrome(args.timeline, report.timeline())
    if args.plot:
        from . import breakdown_plot
        breakdown_plot.write(args.plot, [(report["topology"], report["breakdown_us"])],
                             f"{report['source']}: step time breakdown")
    _report(args, report.to_dict(), report.format)
    return 0


def _check_step_options(report, given: set[str]) -> None:
    """Refuse what the step turned out not to use, before anything is written: known once its collectives are
    (every rank's). Options that describe the machine (--pool, --mem-latency, the network's) are not refused where
    the step leaves part of it unused: an ASTRA-sim run gives its remote memory file with every step."""
    from . import cli_rules
    spans = [k[2] for k in report.collective_keys if k[0] == "all_reduce"]
    cli_rules.check_all_reduce_split(spans, given, "each of the step's all-reduces runs over one dimension"
                                     if spans else "the step has no all-reduce")


def _emit_step_tables(args, report) -> int:
    from . import step_dir
    from ..runtime import step_tables
    step = report.step_tables(args.table_format)
    if args.output:
        step_tables.write(args.output, step, force=args.force)
        ranks = step.meta["npus"]
        print(f"wrote the step of {ranks} accelerators to {args.output}: {len(step.programs)} program table(s), "
              f"{len(step.collectives)} collective schedule(s), meta.json; step time "
              f"{report.total_time_us:.3f} us")
        return 0
    npu = _npu(args)
    print(step_dir.format_npu(step, npu, args.json))
    return 0


def _npu(args) -> int:
    """--npu K (an empty value is -1, which the range checks refuse)."""
    return _int_list(args.npu, "--npu")[0] if args.npu.strip() else -1


def _report(args, obj: dict, text) -> None:
    """Print a run's report: its --json object or its text (`text()`). A sweep point (sweep/point.py) sets
    `args.report_sink` to a list and gets the JSON object instead, computed by exactly the command's code path."""
    _check_finite(obj)
    sink = getattr(args, "report_sink", None)
    if sink is not None:
        sink.append(obj)
    else:
        print(json.dumps(obj, indent=1) if args.json else text())


def _check_finite(obj) -> None:
    """No report says Infinity or NaN: every input is range-checked where it is read (docs/reliability.md, Numbers
    at the edges), and should a combination still leave float range, the run is refused naming the figure rather
    than printing it."""
    stack = [(obj, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"the run's {where} came out as {value}: the inputs' values together leave the range "
                            "the cost model computes in; bring them nearer the defaults")


def _kind(args) -> str:
    if args.list_passes:
        return "list-passes"
    if _is_workload(args.input):
        return "training step"
    if len(args.input) == 1 and os.path.isdir(args.input[0]):
        from ..runtime.step_tables import is_step_dir
        if is_step_dir(args.input[0]):
            return "step tables"
    if len(args.input) == 1 and os.path.isdir(args.input[0]):
        return "table directory"
    return "collective"


def run_parsed(args, given: set[str] = frozenset()) -> int:
    """Run a parsed command line (`parse`); the CLI and the sweep points (sweep/point.py) both come here."""
    from . import cli_rules
    kind = _kind(args)
    record, where = _recorded(args, kind)
    filled = {}
    if record:   # what the directory or module records stands in for the options not typed (recorded_run.py)
        from . import recorded_run
        filled = recorded_run.fill(args, getattr(args, "named", given), record)
    cli_rules.check(kind, args, given)
    notices = []
    if args.system:
        from . import astra_system
        # an option typed wins over the file even at its default (`--intra scf` over its FIFO): args.named
        notices = astra_system.apply(args, getattr(args, "named", given), kind == "training step")
    from ..dialects.comm import IRError
    from ..passes import PassError
    try:
        if args.system:
            cli_rules.check(kind, args, given)   # again: an option typed may not apply beside what the file set
        code = _run_kind(args, kind, given)
    except (UserError, IRError, PassError) as e:   # an option the file set is the file's key, not a flag typed
        if not args.system and not filled:
            raise
        e = recorded_run.blamed(e, filled, where) if filled else e
        raise (astra_system.blamed(e, args) if args.system else e) from None
    if record:
        notices += recorded_run.notes(args, record, where)
    for line in notices:   # after the run: a refused run says its one line only
        sys.stderr.write(line + "\n")
    return code


def _recorded(args, kind: str) -> tuple[dict, str]:
    """The run options a table directory, step directory or module given as input records, checked, and where
    (recorded_run.py); ({}, "") for other runs."""
    from . import recorded_run
    if kind == "training step" and _is_step_module(args.input):
        kind = "workload module"
    elif kind == "collective" and len(args.input) == 1 and args.input[0].endswith(".mlir"):
        kind = "comm module"
    if kind not in recorded_run.INPUTS:
        return {}, ""
    return recorded_run.of_input(kind, args.input[0])


def _run_kind(args, kind: str, given: set[str]) -> int:
    if kind == "list-passes":
        from ..passes import all_passes
        for name, cls in sorted(all_passes().items()):
            opts = " ".join(f"{k}=<{f.metadata['help']}>" for k, f in cls.options().items())
            print(f"{name:24s} {cls.summary}" + (f"  [{opts}]" if opts else ""))
        return 0
    from ..network.units import parse_size
    try:
        max_memory = parse_size(args.max_memory) if args.max_memory is not None else None
    except UserError as e:
        raise UserError(f"--max-memory: {e}") from None
    if kind in ("training step", "step tables"):
        return _run_workload(args, max_memory, given, kind == "step tables")
    if len(args.input) > 1:
        raise UserError(f"give one .mlir module or table directory, got {len(args.input)} inputs")
    args.input = args.input[0] if args.input else None
    from . import driver
    active = _positive_int(args.active_chunks, "--active-chunks")
    run = driver.RunOptions(args.backend, args.execution, args.intra, active, args.switching,
                            timeline=bool(args.timeline or args.plot) and args.backend == "congestion",
                            max_memory=max_memory, local_mem_gbps=_local_mem(args))
    if kind == "table directory":
        return _run_table_dir(args, run)
    return _run_collective(args, run, given)


def _step_semantics(args):
    """--step-semantics, with the per-link bandwidths of an ASTRA-sim network file the system reader converted."""
    from .workload_driver import StepSemantics
    return StepSemantics(args.step_semantics or "streams", getattr(args, "astra_link_gbps", None))


def _local_mem(args) -> float | None:
    if args.local_mem_bw is None:
        return None
    from ..network.memory import check_local_mem_gbps
    return check_local_mem_gbps(args.local_mem_bw)


def _write_timeline(args, result, meta: dict, title: str) -> None:
    if args.timeline:
        from ..runtime.trace import write_trace
        write_trace(args.timeline, result, meta)
    if args.plot:
        from ..runtime.trace import write_plot
        write_plot(args.plot, result, meta.ndims, title)


def _verify(schedule, max_memory: int | None) -> None:
    """--verify: the schedule's rows read and checked, the pieces they cut its buffers into counted, the memory of
    executing them on symbols estimated, then executed (runtime/verify_symbolic.py)."""
    from . import resources
    from ..runtime.verifier import SymbolicRun
    check = SymbolicRun(schedule)
    resources.verified_cells(check).check(max_memory)
    check.run()


def _run_table_dir(args, run) -> int:
    """Execute tables written earlier with -o."""
    from . import driver
    from ..runtime.tables import DirSchedule
    from . import resources
    schedule = DirSchedule(args.input)
    resources.table_files(args.input, schedule.meta, run.execution != "full", args.verify,
                          run.max_memory).check(run.max_memory)
    result = driver.execute(schedule, run)
    out = {"total_time_us": result.total_ns / 1e3, "npus": schedule.meta.npus, "backend": result.backend,
           "execution": result.mode, "per_dim_bytes": result.per_dim_bytes,
           "per_dim_busy_us": [b / 1e3 for b in result.dim_busy_ns]}
    _write_timeline(args, result, schedule.meta, f"{args.input}: {result.backend} runtime")
    if args.verify:  # the written tables on their own: their meta carries every shard layout
        from ..runtime.verifier import VerificationError
        try:
            _verify(schedule, run.max_memory)
        except VerificationError as e:  # tables given as input are the user's: wrong ones are bad input
            raise UserError(f"{args.input}: the tables do not implement their collectives: {e}") from None
        out["verified"] = True
    _report(args, out, lambda: f"total time {out['total_time_us']:.3f} us on {out['npus']} NPUs ({result.backend}, "
                               f"{result.mode} execution)" + (f"\n{VERIFIED}" if args.verify else ""))
    return 0


def _run_collective(args, run, given: set[str]) -> int:
    """One collective (--collective) or a comm module (.mlir): compile, then report, emit MLIR or emit tables."""
    from . import driver
    from ..dialects import comm
    from ..network.parse import parse_topology, with_endpoint_delay
    from ..passes import PassError
    from ..network.units import parse_size

    topology = None
    if args.topology:
        topology = parse_topology(args.topology, args.bandwidth, args.latency, args.links, args.endpoint_delay)
    elif any((args.bandwidth, args.latency, args.links)):
        raise UserError("--bandwidth/--latency/--links need --topology")

    ctx = comm.new_context()
    if args.input:
        if not args.input.endswith(".mlir"):
            raise UserError(f"cannot compile '{args.input}': expected a .mlir comm module or a table directory")
        if args.collective or args.size or args.dims or args.root is not None:
            raise UserError("give either an input module or --collective/--size/--dims/--root, not both")
        module = driver.read_module(ctx, args.input)
        try:  # the module's own mistakes name its file
            topology = with_endpoint_delay(driver.module_topology(module, topology), args.endpoint_delay)
            comm.verify_module(module, list(topology.shape))
        except (UserError, comm.IRError) as e:
            raise type(e)(f"{args.input}: {e}") from None
    else:
        if not args.collective:
            raise UserError("nothing to compile: give --collective and --size, or an input .mlir module")
        if topology is None:
            raise UserError("--topology is required")
        if not args.size:
            raise UserError("--size is required with --collective")
        dims = _int_list(args.dims, "--dims") if args.dims else None
        root = 0
        if args.root is not None:
            try:
                root = int(args.root)
            except ValueError:
                root = -1
            if not 0 <= root < topology.npus:
                raise UserError(f"--root must be an NPU of {args.topology} (0..{topology.npus - 1}), got "
                                f"'{args.root}'")
        module = driver.build_module(ctx, topology, args.collective, parse_size(args.size), dims, root)

    defaults = {}
    if args.chunks is not None:
        defaults["chunks"] = _positive_int(args.chunks, "--chunks")
        if args.input and not any(v.opname in comm.COLLECTIVES and v.chunks is None
                                  for v in map(comm.view, comm.ops(module))):
            # the chunk pass fills only collectives without a count: here --chunks would change nothing
            raise UserError(f"--chunks {args.chunks}: every collective of {args.input} already carries its chunk "
                            "count (or has been decomposed into phases); drop --chunks, or edit the count in the "
                            "module")
    if args.algorithm:
        defaults["algorithm"] = args.algorithm
    if args.all_reduce:
        defaults["all_reduce"] = args.all_reduce
    if args.ports is not None:
        from .. import algorithms
        name = algorithms.canonical(args.algorithm or "")
        if name is None or not algorithms.REGISTRY[name].takes_ports:
            takes = " or ".join(n for n, a in algorithms.all_algorithms().items() if a.takes_ports)
            raise UserError(f"--ports applies to --algorithm {takes}")
        defaults["ports"] = _positive_int(args.ports, "--ports")
    _check_dimension_options(args, module, defaults, given)
    if args.compare:
        source = str(module)
        reports = {name: driver.compile_schedule(source, ctx, topology, name, defaults,
                                                 dataclasses.replace(run, intra=intra)).report
                   for name, intra in (("baseline", "fifo"), ("themis", "scf"), ("optimal", "scf"))}
        from .report import compare_rows
        compared = {k: r.to_json() for k, r in reports.items()}
        _check_finite(compared)
        print(json.dumps(compared, indent=1) if args.json else compare_rows(reports))
        return 0
    try:
        compiled = driver.compile_schedule(str(module), ctx, topology, args.scheduler, defaults, run,
                                           args.print_ir_after_all, args.pass_pipeline, args.mlir_timing)
    except (UserError, comm.IRError, PassError) as e:
        if not args.input:
            raise
        raise type(e)(f"{args.input}: {e}") from None   # what the module's ops say names its file
    module, schedule = compiled.module, compiled.schedule
    if args.verify:  # before anything is written: a schedule that fails verification is never emitted
        from . import resources
        resources.verification(topology, schedule.plans).check(run.max_memory)
        _verify(schedule, run.max_memory)
        if args.emit != "report":
            sys.stderr.write(VERIFIED + "\n")  # stdout carries the MLIR or the table

    if args.emit == "mlir":   # with how it was run, so that `astra-compile module.mlir` runs it so again
        from . import recorded_run
        recorded_run.with_comm_record(module, run)
        text = str(module)
        if args.output:
            atomic.write_text(args.output, text)
        else:
            sys.stdout.write(text)
        return 0

    if args.emit == "tables":
        return _emit_tables(args, schedule, topology, run)

    if args.emit == "chakra":
        from .frontend import chakra_write
        n = chakra_write.write(chakra_write.one_collective(schedule.meta, topology), topology, _chakra_dir(args),
                               args.force)
        print(f"wrote {n} Chakra traces and comm_group.json to {args.output}")
        return 0

    if args.emit == "msccl-xml":
        from .msccl_xml import to_xml
        text = to_xml(schedule, f"astra-compile {compiled.report.collectives[0].buffer_kind} on {topology.name} "
                                f"({compiled.report.scheduler})")
        if args.output:
            atomic.write_text(args.output, text)
        else:
            sys.stdout.write(text)
        return 0

    report = compiled.report
    _write_timeline(args, compiled.result, schedule.meta,
                    f"{topology.name}: {report.backend} runtime, {report.scheduler} scheduler")
    if args.verify:
        report = report.with_(verified=True)
    _report(args, report.to_json(), lambda: report.format() + (f"\n{VERIFIED}" if args.verify else ""))
    return 0


def _check_dimension_options(args, module, defaults: dict, given: set[str]) -> None:
    """Refuse the options that act across dimensions where the run has none to act across: a whole-network
    algorithm (--algorithm's, a --system file's or the one a module's phases run), or an all-reduce over one
    dimension. Known only once the module is read: cli_rules refuses what the command line alone shows."""
    from . import cli_rules, driver
    from ..dialects import comm
    flat = driver.whole_network_run(module, defaults)
    if flat is not None:
        cli_rules.check_whole_network(given, f"--algorithm {flat.name} runs one phase over the whole network"
                                      if "algorithm" in defaults else
                                      f"the phases of {args.input} run {flat.name}, one phase over the whole network")
        defaults.pop("all_reduce", None)   # a --system file's collective-optimization: nothing to split here
        return
    spans = [comm.view(op).dims for op in comm.ops(module) if comm.short_name(op) == "all_reduce"]
    cli_rules.check_all_reduce_split(spans, given, f"the all-reduce runs over dimension {spans[0][0]} alone"
                                     if args.collective and spans else
                                     f"{args.input} holds no all-reduce over several dimensions (one decomposed "
                                     "into phases keeps the split it was given)")


def _chakra_dir(args) -> str:
    if not args.output:
        raise UserError("--emit chakra needs -o DIR (one .et file per rank and comm_group.json go there)")
    return args.output


def _emit_tables(args, schedule, topology, run) -> int:
    from . import recorded_run
    from ..runtime.tables import write_dir
    if args.output:   # with how they execute, so that `astra-compile DIR` runs them as this run would
        write_dir(schedule, args.output, args.table_format, force=args.force, run=recorded_run.of_tables(run))
        print(f"wrote {schedule.meta.npus} tables and meta.json to {args.output}")
        return 0
    if args.npu is None:
        raise UserError("--emit tables needs --npu K (print one table) or -o DIR (write them all)")
    npu = _npu(args)
    if not 0 <= npu < topology.npus:
        raise UserError(f"--npu {npu} outside 0..{topology.npus - 1}")
    if args.table_view == "trees":
        from .tree_table import format_tree_table
        text = format_tree_table(schedule, npu)   # first: a schedule without trees is refused with nothing printed
        print(f"# accelerator {npu} of {topology.npus} on {topology.name}: MultiTree commands")
        print(text)
        return 0
    table = schedule.table(npu)
    if args.json:
        print(json.dumps({c: table[c].tolist() for c in table.cols}))
    else:
        print(f"# accelerator {npu} of {topology.npus} on {topology.name}: {len(table)} rows")
        print(table.to_text(schedule.meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
