"""A block's serial time, measured once per tensor-parallel size, micro-batch size and checkpointing: the tighter of
the two lower bounds plan/step_bound.py puts on a layout's step (docs/plan.md, "Skipped by their step's bound").

A rank runs its compute ops one at a time on its compute stream in issue order, and a tensor-parallel all-reduce
whose result the next op reads holds the stream until it ends (docs/workloads.md, "The workload engine"). So each
block's forward and backward, for each micro-batch, occupies the critical rank's stream for at least the time it
takes where nothing else runs beside it: the model file run on its tensor-parallel group alone (`--mesh tp=T`, one
micro-batch, no data parallelism or pipeline), on a topology of T GPUs with the cluster's own intra-node fabric,
bandwidth and latency (where a layout's tp group lies: plan/space.py keeps tp inside a node); without tensor
parallelism, the model as built on one GPU (frontend/layout.py's `unsharded`, `--mesh dp=2` on 2 GPUs: a topology
has 2 NPUs or more, and the second trains its own copy; a file with a parallelize() of its own has no such probe,
as its parallelize() is what makes its layouts). Such a probe runs
at two depths (depth.DEPTHS blocks) and its forward-and-backward span (the backward's end less the forward's
start: not the optimizer step, which a layout runs once per step, not per micro-batch) grows by the block's
serial time. A layout adds to that only: data parallelism's and FSDP2's ops and collectives, other ranks'
traffic on the same links, gradient accumulation's additions, the pipeline's waits; none makes a block's ops or
its all-reduces shorter.

A probe of a file without a parallelize() of its own is trusted from the start: plan lays such a file out itself
(frontend/parallelize.apply_builtin: TP_PLAN's styles, FSDP2 without a MixedPrecisionPolicy, DDP), the probe as
its layouts, and none of it changes the dtype a block computes in. A file's own parallelize() may (FSDP2's
MixedPrecisionPolicy casting fp32 parameters to bf16 would make the probe slower than the layout), so its probe is
trusted for a layout only once a layout of the same kind (the same tp, micro-batch size, checkpointing, and FSDP2
or not) has run at reduced depth and done at least the probe's FLOPs per block and micro-batch in every dtype
(`trusted`).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from ..frontend.layout import layout_file_text
from ..sweep.spec import Point
from .depth import DEPTHS
from .rank import cell_json, flops_per_block

# the results file's points: each layout's runs are point(i, 0..2, n) < 3 n (rank.point); probe j's two depths
# follow them
FIRST_PROBE_POINT = 3


@dataclass(frozen=True)
class Probe:
    tp: int
    micro_batch: int
    checkpointing: str

    @property
    def key(self) -> tuple:
        """step_bound.key of the layouts it bounds."""
        return self.tp, self.micro_batch, self.checkpointing

    @property
    def mesh(self) -> str:
        return f"tp={self.tp}" if self.tp > 1 else "dp=2"

    @property
    def gpus(self) -> int:
        return max(self.tp, 2)

    def label(self) -> str:
        return f"probe tp={self.tp}, micro-batch {self.micro_batch}, checkpointing {self.checkpointing}"

    def file(self, folder: str, run: str) -> str:
        """The layout file of its run `run` ("depth3", "head", ...) in `folder`."""
        return os.path.join(folder, f"probe_tp{self.tp}_mb{self.micro_batch}_{self.checkpointing}_{run}.py")


def on_node_fabric(cluster, sizes: list[int]) -> dict:
    """A probe run's network: dimensions of `sizes` NPUs each of the cluster's intra-node fabric, with its
    bandwidth and latency (where a layout's tp group lies, plan/space.py, and a head probe's two stages)."""
    bandwidth, latency = cluster.bandwidth().split(",")[0], cluster.latency().split(",")[0]
    return {"topology": "_".join(f"{cluster.intra_block}({n})" for n in sizes),
            "bandwidth": ",".join([bandwidth] * len(sizes)), "latency": ",".join([latency] * len(sizes))}


def probes(found: list, indices: list, cluster, depth_name: str | None, own_parallelize: bool, kind) -> list[Probe]:
    """One probe per (tp, micro-batch size, checkpointing) among the layouts `indices` with tp inside a node (tp=1
    only for a file without a parallelize() of its own, on a node of 2 GPUs or more) where a kind (`kind(layout)`:
    step_bound.kind) has two layouts or more: a lone kind's probe would run twice to bound one layout (and with a
    parallelize() of the file's own that layout runs first anyway, plan/order.py). None without the file's depth
    constant (plan/depth.py), which sets the probe's blocks."""
    if depth_name is None or cluster.per_node < 2:
        return []
    kinds = Counter(kind(found[i]) for i in indices)
    keys = {k[:3] for k, n in kinds.items() if n > 1}
    lowest = 2 if own_parallelize else 1
    return [Probe(*k) for k in sorted(keys) if lowest <= k[0] <= cluster.per_node]


def point_index(j: int, k: int, layouts: int) -> int:
    """The results file's point of probe j's run k (0, 1: depth.DEPTHS) in a plan of `layouts` layouts."""
    return FIRST_PROBE_POINT * layouts + 2 * j + k


