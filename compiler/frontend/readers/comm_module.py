"""A comm module (.mlir of collectives in the comm dialect, not a workload module): the driver compiles its
collectives (driver/driver.read_module), and names what is wrong with a file it cannot read."""
from __future__ import annotations

import os

from .base import COMM_MODULE, Reader


class CommModule(Reader):
    name = "comm module"
    order = 60   # after workload_module.py, which takes the .mlir files that hold a step
    kind = COMM_MODULE

    def sniff(self, paths: list[str]) -> bool:
        return len(paths) == 1 and paths[0].endswith(".mlir") and not os.path.isdir(paths[0])
