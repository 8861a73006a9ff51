"""The measured kernel time of each ATen op call in a torch.profiler (Kineto) trace of a GPU run, with what the
compute model needs to time the same call: its name, shapes, dtype, FLOPs and bytes (`astra-compile
calibrate-compute` fits a GPU's constants to them; `--op-times` gives them to the ops of a run).

- An op call is the innermost operator call whose "External id" the kernels carry (the profiler files a kernel
  under the call that launched it: aten::mm, not the aten::linear around it). Its time is the sum of the
  durations of its device events (kernels, memcpy, memset: kineto.DEVICE_CATEGORIES), and its kernel count.
- Communication is not compute: calls of c10d / functional collectives, NCCL's and DDP's reducer ranges, and
  every call made inside one of them (DDP's bucket copies), and NCCL kernels, are left out.
- Shapes: format_shapes (network/op_classes.py) of the tensor arguments recorded in "Input Dims" / "Input type"
  (record_shapes=True). FLOPs, bytes and dtype come from the project's one rule each: torch.utils.flop_counter's
  formulas, op_bytes.moved_bytes and op_dtype.compute_dtype, applied to meta tensors of the recorded shapes; the
  call is run once on the meta device for its outputs (the profiler records only inputs). A call that will not
  run there (an argument the profiler could not render) counts its inputs' bytes and no FLOPs. The profiler
  records no tensor identities: a tensor passed twice is read twice here, where the frontends read it once,
  except for the optimizer's `_foreach_addcmul_` of two lists of the same sizes (Adam's grad * grad).
- The profiler records no sizes for the tensor lists of the _foreach_ ops the optimizer runs: each such list is
  taken to be the step's parameters, as many and as large as the gradients autograd's AccumulateGrad received in
  the trace (what torch.optim's foreach AdamW/SGD/Adam run over). A list of scalar step counts on the GPU
  (capturable=True) is then counted too large.
- TF32: the trace does not say whether PyTorch allowed it; an fp32 matmul or convolution whose kernel's name says
  it ran on tensor cores in TF32 ("tf32", "s1688gemm", "s16816gemm") is taken as tf32.
- Causal attention (frontend/op_causal.py): an attention call whose is_causal (or, for the memory-efficient
  kernels' own ops, custom_mask_type) "Concrete Inputs" records as true; where the profiler recorded no concrete
  inputs, not causal.
- Calls of the same (name, shapes, dtype, causal) are grouped: the median of their times (`group`).
"""
from __future__ import annotations

import ast
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from ...network.errors import UserError
from ...network.op_classes import format_shapes, op_name
from ...network.user_files import read_json
from .kineto import DEVICE_CATEGORIES, ELEMENT_BYTES, nesting, timed, is_kineto
from .op_bytes import moved_bytes
from .op_causal import causal as is_causal
from .op_dtype import compute_dtype, is_convolution, is_matmul

# A trace is read whole and its events become Python objects (about 10x its size): 512 MiB of JSON is some 5 GB.
MAX_PROFILE_BYTES = 512 << 20
# calls and ranges that are communication; every call inside one of them is too (DDP's bucket copies)
COMM_MARKS = ("c10d::", "_c10d_functional", "nccl", "record_param_comms", "torch::distributed", "torch.distributed",
              "gloo:")
_TF32_KERNEL = re.compile(r"tf32|s1688gemm|s16816gemm", re.IGNORECASE)
_TORCH_DTYPE = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
                "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2", "long int": "int64",
                "int": "int32", "short int": "int16", "signed char": "int8", "unsigned char": "uint8",
                "bool": "bool", "c10::complex<float>": "complex64", "c10::complex<double>": "complex128"}


@dataclass(frozen=True)
class OpTime:
    """One op call, or (group) the median of the calls of one (name, shapes, dtype, causal)."""
    name: str            # as recorded: "aten::mm"
    shapes: str          # format_shapes of its tensor arguments
    dtype: str           # network/dtypes.DTYPES name
    flops: int
    nbytes: int
    kernel_ns: float     # device time of what it launched (a group: the median)
    kernels: int         # device events it launched (a group: the median)
    calls: int = 1       # a group: how many calls
    total_ns: float = 0.0   # a group: the sum of its calls' times
    causal: bool = False    # an attention call that masked causally (op_causal.py)

    @property
    def key(self) -> tuple:
        """What a run's op is matched by (--op-times): the bare ATen name, the shapes, the dtype and whether it
        masked causally."""
        return op_name(self.name), self.shapes, self.dtype, self.causal


