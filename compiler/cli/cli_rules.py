"""Which command-line options apply to which kind of run, so that no option is ever silently ignored.

Every run is one of: listing passes, executing a table directory, a training step (model file, traces or a
workload module), a step table directory, or a collective (from --collective or a .mlir module) emitted as a report, MLIR or tables. An option given outside the
runs it applies to ends the command with one line naming it and what it applies to.
"""
from __future__ import annotations

from ...network.errors import UserError
from ...runtime.meta import ROOTED

# runtime options: how tables execute
RUN = {"backend", "execution", "intra", "active_chunks", "switching", "max_memory", "local_mem_bw"}
NETWORK = {"topology", "bandwidth", "latency", "links", "endpoint_delay", "cluster"}
COMPILE = {"algorithm", "chunks", "scheduler", "all_reduce"}

ALLOWED = {
    "list-passes": {"list_passes"},
    "table directory": RUN | {"json", "verify", "timeline", "plot"},
    "training step": NETWORK | COMPILE | {"system", "mesh", "capture_limit", "peak_tflops", "mem_bw", "gpu",
                                          "backend", "switching", "intra", "emit", "output", "json", "max_memory",
                                          "cache", "iteration", "op_times",
                                          "local_mem_bw", "mem_latency", "pool", "offload", "in_switch", "plot",
                                          "timeline", "npu", "table_format", "force", "step_semantics",
                                          "switching"},
    # a step written with --emit tables -o: compiled already, on its own topology (its step semantics are the ones
    # it records: api.py refuses others)
    "step tables": {"peak_tflops", "mem_bw", "gpu", "backend", "intra", "emit", "npu", "json", "max_memory", "timeline",
                    "local_mem_bw", "mem_latency", "pool", "plot", "switching", "step_semantics"},
    "collective": NETWORK | COMPILE | RUN | {"system", "collective", "size", "dims", "root", "ports",
                                             "pass_pipeline", "print_ir_after_all", "mlir_timing", "emit", "npu",
                                             "output", "table_format", "table_view", "json", "compare",
                                             "timeline", "plot", "verify", "force"},
}

# (option, condition on the run's Job under which it does NOT apply, what it applies to)
CONDITIONAL = (
    ("switching", lambda j: j.run.backend != "congestion", "--backend congestion"),
    ("offload", lambda j: j.step.pool is None, "runs with --pool (the pool the states are kept in)"),
    ("in_switch", lambda j: j.step.pool is None, "runs with --pool (a hiermem pool, whose switches act on the "
                                                 "offloaded states)"),
    ("root", lambda j: j.collective.kind not in ROOTED, "--collective broadcast or reduce"),
    ("all_reduce", lambda j: j.collective.kind not in (None, "all_reduce"), "all-reduces (--collective all_reduce, "
                                                                            "a module's or a training step's)"),
    ("output", lambda j: j.outputs.emit == "report", "--emit mlir or msccl-xml (a file) or --emit tables (a "
                                                     "directory)"),
    ("npu", lambda j: j.outputs.emit != "tables", "--emit tables"),
    ("npu", lambda j: j.outputs.output is not None, "--emit tables without -o (it prints one table; -o writes all)"),
    ("table_format", lambda j: j.outputs.emit != "tables" or j.outputs.output is None, "--emit tables -o DIR"),
    ("table_view", lambda j: j.outputs.emit != "tables" or j.outputs.npu is None, "--emit tables --npu K"),
    ("force", lambda j: j.outputs.emit not in ("tables", "chakra") or j.outputs.output is None,
     "--emit tables or chakra -o DIR"),
    ("json", lambda j: j.outputs.emit in ("mlir", "msccl-xml", "chakra"), "reports and tables (--emit mlir, "
                                                                          "msccl-xml and chakra write files)"),
    ("json", lambda j: j.outputs.emit == "tables" and j.outputs.output is not None,
     "--emit tables --npu K or reports"),
    ("timeline", lambda j: j.outputs.emit != "report" or j.compile.compare, "one timed schedule (not --emit "
                                                                            "mlir/tables, not --compare)"),
    ("plot", lambda j: j.outputs.emit != "report" or j.compile.compare, "one timed schedule (not --emit "
                                                                        "mlir/tables, not --compare)"),
    ("verify", lambda j: j.compile.compare, "one schedule (not --compare)"),
    ("print_ir_after_all", lambda j: j.compile.compare, "one pipeline (not --compare)"),
    ("mlir_timing", lambda j: j.compile.compare, "one pipeline (not --compare)"),
    ("pass_pipeline", lambda j: j.compile.compare, "one pipeline (--compare runs each scheduler's own)"),
    ("emit", lambda j: j.compile.compare, "one schedule (--compare prints a report per scheduler)"),
    ("scheduler", lambda j: j.compile.pass_pipeline is not None, "runs without --pass-pipeline (the pipeline "
                                                                 "names every pass that runs; a scheduler names "
                                                                 "the ordering passes)"),
    ("capture_limit", lambda j: not (j.inputs and j.inputs[0].endswith(".py")),
     "model files (the CPU seconds their loading and capture may take)"),
    ("json", lambda j: j.outputs.table_view == "trees", "the rows view of a table (--table-view trees prints "
                                                        "MultiTree's commands as text)"),
    # a congestion timeline records every link's transfers, so every NPU executes whatever --execution says
    ("execution", lambda j: j.run.backend == "congestion" and bool(j.outputs.timeline or j.outputs.plot),
     "runs without a congestion --timeline or --plot (they record every link, so every NPU executes)"),
)

