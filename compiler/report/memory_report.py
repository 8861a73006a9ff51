"""Memory per rank against the GPU's capacity: the report's `memory` object, its text lines and the one warning
of a layout that does not fit.

The capture measures the peak of live tensor bytes over the step (frontend/step_memory.py), the figure
`torch.cuda.max_memory_allocated` gives, and replays PyTorch's caching allocator on the step's allocations for the
bytes it reserves from the GPU (frontend/caching_allocator.py; `max_memory_reserved`, what nvidia-smi and
torchtitan show). A GPU also holds what PyTorch's allocator never sees: NCCL's own buffers, one set per
communicator (process group), and the CUDA context. Both are stated constants here, added to the reserved bytes
for the verdict against the GPU's memory (`memory_gb` of its preset or device file, decimal GB as datasheets give
it). docs/memory.md, "Memory per rank", checks the figures against the calibration set's runs.
"""
from __future__ import annotations

import warnings

from ...network.errors import InputWarning
from ...network.memory_record import CATEGORIES, PHASE_PEAKS

# NCCL's buffers per communicator: NCCL_BUFFSIZE (4 MiB by default) for the Simple protocol, plus the LL and LL128
# protocols' smaller ones, for each channel and each of its ring and tree connections: about 256 MiB with the 16 to
# 32 channels NCCL opens on NVLink (a stated constant; NCCL_BUFFSIZE and NCCL_MAX_NCHANNELS change it)
NCCL_BYTES_PER_GROUP = 256 * 2**20
# the CUDA context (its kernels' code, the driver's own allocations) on an H100 with CUDA 12's lazy module loading
CUDA_CONTEXT_BYTES = 512 * 2**20
GIB = 2**30
NOT_KNOWN = ("not known: the step records no allocations (a captured model file does, and the module and tables "
             "written from it)")


def memory_object(held: dict | None, groups: int, gpu=None) -> dict | None:
    """The report's `memory` object for one program: `held` its memory record (network/memory_record.py; None: not
    known), `groups` the process groups (communicators) it runs collectives or messages on, `gpu` the --gpu device
    (None: no verdict)."""
    if not held:
        return None
    reserved = int(held["reserved_bytes"])
    nccl = groups * NCCL_BYTES_PER_GROUP
    needs = reserved + nccl + CUDA_CONTEXT_BYTES
    capacity = int(gpu.memory_gb * 1e9) if gpu is not None else None
    return {"peak_bytes": int(held["peak_bytes"]), "reserved_bytes": reserved, "peak_phase": held["peak_phase"],
            "at_peak_bytes": {c: int(held[f"{c}_bytes"]) for c in CATEGORIES},
            "phase_peak_bytes": {p: int(b) for p, b in held.get(PHASE_PEAKS, {}).items()},
            "nccl_bytes": nccl, "cuda_context_bytes": CUDA_CONTEXT_BYTES, "needs_bytes": needs,
            "gpu": gpu.name if gpu is not None else None, "capacity_bytes": capacity,
            "fits": needs <= capacity if capacity is not None else None}


def with_most(memory: dict, program: int) -> dict | None:
    """The reported program's memory object, with `most`: the memory object (and rank) of the program that needs
    the most, where that is another program (a pipeline's other stage: the last holds the loss, the first the most
    micro-batches in flight). `memory`: program rank -> its memory object (None: not known)."""
    mine = memory.get(program)
    known = {rank: m for rank, m in memory.items() if m is not None}
    if mine is None or not known:
        return mine
    most = max(known, key=lambda r: (known[r]["needs_bytes"], -r))
    if known[most]["needs_bytes"] <= mine["needs_bytes"]:
        return mine
    return {**mine, "most": {"rank": most, **known[most]}}


def gib(nbytes: int) -> str:
    return f"{nbytes / GIB:.3f} GiB"


def format_memory(m: dict | None) -> list[str]:
    """The text report's lines (with a blank line after)."""
    if m is None:
        return [f"memory per rank {NOT_KNOWN}", ""]
    held = ", ".join(f"{c.replace('_', ' ')} {b / GIB:.3f}" for c, b in m["at_peak_bytes"].items() if b)
    lines = [f"memory per rank {gib(m['peak_bytes'])} allocated at the peak (in {m['peak_phase'] or 'the step'}), "
             f"{gib(m['reserved_bytes'])} reserved by the caching allocator",
             f"  at the peak   {held or 'nothing'} GiB",
             f"  needs         {gib(m['needs_bytes'])} with NCCL buffers ({m['nccl_bytes'] / GIB:.3f}) and the CUDA "
             f"context ({m['cuda_context_bytes'] / GIB:.3f})"
             + ("" if m["capacity_bytes"] is None else
                f": of the {m['gpu']}'s {m['capacity_bytes'] / 1e9:g} GB ({gib(m['capacity_bytes'])}), "
                + ("fits" if m["fits"] else "DOES NOT FIT"))]
    most = m.get("most")
    if most is not None:   # another stage needs more: a layout fits only where every rank does
        lines.append(f"  most          rank {most['rank']} needs {gib(most['needs_bytes'])} (in "
                     f"{most['peak_phase'] or 'the step'})"
                     + ("" if most["fits"] is None else ": fits" if most["fits"] else ": DOES NOT FIT"))
    return lines + [""]


def warn_over_capacity(memory: dict, gpu) -> None:
    """One warning line for the program that needs the most, where it needs more than the GPU holds. `memory`:
    program rank -> its memory object."""
    over = {rank: m for rank, m in memory.items() if m is not None and m["fits"] is False}
    if not over:
        return
    rank = max(over, key=lambda r: (over[r]["needs_bytes"], -r))
    m = over[rank]
    stages = f" (and {len(over) - 1} other pipeline stage{'s' if len(over) > 2 else ''})" if len(over) > 1 else ""
    warnings.warn(f"rank {rank}{stages} needs {gib(m['needs_bytes'])} at its peak ({gib(m['peak_bytes'])} of tensors "
                  f"in {m['peak_phase'] or 'the step'}, {gib(m['reserved_bytes'])} reserved by the caching allocator, "
                  f"NCCL buffers and CUDA context), more than the {gpu.name}'s {gpu.memory_gb:g} GB "
                  f"({gib(m['capacity_bytes'])})", InputWarning, stacklevel=2)
