"""Lower bounds on a layout's step, by which a plan skips layouts surely slower than the N fastest found
(docs/plan.md, "Skipped by their step's bound"; plan/order.py runs the layouts in order of them).

A rank computes its ops one at a time on its compute stream, and each rank of a pipeline computes its stages'
blocks for every micro-batch. With one stage a rank (1F1B, GPipe) it can start its first micro-batch only after
the stages before it have run theirs forward, and the step ends only after they have run the last one backward.
So, for every rank r, with blocks b_s of stage s,

    step >= micro-batches x (sum of b_s on r) x (a block's time) + (sum of b_s before r's) x (a block's compute)
            + micro-batches x the head's compute, where r holds the last stage (plan/head_probe.py)

(looped schedules: without the second term; without a pipeline, the one rank's blocks and, for each
micro-batch, the span of the rest of the model, plan/probe.py), where a block's time, for one micro-batch,
forward and backward, is at least
- its FLOPs over the GPU's fastest rate for their dtype (network/compute_model.py,
  ComputeModel.fastest_flops_per_s: a tensor-core class's fitted fraction of the peak, attention's over the half
  of the work a causal kernel may skip: self-attention, as many keys as queries); the FLOPs measured, from a
  layout timed at reduced depth with the same tensor-parallel size, micro-batch size and checkpointing (its
  reported rank's FLOPs at the two depths, their difference per block and micro-batch): `bound_us`;
- and, tighter, its serial time on its tensor-parallel group alone, all-reduces and the host's issuing included,
  measured by a probe (plan/probe.py) once a layout of its kind has shown the probe computes what it does:
  `serial_bound_us`.
Data parallelism, FSDP2 and the pipeline add ops, traffic and waits to a block, never take any away; a stage's
embedding or head only adds (the head's compute is counted where it is known to sit on the last stage). The
--top-th fastest step among the layouts that ran and fit only falls as more run, so a layout above it now stays
out of the top. A layout without either bound runs.
"""
from __future__ import annotations

from collections import Counter

from ...network.dtypes import DTYPES
from . import probe
from .depth import blocks_per_stage, stages_of
from .rank import FIRST_DEPTH, SECOND_DEPTH, flops_by_dtype, flops_per_block, point

ONE_STAGE_A_RANK = ("1f1b", "gpipe")   # schedules whose ranks wait on the stages before them as above


def key(lay) -> tuple:
    """What a block's FLOPs per micro-batch depend on among a layout's choices."""
    return lay.axes.get("tp", 1), lay.micro_batch, lay.checkpointing


def kind(lay) -> tuple:
    """The layouts a probe's trust carries over to (plan/probe.py, `trusted`): key() and whether FSDP2 shards them
    (its MixedPrecisionPolicy may change the compute dtype)."""
    return key(lay) + ("fsdp" in lay.axes,)


def _reference_runs(rows: list[dict], found: list, depths: dict):
    """(layout, its two runs, blocks on its reported rank at each) of each layout timed at reduced depth (`depths`:
    index -> Extrapolation) whose two runs both ran."""
    by_index = {int(r["point"]): r for r in rows}
    for i, ex in depths.items():
        runs = [by_index.get(point(i, k, len(found))) for k in (FIRST_DEPTH, SECOND_DEPTH)]
        if any(r is None or r.get("status") != "ok" or not r.get("flops") for r in runs):
            continue
        lay = found[i]
        per_rank = stages_of(lay)[1] if lay.axes.get("pp", 1) > 1 else 1   # a looped rank holds v stages
        yield lay, runs, [d * per_rank for d in ex.depths]


def references(rows: list[dict], found: list, depths: dict) -> dict:
    """key -> (FLOPs per block and micro-batch, the dtypes they ran in) from the layouts timed at reduced depth."""
    out: dict = {}
    for lay, runs, blocks in _reference_runs(rows, found, depths):
        per_micro = (float(runs[1]["flops"]) - float(runs[0]["flops"])) / (blocks[1] - blocks[0]) / lay.microbatches
        if per_micro <= 0:
            continue
        dtypes = set()
        for r in runs:
            dtypes |= {d for d, f in flops_by_dtype(r).items() if f and d in DTYPES}
        was = out.get(key(lay))
        # every reference of a key counts the same FLOPs; the least, and every dtype seen, keep the bound a bound
        out[key(lay)] = (per_micro, dtypes) if was is None else (min(was[0], per_micro), was[1] | dtypes)
    return out


def kind_flops(rows: list[dict], found: list, depths: dict) -> dict:
    """kind -> {dtype: FLOPs per block and micro-batch}, the least over that kind's layouts timed at reduced depth
    (a dtype one of them did not run in: 0), for probe.trusted."""
    out: dict = {}
    for lay, runs, blocks in _reference_runs(rows, found, depths):
        per = {d: f / lay.microbatches for d, f in flops_per_block(*runs, blocks[1] - blocks[0]).items()}
        was = out.get(kind(lay))
        out[kind(lay)] = per if was is None else {d: min(was.get(d, 0), per.get(d, 0)) for d in set(was) | set(per)}
    return out


def rank_paths(lay, per_stage: list) -> list[tuple[int, int, bool]]:
    """For each pipeline rank, the blocks its critical path runs one after another, each for one micro-batch
    (forward and backward): (its own stages' blocks for every micro-batch; those of the stages before its first,
    which with one stage a rank (1F1B, GPipe) run the first micro-batch forward before it can start and the last one
    backward after it has ended, else 0; whether it holds the last stage, and with it the head). `per_stage`: the
    blocks of each of the pipeline's stages in order ([all of them] without one); the stages sit on the ranks as
    torch's schedules put them (frontend/pipeline.py)."""
    pp = lay.axes.get("pp", 1)
    if pp == 1:
        return [(lay.microbatches * sum(per_stage), 0, True)]
    held = stages_held(lay, len(per_stage))
    last = len(per_stage) - 1
    one = (lay.schedule or "1F1B").lower() in ONE_STAGE_A_RANK
    return [(lay.microbatches * sum(per_stage[k] for k in held[r]), sum(per_stage[:held[r][0]]) if one else 0,
             last in held[r]) for r in range(pp)]


