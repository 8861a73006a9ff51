"""Record the training step a script actually runs, on its own ranks, and compile it for any topology.

    with astra_compile.record() as rec:
        train_step()                              # the script's own step: its model, data and process groups
    print(rec.report(topology="8x8_torus").format())

The block runs for real (real tensors and real collectives on the script's process groups, any backend); the
same dispatch-level recorder as the capture (recorder.py) notes every aten op and collective this rank issues.
As in the capture, this rank's step stands for every rank's (SPMD), so the topology must have as many NPUs as
the job has ranks. Each op's phase comes from autograd (an op run while a backward pass is executing is
backward) and from torch.optim's global step hooks (optimizer). Record a steady-state step: DDP rebuilds its
buckets once, in its second step, with broadcasts of their layout that a steady step does not have.
"""
from __future__ import annotations

import contextlib

from ...network.errors import UserError
from ..frontend.workload import Workload


class Recording:
    """What `record()` yields: after the block, `workload` holds the step and `report()` compiles it."""

    def __init__(self):
        self.workload: Workload | None = None
        self.unsupported = ""

    def report(self, topology=..., **options):
        """astra_compile.compile on the recorded step (same options, `job=` too; a topology with the recorded
        run's rank count)."""
        if self.workload is None:
            raise UserError("nothing recorded yet: call report() after the `with astra_compile.record()` block")
        if self.unsupported:
            raise UserError(self.unsupported)
        from .api import compile
        return compile(self.workload, topology, **options)


@contextlib.contextmanager
def record(source: str = "recorded step"):
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from ..frontend.recompute import recompute_marked
    from ..frontend.recorder import StepRecorder

    recording = Recording()
    recorder = StepRecorder(live=True)

    def entering(*_):
        recorder.in_optimizer = True

    def leaving(*_):
        recorder.in_optimizer = False
    hooks = [register_optimizer_step_pre_hook(entering), register_optimizer_step_post_hook(leaving)]
    try:
        with recorder, recompute_marked(lambda: recorder):
            yield recording
    finally:
        for h in hooks:
            h.remove()
    world = dist.get_world_size() if dist.is_initialized() else 1
    recording.unsupported = recorder.unsupported
    recording.workload = Workload(world, {0: recorder.ops}, source=source, spmd=True)
