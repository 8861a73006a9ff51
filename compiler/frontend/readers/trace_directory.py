"""A directory of execution traces: the trace files in it of the first trace format that has any (trace_files in
this package's __init__.py), a directory holding meta.json being tables instead."""
from __future__ import annotations

import os

from . import all_readers, load, trace_files
from .base import Reader


class TraceDirectory(Reader):
    name = "directory of execution traces"
    order = 40

    def sniff(self, paths: list[str]) -> bool:
        if len(paths) != 1 or not os.path.isdir(paths[0]) or os.path.exists(os.path.join(paths[0], "meta.json")):
            return False
        suffixes = tuple(r.suffix for r in all_readers() if r.suffix)
        try:
            return any(name.endswith(suffixes) for name in os.listdir(paths[0]))
        except OSError:
            return False

    def load(self, paths, world_size, mesh, capture_limit, topology=None, max_memory=None):
        return load(trace_files(paths), world_size, mesh, capture_limit, topology, max_memory)
