"""A workload module (--emit mlir of a training step): the step already captured and lowered, with its topology;
the driver reads it (driver/workload_driver.read_lowered)."""
from __future__ import annotations

import os
import stat

from .base import WORKLOAD_MODULE, Reader


class WorkloadModule(Reader):
    name = "workload module"
    order = 50
    kind = WORKLOAD_MODULE

    def sniff(self, paths: list[str]) -> bool:
        """One .mlir file holding a workload module, not a comm module of collectives."""
        if len(paths) != 1 or not paths[0].endswith(".mlir"):
            return False
        try:
            if not stat.S_ISREG(os.stat(paths[0]).st_mode):
                return False  # a FIFO is not opened to peek (no writer: it would wait); read whole as a comm module
            with open(paths[0], encoding="utf-8", errors="replace") as f:
                head = f.read(1 << 16)
        except (OSError, ValueError):
            return False  # the collective path reads it and names the problem
        from ....dialects.workload import is_workload_text
        return is_workload_text(head)
