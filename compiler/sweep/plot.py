"""`astra-compile sweep --plot results.csv --x AXIS --y FIELD [--hue AXIS] [--where C=V] [--pareto] -o FILE`.

Lines: one per value of --hue, y against x, sorted by x. Every other column must hold one value along each line:
pin it with --where, or let the hue carry it (a column zipped with the hue, such as `intra` beside `scheduler`,
names its value in the line's label): a line never silently mixes points that differ in something else.
--pareto: every point as a dot and the front of the points no other point beats in both x and y (smaller is
better in both: time against a cost such as bandwidth or NPUs), labelled by --hue when given.
--y breakdown_us (training-step sweeps): one stacked bar per point of compute, exposed local and remote memory,
exposed communication and idle (ASTRA-sim 2.0's Fig. 4), labelled by --x (and --hue), side by side in x order.
Failed points are left out. Sizes (64MB) and numbers sort by value; other x values keep the sweep's order (its
point numbers), not the order in which the points finished.
"""
from __future__ import annotations

import csv
import math
import os

from ...network.errors import UserError
from ..core.plotting import check_suffix, pyplot, save
from .results import STATUS

NOT_PINNED = set(STATUS) | {"point"}


def plot(path: str, out: str | None, x: str | None, y: str | None, hue: str | None, where: list[str],
         pareto: bool) -> None:
    if not x or not y:
        raise UserError("--plot needs --x COLUMN and --y COLUMN")
    if not out:
        raise UserError("--plot needs -o FILE.png (or .pdf, .svg)")
    check_suffix(out, "-o")
    rows, cols = read_results(path)
    for name in [x, y] + ([hue] if hue else []):
        if name not in cols:
            raise UserError(f"{path} has no column '{name}' (it has: {', '.join(cols)})")
    for cond in where:
        col, eq, value = cond.partition("=")
        if not eq or col not in cols:
            raise UserError(f"--where {cond}: expected COLUMN=VALUE with a column of {path}")
        rows = [r for r in rows if r[col] == value]
    rows = [r for r in rows if r["status"] == "ok"]
    if not rows:
        raise UserError(f"{path}: no successful point left to plot")
    if y == "breakdown_us":
        if pareto:
            raise UserError("--pareto plots one number against another; --y breakdown_us draws bars")
        tied = _check_pinned(rows, cols, {x, y, hue}, hue, path)
        return _breakdown(rows, out, x, hue, tied, path, where)
    ys = [_number(r[y]) for r in rows]
    if any(v is None for v in ys):
        raise UserError(f"--y {y}: the column holds values that are not numbers")
    tied = [] if pareto else _check_pinned(rows, cols, {x, y, hue}, hue, path)
    plt = pyplot()
    xkey, xticks = _x_order([r[x] for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(_label(r, hue, tied) if hue else y, []).append((xkey[r[x]], _number(r[y])))
    if pareto:
        for label, pts in groups.items():
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, label=label if hue else None)
        front = pareto_front([p for pts in groups.values() for p in pts])
        ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="black", label="Pareto front")
    else:
        for label, pts in groups.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    if xticks:
        ax.set_xticks(range(len(xticks)), xticks)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(os.path.basename(path) + (" (" + ", ".join(where) + ")" if where else ""))
    if hue or pareto:
        ax.legend(title=hue, fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, out, dpi=120)


def _breakdown(rows, out: str, x: str, hue: str | None, tied: list[str], path: str, where: list[str]) -> None:
    import json
    from ..report import breakdown_plot
    xkey, _ = _x_order([r[x] for r in rows])
    bars = []
    for r in sorted(rows, key=lambda r: (xkey[r[x]], r[hue] if hue else "")):
        try:
            parts = json.loads(r["breakdown_us"])
        except ValueError:
            parts = None
        if not isinstance(parts, dict) or not all(isinstance(v, (int, float)) for v in parts.values()):
            raise UserError(f"{path}: point {r['point']}'s breakdown_us is not a breakdown (a training step's report "
                            "field)")
        bars.append((f"{x}={r[x]}" + (f"\n{hue}={_label(r, hue, tied)}" if hue else ""), parts))
    breakdown_plot.write(out, bars, os.path.basename(path) + (" (" + ", ".join(where) + ")" if where else ""))


def read_results(path: str) -> tuple[list[dict], list[str]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            cols = next(reader, None)
            if not cols or cols[:1] != ["point"] or not set(STATUS) <= set(cols):
                raise UserError(f"{path} is not a sweep's results file (no point/status columns)")
            rows = [dict(zip(cols, row)) for row in reader if len(row) == len(cols)]
        rows.sort(key=lambda r: _number(r["point"]) or 0.0)  # the sweep's order; the file holds finishing order
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{path} is not a sweep's results file: {e}") from None
    return rows, cols


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _size(text: str) -> int | None:
    from ...network.units import parse_size
    try:
        return parse_size(text)
    except UserError:
        return None


def _x_order(values: list[str]) -> tuple[dict[str, float], list[str] | None]:
    """Each x value's position: its number, its size in bytes (ticks keep the written size), or its rank."""
    distinct = list(dict.fromkeys(values))
    if all(_number(v) is not None for v in distinct):
        return {v: _number(v) for v in distinct}, None
    if all(_size(v) is not None for v in distinct):
        distinct.sort(key=_size)
    return {v: i for i, v in enumerate(distinct)}, distinct


def _check_pinned(rows, cols, shown, hue: str | None, path) -> list[str]:
    """A line is a function of x: every other input column must hold one value along each line (the rows of one
    hue value). Returns the columns that differ between lines only, tied to the hue (named in its labels)."""
    axes = [c for c in cols[1:cols.index("status")] if c not in shown]
    lines: dict[str, list[dict]] = {}
    for r in rows:
        lines.setdefault(r[hue] if hue else "", []).append(r)
    loose = [c for c in axes if any(len({r[c] for r in line}) > 1 for line in lines.values())]
    if loose:
        raise UserError(f"{path}: the points kept also differ in {', '.join(loose)}: pin it with --where "
                        f"{loose[0]}=VALUE, or plot it as --hue")
    return [c for c in axes if len({r[c] for r in rows}) > 1]


def _label(row: dict, hue: str, tied: list[str]) -> str:
    """The hue's value, with the columns that go with it: `baseline (intra=fifo)`."""
    extra = ", ".join(f"{c}={row[c]}" for c in tied)
    return f"{row[hue]} ({extra})" if extra else row[hue]


def pareto_front(points: list[tuple]) -> list[tuple]:
    """The points no other point beats in both coordinates (smaller is better), by increasing x."""
    front, best = [], math.inf
    for px, py in sorted(points):
        if py < best:
            front.append((px, py))
            best = py
    return front
