"""How exact `astra-compile plan`'s reduced depth is (compiler/plan/depth.py, docs/plan.md "Reduced depth"): every
layout of a narrow Llama-3-shaped model (models/llama70b_plan.py with a smaller width and --layers blocks) planned
twice on one cluster, each layout timed at two shallower depths and extrapolated (--depth auto: 3 and 4 blocks,
2 and 3 per pipeline stage, compiler/plan/depth.py), and
run whole (--depth full); it prints, per layout, the extrapolated figures' error against the whole run's (step
time, memory per rank, exposed communication, idle time, MFU), the largest errors, the rank of each layout under
both, and both plans' wall times.

The search covers DDP, FSDP, tensor parallelism, pipelines (1F1B and Interleaved1F1B), checkpointing none and
full, and gradient accumulation (micro-batches of 1 and 2 sequences). --depths 2,3 (--pipeline-depths 1,2)
measures another pair.

With --keep DIR the model and both plans' results files stay in DIR and a second run resumes them (a run with
other --depths and the same DIR runs only the shallower layouts again: the whole plan's file is complete).

    python benchmarks/plan_depth.py [--layers 24] [--cluster dgx-h100:1] [--global-batch 16] [--workers 2] [--keep DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "models", "llama70b_plan.py")
SHAPE = "VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ = {vocab}, {dim}, 8, 2, {ffn}, {layers}, {seq}"
SPACE = '''

def plan_space():
    return {"axes": ["dp", "fsdp", "tp", "pp"], "tp": [1, 2], "pp": [1, 2, 4], "micro_batch": [1, 2],
            "checkpointing": ["none", "full"], "schedule": ["1F1B", "Interleaved1F1B"]}
'''


def narrow_model(directory: str, layers: int, dim: int, seq: int) -> str:
    """models/llama70b_plan.py at another width and depth, with the benchmark's search space."""
    with open(MODEL, encoding="utf-8") as f:
        text = f.read()
    shape = SHAPE.format(vocab=8192, dim=dim, ffn=3 * dim, layers=layers, seq=seq)
    text, n = re.subn(r"^VOCAB, DIM, .*$", shape, text, count=1, flags=re.M)
    assert n == 1, "models/llama70b_plan.py's shape line moved"
    path = os.path.join(directory, "llama_narrow.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + SPACE)
    return path


def plan(path: str, args, depth: str, results: str) -> tuple[dict, float]:
    """{layout: its JSON row} of one plan, and its wall seconds (run in this process: --depths patches the pair)."""
    from astra_compile.compiler.plan import command
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = command.main([path, "--cluster", args.cluster, "--global-batch", str(args.global_batch), "--json",
                             "--workers", str(args.workers), "--depth", depth, "-o", results,
                             "--top", "1000"])
    wall = time.perf_counter() - start
    if code not in (0, 1):
        sys.exit(f"plan --depth {depth} exited {code}")
    return {row["layout"]: row for row in json.loads(out.getvalue())["layouts"]}, wall


def error(got: float, want: float) -> float:
    return 100.0 * (got / want - 1.0) if want else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--cluster", default="dgx-h100:1")
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    from astra_compile.compiler.plan import depth as depth_mod
    pair = lambda t: ",".join(map(str, t))   # noqa: E731
    ap.add_argument("--depths", default=pair(depth_mod.DEPTHS),
                    help=f"the two shallower depths without a pipeline (default {pair(depth_mod.DEPTHS)})")
    ap.add_argument("--pipeline-depths", default=pair(depth_mod.PIPELINE_DEPTHS),
                    help=f"the two per pipeline stage (default {pair(depth_mod.PIPELINE_DEPTHS)})")
    ap.add_argument("--keep", metavar="DIR", help="keep the model and results files here (a later run resumes)")
    args = ap.parse_args()
    depth_mod.DEPTHS = tuple(int(d) for d in args.depths.split(","))
    depth_mod.PIPELINE_DEPTHS = tuple(int(d) for d in args.pipeline_depths.split(","))
    tag = f"{pair(depth_mod.DEPTHS)}_{pair(depth_mod.PIPELINE_DEPTHS)}".replace(",", "")
    with contextlib.ExitStack() as stack:
        d = args.keep or stack.enter_context(tempfile.TemporaryDirectory())
        os.makedirs(d, exist_ok=True)
        path = narrow_model(d, args.layers, args.dim, args.seq)
        short, short_s = plan(path, args, "auto", os.path.join(d, f"auto{tag}.csv"))
        whole, whole_s = plan(path, args, "full", os.path.join(d, "full.csv"))
    print(f"Llama-3 shape, width {args.dim}, {args.layers} blocks, on {args.cluster}, global batch "
          f"{args.global_batch}, depths {pair(depth_mod.DEPTHS)} ({pair(depth_mod.PIPELINE_DEPTHS)} per stage)")
    ok = lambda r: r["status"] == "ok" and r["fits"]   # noqa: E731
    rank_whole = {k: n for n, k in enumerate(k for k, r in whole.items() if ok(r))}
    rank_short = {k: n for n, k in enumerate(k for k, r in short.items() if ok(r))}
    print(f"{'layout':70s} {'from':>7s} {'step %':>7s} {'mem %':>7s} {'comm %':>7s} {'idle %':>7s} {'MFU %':>7s} "
          f"{'rank':>9s}")
    worst = {"step": 0.0, "memory": 0.0}
    for k, w in whole.items():
        s = short.get(k)
        if s is None or s["status"] != "ok" or w["status"] != "ok":
            print(f"{k:70s} failed: {(s or {}).get('error') or w['error']}"[:160])
            continue
        if not s["extrapolated"]:
            print(f"{k:70s} {'whole':>7s}")
            continue
        e = (error(s["step_time_us"], w["step_time_us"]), error(s["peak_memory_bytes"], w["peak_memory_bytes"]),
             error(s["exposed_comm_us"], w["exposed_comm_us"]), error(s["idle_us"], w["idle_us"]),
             error(s["mfu"], w["mfu"]))
        worst["step"], worst["memory"] = max(worst["step"], abs(e[0])), max(worst["memory"], abs(e[1]))
        ranks = f"{rank_short.get(k, '-')}/{rank_whole.get(k, '-')}"
        print(f"{k:70s} {'%d,%d' % tuple(s['depths']):>7s} " + " ".join(f"{x:7.2f}" for x in e) + f" {ranks:>9s}")
    top = lambda ranks: [k for k, _ in sorted(ranks.items(), key=lambda kv: kv[1])[:5]]   # noqa: E731
    extrapolated = sum(r["extrapolated"] for r in short.values())
    print(f"largest error: step {worst['step']:.2f} %, memory {worst['memory']:.2f} %; "
          f"{extrapolated} of {len(short)} layouts extrapolated; top 5 the same: {top(rank_short) == top(rank_whole)}")
    print(f"wall: reduced depth {short_s:.0f} s, whole {whole_s:.0f} s on {args.workers} workers")


if __name__ == "__main__":
    main()
