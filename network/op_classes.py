"""What kind of GPU work a compute op is (its op class) and, for the matrix-multiply kinds, its GEMM dimensions.

The compute model (network/compute_model.py) times each class its own way: matrix multiplies, convolutions and
attention on the tensor cores (FLOPs at a fraction of the dtype's peak, matmuls and convolutions also paying for
tile and wave quantisation), normalisation, elementwise ops, the optimizer's foreach kernels and dtype casts on
memory bandwidth. A cast (`_to_copy`: what autocast inserts before a matmul) is a class of its own for the host:
autocast issues it inside the op it feeds, at a fraction of a Python-issued op's host time. An elementwise op one
of whose tensor arguments broadcasts over the others (a norm's weight [N] over [M, N], a column [M, 1], a causal
mask [S, S] over [B, H, S, S]) is the class `broadcast`: PyTorch's CUDA elementwise ops run their vectorized
kernel only when every operand is contiguous in the output's shape, and the general kernel, which indexes each
element through its strides, is bound by elements rather than bytes (an H200: 0.34 of the bandwidth for bf16,
0.56 for fp32, against 0.9 vectorized; benchmarks/data/h200_broadcast.json).
The class comes from the ATen op's name (`classify`) and, for the broadcast kind, the shapes of its tensor
arguments (`op_class`); the GEMM dimensions from those shapes, as the frontends record them in `wl.shapes` (format
below) and a profiler records them in "Input Dims".

Shapes text (`format_shapes` / `parse_shapes`): the op's tensor arguments in schema order, non-tensor arguments
left out; a tensor is its sizes joined by "x" ("64x4096"; a 0-dim tensor is "s"), a list of tensors is its
tensors joined by ";" in brackets ("[4096x4096;4096]"), arguments are joined by ",". For example addmm(bias,
mat1, mat2, beta, alpha) is "4096,64x4096,4096x4096".
"""
from __future__ import annotations

import math
import re

# (a new class goes at the end: a program table stores each op's class as its index here)
CLASSES = ("matmul", "attention", "attention_backward", "conv", "conv_backward", "norm", "elementwise", "optimizer",
           "cast", "batch_norm", "broadcast")
CODE = {name: code for code, name in enumerate(CLASSES)}
TENSOR_CORE = ("matmul", "attention", "attention_backward", "conv", "conv_backward")   # FLOP-bound classes
ATTENTION_CLASSES = ("attention", "attention_backward")
MAX_SHAPES_TEXT = 4096   # characters kept of an op's shapes (a foreach op over hundreds of tensors is cut)
MAX_VIEWS = 2**31 - 1    # kernel-less ops counted on one compute op (`views`: an int32 column of a program table)

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "addbmm", "matmul", "linear", "dot", "mv", "addmv",
           "_addmm_activation", "_int_mm", "_scaled_grouped_mm", "_grouped_mm"}
# cuDNN's own ops (_cudnn_attention_forward / _backward) are what a profiler records launching the kernels of
# _scaled_dot_product_cudnn_attention, the kernel PyTorch 2.11 picks for bf16 on an H200
_ATTENTION_BACKWARD = re.compile(r"^_?(scaled_dot_product|flash_attention|efficient_attention|"
                                 r"_scaled_dot_product)\w*backward|^_?flash_attention_backward|"
                                 r"^_?efficient_attention_backward|^_?cudnn_attention_backward")
_ATTENTION = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|flex_attention|cudnn_attention")
_CONV_BACKWARD = re.compile(r"convolution_backward|conv\w*backward|cudnn_convolution_backward")
_CONV = re.compile(r"conv(olution)?(\d?d|_transpose\d?d|_tbc|_depthwise\dd)?$|"
                   r"^(cudnn|miopen|mkldnn|_slow|_nnpack|thnn)_?conv")
