"""Input formats as a registry: one file per format in this folder, each a `Reader` (base.py) with a `sniff` that
says whether a run's inputs are its format and a `load` that reads them into the training step (frontend/workload.py).
The command line (cli/cli.py, the run's kind) and the Python API (api/api.py, what to load) both ask `pick`, so an
input is taken by the same reader whichever way it comes; adding a format is adding its file (docs/extend-reader.md).

Readers of inputs that are already past the frontend (a workload module, a step directory, a comm module, a table
directory) only say so (their `kind`): the stage that reads them is above this one.
"""
from __future__ import annotations

import os

from ....network.errors import UserError
from ....network.registry import discover
from .base import (COMM_MODULE, STEP_TABLES, TABLE_DIRECTORY, WORKLOAD, WORKLOAD_MODULE,  # noqa: F401
                   Reader)

_found: list[Reader] = []


def all_readers() -> list[Reader]:
    """Every reader of the folder, in the order they are asked."""
    if not _found:
        _found.extend(cls() for cls in discover(__name__, __path__, Reader))
    return _found


def pick(paths: list[str]) -> Reader | None:
    """The reader of a run's inputs: the first whose sniff takes them (None: no input, or none takes them)."""
    paths = [os.fspath(p) for p in paths]
    return next((r for r in all_readers() if paths and r.sniff(paths)), None)


def kind_of(paths: list[str]) -> str | None:
    """What a run does with its inputs (base.py's kinds), None when no reader takes them."""
    reader = pick(paths)
    return reader.kind if reader is not None else None


def expected() -> str:
    """The formats a training step is read from, as a refusal names them."""
    names = [r.expects for r in all_readers() if r.expects]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def refused(paths: list[str]) -> UserError:
    return UserError(f"cannot compile {', '.join(paths)}: expected {expected()}")


def trace_files(paths: list[str]) -> list[str]:
    """The trace files a run reads: one directory stands for the files in it of the first reader (in order) with a
    suffix that has any; other inputs are themselves."""
    if len(paths) != 1 or not os.path.isdir(paths[0]):
        return paths
    directory = paths[0]
    if os.path.exists(os.path.join(directory, "meta.json")):
        raise UserError(f"{directory} is a table directory, not execution traces: run it as `astra-compile "
                        f"{directory}`")
    files = [r for r in all_readers() if r.suffix]
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise UserError(f"cannot read {directory}: {e.strerror}") from None
    for reader in files:
        taken = sorted(n for n in names if n.endswith(reader.suffix) and n not in reader.sidecars)
        if taken:
            return [os.path.join(directory, n) for n in taken]
    raise UserError(f"{directory}: no {' or '.join(r.label for r in files)} execution-trace files in it")


def load(paths: list[str], world_size: int, mesh: dict | None, capture_limit: float | None, topology=None,
         max_memory: int | None = None):
    """The training step in `paths` (trace files, or one model file), read by the reader that takes them."""
    reader = pick(paths)
    if reader is None or reader.kind != WORKLOAD:
        raise refused(paths)
    return reader.load(paths, world_size, mesh, capture_limit, topology, max_memory)
