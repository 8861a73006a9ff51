"""The results file of a sweep: CSV, one line per finished point, appended the moment the point ends.

Why CSV and not Parquet: a sweep must lose no finished point when it is killed, so each point goes to disk on its
own as it ends. A CSV line is appended with one write() (O_APPEND, then fsync) and the file is valid after every
line; a Parquet file is immutable once written, so each point would mean rewriting the whole file (or leaving a
directory of part files). `pandas.read_csv(path)` opens it directly; `df.to_parquet()` converts it.

Columns: `point` (the point's index in the sweep's expansion order), one per axis (named as its key), `status`
(ok | error), `error` (the point's one-line message), `elapsed_s`, then every field of the `--json` report of the
point's kind. A report field named like an axis is prefixed `report_`; a list or mapping field is JSON text.

Resuming: the header must be the sweep's own and each recorded point must carry the sweep's axis values for its
index; a last line cut short (a crash inside a write) is dropped, and that point runs again.
"""
from __future__ import annotations

import csv
import io
import json
import os
from importlib import resources as importlib_resources

from ..network.errors import UserError, one_line
from ..runtime import atomic

FIXED = ("point",)
STATUS = ("status", "error", "elapsed_s")
TABLE_DIR_FIELDS = ("total_time_us", "npus", "backend", "execution", "per_dim_bytes", "per_dim_busy_us", "verified")


def report_fields(kind: str) -> tuple[str, ...]:
    """The `--json` report fields of a run kind, from the report's JSON schema (one fact, one place)."""
    if kind == "table directory":
        return TABLE_DIR_FIELDS
    name = "report.schema.json" if kind == "collective" else "workload_report.schema.json"
    schema = json.loads(importlib_resources.files("astra_compile").joinpath(name).read_text(encoding="utf-8"))
    return tuple(schema["properties"])


def columns(axes: tuple[str, ...], kinds: list[str]) -> tuple[list[str], dict[str, str]]:
    """The file's columns and, for each report field, the column it goes in."""
    cols = list(FIXED) + list(axes) + list(STATUS)
    where: dict[str, str] = {}
    for kind in kinds:
        for name in report_fields(kind):
            if name in where:
                continue
            col = name if name not in cols else f"report_{name}"
            where[name] = col
            cols.append(col)
    return cols, where


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):  # one line per point, always: control characters are escaped
        return one_line(value)
    return str(value)


def axis_text(value) -> str:
    """How an axis value is written (and compared when resuming)."""
    return ",".join(cell(v) for v in value) if isinstance(value, list) else cell(value)


class ResultsFile:
    def __init__(self, path: str, cols: list[str], where: dict[str, str]):
        if not path.lower().endswith(".csv"):
            raise UserError(f"-o {path}: results are written as CSV, a line per point as it finishes (see "
                            "docs/sweeps.md); name a .csv file")
        self.path, self.cols, self.where = path, cols, where

    def open(self, points) -> dict[int, str]:
        """Create the file (header only), or check the existing one and return the points it holds:
        index -> status."""
        if not os.path.exists(self.path):
            atomic.write_text(self.path, self._line(self.cols))
            return {}
        if os.path.isdir(self.path):
            raise UserError(f"-o {self.path} is a directory; name a .csv file")
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UserError(f"cannot read {self.path}: {e.strerror}") from None
        if data and not data.endswith(b"\n"):  # the last point's line was cut short: it runs again
            data = data[:data.rfind(b"\n") + 1]
            with open(self.path, "r+b") as f:
                f.truncate(len(data))
        try:
            rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
        except (UnicodeDecodeError, csv.Error) as e:
            raise UserError(f"{self.path} is not a results file of a sweep ({e}); name another -o file") from None
        if not rows or rows[0] != self.cols:
            raise UserError(f"{self.path} holds other columns than this sweep's (another sweep's results?); "
                            "name another -o file, or remove it to start again")
        by_index = {p.index: p for p in points}
        done: dict[int, str] = {}
        for n, row in enumerate(rows[1:], start=2):
            rec = dict(zip(self.cols, row))
            try:
                index = int(rec["point"])
            except ValueError:
                index = -1
            point = by_index.get(index)
            if len(row) != len(self.cols) or point is None:
                raise UserError(f"{self.path}, line {n}: not a point of this sweep; name another -o file")
            for axis, value in point.axes.items():
                if rec[axis] != axis_text(value):
                    raise UserError(f"{self.path}, line {n}: point {index} has {axis}={rec[axis]}, but this sweep's "
                                    f"point {index} has {axis}={axis_text(value)}: the sweep file changed; name "
                                    "another -o file")
            if index in done:
                raise UserError(f"{self.path}, line {n}: point {index} is recorded twice")
            done[index] = rec["status"]
        return done

    def append(self, point, outcome: dict) -> None:
        """One point's line, on disk before this returns."""
        rec = {"point": point.index, "status": outcome["status"], "error": outcome.get("error", ""),
               "elapsed_s": round(outcome.get("elapsed_s", 0.0), 6)}
        rec.update({axis: axis_text(v) for axis, v in point.axes.items()})
        for name, value in (outcome.get("report") or {}).items():
            if name in self.where:
                rec[self.where[name]] = value
        line = self._line([cell(rec.get(c)) for c in self.cols])
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _line(values) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        return buf.getvalue()
