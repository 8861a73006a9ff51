"""Data-dependent routing (MoE) under fake tensors: an assumption stands in for the data.

Fake tensors have shapes but no values, so a step that sizes its communication from data stops: token-choice MoE
counts the tokens per expert (`torch.bincount`), reads the counts (`.tolist()`) and passes them to
`all_to_all_single` as split sizes. This mode answers those questions with a stated assumption, taken from the
model file's `ROUTING`:

    ROUTING = "balanced"            (the default) every expert gets the same number of tokens (the remainder to
                                    the first experts)
    ROUTING = [0.4, 0.2, 0.2, 0.2]  a distribution of tokens over the experts (normalised; rounded so the counts
                                    add up to the tokens)

and with one more: every rank routes as this one does (SPMD), so an all-to-all or all-gather of counts returns
what every rank holds. Tensors whose values are known this way carry a real "shadow" (small integer tensors
only); an op whose tensor inputs all have shadows runs on the shadows too, so counts can be summed, offset,
gathered, and read with .tolist() / .item(). A data-dependent op the assumption does not cover (nonzero, a mask
index on router output) stops the capture with one line naming it.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException, FakeTensor,
                                           unset_fake_temporarily)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

from ...network.errors import UserError

SHADOW_MAX = 1 << 16        # elements: counts and offsets, never activations


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class AssumedRouting(TorchDispatchMode):
    def __init__(self, routing, path: str):
        super().__init__()
        self.routing, self.path = routing, path
        self.shadows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}   # storage -> (fake, real of its values)

    def shadow(self, t):
        if not isinstance(t, torch.Tensor):
            return None
        held = self.shadows.get(_storage(t))
        if held is None:
            return None
        base = held[1]
        try:   # the view of the held values that `t` is (a real tensor: outside fake mode)
            with unset_fake_temporarily():
                return base.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset())
        except RuntimeError:
            return None

    def keep(self, fake, real) -> None:
        """Hold `real`'s values for the new tensor `fake` (a fresh contiguous result; a view of a held tensor is
        read through its base, and an in-place op on one updates the held values as it runs on them)."""
        if not (isinstance(fake, torch.Tensor) and isinstance(real, torch.Tensor)) or real.numel() > SHADOW_MAX \
                or real.is_floating_point() or _storage(fake) in self.shadows or not fake.is_contiguous() \
                or fake.storage_offset() != 0 or tuple(fake.shape) != tuple(real.shape):
            return
        if isinstance(real, FakeTensor):   # never hold a fake as values (a slip outside unset_fake_temporarily)
            raise AssertionError("routing shadow is a fake tensor")
        with unset_fake_temporarily():
            self.shadows[_storage(fake)] = (fake, real.detach().contiguous().clone().reshape(-1))

    def assign(self, fake, real) -> None:
        """`fake` now holds `real`'s values (a collective filled it), whatever was held for it before."""
        self.shadows.pop(_storage(fake), None)
        self.keep(fake, real)

    def counts(self, n: int, bins: int) -> torch.Tensor:
        with unset_fake_temporarily():
            if self.routing == "balanced":
                out = torch.full((bins,), n // bins, dtype=torch.int64)
                out[: n % bins] += 1
                return out
            share = torch.tensor([float(p) for p in self.routing], dtype=torch.float64)
            if len(share) != bins:
                raise UserError(f"{self.path}: ROUTING gives {len(share)} shares but the step counts tokens over "
                                f"{bins} experts")
            raw = share / share.sum() * n
            out = raw.floor().to(torch.int64)
            out[torch.argsort(raw - out, descending=True)[: n - int(out.sum())]] += 1
            return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket.__name__)
        tensors = _tensors_in((args, kwargs), [])
        shadows = [self.shadow(t) for t in tensors] if self.shadows else [None] * len(tensors)
        if func is torch.ops.aten._local_scalar_dense.default:
            if shadows and shadows[0] is not None:
                with unset_fake_temporarily():
                    return shadows[0].item()
            try:   # fake mode knows constants (an optimizer's step count)
                return func(*args, **kwargs)
            except DataDependentOutputException:
                raise UserError(f"{self.path}: the step reads a value the capture does not have (.item() / "
                                ".tolist() of a tensor computed from data); ROUTING covers token counts from "
                                "torch.bincount") from None
        if func is torch.ops.aten.bincount.default and shadows[0] is None:
            minlength = kwargs.get("minlength", args[2] if len(args) > 2 else 0)
            if not minlength:
                raise UserError(f"{self.path}: torch.bincount without minlength: the number of experts is unknown "
                                "under fake tensors; pass minlength=<experts>")
            real = self.counts(tensors[0].numel(), int(minlength))
            out = torch.empty(real.shape, dtype=torch.int64)
            self.keep(out, real)
            return out
        if name in ("alltoall_base_", "all_to_all_single", "_allgather_base_", "all_gather_into_tensor") \
                and func.namespace in ("c10d", "_c10d_functional"):
            return self.exchange(func, name, args, kwargs, tensors, shadows)
        if tensors and not self.shadows:   # no values held: nothing to compute alongside (most steps)
            return func(*args, **kwargs)
        known = all(s is not None for s in shadows)   # values known for every input (or no tensor input)
        try:
            out = func(*args, **kwargs)
        except DynamicOutputShapeException:   # bincount, nonzero, unique: shaped by values
            if not (known and tensors):
                raise
            real_out = self.on_shadows(func, args, kwargs)
            out = tree_map(lambda r: torch.empty_strided(tuple(r.shape), tuple(r.stride()), dtype=r.dtype)
                           if isinstance(r, torch.Tensor) else r, real_out)
            for f, r in zip(tree_flatten(out)[0], tree_flatten(real_out)[0]):
                self.keep(f, r)
            return out
        if known and _small_ints(out):   # arange, full, and what is computed from known values: compute too
            try:
                real_out = self.on_shadows(func, args, kwargs)
            except Exception:   # an op the shadows cannot run (a device-only kernel): values stay unknown
                return out
            for f, r in zip(tree_flatten(out)[0], tree_flatten(real_out)[0]):
                self.keep(f, r)
        return out

    def on_shadows(self, func, args, kwargs):
        with unset_fake_temporarily():
            real_args, real_kwargs = tree_map(lambda a: self.shadow(a) if isinstance(a, torch.Tensor) else a,
                                              (args, kwargs))
            return func(*real_args, **real_kwargs)

    def exchange(self, func, name, args, kwargs, tensors, shadows):
        """Counts exchanged between ranks, in equal parts: every rank routes as this one (SPMD), so rank r's
        all-to-all receives, from every rank, the part meant for r of what it sends itself, and an all-gather
        receives its own input once per rank."""
        out = func(*args, **kwargs)
        c10d = name in ("alltoall_base_", "_allgather_base_")   # (output, input, ...): fill output in place
        source = shadows[1] if c10d else (shadows[0] if shadows else None)
        if source is None:
            return out
        target = tensors[0] if c10d else tree_flatten(out)[0][0]
        import torch.distributed as dist
        world, rank = dist.get_world_size(), dist.get_rank()
        with unset_fake_temporarily():
            flat = source.reshape(-1)
            if name in ("alltoall_base_", "all_to_all_single"):
                part = flat.numel() // world
                value = flat[rank * part:(rank + 1) * part].repeat(world)
            else:
                value = flat.repeat(world)
            if value.numel() != target.numel():
                return out
            value = value.reshape(target.shape)
        self.assign(target, value)
        return out


