"""A step table directory (--emit tables -o DIR of a training step): its programs' and collectives' tables and
meta.json, read by interop/step_dir.py."""
from __future__ import annotations

import os

from .base import STEP_TABLES, Reader


class StepDirectory(Reader):
    name = "step table directory"
    order = 70
    kind = STEP_TABLES

    def sniff(self, paths: list[str]) -> bool:
        if len(paths) != 1 or not os.path.isdir(paths[0]):
            return False
        from ....runtime.step_tables import is_step_dir
        return is_step_dir(paths[0])
