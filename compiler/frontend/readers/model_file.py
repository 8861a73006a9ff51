"""A model file (a .py defining the model, its batch and, optionally, its mesh, parallelization, loss and optimizer:
docs/workloads.md): captured in this process under a fake process group (frontend/capture.py)."""
from __future__ import annotations

from . import refused
from .base import Reader


class ModelFile(Reader):
    name = "model file"
    order = 10
    expects = "one model .py file"

    def sniff(self, paths: list[str]) -> bool:
        return paths[0].endswith(".py")   # a .py among other inputs is refused by load, naming what is expected

    def load(self, paths, world_size, mesh, capture_limit, topology=None, max_memory=None):
        if len(paths) != 1:
            raise refused(paths)
        from ..model_file import check_before_torch
        check_before_torch(paths[0], world_size, mesh)   # a mistake costs no torch import (seconds)
        from ..capture import capture
        from ..cpu_limit import cpu_limit
        from ..model_code import guarded
        from ..model_file import load_model_file
        from ..torch_state import kept
        with kept(), guarded(paths[0]), cpu_limit(capture_limit, f"model file {paths[0]}"):
            return capture(load_model_file(paths[0]), world_size, mesh)
