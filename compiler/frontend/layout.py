"""A model file run with another layout's choices than it was written with: a local batch, micro-batches, activation
checkpointing and a pipeline schedule. `astra-compile plan` (compiler/plan/) writes one small model file per layout
that calls `layout(...)` on the user's file, so every layout is an ordinary model file a user can run, inspect and
capture once (the capture cache keys a file by its content, which names the user's file's digest).

What each choice does to the user's file, as a training script would do it:
- `batch`: `example_inputs()` gives this rank's batch; every tensor's first dimension becomes `batch` (fake
  tensors: only shapes matter).
- `microbatches`: with a `pp` axis the pipeline's `PIPELINE["microbatches"]`, else `GRADIENT_ACCUMULATION`.
- `checkpointing`: "none" leaves the file's own; "full" checkpoints every block of the model's repeated layers
  (each child of the longest nn.ModuleList / nn.Sequential whose children share one class) with non-reentrant
  torch.utils.checkpoint, as torchtitan's and Megatron's full recomputation do; "selective" checkpoints the same
  blocks under torchtitan's op-level policy (save matmul and attention outputs, and the collectives' results,
  recompute every second matmul and the rest). The block's forward is replaced on the instance, so module names
  (TP plans, FSDP units) stay the file's.
- `schedule`: the pipeline schedule (PIPELINE["schedule"]) with a `pp` axis.
- the optimizer: a file without its own `optimizer()` trains with AdamW, as the capture's default does, but with
  the DTensor parameters tensor parallelism makes and the plain ones it leaves (embeddings, norms) in two param
  groups where the rank holds both. A layout with `tp` but neither `dp` nor `fsdp` does (DDP makes every
  parameter a local tensor, FSDP2 every one a DTensor), and AdamW's foreach kernels refuse the two kinds together
  on a GPU as in the capture (docs/workloads.md): the two groups are what a training script written for that
  layout does. With one kind only, it is the default optimizer itself.
- `depth`: (name, blocks): the file run with its top-level constant `name` set to `blocks`, as the file itself
  would build a shallower model (its pipeline_stage() splitting by the same constant); `astra-compile plan` times a
  layout at two such depths and extrapolates (compiler/plan/depth.py).
- `unsharded`: the model trained as built, on every rank alike (a file without a parallelize() of its own, run
  with `--mesh dp=N`: no DDP, no collective), as `astra-compile plan`'s probe of a block without tensor
  parallelism runs it (compiler/plan/probe.py; a topology has 2 NPUs or more).
"""
from __future__ import annotations

import functools
import os

from ...network.errors import UserError

CHECKPOINTING = ("none", "selective", "full")


def layout(path: str, batch: int | None = None, microbatches: int = 1, checkpointing: str = "none",
           schedule: str | None = None, pipelined: bool = False, depth: tuple | None = None,
           unsharded: bool = False) -> dict:
    """The user's model file's names with the layout's choices applied (a dict for the layout file's globals)."""
    from .model_file import load_model_file
    if checkpointing not in CHECKPOINTING:
        raise UserError(f"layout of {path}: checkpointing {checkpointing!r}: expected one of "
                        f"{', '.join(CHECKPOINTING)}")
    # the file's own checks and its one-line errors
    load_model_file(os.fspath(path), None if depth is None else {depth[0]: depth[1]})
    import sys
    from .model_file import module_name
    names = dict(vars(sys.modules[module_name(os.fspath(path))]))
    names.pop("mesh_axes", None)              # the layout's mesh is given on the command line
    if batch is not None:
        names["example_inputs"] = _resized(names["example_inputs"], batch)
    if names.get("optimizer") is None:
        names["optimizer"] = adamw_by_tensor_kind
    if checkpointing != "none":
        names["build_model"] = _checkpointed(names["build_model"], checkpointing)
    if pipelined:
        names["PIPELINE"] = {"schedule": schedule or "1F1B", "microbatches": microbatches}
        names.pop("GRADIENT_ACCUMULATION", None)
    elif microbatches > 1:
        names["GRADIENT_ACCUMULATION"] = microbatches
    if unsharded:
        if names.get("parallelize") is not None:
            raise UserError(f"layout of {path}: unsharded: the file has a parallelize() of its own")
        names["parallelize"] = _as_built
    for dunder in ("__name__", "__file__", "__builtins__", "__loader__", "__spec__", "__package__"):
        names.pop(dunder, None)
    return names


