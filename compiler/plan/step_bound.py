"""Layouts not run because their step is surely slower than the N fastest found (docs/plan.md, "Skipped by their
step's bound").

A plan runs the layouts it times at reduced depth first (plan/depth.py: seconds each), then those it runs whole
(a large model's pipelines of 16 stages and more: a minute or two each). A layout to run whole whose step is
surely slower than the --top fastest found so far is not run: it cannot be among them. "Surely": a rank computes
its ops one at a time on its compute stream, no op runs faster than the GPU's fastest rate for its dtype
(network/compute_model.py, ComputeModel.fastest_flops_per_s: a tensor-core class's fitted fraction of the peak,
attention's over the half of the work a causal kernel may skip: self-attention, as many keys as queries), and
the rank of the pipeline's largest stage computes that stage's blocks for every micro-batch. With one stage a
rank (1F1B, GPipe) it can start its first micro-batch only after the stages before it have run theirs forward,
and the step ends only after they have run the last one backward. So, in FLOPs per block and micro-batch F,
blocks b_s of stage s, L the largest,

    step >= (micro-batches x b_L + sum of b_s before L) x F / the fastest rate

(looped schedules: micro-batches x b_L). F is measured, not assumed: from a layout timed at reduced depth with the
same tensor-parallel size, micro-batch size and checkpointing (its reported rank's FLOPs at the two depths, their
difference per block and micro-batch; the rate that of the fastest dtype they ran in). Data parallelism, FSDP2
and the pipeline leave a block's FLOPs as they are (their copies and messages count none); a stage's embedding or
head only adds. The --top-th fastest step among the layouts that ran and fit only falls as more run, so a layout
above it now stays out of the top. A layout without such a reference runs.
"""
from __future__ import annotations

from ...network.dtypes import DTYPES
from .depth import stages_of
from .rank import FIRST_DEPTH, SECOND_DEPTH, cell_json, point

ONE_STAGE_A_RANK = ("1f1b", "gpipe")   # schedules whose ranks wait on the stages before them as above


def key(lay) -> tuple:
    """What a block's FLOPs per micro-batch depend on among a layout's choices."""
    return lay.axes.get("tp", 1), lay.micro_batch, lay.checkpointing


def references(rows: list[dict], found: list, depths: dict) -> dict:
    """key -> (FLOPs per block and micro-batch, the dtypes they ran in) from the layouts timed at reduced depth
    (`depths`: index -> Extrapolation) whose two runs both ran."""
    by_index = {int(r["point"]): r for r in rows}
    out: dict = {}
    for i, ex in depths.items():
        runs = [by_index.get(point(i, k, len(found))) for k in (FIRST_DEPTH, SECOND_DEPTH)]
        if any(r is None or r.get("status") != "ok" or not r.get("flops") for r in runs):
            continue
        lay = found[i]
        per_rank = stages_of(lay)[1] if lay.axes.get("pp", 1) > 1 else 1   # a looped rank holds v stages
        blocks = [d * per_rank for d in ex.depths]
        per_micro = (float(runs[1]["flops"]) - float(runs[0]["flops"])) / (blocks[1] - blocks[0]) / lay.microbatches
        if per_micro <= 0:
            continue
        dtypes = set()
        for r in runs:
            by_dtype = cell_json(r.get("flops_by_dtype"), None) or {"fp32": 1}   # none: every FLOP in fp32 (the report's)
            dtypes |= {d for d, f in by_dtype.items() if f and d in DTYPES}
        was = out.get(key(lay))
        # every reference of a key counts the same FLOPs; the least, and every dtype seen, keep the bound a bound
        out[key(lay)] = (per_micro, dtypes) if was is None else (min(was[0], per_micro), was[1] | dtypes)
    return out


def bound_us(lay, per_stage: list, ref: tuple, gpu) -> float:
    """The layout's step can be no shorter than this (us); `per_stage`: the blocks of each of its pipeline's
    stages in order ([all of them] without one); `ref`: references()' entry for its key."""
    per_micro, dtypes = ref
    model = gpu.compute_model()
    rate = max(model.fastest_flops_per_s(d, gpu.peak(d)) for d in dtypes)
    largest = max(per_stage)
    last = len(per_stage) - 1 - per_stage[::-1].index(largest)   # the latest of the largest: the most before it
    schedule = (lay.schedule or "1F1B").lower()
    before = sum(per_stage[:last]) if len(per_stage) > 1 and schedule in ONE_STAGE_A_RANK else 0
    return (lay.microbatches * largest + before) * per_micro / rate * 1e6


def threshold_us(ranked: list, top: int) -> float | None:
    """The --top-th fastest step among the layouts that ran and fit (None: fewer than --top did)."""
    steps = sorted(o.step_us for o in ranked if o.ranked)
    return steps[top - 1] if len(steps) >= top else None