def stages_held(lay, stages: int) -> list[list[int]]:
    """The stages each pipeline rank holds, in order, as torch's schedules put them (frontend/pipeline.py)."""
    from torch.distributed.pipelining._utils import generate_rank_to_stage_mapping
    from ..frontend.pipeline import SCHEDULES
    held = generate_rank_to_stage_mapping(lay.axes["pp"], stages, SCHEDULES[(lay.schedule or "1F1B").lower()][1])
    return [held[r] for r in range(lay.axes["pp"])]


def bound_us(lay, per_stage: list, ref: tuple, gpu) -> float:
    """The layout's step can be no shorter than this (us), from the FLOPs of its blocks: `ref`, references()'
    entry for its key."""
    per_micro, dtypes = ref
    model = gpu.compute_model()
    rate = max(model.fastest_flops_per_s(d, gpu.peak(d)) for d in dtypes)
    return max(own + before for own, before, _ in rank_paths(lay, per_stage)) * per_micro / rate * 1e6


def serial_bound_us(lay, per_stage: list, serial, head_us: float | None = None) -> float:
    """The layout's step can be no shorter than this (us), from a block's serial time (plan/probe.Serial): each
    rank's own blocks at the probe's span, which its host's issuing bounds too, and the stages' before it at the
    probe's compute alone, as their hosts issue theirs while the stages before them compute; the largest over the
    ranks. Each micro-batch adds, without a pipeline, the rest of the model's span (embedding, head, loss), and on
    the rank holding a pipeline's last stage `head_us` (plan/head_probe.py; None: not known)."""
    if lay.axes.get("pp", 1) == 1:
        ((own, _, _),) = rank_paths(lay, per_stage)
        return own * serial.us + lay.microbatches * serial.rest_us
    head = lay.microbatches * (head_us or 0.0)
    return max(own * serial.us + before * serial.gpu_us + (head if last else 0.0)
               for own, before, last in rank_paths(lay, per_stage))


def threshold_us(ranked: list, top: int) -> float | None:
    """The --top-th fastest step among the layouts that ran and fit (None: fewer than --top did)."""
    steps = sorted(o.step_us for o in ranked if o.ranked)
    return steps[top - 1] if len(steps) >= top else None


class Bounds:
    """Each layout's lower bound on its step from the runs so far (`update`): the larger of the FLOPs bound and,
    where its probe is trusted for its kind (plan/probe.py: from the start for a file without a parallelize() of
    its own), the serial one; None where neither is known yet."""

    def __init__(self, spec, path: str, found: list, blocks: int, gpu, serial: dict, depths: dict,
                 heads: dict | None = None, head_counts: set = frozenset()):
        self.spec, self.path, self.found, self.blocks, self.gpu = spec, path, found, blocks, gpu
        # a probe of a file with a parallelize() of its own is trusted only by a run of its kind (probe.trusted)
        self.trust_by_runs = spec.parallelize is not None
        self.serial, self.depths = serial, depths       # probe.measured(); layout index -> Extrapolation
        # head_probe.measured(), and the stage counts whose last stage holds that head (head_probe.probes)
        self.heads, self.head_counts = heads or {}, head_counts
        self.refs: dict = {}
        self.kinds: dict = {}
        self._stages: dict = {}
        self._timed_keys = Counter(key(found[j]) for j in depths)   # layouts timed at reduced depth, by key

    def update(self, rows: list[dict]) -> None:
        self.refs = references(rows, self.found, self.depths)
        self.kinds = kind_flops(rows, self.found, self.depths)

    def per_stage(self, i: int) -> list | None:
        return blocks_per_stage(self.spec, self.path, self.found[i], self.blocks, self._stages)

    def of(self, i: int) -> float | None:
        lay = self.found[i]
        ref, serial = self.refs.get(key(lay)), self.serial.get(key(lay))
        if serial is not None and self.trust_by_runs and not probe.trusted(serial, self.kinds.get(kind(lay))):
            serial = None
        per_stage = self.per_stage(i) if ref or serial else None
        if not per_stage:
            return None
        out = [bound_us(lay, per_stage, ref, self.gpu)] if ref else []
        if serial is not None:
            out.append(serial_bound_us(lay, per_stage, serial, self.head(lay, per_stage)))
        return max(out)

    def may_bound(self, i: int) -> bool:
        """Can layout i have a bound, now or once more layouts have run: a probe of its key, or another layout of
        its key to time at reduced depth (its FLOPs)?"""
        k = key(self.found[i])
        return k in self.serial or self._timed_keys[k] > (i in self.depths)

    def head(self, lay, per_stage: list) -> float | None:
        """The head's compute for one micro-batch on the last stage of the layout's pipeline (None: not known)."""
        return self.heads.get(key(lay)) if len(per_stage) in self.head_counts else None

    def estimate(self, i: int) -> float:
        """Where to put the layout in the order the plan runs them: its bound, or its probe's not yet trusted
        (likely its bound once a layout of its kind has run), else 0 (first)."""
        bound = self.of(i)
        if bound is not None:
            return bound
        lay = self.found[i]
        serial = self.serial.get(key(lay))
        per_stage = self.per_stage(i) if serial is not None else None
        return serial_bound_us(lay, per_stage, serial, self.head(lay, per_stage)) if per_stage else 0.0
