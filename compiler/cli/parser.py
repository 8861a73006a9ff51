"""The run command's parser: its options (build_parser), the parsed command line and the options given (parse),
and what every subcommand's parser shares: usage errors in one line (Parser), the one `astra-compile: error: ...`
line with status 2 (fail) and the checks of the counts and lists typed (int_list, positive_int, capture_limit)."""
from __future__ import annotations

import argparse
import math
import sys

from ...network.errors import AstraError, UserError, one_line
from ...network.kinds import COLLECTIVES
from ..core.job import DEFAULT_CAPTURE_LIMIT, FASTEST_CHUNKS

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
  astra-compile plan model.py --cluster dgx-h100:2 --global-batch 64
                                                   (the fastest layouts that fit: docs/plan.md)
  astra-compile calibrate LOG... --topology T       (bandwidth and latency fitted to nccl-tests logs:
                                                    docs/calibrate.md)
  astra-compile calibrate-compute PROFILE.json --gpu-name h200 -o my_gpu.yaml
                                                   (a GPU's compute model fitted to torch.profiler traces:
                                                    docs/compute.md)

sizes: B, KB/MB/GB (powers of 2, as ASTRA-sim), KiB/MiB/GiB; bandwidth in GB/s (2^30 B/s); latency in ns."""


class Parser(argparse.ArgumentParser):
    """Usage errors in one line naming the option and what it accepts, not the whole usage block."""

    def error(self, message: str):
        hint = " (astra-compile --help lists them)" if message.startswith("unrecognized arguments") else ""
        sys.exit(fail(message + hint))


def build_parser() -> Parser:
    from ...passes import ALL_REDUCE_SPLITS   # here, not at the top: a Ctrl-C while it loads finds main's handler
    p = Parser(prog="astra-compile", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
               description="Compile collectives to per-accelerator schedule tables and time them.")
    p.add_argument("input", nargs="*",
                   help="a model .py file, PyTorch execution-trace .json files (one per rank), a .mlir comm module, "
                        "or a directory of tables written with -o")
    g = p.add_argument_group("workload")
    g.add_argument("--collective", choices=COLLECTIVES,
                   help="one collective over the whole topology (or --dims)")
    g.add_argument("--size", help="collective size (full buffer, as nccl-tests count it), e.g. 1GB")
    g.add_argument("--dims", help="topology dimensions of the collective's groups, e.g. 0,1 (default: all)")
    g.add_argument("--root", help="a broadcast's or reduce's root NPU (default 0); every group sends from (reduces "
                                  "to) its member at the root's coordinates on --dims")
    g = p.add_argument_group("training step (model .py files and execution traces)")
    g.add_argument("--mesh", help="device mesh of a model file, outermost axis first, e.g. dp=8,tp=8 (the last axis "
                                  "takes topology dimension 0); axes dp, fsdp and tp apply DDP, FSDP2 and the "
                                  "file's TP_PLAN; default: the file's mesh_axes(), else dp over every NPU")
    g.add_argument("--capture-limit", type=float, default=DEFAULT_CAPTURE_LIMIT, metavar="SECONDS",
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
                   help="compute roofline: peak TFLOPS per NPU (default 234, ASTRA-sim 2.0's A100 figure)")
    g.add_argument("--mem-bw", type=float, default=1896.0,
                   help="compute roofline: memory bandwidth per NPU in GB/s of 2^30 B (default 1896 = A100-80GB's "
                        "2039 decimal GB/s)")
    g.add_argument("--gpu", metavar="NAME|FILE",
                   help="the GPU each NPU is: a preset (v100, a100-40gb, a100-80gb, h100, h100-96gb, h100-pcie, h200, "
                        "b200, gb200, mi300x, mi325x, mi355x) or a device file (.yaml/.json): its per-dtype peaks and "
                        "memory bandwidth set the roofline; --peak-tflops/--mem-bw beside it override its fp32 peak "
                        "and bandwidth (docs/compute.md)")
    g.add_argument("--mem-latency", type=float, default=0.0, metavar="NS",
                   help="local memory access latency in ns (default 0): a local load or store of S bytes takes it "
                        "plus S / --mem-bw (docs/memory.md)")
    g.add_argument("--pool", metavar="POOL.yaml",
                   help="the remote memory pool remote loads and stores use: ASTRA-sim 2.0's HierMem or ZeRO-Infinity "
                        "(docs/memory.md)")
    g.add_argument("--op-times", metavar="PROFILE.json",
                   help="a torch.profiler trace of a GPU run (record_shapes=True): the step's compute ops found in "
                        "it take its measured median times, the rest the compute model's (docs/compute.md)")
    g.add_argument("--offload", metavar="STATES",
                   help="keep these training states in the remote pool and move them as the step needs them "
                        "(ZeRO-Infinity style): params, grads, optimizer, comma-separated; needs --pool")
    g.add_argument("--in-switch", action="store_true",
                   help="with offloaded states (--offload, or the model file's OFFLOAD) on a hiermem pool: the pool's "
                        "switches all-gather parameters while they are loaded and reduce-scatter gradients while "
                        "they are stored (ASTRA-sim 2.0's in-switch collectives), in place of those collectives")
    g = p.add_argument_group("network")
    g.add_argument("--topology", help='e.g. "Ring(4)_FC(2)_Switch(8)", 8x8_torus, 64_switch, an ASTRA-sim .yml/.json, '
                                         'or a graph: 4x8_bigraph, dgx1, 2_dgx1, a .edges file')
    g.add_argument("--cluster", metavar="NAME:NODES[xGPUS]",
                   help="a cluster preset and its node count, e.g. dgx-h100:16, or part of each node, e.g. "
                        "dgx-a100:1x4 (dgx-a100, dgx-h100, hgx-h200, "
                        "dgx-b200, gb200-nvl72, mi300x, grand-teton): sets the topology (the node's fabric, then a "
                        "switch of the nodes) with its bandwidths and latencies, and the GPU; --topology, --bandwidth, "
                        "--latency and --gpu typed beside it override that part (docs/clusters.md)")
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
    g.add_argument("--chunks", help="chunks per collective (ASTRA-sim preferred-dataset-splits; default 1, and "
                   "'fastest' with --cluster), or 'fastest': each collective that spans several dimensions runs "
                   "with the fastest of 1, 2, 4, 8 and 16 chunks, as NCCL overlaps a node's and its NICs' phases")
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
                   help="with --emit tables --npu: every row, or (multitree) MultiTree's Reduce/Gather commands")
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
                                                      "time broken down as ASTRA-sim 2.0's Fig. 4 (needs matplotlib)")
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
        from .. import __version__
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


def fail(message: str) -> int:
    sys.stderr.write(f"astra-compile: error: {one_line(message)}\n")
    return 2


def run_subcommand(build_parser, run, argv: list[str], interrupted: str | None = None) -> int:
    """A subcommand's main (calibrate, calibrate-compute, plan): its arguments parsed and run; an AstraError (bad
    input, an output that cannot be written) is one line and exit 2; with `interrupted`, Ctrl-C prints that line
    and exits 130."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except AstraError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        sys.stderr.write(interrupted + "\n")
        return 130


