"""Layouts timed on a shallower model and extrapolated to the real depth (docs/plan.md, "Reduced depth").

A layout's step time, exposed communication, idle time, FLOPs and memory per rank are, to first order, affine in
the number of repeated blocks a rank's stage holds: each block adds its compute, its collectives, its parameters,
gradients and optimizer states and its saved activations; the embedding, the head, the optimizer's launch and a
pipeline's fill and drain are the constant part. So `astra-compile plan` runs each layout at two shallower depths,
DEPTHS blocks in all without a pipeline and PIPELINE_DEPTHS blocks per stage with one, and evaluates the line
through the two at the real depth: two small captures instead of one of the whole model.

The depth is changed the way the file itself would build a shallower model: its top-level int constant that
counts the blocks (`plan_space()`'s "depth" names it; else the one top-level int equal to the model's repeated
blocks, frontend/layout.repeated_blocks) is set before the file's own code runs on (frontend/model_file.py), so
constants derived from it and the file's pipeline_stage() follow. The constant is used only once the model built
with it set to CHECKED (on fake tensors, once per plan) really has that many repeated blocks, and, for each
pipeline shape, each of its stages really holds as many blocks as it is set for.

A layout runs whole where no constant changes the depth, where the two shallower models together hold as many
blocks as the real one (their captures would cost as much), with a pipeline
the file's own parallelize() builds, and with --depth full.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ...network.errors import UserError

# Blocks in all of the two shallower runs of a layout without a pipeline. Both hold a first, a last and a middle
# block, so edge effects (FSDP's prefetch of the next block, a last block that does not reshard, DDP's bucket
# boundaries) are in both points, and FSDP2's gathers have reached their steady depth: it keeps about three
# units' parameters gathered at a time, so a 2-block model gathers fewer and a line from 2 to 3 blocks overshot a
# 12-block model's memory by 44 % (docs/plan.md, Limits).
DEPTHS = (3, 4)
# Blocks per stage of a pipeline's two shallower runs: 2 and 3 keep a first and a last block in each stage, and a
# pipeline's capture costs its stages more than its blocks (docs/plan.md, Limits: FSDP inside a stage).
PIPELINE_DEPTHS = (2, 3)
CHECKED = (3, 4)   # a constant sets the depth when the model built with it at these has that many blocks (2 or
#                    more: a single block is no repeated layer, frontend/layout.repeated_blocks)


@dataclass(frozen=True)
class Extrapolation:
    """How one layout is timed: at `depths` (blocks per stage, in all without a pipeline) with the file's
    `name` set to `settings` (the blocks in all at each depth), extrapolated to `real` blocks (the largest
    stage's)."""
    name: str
    depths: tuple      # the two shallower runs' blocks (per stage with a pipeline)
    settings: tuple    # the constant's value at each depth
    real: int

    def at(self, first: float, second: float) -> float:
        """The line through (depths[0], first) and (depths[1], second) at the real depth."""
        d1, d2 = self.depths
        return first + (second - first) * (self.real - d1) / (d2 - d1)


@dataclass(frozen=True)
class DepthPlan:
    name: str | None                 # the depth constant; None: every layout runs whole
    why_whole: str                   # why none is used (name None), for the plan's closing line
    layouts: dict                    # layout index -> Extrapolation (the others run whole)


def plan(spec, names: dict, path: str, blocks: int, found: list, skip: set, asked, whole: bool = False) \
        -> DepthPlan:
    """Which layouts run at reduced depth. `asked`: plan_space()'s "depth" (None: look for the constant);
    `skip`: layouts that do not run; `blocks`: the model's repeated blocks; `whole`: --depth full."""
    if whole:
        return DepthPlan(None, "--depth full", {})
    _BUILT.clear()   # one plan's builds: the file may have changed since the last plan in this process
    name = _checked_name(spec, names, path, blocks, asked)
    if name is None:
        return DepthPlan(None, f"no top-level int of {os.path.basename(path)} equal to its {blocks} repeated blocks "
                               "builds a shallower model when set (name it with plan_space()'s \"depth\")", {})
    shapes: dict = {}
    out = {}
    for i, lay in enumerate(found):
        if i in skip:
            continue
        stages = stages_of(lay)
        if stages is not None and spec.pipeline_stage is None:   # the file's own parallelize() splits it
            continue
        key = stages or (1, 1)
        if key not in shapes:
            shapes[key] = _shape(spec, path, name, stages, blocks)
        if shapes[key] is not None:
            real, depths, settings = shapes[key]
            out[i] = Extrapolation(name, depths, settings, real)
    why = "" if out else "every layout's stages hold too few blocks to gain from running shallower"
    return DepthPlan(name, why, out)


def stages_of(lay) -> tuple | None:
    """(pp ranks, stages per rank) of a pipelined layout (frontend/pipeline.py), else None."""
    pp = lay.axes.get("pp", 1)
    if pp == 1:
        return None
    from ..frontend.pipeline import LOOPED_DEFAULT, SCHEDULES
    fixed = SCHEDULES[(lay.schedule or "1F1B").lower()][2]
    return pp, fixed or LOOPED_DEFAULT


def blocks_per_stage(spec, path: str, lay, blocks: int, known: dict) -> list | None:
    """The blocks each stage of the layout's pipeline holds, in stage order, as the file's pipeline_stage() splits
    the model as written ([blocks] without a pipeline); None where a stage fails to build. `known`: the splits
    found so far in this plan, by stage count (updated)."""
    stages = stages_of(lay)
    if stages is None:
        return [blocks]
    count = stages[0] * stages[1]
    if count not in known:
        known[count] = _per_stage(_built(path, None, None, spec), count)
    return known[count]


def blocks_at(path: str, name: str, value: int, count: int) -> list | None:
    """The repeated blocks each of `count` stages of the file's split holds, the model built with `name` = `value`
    (None where it fails)."""
    return _per_stage(_built(path, name, value), count)


def outside_blocks(spec, path: str, name: str | None, value: int | None, stage: int | None, count: int) \
        -> frozenset | None:
    """The names (in the model) of the modules outside its repeated blocks, containers of blocks left out, that
    stage `stage` of the file's split into `count` holds (`stage` None: the whole model's), the model built with
    `name` = `value` (None: as written); None where it fails to build. Which stage the embedding, the final norm
    and the head sit on (plan/head_probe.py puts the head on the last stage only where this says it is there)."""
    from ..frontend.fake_params import fake_build
    made = _built(path, name, value, spec)
    if made is None:
        return None
    inside = {id(m) for block in made.blocks for m in block.modules()}
    blocks = {id(b) for b in made.blocks}
    # neither the blocks nor what holds them (a ModuleList of the layers)
    names = {id(m): n for n, m in made.model.named_modules()
             if n and id(m) not in inside and not any(id(c) in blocks for c in m.modules())}
    if stage is None:
        return frozenset(names.values())
    try:
        with made.mode, fake_build():
            part = made.spec.pipeline_stage(made.model, stage, count)
            return frozenset(names[id(m)] for m in part.modules() if id(m) in names)
    except Exception:   # the user's stage function on this many stages
        return None


def _checked_name(spec, names: dict, path: str, blocks: int, asked) -> str | None:
    """The depth constant: plan_space()'s (checked: bad input when it is no top-level int or does not change the
    block count), else the first top-level int equal to `blocks` that does, else None."""
    if asked is not None:
        value = names.get(asked) if isinstance(asked, str) else None
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{path}: plan_space()['depth'] = {asked!r}: expected the name of the file's top-level "
                            "int that counts its repeated blocks")
        got = _blocks_at(spec.path, asked, CHECKED)
        if got != list(CHECKED):
            raise UserError(f"{path}: plan_space()['depth'] = {asked!r}: setting {asked} to {CHECKED[0]} and "
                            f"{CHECKED[1]} builds models of {got[0]} and {got[1]} repeated blocks, not {CHECKED[0]} "
                            f"and {CHECKED[1]}: it does not set the model's depth")
        return asked
    if blocks <= PIPELINE_DEPTHS[1]:
        return None
    for candidate in sorted(n for n, v in names.items()
                            if type(v) is int and v == blocks and not n.startswith("_")):
        if _blocks_at(spec.path, candidate, CHECKED) == list(CHECKED):
            return candidate
    return None


