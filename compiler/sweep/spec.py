"""A sweep file: the base command and its axes, read, checked and expanded into points.

    description: Themis against the baseline          # optional
    base: {collective: all_reduce, size: 1GB, topology: "Switch(8)_Switch(8)_Switch(8)", latency: 1}
    axes:
      scheduler: [baseline, themis, optimal]          # a list of values
      chunks: {from: 4, to: 64, times: 2}             # a range, both ends included: 4, 8, 16, 32, 64
      size: {from: 64MB, to: 1GB, times: 2}           # sizes too (step: S instead of times: K is arithmetic)
      zip:                                            # axes that vary together (lists of equal length)
        topology: [4x4_torus, 16_ring]
        bandwidth: ["50,50", 100]
      zip_queues: {scheduler: [baseline, themis], intra: [fifo, scf]}   # another group: zip_<any name>

Keys are the CLI's long option names (`peak-tflops` or `peak_tflops`), plus `input` for what the CLI takes as
its positional arguments (a model file, trace files, a .mlir module, a table directory). Points are the product
of the axes, the first axis outermost; a zip group is one axis. `input` and a topology file are found relative to
the sweep file. Everything here is checked before any point runs; a mistake is one UserError naming the file.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

from ...network.errors import UserError, show
from ...network.user_files import read_yaml

MAX_POINTS = 100_000   # a sweep that expands past this is almost surely a typo in a range
TOP_KEYS = ("description", "base", "axes")
MAX_FILE_BYTES = 16 << 20   # a sweep file is a page of axes; 16 MB lists a million values


@dataclass(frozen=True)
class Point:
    index: int        # position in the expansion order (the results file's `point` column)
    options: dict     # option key -> value: the base with this point's axis values
    axes: dict        # axis key -> this point's value


@dataclass(frozen=True)
class Sweep:
    path: str
    base: dict
    axes: tuple[str, ...]     # axis keys as written, in column order
    points: tuple[Point, ...]

    @property
    def directory(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))


def load(path: str) -> Sweep:
    return parse(read_yaml(path, "a YAML sweep file", "sweep file ", MAX_FILE_BYTES), path)


def parse(data, path: str) -> Sweep:
    if not isinstance(data, dict):
        raise UserError(f"{path}: a sweep file is a mapping with 'base' and 'axes', got {type(data).__name__}")
    for key in data:
        if key not in TOP_KEYS:
            raise UserError(f"{path}: unknown key '{key}' (a sweep file has {', '.join(TOP_KEYS)})")
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise UserError(f"{path}: 'base' must be a mapping of option: value, got {type(base).__name__}")
    for key, value in base.items():
        _check_value(path, f"base.{key}", value)
    axes_data = data.get("axes")
    if not isinstance(axes_data, dict) or not axes_data:
        raise UserError(f"{path}: 'axes' must be a non-empty mapping of option: values")
    groups: list[list[tuple[str, list]]] = []   # each group: the axes that vary together
    for key, values in axes_data.items():
        if key == "zip" or str(key).startswith(("zip_", "zip-")):
            groups.append(_zip_group(path, values))
        else:
            groups.append([(str(key), _values(path, str(key), values))])
    keys = [k for g in groups for k, _ in g]
    for key in keys:
        if keys.count(key) > 1:
            raise UserError(f"{path}: axis '{key}' is given twice")
        if _dest(key) in {_dest(k) for k in base}:
            raise UserError(f"{path}: '{key}' is both in base and an axis: keep one")
    count = math.prod(len(g[0][1]) for g in groups)
    if count > MAX_POINTS:
        raise UserError(f"{path}: the axes expand to {count} points, more than {MAX_POINTS}: check the ranges")
    points = []
    for i, combo in enumerate(itertools.product(*[range(len(g[0][1])) for g in groups])):
        values = {k: vals[j] for g, j in zip(groups, combo) for k, vals in g}
        points.append(Point(i, {**base, **values}, values))
    return Sweep(path, dict(base), tuple(keys), tuple(points))


def _dest(key) -> str:
    return str(key).replace("-", "_")


def _zip_group(path: str, data) -> list[tuple[str, list]]:
    if not isinstance(data, dict) or len(data) < 2:
        raise UserError(f"{path}: 'zip' must map two or more options to lists of equal length")
    group = [(str(k), _values(path, str(k), v)) for k, v in data.items()]
    lengths = {k: len(v) for k, v in group}
    if len(set(lengths.values())) > 1:
        raise UserError(f"{path}: zip axes must have equal lengths, got "
                        + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
    return group


def _values(path: str, key: str, data) -> list:
    if isinstance(data, dict):
        values = _range(path, key, data)
    elif isinstance(data, list):
        values = data
    else:
        raise UserError(f"{path}: axis '{key}' must be a list of values or a range {{from, to, step|times}}, "
                        f"got {show(data)}")
    if not values:
        raise UserError(f"{path}: axis '{key}' is empty")
    for v in values:
        _check_value(path, f"axis {key}", v)
    return list(values)


def _check_value(path: str, where: str, value) -> None:
    scalar = (str, int, float, bool)
    if isinstance(value, scalar) or (isinstance(value, list) and value and
                                     all(isinstance(v, scalar) and not isinstance(v, bool) for v in value)):
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{path}: {where}: {value} is not a finite number")
        return
    raise UserError(f"{path}: {where}: expected a number, a string, true/false or a list of numbers, got {show(value)}")


def _range(path: str, key: str, spec: dict) -> list:
    """{from: A, to: B, step: S} (arithmetic) or {from: A, to: B, times: K} (geometric); sizes keep their unit."""
    known = {"from", "to", "step", "times"}
    if set(spec) - known or not {"from", "to"} <= set(spec) or len({"step", "times"} & set(spec)) != 1:
        raise UserError(f"{path}: axis '{key}': a range is {{from: A, to: B, step: S}} or {{from: A, to: B, "
                        f"times: K}}, got {show(spec)}")
    sized = isinstance(spec["from"], str) or isinstance(spec["to"], str)
    lo, hi = (_number(path, key, spec[k], sized) for k in ("from", "to"))
    if hi < lo:
        raise UserError(f"{path}: axis '{key}': the range runs from {spec['from']} down to {spec['to']}")
    out = []
    if "step" in spec:
        step = _number(path, key, spec["step"], sized)
        if step <= 0:
            raise UserError(f"{path}: axis '{key}': step must be positive, got {show(spec['step'])}")
        span = (hi - lo) / step   # inf for from 0 to 1e300 in steps of 1e-300: refused, not floored
        n = math.floor(span + 1e-9) + 1 if span < MAX_POINTS else MAX_POINTS + 1
        if n > MAX_POINTS:
            raise UserError(f"{path}: axis '{key}': the range has more than {MAX_POINTS} values")
        out = [lo + i * step for i in range(n)]
    else:
        k = spec["times"]
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 1 or not math.isfinite(k):
            raise UserError(f"{path}: axis '{key}': times must be a number above 1, got {show(k)}")
        if lo <= 0:
            raise UserError(f"{path}: axis '{key}': a geometric range starts above 0, got {show(spec['from'])}")
        v = lo
        while v <= hi * (1 + 1e-12):
            out.append(v)
            v = v * k
            if len(out) > MAX_POINTS:
                raise UserError(f"{path}: axis '{key}': the range has more than {MAX_POINTS} values")
    if sized:
        from ...network.units import format_size
        return [format_size(int(v)) if float(v).is_integer() else f"{int(v)}B" for v in out]
    if all(float(v).is_integer() for v in out) and all(isinstance(spec[k], int) for k in spec if k != "times"):
        return [int(v) for v in out]
    return [float(v) for v in out]


def _number(path: str, key: str, value, sized: bool):
    if sized:
        from ...network.units import parse_size
        try:
            return parse_size(str(value))
        except UserError as e:
            raise UserError(f"{path}: axis '{key}': {e}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{path}: axis '{key}': range bounds must be numbers or sizes, got {show(value)}")
    return value
