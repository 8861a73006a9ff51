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
import errno
import fcntl
import io
import json
import os
import stat
from importlib import resources as importlib_resources

from ...network.errors import UserError, one_line

# a report field of a large step (its `collectives` list as JSON) runs past the csv module's default field limit of
# 128 KiB, and reading the file back (resuming, plotting, plan) would fail on it; the file itself is read whole and
# checked for size before this, so the cell limit only has to hold the largest report
csv.field_size_limit(1 << 30)

FIXED = ("point",)
STATUS = ("status", "error", "elapsed_s")
TABLE_DIR_FIELDS = ("total_time_us", "npus", "backend", "execution", "per_dim_bytes", "per_dim_busy_us", "verified")
# report fields a results file leaves out: the --gpu device (its axis or the base names it; peak_tflops and
# mem_bw_gbps hold its figures) and the --cluster (likewise; topology and npus hold its shape), so that the columns
# of a sweep, and resuming one, stay what they were before --gpu and --cluster
NOT_IN_RESULTS = ("gpu", "cluster")


def report_fields(kind: str) -> tuple[str, ...]:
    """The `--json` report fields of a run kind, from the report's JSON schema (one fact, one place)."""
    if kind == "table directory":
        return TABLE_DIR_FIELDS
    name = "report.schema.json" if kind == "collective" else "workload_report.schema.json"
    schema = json.loads(importlib_resources.files("astra_compile.compiler.report").joinpath(name)
                        .read_text(encoding="utf-8"))
    return tuple(k for k in schema["properties"] if k not in NOT_IN_RESULTS)


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
        return repr(float(value))   # numpy's float64 is a float whose repr reads np.float64(...)
    if isinstance(value, str):  # one line per point, always: control characters are escaped
        return one_line(value)
    return str(value)


def axis_text(value) -> str:
    """How an axis value is written (and compared when resuming)."""
    return ",".join(cell(v) for v in value) if isinstance(value, list) else cell(value)


class ResultsFile:
    """The results file, held for the sweep: opened once, locked (flock) so that a second sweep on the same file is
    refused while this one runs, and appended to through that one descriptor."""

    def __init__(self, path: str, cols: list[str], where: dict[str, str]):
        if not path.lower().endswith(".csv"):
            raise UserError(f"-o {path}: results are written as CSV, a line per point as it finishes (see "
                            "docs/sweeps.md); name a .csv file")
        self.path, self.cols, self.where = path, cols, where
        self.fd: int | None = None
        self.points = 0   # lines of points in the file

    def open(self, points) -> dict[int, str]:
        """Take the file (created when absent), check what it holds and return the points it holds: index ->
        status. A file that is not this sweep's results is refused before anything is written to it."""
        self.fd = _take(self.path)
        try:
            data = _read_all(self.fd, self.path)
            if not data:   # new, or made by a sweep killed before its header: ours, and empty
                self._write(self._line(self.cols))
                return {}
            whole = data[:data.rfind(b"\n") + 1]   # a last line cut short (a crash inside a write) runs again
            done = self._check(whole, points)
            if len(whole) != len(data):
                os.ftruncate(self.fd, len(whole))
        except BaseException:
            self.close()
            raise
        self.points = len(done)
        return done

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)   # and the lock with it
            self.fd = None

    def _check(self, data: bytes, points) -> dict[int, str]:
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
        self._write(self._line([cell(rec.get(c)) for c in self.cols]))
        self.points += 1

    def _write(self, line: str) -> None:
        """Append `line` with write() and fsync; a disk that is full or read-only ends the sweep in one line, the
        file cut back to its last whole line (the points already in it are kept)."""
        end = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            view = memoryview(line.encode("utf-8"))
            while view:
                view = view[os.write(self.fd, view):]
            os.fsync(self.fd)
        except OSError as e:
            try:
                os.ftruncate(self.fd, end)
            except OSError:
                pass   # the next run drops a line cut short
            raise UserError(f"cannot write to {self.path}: {e.strerror}; the {self.points} point(s) already in it "
                            "are kept, and the same command resumes") from None

    @staticmethod
    def _line(values) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        return buf.getvalue()


def _take(path: str) -> int:
    """A descriptor of the results file `path` (created when absent), locked for this sweep. Only a regular file is
    taken: a device or a pipe cannot be read back to resume (and opening a FIFO would wait for a writer)."""
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        special = False   # absent: made below (or the open names what is wrong)
    if special and os.path.isdir(path):
        raise UserError(f"-o {path} is a directory; name a .csv file")
    if special:   # refused without opening it: opening a device can do things (rewind a tape)
        raise UserError(f"-o {path}: not a regular file (the results file is read back to resume); name a .csv "
                        "file")
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.EISDIR:
            raise UserError(f"-o {path} is a directory; name a .csv file") from None
        if e.errno == errno.ENXIO:   # a FIFO nobody has open (one that somebody has is refused below)
            raise UserError(f"-o {path}: not a regular file (the results file is read back to resume); name a "
                            ".csv file") from None
        raise UserError(f"cannot open {path}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"-o {path}: not a regular file (the results file is read back to resume); name a "
                            ".csv file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"-o {path}: another sweep is writing to it now; wait for it to end (the same command "
                            "then resumes), or name another -o file") from None
        except OSError:
            pass   # a file system without locks (some network mounts): taken unlocked
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int, path: str) -> bytes:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        parts = []
        for block in iter(lambda: os.read(fd, 1 << 20), b""):
            parts.append(block)
        return b"".join(parts)
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
