"""What a step's compile keeps for its whole run taken out of the cyclic garbage collector's walks.

A captured step holds millions of small objects (a 175B GPT's 1.28M ops, then as many lowered ops) that live until
the step is timed. Each full collection walks every tracked object, and the collector runs a full one each time
the heap has grown by a quarter: on that step a fifth of the run went there (87 s of 462 s, 23 full collections).
`settled()`, called where such a structure is complete (a stage's ops captured, the step lowered), collects what
is garbage by then and freezes the rest (gc.freeze): later collections skip it. Reference counting still frees a
frozen object that is no longer used; only a reference cycle among frozen objects waits for `compiling`'s end,
which hands them back to the collector. Where the process froze objects of its own before (a server that froze
its heap before forking), nothing is frozen here and nothing unfrozen.
"""
from __future__ import annotations

import contextlib
import gc

_active = [0]   # compiles under way that own the frozen generation (nested: a sweep point inside a plan)


@contextlib.contextmanager
def compiling():
    """Around one compile: what `settled()` froze is handed back to the collector when the outermost ends."""
    owns = _active[0] > 0 or gc.get_freeze_count() == 0
    if owns:
        _active[0] += 1
    try:
        yield
    finally:
        if owns:
            _active[0] -= 1
            if not _active[0]:
                gc.unfreeze()


def settled() -> None:
    """Everything alive now stays for the rest of the compile: garbage collected, the rest frozen (outside a
    `compiling()` that owns the frozen generation: nothing)."""
    if _active[0] and gc.isenabled():
        gc.collect()
        gc.freeze()


@contextlib.contextmanager
def paused(keep: bool = False):
    """A phase that builds a great many objects and leaves no reference cycles behind (the lowered programs, the
    engine's tables and its run): the collector does not run during it (each full collection would walk the
    objects it has built so far: the engine's run of a 175B GPT's 1.28M ops took 131 of them), and runs as before
    after it. `keep`: what it made lives for the rest of the compile (a copied micro-batch's ops): frozen before the
    collector runs again, so that no collection walks them first (in a compile; what is frozen with them waits for
    its end). Re-enabled first, the collector could run as the phase's context ended, over everything the phase
    had made."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if keep and _active[0]:
                gc.freeze()
            gc.enable()
