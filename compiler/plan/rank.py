"""The layouts of a plan ranked: each run's report read back from the results file, the figures users compare
layouts by derived from it, and the table `astra-compile plan` prints.

- step time: the report's total_time_us (every layout runs the same global batch, so step times compare directly);
- tokens/s per GPU: global batch x tokens per sample / step time / GPUs;
- MFU: the step's model FLOPs (every phase but the recomputed forward) per GPU over the step time and the peak of
  the dtype most of them run in, of the cluster's GPU;
- memory: what the rank needs at its peak (the report's `memory.needs_bytes`: the caching allocator's reserved
  bytes, NCCL's buffers and the CUDA context), against the GPU's capacity;
- exposed communication and idle time (on a pipeline, mostly its bubble), from the report's breakdown.
A layout run at two shallower depths (plan/depth.py) has each of these on the line through its two runs, at its
real depth; the table's `depth` column and the JSON's `extrapolated`, `depths` and `blocks` say so.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ...network.dtypes import DTYPES


# a lead that shrinks by less than this share of the step between the two depths is taken as steady (host_limited)
LEAD_NOISE = 1e-4
# a layout's runs, as the results file numbers them (point): whole, or at its two shallower depths (the first at
# the layout's own number), and whole again where its host falls behind with depth (host_limited)
FIRST_DEPTH, SECOND_DEPTH, WHOLE_AGAIN = 0, 1, 2


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory as a run's report gives it: what it needs (the allocator's reserve, NCCL's buffers and the
    CUDA context), the tensors live at its peak, the allocator's reserve, and each phase's own peak of tensors."""
    needs: int
    allocated: int | None
    reserved: int | None
    phases: dict | None


def point(i: int, run: int, layouts: int) -> int:
    """The results file's point number of layout `i`'s `run` (FIRST_DEPTH, a whole run too, SECOND_DEPTH or
    WHOLE_AGAIN) in a plan of `layouts` layouts."""
    return i + run * layouts


@dataclass
class Outcome:
    index: int
    layout: object              # space.Layout
    error: str | None = None
    step_us: float = 0.0
    tokens_per_gpu_s: float = 0.0
    mfu: float = 0.0
    peak_bytes: int | None = None
    capacity_bytes: int | None = None
    exposed_comm_us: float = 0.0
    idle_us: float = 0.0
    estimated: bool = False     # not run: its memory's lower bound (plan/memory.py) already exceeds the GPU's
    extrapolation: object = None   # plan/depth.Extrapolation: figures from two shallower runs (None: run whole)
    allocated_bytes: int | None = None   # the report's memory.peak_bytes: the tensors live at the peak
    reserved_bytes: int | None = None    # its reserved_bytes: the caching allocator's segments at their peak
    phase_bytes: dict | None = None      # its phase_peak_bytes: each phase's own peak of live tensors
    bound_us: float | None = None        # its step is at least this (plan/step_bound.py; None: no bound known)
    skipped: bool = False                # not run: that bound is slower than the --top fastest (plan/order.py)
    # each rank whose memory the report gives (the reported one, and the one that needs the most where that is
    # another: a pipeline's first stage holds the most micro-batches in flight, its last the loss's logits):
    # rank -> RankMemory. A shallower run's most may be another stage than the real depth's (_extrapolated)
    memories: dict | None = None

    @property
    def ranked(self) -> bool:
        """Ran (or was extrapolated), fits a GPU's memory: among the layouts the table ranks."""
        return self.error is None and self.fits and not self.skipped

    @property
    def fits(self) -> bool:
        return self.peak_bytes is None or self.capacity_bytes is None or self.peak_bytes <= self.capacity_bytes

    def as_dict(self, world: int) -> dict:
        lay = self.layout
        return {"layout": lay.label(world), "mesh": lay.mesh_text(world), "micro_batch": lay.micro_batch,
                "microbatches": lay.microbatches, "checkpointing": lay.checkpointing, "schedule": lay.schedule,
                "status": "error" if self.error is not None else "skipped" if self.skipped else "ok",
                "error": self.error or "", **({"step_bound_us": self.bound_us} if self.bound_us is not None else {}),
                "step_time_us": self.step_us, "tokens_per_s_per_gpu": self.tokens_per_gpu_s, "mfu": self.mfu,
                "peak_memory_bytes": self.peak_bytes, "capacity_bytes": self.capacity_bytes, "fits": self.fits,
                "exposed_comm_us": self.exposed_comm_us, "idle_us": self.idle_us, "memory_estimated": self.estimated,
                **self.depth_dict()}

    def depth_dict(self) -> dict:
        """Whether the figures are extrapolated, from which depths (blocks per pipeline stage, in all without a
        pipeline) to which (the largest stage's blocks)."""
        ex = self.extrapolation
        if ex is None:
            return {"extrapolated": False, "depths": None, "blocks": None}
        return {"extrapolated": True, "depths": list(ex.depths), "blocks": ex.real}