# BatchNorm is a class of its own: its kernels reduce each channel over the batch and the image (cuDNN's NCHW
# kernels pass over the tensor more than once), far below the bandwidth a layer or RMS norm's one pass over each
# row reaches (an H200's fp32 cuDNN batch norm forward at 0.18 of its bandwidth counting each byte once, its layer
# norms at 0.41: docs/compute.md)
_BATCH_NORM = re.compile(r"batch_norm")
_NORM = re.compile(r"(layer|group|instance|rms)_norm|native_norm|norm_backward")
_OPTIMIZER = re.compile(r"^_foreach_|^_fused_(adam|adamw|sgd|adagrad)")
_CAST = {"_to_copy", "to", "_to_dtype", "type_as"}
# elementwise-class ops that are no pointwise TensorIterator kernel, whatever their arguments' shapes (a masked
# softmax's mask, a loss's targets, an index): never the broadcast class
_NOT_POINTWISE = re.compile(r"softmax|embedding|gather|scatter|index|nll_loss|cross_entropy|sort|topk|cum")


def op_name(name: str) -> str:
    """The bare ATen name of an op: "aten.mm.default", "aten::mm" and "mm" all give "mm"."""
    bare = re.sub(r"^(aten|prims|c10d)(::|\.)", "", name.strip())
    return bare.split(".")[0]


def classify(name: str) -> str:
    """The op class of a compute op by its name (CLASSES)."""
    op = op_name(name)
    if _OPTIMIZER.search(op):
        return "optimizer"
    if op in _CAST:
        return "cast"
    if op in _MATMUL:
        return "matmul"
    if _ATTENTION_BACKWARD.search(op):
        return "attention_backward"
    if _ATTENTION.search(op):
        return "attention"
    if _CONV_BACKWARD.search(op):
        return "conv_backward"
    if _CONV.search(op):
        return "conv"
    if _BATCH_NORM.search(op):
        return "batch_norm"
    if _NORM.search(op):
        return "norm"
    return "elementwise"


def op_class(name: str, args: list) -> str:
    """The op class of a compute op by its name and its tensor arguments' sizes (parse_shapes' list, as gemm_dims
    takes them): classify's, an elementwise op with a broadcast operand being `broadcast` (broadcasts)."""
    cls = classify(name)
    if cls == "elementwise" and not _NOT_POINTWISE.search(op_name(name)) and broadcasts(args):
        return "broadcast"
    return cls


def broadcasts(args: list) -> bool:
    """Do these tensor arguments (parse_shapes' list) broadcast: each tensor's sizes, aligned on the right, equal
    the largest tensor's or are 1 (or missing), and one of them has fewer elements than the largest but more than
    one? Tensor lists and 0-dim tensors (which a profiler does not tell from a Python scalar, and which CUDA takes
    as one) do not count; arguments of other shapes (a gather's indices, an embedding's table) are no broadcast."""
    tensors = [tuple(a) for a in args if a and not isinstance(a[0], (list, tuple))]
    if len(tensors) < 2:
        return False
    full = max(tensors, key=math.prod)
    whole = math.prod(full)
    smaller = False
    for t in tensors:
        if len(t) > len(full) or any(s not in (f, 1) for s, f in zip(reversed(t), reversed(full))):
            return False
        smaller = smaller or 1 < math.prod(t) < whole
    return smaller


def format_shapes(args: list) -> str:
    """`args`: per tensor argument its sizes (a sequence of ints) or, for a list of tensors, a list of those."""
    parts = []
    for a in args:
        if a and isinstance(a[0], (list, tuple)) or (isinstance(a, list) and not a):
            parts.append("[" + ";".join(_tensor(t) for t in a) + "]")
        else:
            parts.append(_tensor(a))
    text = ",".join(parts)
    return text if len(text) <= MAX_SHAPES_TEXT else text[:MAX_SHAPES_TEXT - 3] + "..."


def _tensor(sizes) -> str:
    return "x".join(str(int(s)) for s in sizes) if len(sizes) else "s"


def parse_shapes(text: str) -> list:
    """The argument list `format_shapes` wrote (a cut text reads as far as it is whole); ValueError if malformed."""
    if not text:
        return []
    text = _whole_part(text[:-3]) if text.endswith("...") else text
    if not text:
        return []
    out = []
    for part in _split_args(text):
        if part.startswith("["):
            if not part.endswith("]"):
                raise ValueError(f"unclosed tensor list {part!r}")
            inner = part[1:-1]
            out.append([_sizes(t) for t in inner.split(";")] if inner else [])
        else:
            out.append(_sizes(part))
    return out