@dataclass
class Profile:
    path: str
    gpu: str                 # deviceProperties[0].name
    multiprocessors: int     # deviceProperties[0].numSms (0: not recorded)
    calls: list              # OpTime per compute call that launched device work
    host_ns: float           # host time per op issue (host_issue_ns)
    comm_ns: float           # device time of the communication left out
    foreach_guessed: bool    # foreach lists sized from the parameters (module notes)
    outer: list = field(default_factory=list)   # OpTime of each ATen call around launchers, by what runs inside


def read_profile(path: str) -> Profile:
    data = read_json(path, "a torch.profiler trace (Kineto JSON)", "profile ", MAX_PROFILE_BYTES)
    try:
        return _read_profile(path, data)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as e:   # not as torch writes
        raise UserError(f"{path}: malformed profiler trace ({type(e).__name__}: {e})".replace("\n", " ")) from None


def _read_profile(path: str, data) -> Profile:
    if not is_kineto(data) or not isinstance(data["traceEvents"], list):
        raise UserError(f"{path}: not a torch.profiler (Kineto) trace: no 'traceEvents' list")
    props = data.get("deviceProperties")
    first = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else None
    if first is None or not isinstance(first.get("name"), str):
        raise UserError(f"{path}: the profiler trace has no deviceProperties (a GPU's name): record it on a GPU with "
                        "ProfilerActivity.CUDA")
    sms = first.get("numSms")
    sms = sms if isinstance(sms, int) and not isinstance(sms, bool) and 0 < sms < 1 << 20 else 0
    events = data["traceEvents"]
    ops = [e for e in events if timed(e) and e.get("cat") in ("cpu_op", "user_annotation")]
    device = [e for e in events if timed(e) and e.get("cat") in DEVICE_CATEGORIES]
    if not device:
        raise UserError(f"{path}: the profiler trace holds no GPU kernels: record it with "
                        "torch.profiler.ProfilerActivity.CUDA on a GPU run")
    calls = [e for e in ops if e.get("cat") == "cpu_op"]
    if not any(isinstance(e.get("args"), dict) and "Input Dims" in e["args"] for e in calls):
        raise UserError(f"{path}: the profiler trace has no shapes: record it with "
                        "torch.profiler.profile(record_shapes=True)")
    parent = nesting([(e, e.get("args") or {}) for e in ops])
    by_external = {}
    for e in calls:
        x = e["args"].get("External id") if isinstance(e.get("args"), dict) else None
        if isinstance(x, int) and not isinstance(x, bool):
            by_external[x] = e
    launched: dict[int, list] = defaultdict(list)   # id(call) -> its device events
    comm_ns = 0.0
    for k in device:
        x = k["args"].get("External id") if isinstance(k.get("args"), dict) else None
        owner = by_external.get(x) if isinstance(x, int) else None
        if owner is None:
            continue   # work no call launched (the profiler's own, or a trace cut short)
        if str(k["name"]).lower().startswith("nccl") or _in_comm(owner, parent):
            comm_ns += k["dur"] * 1e3
            continue
        launched[id(owner)].append(k)
    params = _parameters(calls)
    out, guessed = [], False
    for e in calls:
        if id(e) in launched:
            call, sized = _call(path, e, launched[id(e)], params)
            out.append(call)
            guessed = guessed or sized
    # the ATen calls around a launcher (aten::linear around aten::addmm), timed by what runs inside them: a run
    # whose op is the outer call (an execution trace's) finds its time there (--op-times)
    inside: dict[int, list] = defaultdict(list)
    for e in calls:
        if id(e) not in launched:
            continue
        seen, up = {id(e)}, parent.get(id(e))
        while up is not None and id(up[0]) not in seen:
            seen.add(id(up[0]))
            if up[0].get("cat") == "cpu_op" and str(up[0]["name"]).startswith("aten::"):
                inside[id(up[0])] += launched[id(e)]
            up = parent.get(id(up[0]))
    outer = [_call(path, e, inside[id(e)] + launched.get(id(e), []), params)[0] for e in calls if id(e) in inside]
    if not out:
        raise UserError(f"{path}: the profiler trace holds no compute kernels launched by an operator call")
    return Profile(path, first["name"], sms, out, host_issue_ns(calls, parent), comm_ns, guessed, outer)


def _in_comm(call: dict, parent: dict) -> bool:
    seen, e = set(), call
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if str(e["name"]).startswith(COMM_MARKS) or "reducer" in str(e["name"]):
            return True
        up = parent.get(id(e))
        e = up[0] if up is not None else None
    return False


