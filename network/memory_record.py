"""A rank program's memory as the capture measures it (compiler/frontend/step_memory.py): the peak of live tensor
bytes, the part of the step it falls in, what held it by category, and the bytes the caching allocator reserves.
Read back from the capture cache, a workload module's `wl.memory` and a step directory's meta.json, each checked
here: a hand-made or damaged record is refused, never shown as a figure."""
from __future__ import annotations

from .errors import show

# what live bytes at the peak held, in the order reports list them (a storage counts under the first it held)
CATEGORIES = ("parameters", "gradients", "optimizer_states", "communication", "activations", "other")
BYTES = ("peak_bytes", "reserved_bytes") + tuple(f"{c}_bytes" for c in CATEGORIES)
PHASES = ("", "forward", "backward", "optimizer")
MAX_BYTES = 2**63 - 1
PHASE_PEAKS = "phase_peak_bytes"   # optional: {phase: its own peak of live bytes}


def problem(record) -> str:
    """What is wrong with a memory record ("" when nothing is): exactly BYTES (non-negative counts whose
    categories sum to the peak, reserved at least the peak), peak_phase and, in records written since it was
    added, phase_peak_bytes (each phase's own peak: at most the step's)."""
    if not isinstance(record, dict) or set(record) - {PHASE_PEAKS} != set(BYTES) | {"peak_phase"}:
        return f"needs exactly {', '.join(BYTES)}, peak_phase (and optionally {PHASE_PEAKS}); got {show(record)}"
    for key in BYTES:
        v = record[key]
        if not _is_bytes(v):
            return f"{key}: {show(v)} is not a byte count"
    if record["peak_phase"] not in PHASES:
        return f"peak_phase: {show(record['peak_phase'])} is not one of {', '.join(map(repr, PHASES))}"
    peaks = record.get(PHASE_PEAKS, {})
    if not isinstance(peaks, dict) or set(peaks) - set(PHASES[1:]) or \
            not all(_is_bytes(v) and v <= record["peak_bytes"] for v in peaks.values()):
        return (f"{PHASE_PEAKS}: {show(peaks)} is not a byte count of at most peak_bytes for each of "
                f"{', '.join(PHASES[1:])}")
    if sum(record[f"{c}_bytes"] for c in CATEGORIES) != record["peak_bytes"]:
        return "the categories' bytes do not sum to peak_bytes"
    if record["reserved_bytes"] < record["peak_bytes"]:
        return "reserved_bytes is less than peak_bytes"
    return ""


def _is_bytes(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and 0 <= v <= MAX_BYTES
