"""The layouts `astra-compile plan` searches: every way to lay a model file out on a cluster's GPUs for one global
batch that the file supports.

A layout is a mesh (its axes' sizes multiply to the GPU count), a micro-batch size and count (their product is
the rank's local batch: the global batch over the data-parallel ranks), an activation checkpointing choice and,
with a pipeline, its schedule. The axes a file supports are those `plan_space()` allows, else what the file shows:
`dp` always (DDP), `fsdp` with FSDP_UNITS, `tp` with a TP_PLAN, `pp` with pipeline_stage(), and the axes of its
own `mesh_axes()` where it has a parallelize(). Pruned before anything runs:
- tensor parallelism beyond one node (its all-reduces would cross the scale-out network) and sizes that are not
  powers of two;
- dp and fsdp together (HSDP is left to plan_space());
- a pipeline with fewer micro-batches than stages (mostly bubble), or with more stages than the model has
  repeated blocks (a stage without one);
- a global batch the data-parallel ranks do not divide.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ...network.errors import UserError
from ..frontend.layout import CHECKPOINTING

AXES = ("pp", "dp", "fsdp", "tp")   # mesh order: the last axis varies fastest (consecutive GPUs: one node)
DATA_AXES = ("dp", "fsdp")
# the pipeline schedules a plan may try (PIPELINE's names, frontend/pipeline.py; the looped ones run torch's
# default of 2 stages per rank)
SCHEDULES = ("1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
SPACE_KEYS = ("axes", "dp", "fsdp", "tp", "pp", "micro_batch", "checkpointing", "schedule", "depth")


@dataclass(frozen=True)
class Layout:
    mesh: tuple            # ((axis, size), ...) in AXES order, sizes >= 2 only; () for one GPU
    micro_batch: int
    microbatches: int
    checkpointing: str     # one of CHECKPOINTING
    schedule: str | None   # with a pp axis

    @property
    def axes(self) -> dict:
        return dict(self.mesh)

    def mesh_text(self, world: int) -> str:
        """--mesh for this layout (dp=1 spelled out where every axis is 1)."""
        return ",".join(f"{a}={n}" for a, n in self.mesh) or f"dp={world}"

    def label(self, world: int) -> str:
        pipe = f", {self.schedule}" if self.schedule else ""
        return (f"{self.mesh_text(world)}, micro-batch {self.micro_batch} x {self.microbatches}, "
                f"checkpointing {self.checkpointing}{pipe}")


@dataclass(frozen=True)
class Space:
    axes: tuple                # axes the file supports
    sizes: dict                # axis -> allowed sizes (None: any)
    micro_batch: tuple | None  # allowed micro-batch sizes (None: any power of two dividing the local batch)
    checkpointing: tuple
    schedule: tuple
    depth: str | None = None   # the file's constant that counts its repeated blocks (plan/depth.py)


def space_of(spec, names: dict, path: str) -> Space:
    """The file's search space: plan_space() where it defines one, else what its names show."""
    asked = names.get("plan_space")
    given = {}
    if asked is not None:
        try:
            given = asked() if callable(asked) else asked
        except Exception as e:  # the user's function: one line
            raise UserError(f"{path}: plan_space() failed: {type(e).__name__}: {e}") from None
        if not isinstance(given, dict) or set(given) - set(SPACE_KEYS):
            raise UserError(f"{path}: plan_space() must return a dict with keys among {', '.join(SPACE_KEYS)}, "
                            f"got {given!r}")
    axes = given.get("axes")
    if axes is None:
        axes = ["dp"]
        if spec.fsdp_units:
            axes.append("fsdp")
        if spec.tp_plan or spec.parallelize is not None and "tp" in _file_axes(spec):
            axes.append("tp")
        if spec.pipeline_stage is not None:
            axes.append("pp")
        if spec.parallelize is not None:
            axes = sorted(set(axes) | set(_file_axes(spec)), key=_axis_order)
    if not isinstance(axes, (list, tuple)) or not axes or set(axes) - set(AXES):
        raise UserError(f"{path}: plan_space()['axes'] = {axes!r}: expected a list among {', '.join(AXES)}")
    sizes = {}
    for a in AXES:
        v = given.get(a)
        if v is not None and (not isinstance(v, (list, tuple)) or not all(_positive(x) for x in v)):
            raise UserError(f"{path}: plan_space()['{a}'] = {v!r}: expected a list of sizes")
        sizes[a] = tuple(v) if v is not None else None
    micro = given.get("micro_batch")
    if micro is not None and (not isinstance(micro, (list, tuple)) or not all(_positive(x) for x in micro)):
        raise UserError(f"{path}: plan_space()['micro_batch'] = {micro!r}: expected a list of sizes")
    ck = tuple(given.get("checkpointing", CHECKPOINTING))
    if not ck or set(ck) - set(CHECKPOINTING):
        raise UserError(f"{path}: plan_space()['checkpointing'] = {list(ck)!r}: expected a list among "
                        f"{', '.join(CHECKPOINTING)}")
    sched = tuple(given.get("schedule", ("1F1B",)))
    if not sched or set(sched) - set(SCHEDULES):
        raise UserError(f"{path}: plan_space()['schedule'] = {list(sched)!r}: expected a list among "
                        f"{', '.join(SCHEDULES)}")
    return Space(tuple(sorted(set(axes), key=_axis_order)), sizes, tuple(micro) if micro else None, ck, sched,
                 given.get("depth"))


def _file_axes(spec) -> list:
    """The axes of the file's own mesh_axes() (any world size it accepts: tried on a few)."""
    if spec.mesh_axes is None:
        return []
    for world in (64, 512, 16, 8):
        try:
            return [a for a in dict(spec.mesh_axes(world)) if a in AXES]
        except Exception:
            continue
    return []


def _axis_order(a: str) -> int:
    return AXES.index(a) if a in AXES else len(AXES)


def _positive(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _powers_of_two(n: int) -> list[int]:
    return [1 << k for k in range(n.bit_length()) if n % (1 << k) == 0]


def layouts(space: Space, world: int, gpus_per_node: int, global_batch: int,
            blocks: int = 0) -> list[Layout]:
    """Every layout of `space` on `world` GPUs for `global_batch` samples per step, pruned as the module says
    (`blocks`: the model's repeated blocks, frontend/layout.repeated_blocks; 0: not known, no limit on stages)."""
    out = []
    choices = []
    for a in space.axes:
        allowed = space.sizes[a] or _powers_of_two(world)
        if a == "tp" and space.sizes[a] is None:
            allowed = [n for n in allowed if n <= gpus_per_node]
        choices.append([n for n in allowed if world % n == 0])
    for sizes in itertools.product(*choices):
        axes = dict(zip(space.axes, sizes))
        if math.prod(sizes) != world:
            continue
        if space.sizes.get("dp") is None and space.sizes.get("fsdp") is None and \
                axes.get("dp", 1) > 1 and axes.get("fsdp", 1) > 1:
            continue
        data = axes.get("dp", 1) * axes.get("fsdp", 1)
        if global_batch % data:
            continue
        local = global_batch // data
        mesh = tuple((a, axes[a]) for a in AXES if axes.get(a, 1) > 1)
        pp = axes.get("pp", 1)
        if blocks and pp > blocks:
            continue
        micro_sizes = space.micro_batch or _powers_of_two(local)
        for mb in micro_sizes:
            if local % mb:
                continue
            count = local // mb
            if pp > 1 and count < pp:
                continue
            for ck in space.checkpointing:
                for sched in (space.schedule if pp > 1 else (None,)):
                    out.append(Layout(mesh, mb, count, ck, sched))
    return out