def _parameters(calls: list) -> list:
    """(sizes, dtype) of each gradient AccumulateGrad received: the step's parameters."""
    out = []
    for e in calls:
        if e["name"] == "torch::autograd::AccumulateGrad":
            args = e.get("args") or {}
            dims, types = args.get("Input Dims") or [], args.get("Input type") or []
            if dims and types and isinstance(dims[0], list) and types[0] in ELEMENT_BYTES and _sizes(dims[0]):
                out.append((tuple(dims[0]), types[0]))
    return out


def _sizes(d) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**40 for x in d)


def _call(path: str, e: dict, kernels: list, params: list) -> tuple[OpTime, bool]:
    """The call's OpTime, and whether a tensor list of it was sized from the parameters."""
    args = e.get("args") or {}
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    shapes, inputs = [], []   # tensor arguments' sizes (recorded), and every argument as (kind, value)
    for i, d in enumerate(dims if isinstance(dims, list) else []):
        t = types[i] if isinstance(types, list) and i < len(types) and isinstance(types[i], str) else ""
        if t in ELEMENT_BYTES and _sizes(d):
            shapes.append(tuple(d))
            inputs.append(("tensor", (tuple(d), t)))
        elif t == "TensorList" and isinstance(d, list) and all(_sizes(x) for x in d):
            shapes.append([tuple(x) for x in d])
            inputs.append(("list", [(tuple(x), "float") for x in d] if d else None))
        else:
            text = concrete[i] if isinstance(concrete, list) and i < len(concrete) else ""
            inputs.append(("value", text if isinstance(text, str) else ""))
    name = str(e["name"])
    guessed = name.startswith("aten::_foreach_") and bool(params) and any(k == "list" and not v for k, v in inputs)
    if guessed:
        inputs = [("list", params) if kind == "list" and not value else (kind, value) for kind, value in inputs]
    flops, nbytes, in_types, out_types = _work(name, inputs)
    dtype = compute_dtype(name, in_types, out_types)
    short = op_name(name)
    if dtype == "fp32" and (is_matmul(short) or is_convolution(short)) \
            and any(_TF32_KERNEL.search(str(k["name"])) for k in kernels):
        dtype = "tf32"
    if len(shapes) != len([1 for kind, _ in inputs if kind != "value"]):
        raise UserError(f"{path}: {name} at {e['ts']} us: malformed recorded shapes")
    causal = is_causal(name, None, [value if kind == "value" else None for kind, value in inputs])
    return OpTime(name, format_shapes(shapes), dtype, flops, nbytes, sum(k["dur"] for k in kernels) * 1e3,
                  len(kernels), causal=causal), guessed


def _work(name: str, inputs: list) -> tuple:
    """(FLOPs, bytes, input torch dtypes, output torch dtypes) of a call, from a run on meta tensors; where it will
    not run, no FLOPs and its inputs' bytes."""
    import torch
    from torch.utils.flop_counter import flop_registry
    in_tensors = []
    lists = [i for i, (kind, _) in enumerate(inputs) if kind == "list"]
    if op_name(name) in ("_foreach_addcmul_", "_foreach_addcmul") and len(lists) >= 3 \
            and inputs[lists[1]][1] == inputs[lists[2]][1]:
        # torch.optim's Adam/AdamW pass the gradients twice (exp_avg_sq += grad * grad); the kernel reads them
        # once, as the frontends count (op_bytes.py). The profiler records no identities to tell otherwise.
        inputs = inputs[:lists[2]] + inputs[lists[2] + 1:]
    for kind, value in inputs:
        if kind == "tensor":
            in_tensors.append(value)
        elif kind == "list" and value:
            in_tensors += value
    stand_in = _STAND_IN.get(op_name(name))
    if stand_in and len(inputs) == stand_in[1] and name.startswith("aten::"):
        name, inputs = "aten::" + stand_in[0], stand_in[2](inputs)
    in_types = [_TORCH_DTYPE.get(t, t) for _, t in in_tensors]
    in_bytes = [_numel(s) * ELEMENT_BYTES.get(t, 0) for s, t in in_tensors]
    kernel = _KERNEL_ATTENTION.get(op_name(name))
    if kernel and len(in_tensors) >= kernel[0] and all(len(s) == 4 for s, _ in in_tensors[:kernel[0]]):
        return _kernel_attention(name, in_tensors, in_bytes, in_types)
    # where the call does not run on meta tensors: an in-place op (the trailing underscore) writes its first
    # argument back without returning it, as the optimizer's foreach ops do (op_bytes.py)
    first = next(([v] if kind == "tensor" else v for kind, v in inputs if kind in ("tensor", "list")), [])
    unrun = moved_bytes(name, in_bytes, [], sum(_numel(sz) * ELEMENT_BYTES.get(t, 0) for sz, t in first or [])
                        if op_name(name).endswith("_") else 0)
    packet = getattr(torch.ops.aten, op_name(name), None) if name.startswith("aten::") else None
    if packet is None or not in_tensors:   # a factory (zeros, arange) is not run: it would allocate on the host
        return 0, unrun, in_types, []
    try:
        args, kwargs, overload = _bind(name, packet, inputs)
        with torch.no_grad(), torch.device("meta"):
            out = overload(*args, **kwargs)
        results = [t for t in _flatten(out) if isinstance(t, torch.Tensor)]
        if any(t.device.type != "meta" for t in results):
            raise ValueError("the op left the meta device")
        flops = 0
        if packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
    except Exception:   # noqa: BLE001 - whatever torch raises for arguments the profiler could not render
        return 0, unrun, in_types, []
    out_types = [str(t.dtype).removeprefix("torch.") for t in results]
    out_bytes = [t.numel() * t.element_size() for t in results]
    # written in place and not returned (_foreach_mul_, ...): op_bytes.py charges it, as the capture does
    from .recorder import written_args
    written = 0 if results else sum(t.numel() * t.element_size()
                                    for t in written_args(overload, args, kwargs, read_too=True))
    return flops, moved_bytes(name, in_bytes, out_bytes, written), in_types, out_types


