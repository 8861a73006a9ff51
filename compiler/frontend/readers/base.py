"""What an input format is to the reader registry (frontend/readers/__init__.py): a `Reader` subclass in a file of
this folder, found by discovery (network/registry.py), so adding a format is adding its file (docs/extend-reader.md).
"""
from __future__ import annotations

# what a run does with an input a reader takes (the command line's run kinds follow from it, cli/cli.py):
WORKLOAD = "workload"                # the reader's load() gives the training step (frontend/workload.Workload)
WORKLOAD_MODULE = "workload module"  # a step already captured and lowered (--emit mlir): the driver reads it
STEP_TABLES = "step tables"          # a step's tables (--emit tables -o): interop/step_dir.py reads them
COMM_MODULE = "comm module"          # collectives in the comm dialect: the driver compiles them
TABLE_DIRECTORY = "table directory"  # one collective's tables (--emit tables -o): the runtime executes them


class Reader:
    """One input format. `sniff(paths)` says whether the paths a run was given are this format's (cheaply: names,
    and at most the first bytes of one file; a file it cannot read is left to `load`, which names the problem);
    `load` reads them into the training step."""

    name = ""                # the format, as the docs and messages call it
    order = 100              # readers are asked in (order, name) order; the first whose sniff takes the paths reads
    kind = WORKLOAD          # what the run does with the input (above)
    expects = ""             # how a refusal of inputs no reader takes names this format: "Chakra .et files"
    suffix = ""              # a trace file's suffix: a directory of such files is read as them (trace_directory.py)
    label = ""               # how a directory holding none of them names this format's files: "Chakra .et"
    sidecars: tuple[str, ...] = ()   # names with the suffix that are not traces (Chakra's comm_group.json)

    def sniff(self, paths: list[str]) -> bool:
        raise NotImplementedError

    def load(self, paths: list[str], world_size: int, mesh: dict | None, capture_limit: float | None,
             topology=None, max_memory: int | None = None):
        """The training step in `paths` (a Workload) for `world_size` NPUs: `mesh` shapes a model file's device mesh,
        `capture_limit` bounds the CPU seconds a model file may take, `topology` and `max_memory` let a trace reader
        fold ranks into one SPMD program and refuse what would not fit in memory. Readers of another kind than
        WORKLOAD are read by the stage named there, not here."""
        raise NotImplementedError(f"{self.name} inputs are read by the driver, not the frontend")
