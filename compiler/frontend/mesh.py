"""The device mesh of a model file, checked without torch: `--mesh` text, its size against the topology, and the
built-in parallelism each axis asks for (parallelize.py applies it, with torch).

Mesh axes follow torch's init_device_mesh (the last axis varies fastest; docs/workloads.md). Axis names with a
built-in meaning: dp (DistributedDataParallel), fsdp (FSDP2 fully_shard), tp (DTensor tensor parallelism from the
file's TP_PLAN), pp (pipeline stages, which the capture runs: pipeline.py); others (ep, ...) are only passed to
the file's parallelize(module, mesh). Everything here runs before torch is imported, so a mistake in the command
line is reported at once rather than after torch's import (seconds).
"""
from __future__ import annotations

import math
import numbers

from ...network.coords import coords
from ...network.errors import UserError

BUILTIN_AXES = ("dp", "fsdp", "tp")


def parse_mesh(text: str) -> dict[str, int]:
    """'dp=8,tp=8' -> {'dp': 8, 'tp': 8} (order kept: outermost axis first)."""
    axes: dict[str, int] = {}
    for part in text.split(","):
        name, eq, size = part.strip().partition("=")
        if not eq or not name.strip().isidentifier():
            raise UserError(f"--mesh wants name=size pairs such as dp=8,tp=8, got '{text}'")
        try:
            n = int(size)
        except ValueError:
            raise UserError(f"--mesh axis {name.strip()} needs an integer size, got '{size}'") from None
        if n <= 0 or name.strip() in axes:
            raise UserError(f"--mesh axis {name.strip()}: sizes must be positive and names unique ('{text}')")
        axes[name.strip()] = n
    return axes


def mesh_text(axes: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in axes.items())


def check_axes(axes, what: str = "mesh") -> dict[str, int]:
    """A mesh given as a dict (the API, a file's mesh_axes()): names are identifiers, sizes positive integers."""
    if not isinstance(axes, dict) or not axes:
        raise UserError(f"{what} must be a non-empty dict of axis name -> size such as {{'dp': 8, 'tp': 8}}, got "
                        f"{axes!r}")
    for name, n in axes.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError(f"{what}: axis name {name!r} is not a name such as dp or tp")
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
            raise UserError(f"{what}: axis {name} needs a positive integer size, got {n!r}")
    return {name: int(n) for name, n in axes.items()}


def check_mesh(axes: dict[str, int], world_size: int) -> None:
    total = math.prod(axes.values())
    if total != world_size:
        raise UserError(f"mesh {mesh_text(axes)} has {total} ranks but the topology has {world_size} NPUs")


def builtin_refusal(axes: dict[str, int], has_tp_plan: bool) -> str:
    """Why the built-in parallelism (a model file without parallelize()) cannot apply `axes`; "" when it can."""
    unknown = [a for a in axes if a not in BUILTIN_AXES + ("pp",) and axes[a] > 1]   # pp: the capture's
    if unknown:
        return (f"mesh axis {unknown[0]} has no built-in meaning (dp, fsdp, tp); apply it in the model file's "
                "parallelize(module, mesh)")
    if "dp" in axes and "fsdp" in axes:
        return "give either a dp (DDP) or an fsdp (FSDP2) axis, not both"
    if axes.get("tp", 1) > 1 and not has_tp_plan:
        return "the mesh has a tp axis but the model file has no TP_PLAN and no parallelize()"
    return ""


def silent_axes(axes: dict[str, int], groups) -> list[str]:
    """Axes of 2 or more ranks (but pp, whose stages the capture runs) along which no group of the step varies
    (`groups`: the ranks of each collective and message): their ranks never exchange anything, so they would
    train as unsynchronised copies. Ranks are laid out row-major over the axes, the last varying fastest."""
    spanned = set()
    for ranks in dict.fromkeys(map(tuple, groups)):   # each distinct group once: a step repeats a few thousandfold
        at = mesh_coords(list(ranks), axes)
        spanned |= {name for name, column in zip(axes, at.T) if len(set(column.tolist())) > 1}
    return [a for a in axes if axes[a] > 1 and a != "pp" and a not in spanned]


def mesh_coords(ranks, axes: dict[str, int]):
    """The coordinates of `ranks` on the mesh, one column per axis in the mesh's order: ranks are row-major over
    the axes (torch's init_device_mesh), which is the network's numbering of NPUs with the axes reversed (the
    last axis takes dimension 0)."""
    return coords(ranks, list(axes.values())[::-1])[..., ::-1]