def outcomes(rows: list[dict], layouts: list, world: int, global_batch: int, seq: int, cluster,
             pruned: dict | None = None, depths: dict | None = None, skipped: dict | None = None,
             bounds: dict | None = None, slack_with_tensors: bool = False) -> list[Outcome]:
    """Every layout's outcome, ranked: those that ran and fit by step time, then those over memory (`pruned`:
    {index: lower bound in bytes} of those not run, plan/memory.py), then failures. `depths`: {index:
    plan/depth.Extrapolation} of the layouts run at two shallower depths (point index, then index + len(layouts)),
    whose figures are extrapolated to the real depth, or taken from the layout's whole run where it ran again
    whole (host_limited). `skipped`: {index: bound} of those not run, their step surely slower than the --top
    fastest (plan/step_bound.py); `bounds`: {index: bound} of the others whose bound is known.
    `slack_with_tensors`: the model file leaves the caching allocator's expandable segments off, so its slack
    grows with the live tensors (_extrapolated)."""
    from ...network import devices
    gpu = devices.resolve(cluster.gpu)
    by_index = {int(r["point"]): r for r in rows}
    depths = depths or {}
    n = len(layouts)
    out = []
    for i, lay in enumerate(layouts):
        if pruned and i in pruned:
            out.append(Outcome(i, lay, peak_bytes=pruned[i], capacity_bytes=int(gpu.memory_gb * 1e9),
                               estimated=True))
        elif skipped and i in skipped:
            out.append(Outcome(i, lay, bound_us=skipped[i], skipped=True))
        elif i in depths and point(i, WHOLE_AGAIN, n) not in by_index:
            runs = [_from_row(i, lay, by_index.get(point(i, k, n)), world, global_batch, seq, gpu)
                    for k in (FIRST_DEPTH, SECOND_DEPTH)]
            out.append(_extrapolated(runs, depths[i], world, global_batch, seq, slack_with_tensors))
        else:
            whole = point(i, WHOLE_AGAIN if i in depths else FIRST_DEPTH, n)
            out.append(_from_row(i, lay, by_index.get(whole), world, global_batch, seq, gpu))
    for o in out:
        if bounds and not o.skipped and o.index in bounds:
            o.bound_us = bounds[o.index]
    return sorted(out, key=lambda o: (o.error is not None, o.skipped, not o.fits, o.step_us, o.bound_us or 0.0,
                                      o.index))


def _from_row(i: int, lay, row: dict | None, world: int, global_batch: int, seq: int, gpu) -> Outcome:
    """One run's outcome, from its results row."""
    if row is None:
        return Outcome(i, lay, error="did not run")
    if row.get("status") != "ok":
        return Outcome(i, lay, error=row.get("error") or "failed")
    step_us = float(row["total_time_us"])
    o = Outcome(i, lay, step_us=step_us, exposed_comm_us=float(row["exposed_comm_time_us"] or 0.0))
    o.idle_us = float(cell_json(row.get("breakdown_us"), {}).get("idle", 0.0))
    o.tokens_per_gpu_s = global_batch * seq / (step_us / 1e6) / world
    o.mfu = _mfu(row, step_us, gpu)
    memory = cell_json(row.get("memory"), None)
    if isinstance(memory, dict):   # what the rank needs: the allocator's reserve, NCCL and the CUDA context
        most = memory.get("most")
        reported = _int(row.get("rank"))
        o.memories = {rank: RankMemory(m.get("needs_bytes"), m.get("peak_bytes"), m.get("reserved_bytes"),
                                       m.get("phase_peak_bytes") or None)
                      for rank, m in ((reported, memory), (_int(most.get("rank")) if most else None, most))
                      if m is not None and isinstance(m.get("needs_bytes"), int)}
        memory = most or memory   # a layout fits where every rank does: another stage may need more
        o.peak_bytes = memory.get("needs_bytes")
        o.capacity_bytes = memory.get("capacity_bytes")
        o.allocated_bytes = memory.get("peak_bytes")
        o.reserved_bytes = memory.get("reserved_bytes")
        o.phase_bytes = memory.get("phase_peak_bytes") or None
    return o


