"""Real-GPU ground truth for elementwise kernels whose operands are not all contiguous and of the output's shape.

PyTorch's CUDA elementwise ops (TensorIterator) run a vectorized kernel only when every operand is contiguous;
an operand broadcast along some dimension (stride 0: a norm's weight [N] over [M, N], a column [M, 1], a causal
mask [S, S] over [B, H, S, S]) or a transposed one sends the op to the general kernel, which indexes each element
through its strides. This records, for binary ops (mul, add), an in-place masked_fill_ and copies, per operand
layout and dtype (fp32, bf16, fp16) and two sizes, the kernels one call launches and their mean time over 3 calls
(torch.profiler, CUDA activity, after 3 warm-up calls).

    python3 record_broadcast.py OUT_DIR [--dry]
"""
import json
import os
import sys

import torch

from kernel_profile import kernels_of as _kernels_of   # beside this file

OUT = sys.argv[1]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
CALLS = 3
os.makedirs(OUT, exist_ok=True)


def kernels_of(fn) -> dict:
    return _kernels_of(fn, DRY, CALLS)


def cases(m: int, n: int, dtype):
    """(name, output elements, bytes read and written once, fn) per case over an [m, n] output."""
    r = lambda *s, dt=dtype: torch.randn(*s, device=DEV, dtype=dt)
    x, y = r(m, n), r(m, n)
    yt = r(n, m).t()                                   # transposed: no broadcast, not contiguous
    row, col = r(n), r(m, 1)
    b = m * n // (1024 * 1024) if m * n >= 1024 * 1024 else 1
    s = int((m * n // b) ** 0.5)
    x3 = r(b, s, s)
    mask2 = torch.ones(s, s, dtype=torch.bool, device=DEV).tril().logical_not()
    full_mask = torch.rand(b, s, s, device=DEV) > 0.5
    zero_d = r(())
    e = x.element_size()
    big = m * n
    out = []
    for op in ("mul", "add"):
        f = getattr(torch, op)
        out += [(f"{op}_same", big, 3 * big * e, lambda f=f: f(x, y)),
                (f"{op}_transposed", big, 3 * big * e, lambda f=f: f(x, yt)),
                (f"{op}_row", big, 2 * big * e + n * e, lambda f=f: f(x, row)),
                (f"{op}_col", big, 2 * big * e + m * e, lambda f=f: f(x, col)),
                (f"{op}_mask_lead", big, 2 * big * e + s * s * e, lambda f=f: f(x3, x3[0])),
                (f"{op}_0d_tensor", big, 2 * big * e, lambda f=f: f(x, zero_d)),
                (f"{op}_python_scalar", big, 2 * big * e, lambda f=f: f(x, 2.0))]
    out += [("masked_fill__full_mask", big, 2 * big * e + big, lambda: x3.masked_fill_(full_mask, -1.0)),
            ("masked_fill__broadcast_mask", big, 2 * big * e + s * s, lambda: x3.masked_fill_(mask2, -1.0)),
            ("copy_contiguous", big, 2 * big * e, lambda: x.clone()),
            ("copy_transposed", big, 2 * big * e, lambda: yt.contiguous())]
    return out


def main():
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": []}
    sizes = [(64, 256), (32, 128)] if DRY else [(16384, 4096), (4096, 2048)]
    for m, n in sizes:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for name, elements, nbytes, fn in cases(m, n, dtype):
                k = kernels_of(fn)
                res["cases"].append({"case": name, "dtype": str(dtype).split(".")[-1], "shape": [m, n],
                                     "elements": elements, "bytes": nbytes, **k})
                tb = nbytes / (k["us"] * 1e6) if k["us"] else 0.0
                print(f"{name:28s} {res['cases'][-1]['dtype']:9s} {m}x{n} {k['us']:9.1f} us {tb:6.2f} TB/s "
                      f"{k['count']:.0f} kernels", flush=True)
            torch.cuda.empty_cache() if not DRY else None
    with open(os.path.join(OUT, "broadcast.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
