"""Building blocks the 3-D parallel model files here share (gpt3_175b_megatron.py, bloom_176b.py,
llama3_405b.py); not a model file itself.

- `published(filename, name, **sizes)`: a calibration model file of benchmarks/published/ (its layers) loaded
  as a module of its own, with a model's sizes set in its globals (its layers read them when they are built and
  run); a module of its own, so the calibration runs' import is never changed. `megatron_gpt(name, **sizes)`:
  megatron_gpt.py's layers, Megatron's tensor parallelism and fp16 optimizer.
- `scatter_to_tp` / `gather_from_tp`: Megatron's scatter/gather of the tensors a pipeline stage sends (Narayanan et
  al. 2021, section 4.1; DeepSpeed's pipeline engine partitions them the same way over its model-parallel group).
  A stage's output is the same on every tensor-parallel rank, so each of them sends only its 1/tp slice over its
  own NIC and the receiving stage all-gathers the slices over NVLink; the gradients sent back are split and
  gathered alike. Without them every tp rank sends the whole tensor across nodes (tp times the bytes).
"""
import importlib.util
import os

import torch
import torch.distributed as dist


def published(filename, name, **sizes):
    """benchmarks/published/`filename` (beside this file's folder, else in the astra_compile checkout: an installed
    package holds no benchmarks) as a module of its own called `name`, with `sizes` set in its globals."""
    import astra_compile
    near = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "published", filename)
    path = near if os.path.exists(near) else \
        os.path.join(os.path.dirname(astra_compile.__file__), "benchmarks", "published", filename)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in sizes.items():
        if not hasattr(module, key):
            raise AttributeError(f"{filename} has no {key} to set")
        setattr(module, key, value)
    return module


def megatron_gpt(name, **sizes):
    return published("megatron_gpt.py", name, **sizes)


class _Scatter(torch.autograd.Function):
    """This tp rank's 1/tp of the flattened tensor forward; the gradient's slices all-gathered backward."""
    @staticmethod
    def forward(ctx, x, group, tp, rank):
        ctx.group, ctx.tp, ctx.shape = group, tp, x.shape
        return x.reshape(-1).chunk(tp)[rank].contiguous()

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad.contiguous(), ctx.group, ctx.tp).view(ctx.shape), None, None, None


class _Gather(torch.autograd.Function):
    """The tp ranks' slices all-gathered into the whole tensor forward; this rank's slice of the gradient back."""
    @staticmethod
    def forward(ctx, piece, group, tp, rank, shape):
        ctx.tp, ctx.rank = tp, rank
        return _gather(piece, group, tp).view(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(-1).chunk(ctx.tp)[ctx.rank].contiguous(), None, None, None, None


def _gather(piece, group, tp):
    if group is None:   # the stage run alone to learn its shapes, before it is parallelized: same shapes
        return piece.repeat(tp)
    whole = piece.new_empty(tp * piece.numel())
    dist.all_gather_into_tensor(whole, piece, group=group)
    return whole


def scatter_to_tp(x, group, tp, rank):
    return _Scatter.apply(x, group, tp, rank)


def gather_from_tp(piece, group, tp, rank, shape):
    return _Gather.apply(piece, group, tp, rank, shape)
