"""A table directory (--emit tables -o DIR of one collective): its tables and meta.json, executed by the runtime
(runtime/tables.DirSchedule), which names what is wrong with any other directory."""
from __future__ import annotations

import os

from .base import TABLE_DIRECTORY, Reader


class TableDirectory(Reader):
    name = "table directory"
    order = 80   # the last of the directories: trace and step directories are taken before
    kind = TABLE_DIRECTORY

    def sniff(self, paths: list[str]) -> bool:
        return len(paths) == 1 and os.path.isdir(paths[0])
