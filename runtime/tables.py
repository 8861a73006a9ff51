"""Schedule tables: the per-accelerator output of the compiler and the only input of the runtime.

A table is a set of numpy columns, one row per transfer endpoint (a send on the sender, a receive on the
receiver). Rows of one message share (coll, flow, stage, step, peer, lane); a message may have several rows when
its bytes are not contiguous. See docs/tables.md for the column meanings and the on-disk format.
"""
from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from . import atomic
from .errors import TableError, read_table_json, read_table_text
from .meta import FORMAT, VERSION, Meta  # noqa: F401 (FORMAT, VERSION: the table format's name and version)
# the row format (table_rows.py), which the runtime and the compiler import from here
from .table_rows import (COLUMN_NAMES, COLUMNS, DTYPES, OP_CODES, OP_NAMES, RECV_COPY, RECV_REDUCE, SEND,  # noqa: F401
                         SWITCH)


@dataclass
class Table:
    cols: dict

    def __post_init__(self):
        missing = [c for c in COLUMN_NAMES if c not in self.cols]
        if missing:
            raise TableError(f"table lacks column(s) {', '.join(missing)}")
        self.cols = {c: np.asarray(self.cols[c], dtype=DTYPES[c]) for c in COLUMN_NAMES}
        n = {len(v) for v in self.cols.values()}
        if len(n) > 1:
            raise TableError("table columns differ in length")

    def __len__(self) -> int:
        return len(self.cols["npu"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    @staticmethod
    def empty() -> "Table":
        return Table({c: np.zeros(0, DTYPES[c]) for c in COLUMN_NAMES})

    @staticmethod
    def concat(tables: list["Table"]) -> "Table":
        if not tables:
            return Table.empty()
        return Table({c: np.concatenate([t.cols[c] for t in tables]) for c in COLUMN_NAMES})

    def split(self, npus) -> dict:
        """NPU -> its rows, for the ascending `npus` of a table whose rows are in NPU order (several NPUs' tables
        joined); an NPU without rows gets an empty table."""
        npus = np.asarray(npus, np.int64)
        lo, hi = np.searchsorted(self["npu"], npus), np.searchsorted(self["npu"], npus, side="right")
        return {n: Table({c: v[a:b] for c, v in self.cols.items()})
                for n, a, b in zip(npus.tolist(), lo.tolist(), hi.tolist())}

    def to_csv(self, path: str) -> None:
        header = ",".join(COLUMN_NAMES)
        with open(path, "w") as f:
            f.write(header + "\n")
            if len(self):
                cols = [self.cols[c] for c in COLUMN_NAMES]
                fmt = ["%d" if c != "gbps" else "%.17g" for c in COLUMN_NAMES]
                np.savetxt(f, np.column_stack([c.astype(object) for c in cols]), fmt=",".join(fmt))

    @staticmethod
    def from_csv(path: str) -> "Table":
        from .table_checks import checked_columns
        text = read_table_text(path, "a table of numbers")
        header = text.split("\n", 1)[0].strip().split(",")
        if tuple(header) != COLUMN_NAMES:
            raise TableError(f"{path}: header is not {','.join(COLUMN_NAMES)}")
        try:
            data = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
        except ValueError as e:
            raise TableError(f"{path}: not a table of numbers ({' '.join(str(e).split())[:120]})") from None
        if data.size == 0:
            return Table.empty()
        if data.shape[1] != len(COLUMN_NAMES):
            raise TableError(f"{path}: rows have {data.shape[1]} values, the header {len(COLUMN_NAMES)}")
        return Table(checked_columns({c: data[:, i] for i, c in enumerate(COLUMN_NAMES)}, path))

    def to_text(self, meta=None) -> str:
        """Human-readable rows: one line per row, op names spelled out, sizes in bytes."""
        names = ("step", "op", "flow", "coll", "stage", "dim", "peer", "lane", "hops", "offset", "bytes", "dep")
        rows = [names]
        coll_names = [c.name for c in meta.collectives] if meta else None
        for i in range(len(self)):
            r = {c: self.cols[c][i] for c in COLUMN_NAMES}
            rows.append((str(r["step"]), OP_NAMES[int(r["op"])], str(r["flow"]),
                         coll_names[r["coll"]] if coll_names else str(r["coll"]), str(r["stage"]), str(r["dim"]),
                         str(r["peer"]), str(r["lane"]), str(r["hops"]), str(r["offset"]), str(r["bytes"]),
                         str(r["dep"])))
        widths = [max(len(row[i]) for row in rows) for i in range(len(names))]
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


class Schedule(Protocol):
    """What the runtime executes: `meta` (runtime/meta.py) and one table per NPU. The compiler's lowering and a table
    directory read back (DirSchedule) both are one."""
    meta: Meta

    def table(self, npu: int, deps: bool = True) -> Table:
        """NPU `npu`'s table; deps=False may leave the `dep` column unfilled (the cost models do not read it)."""
        ...

    # optional: tables(npus, ordered) -> Table, several NPUs' tables joined without `dep` (phases.tables_of)

    def export_meta(self) -> Meta:
        """meta with every reduce-scatter/all-gather shard layout, so written tables verify on their own."""
        ...


def write_dir(schedule: Schedule, out_dir: str, fmt: str = "csv", force: bool = False, run: dict | None = None) -> None:
    """Write meta.json and one table per NPU; the directory appears complete or not at all (runtime/atomic.py).
    An existing directory is replaced only when it is empty, or is an earlier table directory and `force` is set.
    `run`: the run options the tables executed with, where not the defaults (Meta.run)."""
    if fmt not in ("csv", "json"):
        raise TableError(f"unknown table format '{fmt}' (csv or json)")

    atomic.write_dir(out_dir, lambda tmp: fill_dir(schedule, tmp, fmt, run=run), not_a_table_dir, force, "tables")


def fill_dir(schedule: Schedule, folder: str, fmt: str, representative: bool = False, run: dict | None = None) -> None:
    """meta.json and one table per NPU into an empty folder (write_dir's, or a step directory's collective_<c>);
    `representative`: NPU 0's table only, standing for all (a symmetric schedule, Meta.representative)."""
    meta = schedule.export_meta().with_(table_format=fmt, representative=representative, run=dict(run or {}))
    meta.write(os.path.join(folder, "meta.json"))
    for npu in range(1 if representative else meta.npus):
        t = schedule.table(npu)
        path = os.path.join(folder, f"npu_{npu}.{fmt}")
        if fmt == "csv":
            t.to_csv(path)
        else:
            with open(path, "w") as f:
                json.dump({c: t.cols[c].tolist() for c in COLUMN_NAMES}, f)


_TABLE_FILE = re.compile(r"^npu_[0-9]+\.(csv|json)$")


def not_a_table_dir(path: str) -> str | None:
    """None when `path` is provably a table directory astra-compile wrote (its meta.json names the format and it
    holds nothing but meta.json and npu_K tables); otherwise why not, naming a file."""
    names = sorted(os.listdir(path))
    foreign = [n for n in names if n != "meta.json" and not _TABLE_FILE.match(n)]
    if foreign:
        return f"it holds files astra-compile did not write ({foreign[0]})"
    try:
        meta = read_table_json(os.path.join(path, "meta.json"), "a table directory's meta.json")
    except TableError:
        return "it has no readable meta.json of an astra-compile table directory"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return f"its meta.json is not an {FORMAT} file"
    return None


class DirSchedule:
    """A schedule read back from a directory written by write_dir. Nothing is trusted: meta.json is checked key by key
    (Meta.read), every NPU's table must be present and each table's rows in range (table_checks.py), and a claimed
    symmetry is confirmed against every table before NPU 0 may stand for the others."""

    def __init__(self, path: str):
        from . import table_checks
        self.path = path
        self.meta = Meta.read(path)
        self.fmt = self.meta.table_format or "csv"
        table_checks.check_files(path, self.meta)
        if self.meta.symmetric and not self.meta.representative:
            first = self.table(0)
            for npu in range(1, self.meta.npus):
                if not table_checks.symmetric_claim_holds(first, self.table(npu)):
                    # an edited table: still runnable, but only in full execution
                    self.meta = self.meta.without_symmetry()
                    break

    def export_meta(self) -> Meta:
        return self.meta

    def table(self, npu: int, deps: bool = True) -> Table:
        from . import table_checks
        if npu and self.meta.representative:
            raise TableError(f"{self.path}: holds NPU 0's table only, which stands for every NPU (meta.json: "
                             f"representative); NPU {npu}'s table is not stored: it runs in symmetric execution only, "
                             "and `--emit tables --npu K` of the model file or traces prints any NPU's rows")
        path = os.path.join(self.path, f"npu_{npu}.{self.fmt}")
        if self.fmt == "csv":
            table = Table.from_csv(path)
        else:
            cols = read_table_json(path, "a table: an object of columns")
            table = Table(table_checks.checked_columns(cols, path))
        table_checks.check_rows(table, self.meta, npu, path)
        return table
