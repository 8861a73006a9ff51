"""The exact outputs refactors must keep: a grid of collective commands (every algorithm, building block,
collective kind, scheduler and backend, including the ones that must fail) and the bundled examples.

`python tests/snapshot_grid.py [--examples-only]` records them into tests/snapshots/ (only when a change of
behaviour is intended, and said so in its commit); tests/test_snapshots.py compares today's outputs with the
record, exactly: every figure of every --json report, every error line, and a digest of every table written for
the small networks.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
GRID_FILE = os.path.join(HERE, "snapshots", "collective_grid.json")
EXAMPLES_FILE = os.path.join(HERE, "snapshots", "examples.json")

TOPOLOGIES = ["8_ring", "FC(4)", "8_switch", "Mesh(4)", "4x4_torus", "Ring(4)_FC(2)_Switch(4)", "Switch(4)_Switch(4)",
              "3x3_mesh", "2x4_bigraph", "dgx1", "Ring(3)_Switch(6)", "4x4x4_torus"]
KINDS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]
ALGORITHMS = [None, "ring", "direct", "halving_doubling", "double_binary_tree", "multitree", "multitree_optimal",
              "flat_ring", "rank_ring", "flat_direct", "flat_halving_doubling", "flat_double_binary_tree", "hdrm"]
SCHEDULERS = ["baseline", "themis", "optimal"]
BACKENDS = [[], ["--backend", "congestion"], [], ["--backend", "congestion", "--switching", "store-and-forward"]]
SIZES = ["1MB", "3000", "64MB"]
TABLE_DIGEST_MAX_NPUS = 16

# commands beyond the grid: options the grid does not vary, and the README's tour
EXTRA = [
    "--collective all_reduce --size 1GB --topology Switch(8)_Switch(8)_Switch(8) --bandwidth 50,50,50 --latency 1,1,1 "
    "--algorithm halving_doubling --chunks 64 --scheduler baseline --intra fifo",
    "--collective all_reduce --size 1GB --topology Switch(8)_Switch(8)_Switch(8) --bandwidth 50,50,50 --latency 1,1,1 "
    "--chunks 64",
    "--collective all_reduce --size 1GB --topology Switch(8)_Switch(8)_Switch(8) --bandwidth 50,50,50 --latency 1,1,1 "
    "--chunks 64 --scheduler themis",
    "--collective all_reduce --size 1GB --topology 64_switch --algorithm direct --chunks 4",
    "--collective all_reduce --size 1GB --topology 64_switch --algorithm direct --chunks 4 --backend congestion "
    "--switching store-and-forward",
    "--collective all_reduce --size 1GB --topology Ring_FC_Ring_Switch:2x8x8x4 --bandwidth 1000,200,100,50 "
    "--latency 1 --chunks 16 --active-chunks 4",
    "--collective all_reduce --size 256MB --topology Ring(4)_Switch(8) --bandwidth 100,25 --chunks 16 --compare",
    "--collective all_reduce --size 64MB --topology 4x4_torus --dims 1 --chunks 4",
    "--collective all_gather --size 64MB --topology Ring(4)_FC(4) --links 2,1 --chunks 4 --intra fifo",
    "--collective all_reduce --size 64MB --topology 4x4_torus --algorithm multitree --ports 1",
    "--collective all_reduce --size 64MB --topology 8x8_torus --algorithm multitree",
    "--collective all_reduce --size 64MB --topology 4x8_bigraph --algorithm hdrm",
    "--collective all_reduce --size 64MB --topology 4x8_bigraph --algorithm multitree",
    "--collective all_to_all --size 64MB --topology Ring(4)_FC(2)_Switch(8) --chunks 2 --execution full",
    "--collective all_reduce --size 64MB --topology 4x4_torus --algorithm ring,halving_doubling --chunks 8 "
    "--active-chunks 2 --backend congestion",
    "--collective all_reduce --size 1MB --topology 16x16x16_torus --chunks 4 --scheduler themis",
    "--collective reduce_scatter --size 64MB --topology 2_dgx1 --algorithm multitree",
    "--collective all_reduce --size 64MB --topology 4x4_torus --chunks 4 --all-reduce per-dimension",
    "--collective all_reduce --size 3000 --topology Ring(4)_FC(2)_Switch(4) --chunks 2 --all-reduce per-dimension "
    "--backend congestion",
    "--collective all_reduce --size 1MB --topology Switch(4)_Switch(4) --algorithm in_switch,direct "
    "--all-reduce per-dimension",
    # options that would change nothing are refused: across dimensions where the run has none, beside a pipeline
    "--collective all_reduce --size 64MB --topology 4x4_torus --algorithm multitree --scheduler themis",
    "--collective all_reduce --size 64MB --topology 4x4_torus --algorithm flat_ring --compare",
    "--collective all_reduce --size 64MB --topology 4x4_torus --algorithm rank_ring --all-reduce hierarchical",
    "--collective all_reduce --size 1MB --topology 8_ring --chunks 4 --all-reduce per-dimension",
    "--collective all_reduce --size 64MB --topology 4x4_torus --scheduler baseline --pass-pipeline "
    "decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm",
]
MLIR_EXAMPLES = ["all_reduce_3d_switch.mlir", "themis_4d.mlir", "torus_two_collectives.mlir"]
MODEL_EXAMPLES = ["mlp_dp.py", "gpt_tp_dp.py", "resnet_dp.py", "moe_ep.py", "llama_fsdp_tp.py", "llama_pp_tp_dp.py"]


def grid() -> list[str]:
    """The grid: every topology x kind x algorithm once, with scheduler, backend, size and chunks cycling through
    their values at co-prime periods so every combination of neighbours appears somewhere. A whole-network
    algorithm takes no scheduler (it has no dimensions to order chunks over: one is refused)."""
    from astra_compile.algorithms import whole_network
    out = []
    i = 0
    for topo in TOPOLOGIES:
        for kind in KINDS:
            for algo in ALGORITHMS:
                scheduler = [] if algo and whole_network(algo) else \
                    ["--scheduler", SCHEDULERS[i % 3 if i % 7 else (i + 1) % 3]]
                argv = ["--collective", kind, "--size", SIZES[i % 3], "--topology", topo, *scheduler,
                        "--chunks", str([1, 4][i % 2])]
                argv += BACKENDS[i % 4] + (["--algorithm", algo] if algo else [])
                out.append(" ".join(argv))
                i += 1
    return out + EXTRA


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from astra_compile.compiler.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def digest_dir(path: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        h.update(name.encode())
        with open(os.path.join(path, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _argv(command: str) -> list[str]:
    # topology strings hold no spaces, so a command splits on whitespace
    return command.split()


def observe(command: str) -> dict:
    """What one grid command does: exit status, the --json report (or the error line), and for small networks a
    digest of every table it writes."""
    argv = _argv(command)
    code, out, err = run_cli(argv + ["--json"])
    record = {"exit": code, "stderr": err}
    if code == 0:
        record["report"] = json.loads(out)
        npus = record["report"].get("npus") if isinstance(record["report"], dict) else None
        if npus is not None and npus <= TABLE_DIGEST_MAX_NPUS and "--compare" not in argv:
            with tempfile.TemporaryDirectory() as tmp:
                target = os.path.join(tmp, "t")
                tcode, _, terr = run_cli(argv + ["--emit", "tables", "-o", target])
                record["tables"] = digest_dir(target) if tcode == 0 else terr
    return record


def observe_examples() -> dict:
    """The examples run from their folder, so no path of this checkout appears in a report."""
    here = os.getcwd()
    os.chdir(EXAMPLES)
    try:
        return _observe_examples()
    finally:
        os.chdir(here)


def _observe_examples() -> dict:
    out = {}
    for name in MLIR_EXAMPLES:
        path = name
        code, text, err = run_cli([path])
        jcode, jtext, _ = run_cli([path, "--json"])
        mcode, mlir, _ = run_cli([path, "--emit", "mlir"])
        out[name] = {"exit": code, "text": text, "stderr": err, "report": json.loads(jtext) if jcode == 0 else None,
                     "mlir": mlir}
    for name in MODEL_EXAMPLES:
        code, text, err = run_cli([name, "--topology", "8x8_torus", "--json"])
        out[name] = {"exit": code, "report": json.loads(text) if code == 0 else None, "stderr": err}
    return out


def normalise(value):
    """JSON round trip: what the file holds (tuples become lists)."""
    return json.loads(json.dumps(value))


def record(examples_only: bool) -> None:
    """Record both files, or (--examples-only, after adding an example) the examples, keeping every example
    already recorded as it was: one whose output changed stops the recording instead."""
    examples = observe_examples()
    if examples_only:
        with open(EXAMPLES_FILE) as f:
            before = json.load(f)
        changed = [k for k in before if normalise(examples.get(k)) != before[k]]
        if changed:
            sys.exit(f"examples changed: {', '.join(changed)}; record everything if that is intended")
    else:
        grid_out = {c: observe(c) for c in grid()}
        with open(GRID_FILE, "w") as f:
            json.dump(grid_out, f, indent=0, sort_keys=True)
        ok = sum(r["exit"] == 0 for r in grid_out.values())
        print(f"recorded {len(grid_out)} commands ({ok} exit 0, {len(grid_out) - ok} refused)")
    with open(EXAMPLES_FILE, "w") as f:
        json.dump(examples, f, indent=0, sort_keys=True)
    print(f"recorded {len(MLIR_EXAMPLES) + len(MODEL_EXAMPLES)} examples")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    record("--examples-only" in sys.argv[1:])
