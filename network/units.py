"""Units for sizes and bandwidths, following ASTRA-sim's conventions.

ASTRA-sim treats "KB", "MB", "GB" and "TB" as powers of two (1 GB = 2**30 bytes)
and its "GB/s" bandwidths as 2**30 bytes per second.  We do the same so that
numbers copied from an ASTRA-sim configuration mean the same thing here.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Sequence

from .errors import UserError, show

GIB = 2**30
# The largest collective buffer the compiler takes: 1 TiB per NPU. Table offsets are int64 and the lowering
# multiplies a byte count by a unit index (up to 2 x NPUs) before dividing, which must not overflow.
MAX_BYTES = 2**40

# Every spelling maps to a power of two; the IEC "KiB" forms are accepted as
# synonyms because people use both interchangeably for these units.  The
# single letters K/M/G/T are accepted because they are common on command lines
# ("--size 64M") and cannot mean anything else here.
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10, "kb": 2**10, "kib": 2**10,
    "m": 2**20, "mb": 2**20, "mib": 2**20,
    "g": 2**30, "gb": 2**30, "gib": 2**30,
    "t": 2**40, "tb": 2**40, "tib": 2**40,
}

# Plain decimal only (no exponent, no inf/nan): sizes are typed by people.
_SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)$")


def parse_size(text: str) -> int:
    """Parse a size such as "64MB", "1.5KB", "4096" or "2GiB" into bytes.

    Units are case-insensitive powers of two (KB = KiB = 1024 bytes); "B" or no
    unit means bytes.  Decimals are allowed as long as the result is a whole
    number of bytes ("1.5KB" is 1536, "0.3B" is an error).
    """
    if not isinstance(text, str):
        raise UserError(f"size must be a string like '64MB', got {show(text)}")
    s = text.strip()
    if not s:
        raise UserError("empty size; expected a value like '64MB' or '4096'")
    if s.startswith("-"):
        raise UserError(f"size must be positive, got '{text}'")
    m = _SIZE_RE.match(s)
    if m is None:
        raise UserError(f"malformed size '{text}'; expected a number with an optional unit, e.g. '64MB'")
    number, unit = m.groups()
    mult = _SIZE_UNITS.get(unit.lower())
    if mult is None:
        raise UserError(f"unknown size unit '{unit}' in '{text}'; expected B, KB, MB, GB or TB (or KiB, MiB, GiB, TiB)")
    # Fraction keeps "1.5KB" exact; floats would make the integer check unreliable.
    value = Fraction(number) * mult
    if value == 0:
        raise UserError(f"size must be positive, got '{text}'")
    if value.denominator != 1:
        raise UserError(f"size '{text}' is not a whole number of bytes ({float(value):g} B)")
    return int(value)


# The range of a link the cost model computes with. Outside it the float arithmetic leaves its range (a 1e-310 GB/s
# link makes a 1 GB transfer take an infinite time; 1e308 GB/s overflows the conversion to bytes per ns; a latency
# of 1e308 ns overflows a sum of two hops). Wide enough for any network real or imagined: from 1 MB/s to 1 EB/s per
# link, latency from 0 to one hour.
MIN_GBPS = 1e-3
MAX_GBPS = 1e9
MAX_LATENCY_NS = 3.6e12


def link_range_error(gbps: float, latency_ns: float) -> str | None:
    """Why a link of `gbps` GB/s and `latency_ns` ns is outside the modelled range, or None when it is inside."""
    if not (math.isfinite(gbps) and MIN_GBPS <= gbps <= MAX_GBPS):
        return f"bandwidth must be between {MIN_GBPS:g} and {MAX_GBPS:g} GB/s, got {gbps:g}"
    if not (math.isfinite(latency_ns) and 0 <= latency_ns <= MAX_LATENCY_NS):
        return f"latency must be between 0 and {MAX_LATENCY_NS:g} ns, got {latency_ns:g}"
    return None


# The compute roofline (--peak-tflops, --mem-bw): from 1 GFLOPS to 10^21 FLOPS per NPU, memory bandwidth in the
# links' range. Below them an op's time leaves float range (1e-310 TFLOPS made a step take an infinite time).
MIN_TFLOPS = 1e-3
MAX_TFLOPS = 1e9


def _in_range(what: str, value, low: float, high: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise UserError(f"{what} must be a number of {unit} between {low:g} and {high:g}, got {show(value)}")
    return float(value)


def check_peak_tflops(value, what: str = "--peak-tflops") -> float:
    """A peak rate a roofline can use (1 GFLOPS to 1 ZFLOPS, so every op's time is a finite number of ns), or one
    UserError naming `what` (an option, or a file and its key) and the range."""
    return _in_range(what, value, MIN_TFLOPS, MAX_TFLOPS, "TFLOPS")


def check_roofline(peak_tflops, mem_gbps) -> None:
    """One UserError naming the option and the range when the roofline is outside the modelled range."""
    check_peak_tflops(peak_tflops)
    _in_range("--mem-bw", mem_gbps, MIN_GBPS, MAX_GBPS, "GB/s")


def gbps_to_bytes_per_ns(gbps: float) -> float:
    """Convert GB/s (2**30 bytes per second, as ASTRA-sim) to bytes per nanosecond."""
    return gbps * GIB / 1e9


def _to_float(item: object, what: str, text: object) -> float:
    # bool is an int subclass; "True" as a bandwidth is surely a mistake.
    if isinstance(item, bool):
        raise UserError(f"{what}: expected a number, got {show(item)} in {show(text)}")
    try:
        value = float(item) if isinstance(item, (int, float)) else float(str(item).strip())
    except ValueError:
        raise UserError(f"{what}: '{str(item).strip()}' is not a number (in '{text}')") from None
    if not math.isfinite(value):
        raise UserError(f"{what}: value must be finite, got '{item}' (in '{text}')")
    return value


def parse_number_list(
    text: str | float | Sequence[float],
    what: str,
    count: int | None = None,
    positive: bool = True,
) -> list[float]:
    """Parse comma-separated numbers such as "50,50,50" (one per dimension).

    `what` names the quantity in error messages ("bandwidth").  A list/tuple or a
    single number is accepted too, so values read from config files go through
    the same checks.  When `count` is given the result has exactly `count`
    entries: a single value is broadcast to all of them, any other length
    mismatch is an error.  With `positive=True` zero and negative values are
    rejected (a zero bandwidth would mean infinite transfer time); with
    `positive=False` the sign is left for the caller to check.
    """
    if isinstance(text, str):
        s = text.strip()
        if not s:
            raise UserError(f"{what}: empty value; expected comma-separated numbers like '50,50'")
        items: list[object] = [part.strip() for part in s.split(",")]
        if any(item == "" for item in items):
            raise UserError(f"{what}: malformed list '{text}' (empty entry); expected comma-separated numbers like '50,50'")
    elif isinstance(text, (list, tuple)):
        items = list(text)
        if not items:
            raise UserError(f"{what}: empty list; expected at least one number")
    else:
        items = [text]
    values = [_to_float(item, what, text) for item in items]
    if positive:
        for v in values:
            if v <= 0:
                raise UserError(f"{what} must be positive, got {v:g} (in '{text}')")
    if count is not None:
        if len(values) == 1 and count > 1:
            values = values * count
        elif len(values) != count:
            raise UserError(
                f"{what}: got {len(values)} values ('{text}') but expected {count} "
                f"(one per dimension) or a single value for all")
    return values


_FORMAT_UNITS = (("B", 1), ("KB", 2**10), ("MB", 2**20), ("GB", 2**30), ("TB", 2**40))


def format_size(nbytes: int, decimals: int = 2) -> str:
    """Human-readable size with power-of-two units: 1073741824 -> "1GB", 1536 -> "1.5KB".

    Exact multiples print without decimals; other values are rounded to `decimals`
    decimals, so the output is for people, not for parsing back exactly.
    """
    n = int(nbytes)
    if n < 0:
        return "-" + format_size(-n, decimals)
    # Largest unit not exceeding n (bytes for n < 1024, including 0).
    i = max(k for k, (_, mult) in enumerate(_FORMAT_UNITS) if k == 0 or n >= mult)
    unit, mult = _FORMAT_UNITS[i]
    if n % mult == 0:
        return f"{n // mult}{unit}"
    value = round(n / mult, decimals)
    if value >= 1024 and i + 1 < len(_FORMAT_UNITS):
        # Rounding pushed e.g. 1023.999MB up to 1024: say "1GB" instead.
        unit, mult = _FORMAT_UNITS[i + 1]
        value = round(n / mult, decimals)
    text = f"{value:.{decimals}f}".rstrip("0").rstrip(".")
    return f"{text}{unit}"