def _blocks_at(path: str, name: str, depths: tuple) -> list:
    """The repeated blocks of the model the file builds with `name` set to each of `depths` (-1 where it fails)."""
    return [len(made.blocks) if made else -1 for made in (_built(path, name, d) for d in depths)]


@dataclass(frozen=True)
class _Built:
    spec: object       # the file's ModelFile at this depth
    blocks: list       # its model's repeated blocks
    model: object
    mode: object       # the FakeTensorMode it was built in (its stages are built in the same)


_BUILT: dict = {}   # (path, name, value) -> _Built, within one plan()


def _built(path: str, name: str | None, value: int | None, spec=None) -> _Built | None:
    """The file run with `name` = `value` (None: `spec`, the file as written), its model built on fake tensors;
    None where that fails. The file's module in sys.modules is put back: the plan's own spec stays the
    full-depth one."""
    key = (path, name, value)
    if key in _BUILT:
        return _BUILT[key]
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from ..frontend.fake_params import fake_build
    from ..frontend.layout import repeated_blocks
    from ..frontend.model_file import load_model_file, module_name
    module = module_name(path)
    before = sys.modules.get(module)
    try:
        if name is not None:
            spec = load_model_file(path, {name: value})
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode, fake_build():
            model = spec.build_model()
        made = _Built(spec, repeated_blocks(model), model, mode) if isinstance(model, torch.nn.Module) else None
    except Exception:   # the user's code at another depth (UserError included): not a depth constant
        made = None
    finally:
        if before is not None:
            sys.modules[module] = before
    _BUILT[key] = made
    return made


