"""Real-GPU ground truth for ops that CUDA runs as more than one kernel: which kernels each launches, and their time.

The capture sees one ATen op where the GPU may run several kernels (an out-of-place `masked_fill` is a copy and an
in-place fill; a softmax's backward may multiply before its own kernel). For each case, one call is profiled
(torch.profiler, CUDA activity) after warm-ups, and every kernel it launched is recorded with its time: softmax
forward and backward over the last dimension at several sizes, fp32 and from bf16 to fp32 (autocast's
`softmax(x, dtype=float32)`), log-softmax's, and masked_fill out of place and in place with a broadcast mask.

    python3 record_composites.py OUT_DIR [--dry]
"""
import json
import os
import sys

import torch
from torch.nn import functional as F

from kernel_profile import kernels_of as _kernels_of   # beside this file

OUT = sys.argv[1]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
ROWS = 64 if DRY else 64 * 1024     # rows of each softmax: a [ROWS, n] tensor
os.makedirs(OUT, exist_ok=True)


def kernels_of(fn) -> dict:
    return _kernels_of(fn, DRY)


def main():
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": []}
    for n in (128, 512, 1024, 2048, 4096, 8192, 32768):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(max(1, ROWS * 1024 // n), n, device=DEV, dtype=dtype, requires_grad=True)
            y = F.softmax(x, dim=-1, dtype=torch.float32)     # autocast's softmax: fp32 out
            g = torch.randn_like(y)
            case = {"op": "softmax", "n": n, "rows": x.shape[0], "dtype": str(dtype).split(".")[-1],
                    "forward": kernels_of(lambda: F.softmax(x, dim=-1, dtype=torch.float32)),
                    "backward": kernels_of(lambda: torch.autograd.grad(y, x, g, retain_graph=True))}
            res["cases"].append(case)
            ly = F.log_softmax(x, dim=-1, dtype=torch.float32)
            res["cases"].append({"op": "log_softmax", "n": n, "rows": x.shape[0], "dtype": case["dtype"],
                                 "forward": kernels_of(lambda: F.log_softmax(x, dim=-1, dtype=torch.float32)),
                                 "backward": kernels_of(lambda: torch.autograd.grad(ly, x, g, retain_graph=True))})
            print(n, case["dtype"], [(c["op"], c["forward"]["count"], c["backward"]["count"],
                                      round(c["backward"]["us"])) for c in res["cases"][-2:]], flush=True)
    s = 64 if DRY else 1024
    scores = torch.randn(4 if DRY else 16, 16, s, s, device=DEV, dtype=torch.bfloat16)
    above = ~torch.ones(s, s, dtype=torch.bool, device=DEV).tril()
    filled = scores.clone()
    res["cases"].append({"op": "masked_fill", "shape": list(scores.shape), "mask": list(above.shape),
                         "out_of_place": kernels_of(lambda: scores.masked_fill(above, float("-inf"))),
                         "in_place": kernels_of(lambda: filled.masked_fill_(above, float("-inf")))})
    print("masked_fill", {k: v["count"] for k, v in res["cases"][-1].items() if isinstance(v, dict)}, flush=True)
    with open(os.path.join(OUT, "composites.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
