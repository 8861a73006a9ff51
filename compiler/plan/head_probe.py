"""What a pipeline's last stage computes for each micro-batch beyond its blocks: its head (the final norm, the
output layer, the loss), the part of the pipeline's work plan/step_bound.py's bound on the rank holding that stage
would otherwise leave out (docs/plan.md, "Skipped by their step's bound"). On a Llama-3-70B shape the output
layer alone is about 8 blocks' FLOPs at tp=8.

A block probe (probe.py) runs the model on its tensor-parallel group alone: its forward and backward compute at d
blocks is E + H + d x C, with C a block's, E what the model computes before its blocks (the embedding) and H after
them. A head probe runs the same model at 2 x STAGE_BLOCKS blocks as a pipeline of 2 stages (`--mesh pp=2,tp=T`,
MICROBATCHES micro-batches, 1F1B) on 2 x T GPUs: the report is the first stage's rank, whose forward and backward
compute is MICROBATCHES x (E + STAGE_BLOCKS x C). So H = (E + H) - E: each compute op's time is the compute
model's, the same in both runs, so H is exact, not a difference of noisy measures (a pipeline adds compute to its
first stage, if anything, which only makes H smaller). The host's issuing and the stream's waits are not in H: it
bounds the head from below.

H belongs to the last stage of a layout's pipeline only where that stage holds every module outside the blocks
that the first of 2 stages does not (`applies`: depth.outside_blocks on the file's own split of the model built
on fake tensors); a file whose split leaves, say, a norm on a middle stage gets no head term.
"""
from __future__ import annotations

from ..frontend.layout import layout_file_text
from ..sweep.spec import Point
from . import depth
from .probe import FIRST_PROBE_POINT, Probe, on_node_fabric, span_of

STAGE_BLOCKS = 2   # blocks on each of a head probe's 2 stages (the file's depth constant set to twice this)
MICROBATCHES = 2   # torch's 1F1B takes no fewer micro-batches than stages


def applies(spec, path: str, depth_name: str, count: int) -> bool:
    """Does the last of `count` stages of the file's split hold every module outside the blocks that the first of
    2 stages does not, and does that first stage hold the same ones on the head probe's shallower model?"""
    first = depth.outside_blocks(spec, path, None, None, 0, 2)
    probed = depth.outside_blocks(spec, path, depth_name, 2 * STAGE_BLOCKS, 0, 2)
    every = depth.outside_blocks(spec, path, None, None, None, count)
    last = depth.outside_blocks(spec, path, None, None, count - 1, count)
    return None not in (first, probed, every, last) and first == probed and every - first <= last


def probes(made: list[Probe], stage_counts: set, spec, path: str, depth_name: str | None) -> tuple[list, set]:
    """(the head probes: one per block probe `made`, where a layout's pipeline of `stage_counts` stages (pp x
    stages per rank) may use it; the counts whose last stage holds the head, `applies`). None without a
    pipeline_stage() of the file's, or where its split of the shallower model does not hold STAGE_BLOCKS a stage."""
    if depth_name is None or spec.pipeline_stage is None or not made or not stage_counts:
        return [], set()
    if depth.blocks_at(path, depth_name, 2 * STAGE_BLOCKS, 2) != [STAGE_BLOCKS, STAGE_BLOCKS]:
        return [], set()
    counts = {c for c in stage_counts if applies(spec, path, depth_name, c)}
    return (list(made), counts) if counts else ([], set())


def point_index(j: int, block_probes: int, layouts: int) -> int:
    """The results file's point of head probe j: after the block probes' (probe.point_index)."""
    return FIRST_PROBE_POINT * layouts + 2 * block_probes + j


def sweep_points(path: str, digest: str, found_count: int, block_probes: int, heads: list[Probe], depth_name: str,
                 folder: str, cluster, cluster_name: str, options: dict, files: bool, write) -> list[Point]:
    """The head probes' points (and, with `files`, their model files in `folder`, written by `write(file, text)`)."""
    points = []
    for j, head in enumerate(heads):
        file, label = head.file(folder, "head"), f"head {head.label()}"
        if files:
            write(file, layout_file_text(path, digest, head.micro_batch * MICROBATCHES, MICROBATCHES,
                                         head.checkpointing, "1F1B", True, label, (depth_name, 2 * STAGE_BLOCKS)))
        points.append(Point(point_index(j, block_probes, found_count),
                            {"input": file, "cluster": cluster_name,
                             "mesh": "pp=2" + (f",tp={head.tp}" if head.tp > 1 else ""),
                             **on_node_fabric(cluster, [head.tp, 2] if head.tp > 1 else [2]), **options},
                            {"layout": label, "depth": str(2 * STAGE_BLOCKS)}))
    return points


def measured(rows: list[dict], heads: list[Probe], block_probes: int, found_count: int, serial: dict) -> dict:
    """step_bound.key -> H (us, one micro-batch), from the head probes that ran and whose block probe measured
    (probe.measured's `serial`); none where H comes out 0 or less."""
    by_point = {int(r["point"]): r for r in rows}
    out = {}
    for j, head in enumerate(heads):
        row, block = by_point.get(point_index(j, block_probes, found_count)), serial.get(head.key)
        if block is None or row is None or row.get("status") != "ok" or (span := span_of(row)) is None:
            continue
        h = block.rest_gpu_us - (span[1] / MICROBATCHES - STAGE_BLOCKS * block.gpu_us)
        if h > 0:
            out[head.key] = h
    return out