def is_views(value) -> bool:
    """Is `value` a compute op's count of kernel-less ops (views) issued before it: a whole number 0..MAX_VIEWS?
    What the readers of files holding views check."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VIEWS


def is_shapes(text) -> bool:
    """Is `text` shapes text as format_shapes writes it (a string parse_shapes reads, at most MAX_SHAPES_TEXT
    characters)? What the readers of files holding shapes check."""
    if not isinstance(text, str) or len(text) > MAX_SHAPES_TEXT:
        return False
    try:
        parse_shapes(text)
    except ValueError:
        return False
    return True


def _whole_part(cut: str) -> str:
    """Of a text format_shapes cut short: the arguments before the cut, and of a tensor list cut inside, its whole
    tensors (the list closed); the argument the cut went through is dropped."""
    start = cut.rfind("[")
    if start > cut.rfind("]"):   # cut inside a tensor list
        return cut[:cut.rfind(";")] + "]" if cut.rfind(";") > start else cut[:start + 1] + "]"
    return cut[:cut.rfind(",")] if "," in cut else ""


def _split_args(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _sizes(t: str) -> tuple:
    if t == "s":
        return ()
    if not re.fullmatch(r"\d+(x\d+)*", t):
        raise ValueError(f"bad tensor sizes {t!r}")
    return tuple(int(s) for s in t.split("x"))


# attention kernels' own ops whose tensors are [batch, sequence, heads, head size]; every other attention op's
# (scaled_dot_product_*, cuDNN's, flex) are [batch, heads, sequence, head size]
_SEQUENCE_SECOND = re.compile(r"^_?(flash_attention|efficient_attention)_")


def gemm_dims(name: str, args: list, flops: float) -> tuple:
    """(batch, m, n, k) of the GEMM a matmul or convolution runs, or (0, 0, 0, 0) where it is not one or its shapes
    are not known. A convolution is the implicit GEMM cuDNN runs: m = N*Hout*Wout (from the op's FLOPs, as the
    output size depends on stride and padding), n = output channels, k = input channels per group * kernel area.
    An attention op (forward or backward) gives its scores' product Q K^T: batch * heads, query length, key
    length, head size (its query and key: the first two tensors, after the gradient in a backward)."""
    op = op_name(name)
    mats = [a for a in args if a and not isinstance(a[0], (list, tuple))]
    try:
        cls = classify(name)
        if cls in ATTENTION_CLASSES:
            q, k = mats[1:3] if cls == "attention_backward" else mats[0:2]
            if len(q) != 4 or len(k) != 4:
                return (0, 0, 0, 0)
            if _SEQUENCE_SECOND.search(op):
                return (q[0] * q[2], q[1], k[1], q[3])
            return (q[0] * q[1], q[2], k[2], q[3])
        if op in ("mm", "_scaled_mm", "_int_mm") and len(mats) >= 2:
            (m, k), (_, n) = mats[0][-2:], mats[1][-2:]
            return (1, m, n, k)
        if op in ("addmm", "_addmm_activation") and len(mats) >= 3:
            (m, k), (_, n) = mats[1][-2:], mats[2][-2:]
            return (1, m, n, k)
        if op == "linear" and len(mats) >= 2 and len(mats[1]) == 2:   # input (..., k), weight (n, k)
            n, k = mats[1]   # the input's rows: its elements over its last dimension
            return (1, math.prod(mats[0]) // k, n, k) if k else (0, 0, 0, 0)
        if op == "bmm" and len(mats) >= 2 and len(mats[0]) == 3:
            (b, m, k), n = mats[0], mats[1][-1]
            return (b, m, n, k)
        if op == "baddbmm" and len(mats) >= 3 and len(mats[1]) == 3:
            (b, m, k), n = mats[1], mats[2][-1]
            return (b, m, n, k)
        if cls == "conv_backward" and len(mats) >= 3 and len(mats[0]) >= 3:
            grad, weight = mats[0], mats[2]
            return (1, grad[0] * math.prod(grad[2:]), weight[0], math.prod(weight[1:]))
        if cls == "conv" and len(mats) >= 2 and len(mats[1]) >= 3:
            weight = mats[1]
            n, k = weight[0], math.prod(weight[1:])
            m = int(round(flops / (2 * n * k))) if n * k else 0
            return (1, m, n, k) if m > 0 else (0, 0, 0, 0)
    except (ValueError, TypeError, IndexError):
        pass
    return (0, 0, 0, 0)