def _as_built(model, mesh):
    """parallelize() of an unsharded layout: the model as built (the dp axis read: every rank trains it alone)."""
    mesh["dp"]
    return model


def adamw_by_tensor_kind(parameters):
    """AdamW over `parameters`, the DTensors and the plain tensors among them in separate param groups where there
    are both (each group's foreach kernels then see one kind), else in the one group of `AdamW(parameters)`."""
    import torch
    from torch.distributed.tensor import DTensor
    parameters = list(parameters)
    shards = [p for p in parameters if isinstance(p, DTensor)]
    plain = [p for p in parameters if not isinstance(p, DTensor)]
    return torch.optim.AdamW([{"params": shards}, {"params": plain}] if shards and plain else parameters)


def _resized(example_inputs, batch: int):
    @functools.wraps(example_inputs)
    def inputs():
        import torch
        made = example_inputs()
        one = not isinstance(made, tuple)
        out = tuple(t.new_empty((batch, *t.shape[1:])) if isinstance(t, torch.Tensor) and t.dim() > 0 else t
                    for t in ((made,) if one else made))
        return out[0] if one else out
    return inputs


def _checkpointed(build_model, mode: str):
    @functools.wraps(build_model)
    def build():
        model = build_model()
        checkpoint_blocks(model, mode)
        return model
    return build


def repeated_blocks(model) -> list:
    """The model's repeated layers: the children of its longest ModuleList or Sequential whose children (2 or more)
    are all of one class."""
    from torch import nn
    best: list = []
    for m in model.modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)):
            kids = list(m.children())
            if len(kids) >= 2 and len({type(k) for k in kids}) == 1 and len(kids) > len(best):
                best = kids
    return best


def checkpoint_blocks(model, mode: str) -> int:
    """Checkpoint each repeated block's forward ("full" or "selective"); returns how many blocks."""
    blocks = repeated_blocks(model)
    if not blocks:
        raise UserError("activation checkpointing: the model has no repeated layers (an nn.ModuleList or "
                        "nn.Sequential of 2 or more blocks of one class) to checkpoint")
    for block in blocks:
        block.forward = _checkpointed_forward(block.forward, mode)
    return len(blocks)


def _checkpointed_forward(forward, mode: str):
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    def run(*args, **kwargs):
        if mode == "selective":
            context = functools.partial(create_selective_checkpoint_contexts, op_policy())
            return checkpoint(forward, *args, use_reentrant=False, context_fn=context, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return run


def op_policy():
    """torchtitan's op-level selective checkpointing policy: keep the outputs of matmuls, attention, reduce-scatters
    and max, but recompute every second matmul (counted apart in the forward and the recomputation)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    saved = {aten.mm.default, aten.addmm.default, aten.max.default,
             aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
             aten._scaled_dot_product_flash_attention_for_cpu.default,
             torch.ops._c10d_functional.reduce_scatter_tensor.default}
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        matmul = func in (aten.mm.default, aten.addmm.default)
        if matmul:
            counts["recompute" if ctx.is_recompute else "forward"] += 1
        every_second = matmul and counts["recompute" if ctx.is_recompute else "forward"] % 2 == 0
        keep = func in saved and not every_second
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def layout_file_text(path: str, digest: str, batch: int, microbatches: int, checkpointing: str,
                     schedule: str | None, pipelined: bool, title: str, depth: tuple | None = None,
                     unsharded: bool = False) -> str:
    """The source of a layout's model file (`astra-compile plan` writes it beside its results); `depth`: (name,
    blocks) for a shallower model, `unsharded` (layout())."""
    shallower = ("" if depth is None else f", depth={tuple(depth)!r}") + (", unsharded=True" if unsharded else "")
    title += "" if depth is None else f" (the model at {depth[0]} = {depth[1]})"
    return (f'"""{title}\n\nWritten by astra-compile plan from {path} (sha256 {digest}); run it as any model file:\n'
            f'    astra-compile THIS_FILE --cluster ... --mesh ...\n"""\n'
            "from astra_compile.compiler.frontend.layout import layout\n\n"
            f"globals().update(layout({path!r}, batch={batch}, microbatches={microbatches}, "
            f"checkpointing={checkpointing!r}, schedule={schedule!r}, pipelined={pipelined}{shallower}))\n")