def _as_convolution(order: tuple):
    """cudnn_convolution(_transpose)'s arguments (`order`: theirs after input and weight) as aten::convolution's:
    input, weight, bias (none: cuDNN adds it in a kernel of its own), stride, padding, dilation, transposed,
    output_padding, groups."""
    def rearrange(inputs: list) -> list:
        given = dict(zip(order, inputs[2:]))
        spatial = len(inputs[1][1][0]) - 2 if inputs[1][0] == "tensor" else 2
        return inputs[:2] + [("value", ""), given["stride"], given["padding"], given["dilation"],
                             ("value", str("output_padding" in order)),
                             given.get("output_padding", ("value", str([0] * spatial))), given["groups"]]
    return rearrange


def _as_batch_norm_backward(inputs: list) -> list:
    """cudnn_batch_norm_backward(input, grad_output, weight, running mean and var, saved mean and var, eps, reserve)
    as native_batch_norm_backward(grad_out, input, weight, running, saved, train, eps, output_mask)."""
    return [inputs[1], inputs[0]] + inputs[2:7] + [("value", "True"), inputs[7], ("value", "[True, True, True]")]


# cuDNN's own ops, which a profiler records launching a convolution's or batch norm's kernels (PyTorch's choice for
# fp32 on CUDA), have no meta kernel: each is counted as the aten op it implements, which the capture records, from
# its recorded arguments rearranged as that op takes them (a batch norm's forward takes them as they are). name:
# (the aten op, its own argument count, the rearrangement)
_STAND_IN = {"cudnn_convolution": ("convolution", 9, _as_convolution(("padding", "stride", "dilation", "groups"))),
             "cudnn_convolution_transpose": ("convolution", 10, _as_convolution(
                 ("padding", "output_padding", "stride", "dilation", "groups"))),
             "cudnn_batch_norm": ("native_batch_norm", 8, list),
             "cudnn_batch_norm_backward": ("native_batch_norm_backward", 9, _as_batch_norm_backward)}


# The attention kernels' own ops, which a profiler records launching the kernels of scaled_dot_product_attention:
# flash's and the memory-efficient kernel's (query, key and value laid out [batch, sequence, heads, dim]) and
# cuDNN's (PyTorch 2.11's bf16 choice on Hopper; [batch, heads, sequence, dim]). cuDNN's have no meta kernel and
# flash's do not run on meta tensors of the recorded arguments, so each is counted as the scaled-dot-product
# attention it implements (torch's formula), from its leading tensors: forward query, key, value; backward
# grad_out, query, key, value. name: (tensors needed, sequence before heads).
_KERNEL_ATTENTION = {"_cudnn_attention_forward": (3, False), "_cudnn_attention_backward": (4, False),
                     "_flash_attention_forward": (3, True), "_flash_attention_backward": (4, True),
                     "_efficient_attention_forward": (3, True), "_efficient_attention_backward": (4, True)}