def parse(argv: list[str]) -> tuple[dict, set[str], frozenset[str]]:
    """The parsed command line (argparse dest -> value), the options given (those that differ from their
    defaults), and the options named: those typed, at their defaults too (a value recorded in a table directory or
    module gives way to those only, recorded_run.py, so `--intra scf` on tables written with --intra fifo is taken
    as typed). The command line's options are read here alone: core/job.from_options makes them the run's Job."""
    parser = build_parser()
    argv = _join_dashed_values(parser, argv)
    values = vars(parser.parse_args(argv))
    given = {k for k, v in values.items() if v != parser.get_default(k)}
    for action in parser._actions:   # parsed again with no defaults: what is left was typed
        action.default = argparse.SUPPRESS
    named = frozenset(vars(parser.parse_args(argv))) | given
    return values, given, named


def int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{what} must be comma-separated integers, got '{text}'") from None
    for v in values:
        if not 0 <= v < 2**31:
            raise UserError(f"{what}: {v} is not a dimension (0, 1, ...)")
    return values


def positive_int(text: str, what: str) -> int:
    """A count given on the command line: 1 .. 2^31-1 (tables number chunks, steps and NPUs in 32 bits)."""
    try:
        v = int(text)
    except ValueError:
        raise UserError(f"{what} must be a positive integer, got '{text}'") from None
    if not 0 < v < 2**31:
        raise UserError(f"{what} must be a positive integer below 2^31, got {v}")
    return v


def chunk_count(text, what: str = "--chunks"):
    """--chunks: a count (positive_int), or FASTEST_CHUNKS: each collective runs with the fastest of 1, 2, 4, 8
    and 16 chunks (driver._fastest_chunks)."""
    if text == FASTEST_CHUNKS:
        return text
    try:
        return positive_int(text, what)
    except UserError as e:
        raise UserError(f"{e} (or '{FASTEST_CHUNKS}')") from None


def capture_limit(seconds: float) -> float:
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"--capture-limit must be a positive number of seconds, got {seconds!r}")
    return seconds