def _int(value) -> int | None:
    """A rank number from a results cell or a memory object (None: not given)."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def host_limited(rows: list[dict], layouts: list, depths: dict) -> set:
    """The layouts run at reduced depth (`depths`) whose host issues a block's ops more slowly than their step
    grows by a block: the lead the GPU's work has over the host's issuing (the step's end less the host's last
    issue) shrinks with depth, and where it runs out, at the real depth or within a phase of it, the GPU waits for
    the host, which the shallower runs' line cannot show (docs/plan.md, "Limits"). A step host-bound at both
    depths, or one whose lead grows, stays on its line. Runs without a compute model (no host time) are none of
    them."""
    by_index = {int(r["point"]): r for r in rows}
    out = set()
    for i in depths:
        runs = [by_index.get(point(i, k, len(layouts))) for k in (FIRST_DEPTH, SECOND_DEPTH)]
        if any(r is None or r.get("status") != "ok" or not r.get("host_issue_us") for r in runs):
            continue
        lead = [float(r["total_time_us"]) - float(r["host_issue_us"]) for r in runs]
        if lead[1] < lead[0] - LEAD_NOISE * float(runs[1]["total_time_us"]):
            out.add(i)
    return out


def _extrapolated(runs: list[Outcome], ex, world: int, global_batch: int, seq: int,
                  slack_with_tensors: bool = False) -> Outcome:
    """The layout at its real depth from its two shallower runs (plan/depth.py): step, exposed communication, idle
    time (below) and the step's FLOPs (MFU x step time) on the line through the two; tokens/s from the step. Memory:
    the tensors live at the peak, each phase's on its line and the largest taken (_allocated), plus the deeper
    run's remainder (the caching allocator's slack, grown with the tensors where the file's allocator has no
    expandable segments: _slack_grown; NCCL's buffers, the CUDA context)."""
    first, second = runs
    failed = next((o for o in runs if o.error is not None), None)
    if failed is not None:
        at = ex.depths[runs.index(failed)]
        return Outcome(first.index, first.layout, error=f"at {ex.name} = {ex.settings[runs.index(failed)]} "
                                                        f"({at} blocks{_per_stage(first.layout)}): {failed.error}",
                       extrapolation=ex)
    # exposed communication and idle time are what a collective or a wait leaves after the overlap: on a line only
    # while it lasts (DDP's last bucket, exposed at 2 blocks, hides under 8 blocks' backward), so each is
    # extrapolated apart and floored at zero, and the step is the line of the rest (compute, exposed memory)
    # plus them
    comm = max(ex.at(first.exposed_comm_us, second.exposed_comm_us), 0.0)
    idle = max(ex.at(first.idle_us, second.idle_us), 0.0)
    busy = ex.at(*(r.step_us - r.exposed_comm_us - r.idle_us for r in runs))
    step_us = busy + comm + idle
    o = Outcome(first.index, first.layout, step_us=step_us, exposed_comm_us=comm, idle_us=idle,
                capacity_bytes=second.capacity_bytes, extrapolation=ex)
    if step_us <= 0:
        o.error = f"extrapolated step time {step_us:.0f} us from {first.step_us:.0f} and {second.step_us:.0f} us"
        return o
    o.tokens_per_gpu_s = global_batch * seq / (step_us / 1e6) / world
    o.mfu = ex.at(first.mfu * first.step_us, second.mfu * second.step_us) / step_us
    # each rank known at both depths on its own line, the one that needs the most at the real depth taken: a
    # pipeline's last stage (the loss's logits) may need the most at 2 and 3 blocks a stage, its first (a block's
    # activations for every micro-batch in flight) at 20
    pairs = [(a, second.memories[r]) for r, a in (first.memories or {}).items() if r in (second.memories or {})]
    if not pairs:
        pairs = [(RankMemory(first.peak_bytes, first.allocated_bytes, first.reserved_bytes, first.phase_bytes),
                  RankMemory(second.peak_bytes, second.allocated_bytes, second.reserved_bytes, second.phase_bytes))]
    lines = [_memory_line(a, b, ex, slack_with_tensors) for a, b in pairs
             if None not in (a.allocated, b.allocated, b.needs)]
    if lines:
        o.peak_bytes, o.allocated_bytes = max(lines)
    return o


def _memory_line(first: RankMemory, second: RankMemory, ex, slack_with_tensors: bool) -> tuple[int, int]:
    """(needs, allocated) of one rank at the real depth: the tensors live at its peak (_allocated) plus the deeper
    run's remainder (the caching allocator's slack, grown with the tensors where the file's allocator has no
    expandable segments: _slack_grown; NCCL's buffers, the CUDA context)."""
    allocated = round(_allocated(first, second, ex))
    return allocated + second.needs - second.allocated + _slack_grown(second, allocated, slack_with_tensors), \
        allocated


def _slack_grown(deeper: RankMemory, allocated: int, with_tensors: bool) -> int:
    """What the caching allocator's slack (reserved less allocated bytes at the peak) adds at the real depth, its
    tensors `allocated`, to the deeper shallow run's. It does not follow the blocks on a line: from 3 to 4 blocks it
    may not move at all, where the loss's logits set the peak, and grow with the optimizer's states at the real
    depth. With expandable segments (one segment per pool, grown in place) it stays about where the deeper run left
    it (torchtitan's 8B: 9.9 GiB at 4 blocks, 8.6 at 32): nothing added. Without (the allocator's default, and
    Megatron's) it grows with the tensors, a steady share of them (Megatron's 1B: about a quarter at 4 and at 24
    blocks), so it is scaled with them (docs/plan.md, "Limits")."""
    if not with_tensors or deeper.reserved is None or not deeper.allocated:
        return 0
    slack = deeper.reserved - deeper.allocated
    return round(slack * (allocated / deeper.allocated - 1))