def sweep_points(path: str, digest: str, found_count: int, made: list[Probe], depth_name: str, folder: str,
                 cluster, cluster_name: str, options: dict, files: bool, write) -> list[Point]:
    """The probes' points (and, with `files`, their model files in `folder`, written by `write(file, text)`)."""
    points = []
    for j, probe in enumerate(made):
        for k, blocks in enumerate(DEPTHS):
            file = probe.file(folder, f"depth{blocks}")
            if files:
                write(file, layout_file_text(path, digest, probe.micro_batch, 1, probe.checkpointing, None, False,
                                             probe.label(), (depth_name, blocks), unsharded=probe.tp == 1))
            points.append(Point(point_index(j, k, found_count),
                                {"input": file, "cluster": cluster_name, "mesh": probe.mesh,
                                 **on_node_fabric(cluster, [probe.gpus]), **options},
                                {"layout": probe.label(), "depth": str(blocks)}))
    return points


@dataclass(frozen=True)
class Serial:
    """A probe's measure of a block, for one micro-batch: its serial time (us: the span's growth, its host's issuing
    included), its compute alone (gpu_us: the forward's and backward's compute), and its FLOPs by dtype; and of the
    rest of the model (the embedding, the head, the loss: the span at depth.DEPTHS[0] blocks less theirs), its
    serial time and compute."""
    us: float
    gpu_us: float
    flops: dict
    rest_us: float = 0.0
    rest_gpu_us: float = 0.0


def ran(rows: list[dict], made: list[Probe], found_count: int):
    """(probe, its two runs' rows) of each probe whose two runs both ran."""
    by_point = {int(r["point"]): r for r in rows}
    for j, made_probe in enumerate(made):
        runs = [by_point.get(point_index(j, k, found_count)) for k in (0, 1)]
        if all(r is not None and r.get("status") == "ok" for r in runs):
            yield made_probe, runs


def measured(rows: list[dict], made: list[Probe], found_count: int) -> dict:
    """step_bound.key -> Serial, from the probes whose two runs ran (a probe the file refuses, say a mesh of tp
    alone, measures nothing: its layouts keep the FLOPs bound)."""
    out = {}
    for probe, runs in ran(rows, made, found_count):
        spans = [span_of(r) for r in runs]
        if None in spans or spans[1][0] <= spans[0][0]:
            continue
        blocks = DEPTHS[1] - DEPTHS[0]
        by_dtype = flops_per_block(*runs, blocks)
        us, gpu_us = (spans[1][0] - spans[0][0]) / blocks, max(spans[1][1] - spans[0][1], 0.0) / blocks
        out[probe.key] = Serial(us, gpu_us, {d: f for d, f in by_dtype.items() if f > 0},
                                max(spans[0][0] - DEPTHS[0] * us, 0.0), max(spans[0][1] - DEPTHS[0] * gpu_us, 0.0))
    return out


def activations(rows: list[dict], made: list[Probe], found_count: int) -> dict:
    """step_bound.key -> bytes a block's activations hold for one micro-batch, at least (memory.in_flight_bound),
    from the probes whose two runs ran and kept their memory: the growth per block of the activations live at the
    step's peak (its backward's start, where they are all saved), or, where the peak lies in the optimizer step
    (no activations left), of the forward's own peak less that of the parameters, gradients and optimizer states
    live at the step's peak (which the forward holds at most); the larger of the two, as each falls short of the
    activations a block saves."""
    out = {}
    for made_probe, runs in ran(rows, made, found_count):
        memory = [cell_json(r.get("memory"), None) for r in runs]
        if not all(isinstance(m, dict) and isinstance(m.get("at_peak_bytes"), dict)
                   and "forward" in (m.get("phase_peak_bytes") or {}) for m in memory):
            continue
        first, second = memory

        def grown(get) -> float:
            return (get(second) - get(first)) / (DEPTHS[1] - DEPTHS[0])

        def weights(m: dict) -> int:
            return sum(m["at_peak_bytes"].get(c, 0) for c in ("parameters", "gradients", "optimizer_states"))
        saved = grown(lambda m: m["at_peak_bytes"].get("activations", 0))
        forward = grown(lambda m: m["phase_peak_bytes"]["forward"]) - grown(weights)
        out[made_probe.key] = int(max(saved, forward, 0))
    return out


def span_of(row: dict) -> tuple | None:
    """(the forward's start to the backward's end, the two phases' compute) in us, from the report's phases."""
    phases = {p.get("phase"): p for p in cell_json(row.get("phases"), []) if isinstance(p, dict)}
    if "forward" not in phases or "backward" not in phases:
        return None
    return (float(phases["backward"]["end_us"]) - float(phases["forward"]["start_us"]),
            float(phases["forward"]["compute_us"]) + float(phases["backward"]["compute_us"]))


def trusted(serial: Serial, done: dict | None) -> bool:
    """May the probe bound layouts of a kind whose reduced-depth runs did `done` ({dtype: FLOPs per block and
    micro-batch}, the least over that kind's layouts; None: none has run)? Only where none of the probe's dtypes
    does more FLOPs than they did: the probe computes what they compute, not in a slower dtype."""
    if not done or not serial.flops:   # (a probe that counted no FLOPs cannot show what it computes)
        return False
    return all(f <= done.get(d, 0) * (1 + 1e-9) for d, f in serial.flops.items())
