"""Gradient accumulation in a model file: `GRADIENT_ACCUMULATION = M` (or {"microbatches": M, "sync": "last" |
"every"}) runs the step's forward and backward once per micro-batch of `example_inputs()`'s batch, split M ways,
before the one optimizer step, as a training loop with gradient accumulation does.

Gradient synchronisation follows the usual idiom: "last" (the default) synchronises only in the last micro-batch's
backward, DDP under `no_sync()` and FSDP2 with `set_requires_gradient_sync(False)` before it (Megatron and torch's
DDP documentation do this; FSDP2 then keeps unsharded gradients between micro-batches); "every" reduces after each
micro-batch's backward (a loop that calls neither). With a `pp` axis the pipeline's schedule runs the
micro-batches (PIPELINE["microbatches"]) and this setting is refused.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ...network.errors import UserError

SYNC = ("last", "every")
MAX_MICROBATCHES = 4096


@dataclass(frozen=True)
class Accumulation:
    microbatches: int = 1
    sync: str = "last"


def parse(value, path: str) -> Accumulation:
    """The file's GRADIENT_ACCUMULATION (None: no accumulation)."""
    if value is None:
        return Accumulation()
    asked = {"microbatches": value} if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(asked, dict) or "microbatches" not in asked or set(asked) - {"microbatches", "sync"}:
        raise UserError(f"{path}: GRADIENT_ACCUMULATION = {value!r}: expected a micro-batch count or a dict with "
                        "the keys microbatches and (optionally) sync")
    micro, sync = asked["microbatches"], asked.get("sync", "last")
    if isinstance(micro, bool) or not isinstance(micro, int) or not 1 <= micro <= MAX_MICROBATCHES:
        raise UserError(f"{path}: GRADIENT_ACCUMULATION microbatches = {micro!r}: expected a count from 1 to "
                        f"{MAX_MICROBATCHES}")
    if sync not in SYNC:
        raise UserError(f"{path}: GRADIENT_ACCUMULATION sync = {sync!r}: expected one of {', '.join(SYNC)}")
    return Accumulation(micro, sync)


def split(inputs: tuple, micro: int, path: str, setting: str = "GRADIENT_ACCUMULATION") -> tuple:
    """The first micro-batch of one rank's batch (every micro-batch has its shapes, all the capture needs);
    `setting` names what asked for `micro` micro-batches."""
    import torch
    if micro == 1:
        return inputs
    first = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            if t.shape[0] % micro:
                raise UserError(f"{path}: example_inputs() has a batch of {t.shape[0]}, which does not split into "
                                f"{setting} = {micro} equal micro-batches")
            first.append(t[: t.shape[0] // micro])
        else:
            first.append(t)
    return tuple(first)


@contextlib.contextmanager
def gradient_sync(model, on: bool):
    """Around one micro-batch's backward: DDP and FSDP2 reduce gradients only if `on`."""
    from torch.distributed.fsdp import FSDPModule
    from .parallelize import ddp_modules
    if on:
        yield
        return
    roots = [m for m in model.modules() if isinstance(m, FSDPModule)]
    with contextlib.ExitStack() as stack:
        for ddp in ddp_modules(model):
            stack.enter_context(ddp.no_sync())
        for m in roots:
            m.set_requires_gradient_sync(False, recurse=False)
        try:
            yield
        finally:
            for m in roots:
                m.set_requires_gradient_sync(True, recurse=False)