_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _tensors_in(value, out: list) -> list:
    """The tensors among `value`'s pytree leaves, in tree_leaves' order, appended to `out`. Every op of the step
    passes this mode, and pytree's walk was most of its own time: an op's arguments nest tuples, lists and dicts,
    walked here; any other container goes to tree_leaves."""
    kind = type(value)
    if kind is tuple or kind is list:
        for v in value:
            _tensors_in(v, out)
    elif kind is dict:
        for v in value.values():
            _tensors_in(v, out)
    elif isinstance(value, torch.Tensor):
        out.append(value)
    elif kind not in _SCALARS:
        out.extend(t for t in tree_leaves(value) if isinstance(t, torch.Tensor))
    return out


def _small_ints(out) -> bool:
    """Whether the op made integer tensors small enough to hold values for (counts, indices, offsets)."""
    made = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(made) and all(not t.is_floating_point() and not t.is_complex() and t.numel() <= SHADOW_MAX
                              for t in made)


def check_routing(routing, path: str):
    if routing is None:
        return "balanced"
    if routing == "balanced":
        return routing
    if isinstance(routing, (list, tuple)) and routing and all(
            isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 and p == p and p < float("inf")
            for p in routing) and sum(routing) > 0:
        return list(routing)
    raise UserError(f"{path}: ROUTING must be \"balanced\" or a list of non-negative shares per expert, got "
                    f"{routing!r}")