def _kernel_attention(name: str, in_tensors: list, in_bytes: list, in_types: list) -> tuple:
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    needed, sequence_first = _KERNEL_ATTENTION[op_name(name)]
    shapes = [list(s) for s, _ in in_tensors[:needed]]
    if sequence_first:   # [b, s, h, d] -> [b, h, s, d], the layout torch's formula takes
        shapes = [[s[0], s[2], s[1], s[3]] for s in shapes]
    if needed == 3:
        flops = sdpa_flop_count(*shapes)
        out_bytes = [in_bytes[0]]                     # the output, as the query
    else:
        flops = sdpa_backward_flop_count(*shapes)
        out_bytes = in_bytes[1:4]                     # the gradients of query, key and value
    return int(flops), moved_bytes(name, in_bytes, out_bytes, 0), in_types, [in_types[0]] * len(out_bytes)


def _numel(sizes) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def _flatten(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


_schemas: dict = {}


def _bind(name: str, packet, inputs: list):
    """(args, kwargs, overload) for calling the op on meta tensors: the first of its overloads (out= variants
    left out) whose arguments take the recorded ones in order, keyword-only ones by name."""
    import torch
    if name not in _schemas:
        _schemas[name] = [s for s in torch._C._jit_get_schemas_for_operator(name)
                          if not any(a.is_out for a in s.arguments)]
    values = [_value(kind, v) for kind, v in inputs]
    for schema in _schemas[name]:
        if len(schema.arguments) != len(values):
            continue
        args, kwargs = [], {}
        for a, v in zip(schema.arguments, values):
            if isinstance(v, torch.Tensor) != _takes_tensor(a.type) and \
                    not (v is None and isinstance(a.type, torch.OptionalType)):   # a `Tensor?` not passed
                break
            if a.kwarg_only:
                kwargs[a.name] = v
            else:
                args.append(v)
        else:
            return args, kwargs, getattr(packet, schema.overload_name or "default")
    raise ValueError("no overload takes the recorded arguments")


def _takes_tensor(kind) -> bool:
    """Whether a schema argument of this type takes one tensor: `Tensor`, or `Tensor?` (a layer norm's weight, a
    convolution's bias), which the profiler records as a tensor when one was passed."""
    import torch
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, torch.TensorType)


def _value(kind: str, value):
    import torch
    if kind == "tensor":
        sizes, t = value
        return torch.empty(sizes, dtype=getattr(torch, _TORCH_DTYPE.get(t, "float32")), device="meta")
    if kind == "list":
        return [_value("tensor", v) for v in value or []]
    if value == "":
        return None
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def host_issue_ns(calls: list, parent: dict) -> float:
    """The host time to issue one op: the median time between the starts of consecutive outermost ATen calls on
    one thread (the main thread issues the forward and the optimizer, autograd's thread the backward), every
    thread's gaps pooled. Outermost, as a run's op is its outermost call (aten::linear, not the addmm in it); the
    Python between two calls is host time too and counts; the median, so that the gaps where the host waited (a
    synchronising .item(), a hand-over between threads) do not. The profiler's own bookkeeping (some
    microseconds per call with record_shapes=True) is in it: eager PyTorch without a profiler issues faster, so
    this is an upper bound. 0 where no thread has 2 such calls."""
    threads = defaultdict(list)
    for e in calls:
        if not str(e["name"]).startswith("aten::"):
            continue
        seen, up = set(), parent.get(id(e))
        while up is not None and id(up[0]) not in seen and not str(up[0]["name"]).startswith("aten::"):
            seen.add(id(up[0]))
            up = parent.get(id(up[0]))
        if up is None or id(up[0]) in seen:
            threads[(str(e.get("pid")), str(e.get("tid")))].append(e["ts"])
    gaps = []
    for starts in threads.values():
        starts.sort()
        gaps += [b - a for a, b in zip(starts, starts[1:])]
    return statistics.median(gaps) * 1e3 if gaps else 0.0


def group(calls: list) -> list:
    """One OpTime per (name, shapes, dtype, causal): the median time and kernel count of its calls, their count and
    sum."""
    by_key = defaultdict(list)
    for c in calls:
        by_key[(c.name, c.shapes, c.dtype, c.causal)].append(c)
    out = []
    for (name, shapes, dtype, causal), cs in by_key.items():
        out.append(OpTime(name, shapes, dtype, cs[0].flops, cs[0].nbytes,
                          statistics.median(c.kernel_ns for c in cs), int(statistics.median(c.kernels for c in cs)),
                          len(cs), sum(c.kernel_ns for c in cs), causal))
    return sorted(out, key=lambda o: -o.total_ns)
