"""A run's memory, estimated before the work that takes it: an estimate over the limit (--max-memory, else this
machine's available memory) is refused in one line instead of the process being killed for memory (or swapping
for an hour). Each stage sizes its own work: driver/resources.py a collective's planning, templates and tables,
frontend/chakra.py a Chakra trace's nodes and programs (docs/reliability.md)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ...network.errors import UserError


@dataclass(frozen=True)
class Estimate:
    bytes: int
    rows: int = 0          # table rows the run materialises
    what: str = ""         # what dominates, for the message
    advice: str = "use fewer chunks or NPUs"

    def check(self, limit: int | None) -> None:
        """Refuse (UserError, one line) when the estimate exceeds `limit` bytes (None: this machine's memory)."""
        cap, source = (limit, "--max-memory") if limit is not None else (machine_memory(), "this machine's "
                                                                         "available memory; raise it with --max-memory")
        if self.bytes > cap:
            detail = ", ".join(x for x in (self.what, f"{self.rows:.3g} table rows" if self.rows else "") if x)
            raise UserError(f"this run would need about {_size(self.bytes)} of memory" +
                            (f" ({detail})" if detail else "") +
                            f", more than {_size(cap)} ({source}); {self.advice}")


def _size(n: int) -> str:
    """Three significant figures in the largest power-of-two unit: an estimate is not exact to the byte."""
    for unit, mult in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= mult:
            return f"{n / mult:.3g}{unit}"
    return f"{n}B"


def machine_memory() -> int:
    """Memory this process may use: MemAvailable of /proc/meminfo (Linux), else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 8 * 2**30
