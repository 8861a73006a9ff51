"""PyTorch's execution traces (.json, one per rank, or one for every rank): ExecutionTraceObserver files, with or
without Kineto profiler traces of the same ranks beside them (their measured times), or Kineto traces alone
(frontend/et_import.py; docs/workloads.md). The two are one format here: a profile is read with the execution trace
of its rank, which the importer pairs by rank, so one reader takes every .json input."""
from __future__ import annotations

from .base import Reader


class PyTorchTraces(Reader):
    name = "PyTorch execution traces"
    order = 20
    expects = "execution-trace .json files"
    suffix = ".json"
    label = ".json"
    sidecars = ("comm_group.json",)   # ASTRA-sim's comm-group file beside Chakra traces

    def sniff(self, paths: list[str]) -> bool:
        return all(p.endswith(".json") for p in paths)

    def load(self, paths, world_size, mesh, capture_limit, topology=None, max_memory=None):
        from ..et_import import load_traces
        return load_traces(paths, world_size, mesh)
