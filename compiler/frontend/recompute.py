"""Activation checkpointing as the capture sees it: the forward that torch.utils.checkpoint runs again inside the
backward pass is recorded with the phase "recompute" (workload.RECOMPUTE), so the report shows what recomputation costs.

The capture runs the model file's own checkpointing (torch.utils.checkpoint, reentrant or not, selective
checkpointing's policies, torch's checkpoint_wrapper, which calls it), so the recomputed ops are already in the
recorded step; only their phase would say "backward". Both of torch's ways run the checkpointed function a second
time during backward through one object each, which is where this module marks the call:
- non-reentrant (the default since torch 2.4, and checkpoint_wrapper's): `_CheckpointFrame.recompute_fn`, called by
  the saved-tensor unpack hook when backward first needs a saved activation of the region;
- reentrant: `CheckpointFunction`'s `run_function`, called again in its backward (the first call, in forward, runs
  outside any backward pass and is left as forward).
Under selective checkpointing the ops its policy saved are served from its cache during recomputation and never
reach the recorder: only what is really recomputed is marked.
"""
from __future__ import annotations

import contextlib
import functools


@contextlib.contextmanager
def recompute_marked(recording):
    """While the capture runs: each recomputation sets `recomputing` on the recorder `recording()` gives (None in the
    warm-up step) for the time it runs. Restores torch's classes on exit."""
    import torch
    from torch.utils import checkpoint as ckpt

    def marked(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            r = recording()
            if r is None or torch._C._current_graph_task_id() == -1:   # the forward's own call, or warm-up
                return fn(*args, **kwargs)
            r.recomputing += 1
            try:
                return fn(*args, **kwargs)
            finally:
                r.recomputing -= 1
        return run

    frame_init = ckpt._CheckpointFrame.__init__
    reentrant_forward = ckpt.CheckpointFunction.forward

    def init(self, recompute_fn, *rest, **kw):
        frame_init(self, marked(recompute_fn), *rest, **kw)

    def forward(ctx, run_function, preserve_rng_state, *args):
        return reentrant_forward(ctx, marked(run_function), preserve_rng_state, *args)

    ckpt._CheckpointFrame.__init__ = init
    ckpt.CheckpointFunction.forward = staticmethod(forward)
    try:
        yield
    finally:
        ckpt._CheckpointFrame.__init__ = frame_init
        ckpt.CheckpointFunction.forward = staticmethod(reentrant_forward)