def _allocated(first: RankMemory, second: RankMemory, ex) -> float:
    """The tensors live at the real depth's peak: each phase's own peak on its line and the largest taken, as the
    peak may move from one phase to another with depth (DDP with full checkpointing: the backward's logits at 2 and
    3 blocks, the optimizer step's gradients and states at 24); the step's peak on its line where the runs do not
    give their phases' (a record written before they were kept)."""
    a, b = first.phases, second.phases
    if a and b and set(a) == set(b):
        return max(ex.at(a[p], b[p]) for p in a)
    return ex.at(first.allocated, second.allocated)


def _per_stage(lay) -> str:
    return " per stage" if lay.axes.get("pp", 1) > 1 else ""


def cell_json(text, default):
    """A results file's cell holding JSON (a report field), read; `default` where it is empty or not JSON."""
    if not text:
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


def flops_by_dtype(row: dict) -> dict:
    """A run's FLOPs by dtype from its results row: the report's flops_by_dtype, or all of its FLOPs in fp32 where
    the report gives none (it leaves the field out when every FLOP is fp32)."""
    return cell_json(row.get("flops_by_dtype"), None) or {"fp32": float(row.get("flops") or 0)}


def flops_per_block(first: dict, second: dict, blocks: int) -> dict:
    """{dtype: FLOPs per block} from two runs' rows `blocks` blocks apart."""
    a, b = flops_by_dtype(first), flops_by_dtype(second)
    return {d: (float(b.get(d, 0)) - float(a.get(d, 0))) / blocks for d in set(a) | set(b) if d in DTYPES}


def _mfu(row: dict, step_us: float, gpu) -> float:
    phases = cell_json(row.get("phases"), [])
    flops = sum(p["flops"] for p in phases if p.get("phase") != "recompute") if phases else float(row["flops"])
    by_dtype = flops_by_dtype(row)
    dtype = max(by_dtype, key=by_dtype.get)
    peak = gpu.peak_tflops[DTYPES.index(dtype)] * 1e12 if dtype in DTYPES else 0.0
    return flops / (step_us / 1e6) / peak if peak > 0 and step_us > 0 else 0.0


def _depth_text(o: Outcome) -> str:
    """"full", or "2,3->80": the figures extrapolated from 2 and 3 blocks (per pipeline stage) to 80."""
    ex = o.extrapolation
    return "full" if ex is None else f"{ex.depths[0]},{ex.depths[1]}->{ex.real}"


def table(ranked: list[Outcome], top: int, world: int) -> str:
    """The best `top` layouts that ran and fit, then one line per kind of failure."""
    ok = [o for o in ranked if o.ranked]
    over = [o for o in ranked if o.error is None and not o.fits]
    skipped = [o for o in ranked if o.skipped]
    failed = [o for o in ranked if o.error is not None]
    head = ("rank", "layout", "step ms", "tokens/s/GPU", "MFU", "memory GiB", "exposed comm ms", "idle ms", "depth")
    rows = [head]
    for n, o in enumerate(ok[:top], start=1):
        mem = f"{o.peak_bytes / 2**30:.1f}" if o.peak_bytes is not None else "-"
        comm, idle = max(o.exposed_comm_us, 0.0) / 1e3, max(o.idle_us, 0.0) / 1e3   # no "-0.0" from rounding
        rows.append((str(n), o.layout.label(world), f"{o.step_us / 1e3:.1f}", f"{o.tokens_per_gpu_s:,.0f}",
                     f"{100 * o.mfu:.1f}%", mem, f"{comm:.1f}", f"{idle:.1f}", _depth_text(o)))
    widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
    lines = ["  ".join(c.ljust(w) if k == 1 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    estimated = sum(o.estimated for o in over)
    before = f" ({estimated} of them by their lower bound, not run)" if estimated else ""
    slower = f"{len(skipped)} not run, their step surely slower than the {top} fastest (its lower bound), " \
        if skipped else ""
    lines.append(f"{len(ranked)} layouts: {len(ok)} ran and fit, {len(over)} over a GPU's memory{before}, "
                 f"{slower}{len(failed)} failed")
    reasons: dict[str, int] = {}
    for o in failed:
        reasons[o.error] = reasons.get(o.error, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])[:5]:
        lines.append(f"  {count} failed: {reason}")
    return "\n".join(lines)