def _shape(spec, path: str, name: str, stages: tuple | None, blocks: int) -> tuple | None:
    """(real blocks per stage, the two depths, the constant's value at each) of one pipeline shape (None: no
    pipeline), or None where it runs whole: the two shallower models hold as many blocks as the real one or more
    (the captures would cost as much), or a shallower model's stages do not hold their depth's blocks each."""
    if stages is None:
        return (blocks, DEPTHS, DEPTHS) if blocks > sum(DEPTHS) else None
    count = stages[0] * stages[1]
    if sum(PIPELINE_DEPTHS) * count >= blocks:
        return None
    whole = _per_stage(_built(path, None, None, spec), count)
    if not whole:
        return None
    real = max(whole)   # the largest stage's blocks: the slowest stage sets a pipeline's pace
    settings = tuple(d * count for d in PIPELINE_DEPTHS)
    for d, setting in zip(PIPELINE_DEPTHS, settings):
        if _per_stage(_built(path, name, setting), count) != [d] * count:
            return None
    return real, PIPELINE_DEPTHS, settings


def _per_stage(made: _Built | None, count: int) -> list | None:
    """How many of the model's repeated blocks each of `count` stages of the file's pipeline_stage() holds (None
    where the model or a stage fails to build)."""
    from ..frontend.fake_params import fake_build
    if made is None:
        return None
    ids = {id(b) for b in made.blocks}
    out = []
    try:
        with made.mode, fake_build():
            for s in range(count):
                stage = made.spec.pipeline_stage(made.model, s, count)
                out.append(sum(id(m) in ids for m in stage.modules()))
    except Exception:   # the user's stage function on this many stages: no reduced depth for this shape
        return None
    return out
