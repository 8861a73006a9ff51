"""Reader of nccl-tests / rccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf).

A log is what the benchmark prints: a header (`# nThread ... nGpus ...`, one `#  Rank N ...` line per rank, the
column heads), then one data row per size:

    size  count  type  redop  [root]  time algbw busbw #wrong  time algbw busbw #wrong
          (out-of-place: us, GB/s, GB/s, errors)   (in-place: the same)

`root` is absent in older versions; `#wrong` may be `N/A` (run with -c 0); other lines (NCCL INFO, mpirun noise,
`# Avg bus bandwidth`) are not rows. The collective is read from `# Collective test starting: X_perf` (newer
versions), else from the file name (all_reduce, allgather, reduce_scatter, alltoall, ...), else it must be given.
The size column is the buffer each rank holds: the message of an all-reduce, the gathered output of an
all-gather, the input of a reduce-scatter, the whole exchange of an all-to-all: the compiler's --size for each.
A row's measured time is the smaller of its out-of-place and in-place times (each an average over the run's
iterations: a transient stall inflates one of them).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...network.errors import UserError
from ...network.user_files import read_text

# names in benchmark binaries and file names -> the compiler's collective kinds
_NAMES = (("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("all_gather", "all_gather"),
          ("allgather", "all_gather"), ("reduce_scatter", "reduce_scatter"), ("reducescatter", "reduce_scatter"),
          ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"))
KINDS = tuple(dict.fromkeys(kind for _, kind in _NAMES))   # the kinds nccl-tests measures, in _NAMES' order
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\b")
MAX_BYTES = 1 << 40   # a row claiming more than a terabyte per rank is not a benchmark row
MAX_FILE_BYTES = 256 << 20
MIN_US, MAX_US = 1e-3, 1e12   # a row's time: a nanosecond to eleven days


@dataclass(frozen=True)
class Row:
    bytes: int
    out_of_place_us: float
    in_place_us: float
    line: int

    @property
    def measured_us(self) -> float:
        return min(self.out_of_place_us, self.in_place_us)


@dataclass(frozen=True)
class Log:
    path: str
    collective: str
    ranks: int | None      # from the `# Rank` lines (None: the header was cut off)
    rows: tuple[Row, ...]


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _row(tokens: list[str]) -> tuple[int, float, float] | None:
    """(bytes, out-of-place us, in-place us) of a data row, or None for any other line."""
    if len(tokens) not in (12, 13) or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    if _number(tokens[2]) is not None or _number(tokens[3]) is not None:   # type and redop are words
        return None
    first = 5 if len(tokens) == 13 else 4
    if len(tokens) == 13 and not re.fullmatch(r"-?\d+", tokens[4]):
        return None
    oop, ip = _number(tokens[first]), _number(tokens[first + 4])
    nbytes = int(tokens[0])
    if oop is None or ip is None or nbytes <= 0:   # a 0-byte row times the launch alone: not a network row
        return None
    return nbytes, oop, ip


def read(path: str, collective: str | None = None) -> Log:
    """The log at `path`; `collective` names what it measured when the log itself does not say."""
    text = read_text(path, "nccl-tests output", "nccl-tests log ", MAX_FILE_BYTES)
    kind, ranks, rows = None, set(), []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        found = _STARTING.search(stripped)
        if found:
            kind = _kind(found.group(1))
        rank = _RANK.match(stripped)
        if rank:
            ranks.add(int(rank.group(1)))
            continue
        if stripped.startswith("#"):
            continue
        row = _row(stripped.split())
        if row is None:
            continue
        nbytes, oop, ip = row
        if nbytes > MAX_BYTES:
            raise UserError(f"{path} line {n}: size {nbytes} B is more than {MAX_BYTES} B (1 TB) per rank, past any "
                            "benchmark's buffer and the largest collective astra-compile takes")
        for t in (oop, ip):
            if not MIN_US <= t <= MAX_US:
                raise UserError(f"{path} line {n}: time {t:g} us is outside {MIN_US:g}..{MAX_US:g} us")
        rows.append(Row(nbytes, oop, ip, n))
    if not rows:
        raise UserError(f"{path}: no data rows (size, count, type, redop, [root,] time, algbw, busbw, #wrong, for "
                        "out-of-place and in-place): is it nccl-tests output?")
    named = kind or _kind(os.path.basename(path))
    if collective is not None:
        if named is not None and named != collective:
            raise UserError(f"{path}: the log measured {named}, --collective says {collective}")
        named = collective
    if named is None:
        raise UserError(f"{path}: cannot tell which collective the log measured (no 'Collective test starting' "
                        f"line, no name in the file name): name it with --collective ({', '.join(KINDS)})")
    if ranks and ranks != set(range(len(ranks))):
        raise UserError(f"{path}: its '# Rank' lines are not ranks 0..{len(ranks) - 1}")
    return Log(path, named, len(ranks) or None, tuple(rows))


def _kind(name: str) -> str | None:
    low = name.lower()
    for key, kind in _NAMES:
        if key in low:
            return kind
    return None
