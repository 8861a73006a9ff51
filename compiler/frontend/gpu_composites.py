"""ATen ops that CUDA runs as more than one kernel, recorded as the ops it runs (recorder.py).

The capture records the ops that reach the dispatcher; on a GPU, some of them run further ATen ops inside their
CUDA implementation, each with its own kernel, that the dispatcher never shows the capture (a profiler does: they
are nested inside the op). Measured on an H200 with PyTorch 2.11 (benchmarks/data/h200_composites.json,
record_composites.py):

- `masked_fill` (out of place, either overload) is `clone` (a device copy) and then `masked_fill_` on the copy:
  two kernels, and the fill runs at the rate of its operands (a broadcast mask: network/op_classes.py `broadcast`).
  A GPT's causal mask ([B, H, S, S] scores, a [S, S] mask) ran 64 us of copy and 181 us of fill where the
  capture's one op was timed 77 us.
- `_softmax_backward_data` multiplies the gradient by the softmax's output (`mul`, a kernel over the whole tensor
  in their dtype) before its own kernel, at every row size from 128 to 32768, fp32 or from bf16 (log-softmax's
  backward does not).
- `logsumexp` is `amax` (keeping the reduced dimensions), `sub` of it, `exp_`, `sum` and `log_` and `add_` of
  the maximum (with `abs`, `eq` and `masked_fill_` on the maxima, for infinities): an H200's profiles of the GPT
  and BERT examples' losses (benchmarks/data/h200_gpt_bf16_kineto.json.gz, h200_bert_base_bf16_kineto.json.gz:
  [16, 512, 30522] fp32, amax 0.25 ms, sub 0.73, exp_ 0.47, sum 0.25 where the one op was timed 0.27).

Each entry takes `record(func, args, kwargs)` (records one op through the recorder, returning its result), the op,
its arguments and keyword arguments, and returns the op's result as CUDA computes it, or None where the op itself
is then recorded after what the entry recorded.
"""
from __future__ import annotations


def _masked_fill(record, func, args, kwargs):
    import torch
    self, rest = args[0], args[1:]
    copy = record(torch.ops.aten.clone.default, (self,), {})
    in_place = torch.ops.aten.masked_fill_.Tensor if func._overloadname == "Tensor" \
        else torch.ops.aten.masked_fill_.Scalar
    return record(in_place, (copy, *rest), kwargs)


def _softmax_backward(record, func, args, kwargs):
    import torch
    grad, output = args[0], args[1]
    record(torch.ops.aten.mul.Tensor, (grad, output), {})
    return None   # then the op itself, as recorded


def _logsumexp(record, func, args, kwargs):
    import torch
    aten = torch.ops.aten
    self, dim = args[0], list(args[1]) if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if self.numel() == 0 or self.dtype.is_complex or not self.is_floating_point():
        return None   # CUDA's other paths: the op itself
    maxes = record(aten.amax.default, (self, dim, True), {})
    squeezed = maxes if keepdim else record(aten.squeeze.dims, (maxes, dim), {})
    infinite = record(aten.eq.Scalar, (record(aten.abs.default, (squeezed,), {}), float("inf")), {})
    record(aten.masked_fill_.Scalar, (squeezed, infinite, 0), {})
    shifted = record(aten.sub.Tensor, (self, maxes), {})
    record(aten.exp_.default, (shifted,), {})
    result = record(aten.sum.dim_IntList, (shifted, dim, keepdim), {})
    record(aten.log_.default, (result,), {})
    return record(aten.add_.Tensor, (result, squeezed), {})


# ops CUDA runs as the ATen ops nested in it and no kernel of its own: an execution trace records those as the
# op's children, which its importer takes instead of the op (et_import.py)
RUN_AS_CHILDREN = ("aten.masked_fill", "aten.logsumexp")
# ops CUDA runs as the ATen ops nested in it and then a kernel of its own: the importer takes those and the op
RUN_WITH_CHILDREN = ("aten._softmax_backward_data",)

# the op's packet name (recorder._packet_name) -> how CUDA runs it; an entry returning None records the op itself
# after what it recorded
CUDA_COMPOSITES = {
    "aten.masked_fill": _masked_fill,
    "aten._softmax_backward_data": _softmax_backward,
    "aten.logsumexp": _logsumexp,
}