# options that act across a collective's dimensions, and what they do there: a whole-network algorithm (one phase
# over every NPU, algorithms/ network and ranks scope) has no dimensions for them
ACROSS_DIMENSIONS = {"scheduler": "it orders chunks across dimensions",
                     "compare": "it compares the schedulers' orders across dimensions",
                     "all_reduce": "it splits an all-reduce across dimensions"}


def flag(dest: str) -> str:
    return "-o/--output" if dest == "output" else "--" + dest.replace("_", "-")


def check(kind: str, job, given: set[str]) -> None:
    """Refuse, in one line, the first option given (`given`: command-line option names) that does not apply to
    this kind of run, its Job (core/job.py) as it stands."""
    for dest in sorted(given - ALLOWED[kind] - {"input"}):
        raise UserError(f"{flag(dest)} does not apply to a {kind} run" +
                        (": nothing else goes with --list-passes" if kind == "list-passes" else ""))
    for dest, off, applies_to in CONDITIONAL:
        if dest in given and dest in ALLOWED[kind] and off(job):
            raise UserError(f"{flag(dest)} applies to {applies_to}")
    if "algorithm" in ALLOWED[kind] and given & ACROSS_DIMENSIONS.keys():
        from ...algorithms import whole_network
        alg = whole_network(job.compile.algorithm)
        if alg is not None:
            check_whole_network(given, f"--algorithm {alg.name} runs one phase over the whole network")


def check_whole_network(given: set[str], runs: str) -> None:
    """Refuse the first option given that acts across dimensions, in a run whose algorithm has none (`runs` says
    which algorithm and where it comes from: --algorithm, a --system file, a module's phases)."""
    for dest, what in ACROSS_DIMENSIONS.items():
        if dest in given:
            raise UserError(f"{flag(dest)} applies to per-dimension algorithms ({what}); {runs}")


def check_all_reduce_split(spans: list, given: set[str], where: str) -> None:
    """Refuse --all-reduce where no all-reduce spans several dimensions (`spans`: each all-reduce's dimensions): over
    one dimension, hierarchical and per-dimension are the same schedule."""
    if "all_reduce" in given and all(len(dims) < 2 for dims in spans):
        raise UserError(f"--all-reduce applies to an all-reduce over several dimensions (it says how to split one "
                        f"across them); {where}")
