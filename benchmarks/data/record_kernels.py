"""Real-GPU ground truth for the compute model's matmul and attention constants: bf16 GEMMs and flash attention.

Each GEMM is timed as autograd runs a linear layer's three products: the forward `x @ w.t()` ("nt": M tokens,
N outputs, K inputs), the input gradient `dy @ w` ("nn": M tokens, N inputs, K outputs) and the weight gradient
`dy.t() @ x` ("tn": M outputs, N inputs, K tokens), at the layer shapes of the published runs (Llama 3 8B and
70B, GPT-3 175B's tensor-parallel slices), plus square, K and M sweeps. Scaled-dot-product attention (flash, bf16)
is timed forward and forward+backward, causal and not. Each time is the median of 5 batches of back-to-back calls
(CUDA events, at least ~20 ms a batch) after warm-ups, in microseconds per call.

    python3 record_kernels.py OUT_DIR [--dry]      # --dry: tiny shapes on the CPU, to check the code path
    python3 record_kernels.py OUT_DIR --extra      # kernels_extra.json: what follows
    python3 record_kernels.py OUT_DIR --short-attention   # kernels_short_attention.json: bf16 attention
    #   by kernel at 128-2048 tokens, head sizes 64 and 128 (short_attention())

`--extra` records, in a fresh process: the bytes the first matmul allocates besides its output (cuBLAS's
workspace, which PyTorch takes from its caching allocator); fp8 GEMMs (`torch._scaled_mm`, e4m3 x e4m3 with
tensor-wise scales and a bf16 output, the layout it takes: the forward's `x @ w.t()`) at Llama 3 8B's layers;
three bf16 GEMMs on three kinds of data (random normal as above, a weight as nn.Linear initialises it, zeros), to
tell whether the data moves the rate; and the attention configurations above with PyTorch's cuDNN attention
turned off (the flash kernel).
"""
import json
import os
import statistics
import sys
import time

import torch
from torch.nn import functional as F

OUT = sys.argv[1]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
SCALE = 64 if DRY else 1      # the dry run divides every dimension
os.makedirs(OUT, exist_ok=True)


def sync():
    if not DRY:
        torch.cuda.synchronize()


def per_call_us(fn) -> float:
    """Median over 5 batches of one call's time; a batch runs enough calls for ~20 ms."""
    fn(); fn(); sync()
    t = time.perf_counter(); fn(); sync(); first = time.perf_counter() - t
    calls = max(1, min(200, int(0.02 / max(first, 1e-6))))
    batches = []
    for _ in range(5):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        batches.append((time.perf_counter() - t) / calls)
    return statistics.median(batches) * 1e6


def gemm(m, n, k, layout, dtype=torch.bfloat16):
    """us of one product of layout nt (a[m,k] @ b[n,k].t()), nn (a[m,k] @ b[k,n]) or tn (a[k,m].t() @ b[k,n])."""
    m, n, k = max(1, m // SCALE), max(1, n // SCALE), max(1, k // SCALE)
    g = torch.Generator(device=DEV).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, dtype=dtype, device=DEV, generator=g)
    if layout == "nt":
        a, b = rand(m, k), rand(n, k).t()
    elif layout == "nn":
        a, b = rand(m, k), rand(k, n)
    else:
        a, b = rand(k, m).t(), rand(k, n)
    out = torch.empty(m, n, dtype=dtype, device=DEV)
    us = per_call_us(lambda: torch.mm(a, b, out=out))
    return {"m": m, "n": n, "k": k, "layout": layout, "dtype": str(dtype).split(".")[-1], "us": us,
            "tflops": 2 * m * n * k / (us * 1e-6) / 1e12}


def linear_shapes():
    """(model, tokens, inputs, outputs) of each linear layer of the published runs' shapes."""
    rows = []
    llama8 = [(4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096), (4096, 128256)]
    for tokens in (2048, 8192, 16384):
        rows += [("llama3_8b", tokens, i, o) for i, o in llama8]
    rows += [("llama3_70b", 8192, i, o) for i, o in ((8192, 8192), (8192, 1024), (8192, 28672), (28672, 8192))]
    # GPT-3 175B at tensor parallelism 8, one micro-batch of 2048 tokens: qkv, projection, fc1, fc2 of one rank
    rows += [("gpt3_175b_tp8", 2048, i, o) for i, o in ((12288, 4608), (1536, 12288), (12288, 6144), (6144, 12288))]
    return rows


def attention(b, h, s, d, causal):
    b, s = max(1, b), max(8, s // SCALE)
    g = torch.Generator(device=DEV).manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=DEV, generator=g, requires_grad=True)
               for _ in range(3))
    fwd = per_call_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    dy = torch.randn_like(y)

    def both():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(out, (q, k, v), dy)
    total = per_call_us(both)
    flops = 4 * b * h * s * s * d   # forward, unmasked (torch.utils.flop_counter's count); backward 2.5x
    return {"b": b, "h": h, "s": s, "d": d, "causal": causal, "fwd_us": fwd, "fwd_bwd_us": total,
            "bwd_us": total - fwd, "fwd_flops_unmasked": flops}


def workspace_bytes() -> dict:
    """What the process's first matmul allocates besides its output (run first in a fresh process)."""
    if DRY:
        return {}
    before = torch.cuda.memory_allocated()
    a = torch.randn(256, 256, dtype=torch.bfloat16, device=DEV)
    after_input = torch.cuda.memory_allocated()
    c = a @ a
    torch.cuda.synchronize()
    return {"first_bf16_matmul_extra_bytes": torch.cuda.memory_allocated() - after_input - c.numel() * 2,
            "input_bytes": after_input - before}


def fp8_gemm(m, n, k) -> dict:
    m, n, k = max(16, m // SCALE), max(16, n // SCALE), max(16, k // SCALE)
    a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=DEV)
    us = per_call_us(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    return {"m": m, "n": n, "k": k, "us": us, "tflops": 2 * m * n * k / (us * 1e-6) / 1e12}


def data_kinds(m, n, k) -> dict:
    m, n, k = max(1, m // SCALE), max(1, n // SCALE), max(1, k // SCALE)
    x = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
    weights = {"random_normal": torch.randn(n, k, dtype=torch.bfloat16, device=DEV),
               "linear_init": torch.empty(n, k, dtype=torch.bfloat16, device=DEV).uniform_(-k ** -0.5, k ** -0.5),
               "zeros": torch.zeros(n, k, dtype=torch.bfloat16, device=DEV)}
    out = {}
    for name, w in weights.items():
        a = torch.zeros_like(x) if name == "zeros" else x
        us = per_call_us(lambda: a @ w.t())
        out[name] = {"us": us, "tflops": 2 * m * n * k / (us * 1e-6) / 1e12}
    return {"m": m, "n": n, "k": k, **out}


def extra():
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "workspace": workspace_bytes(), "fp8": [], "data": [], "flash_attention": []}
    print("workspace", res["workspace"], flush=True)
    for tokens in (8192, 16384):
        for i, o in ((4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096), (4096, 128256)):
            try:
                r = fp8_gemm(tokens, o, i)
            except Exception as e:   # noqa: BLE001 - a GPU or build without fp8 GEMMs: recorded, not fatal
                r = {"m": tokens, "n": o, "k": i, "error": repr(e)[:200]}
            res["fp8"].append(r)
            print("fp8", r, flush=True)
    for m, n, k in ((16384, 14336, 4096), (8192, 8192, 8192), (16384, 4096, 4096)):
        res["data"].append(data_kinds(m, n, k))
        print("data", res["data"][-1], flush=True)
    if not DRY:
        torch.backends.cuda.enable_cudnn_sdp(False)
    for b, h, s in ((2, 32, 8192), (4, 32, 4096), (8, 32, 2048), (16, 32, 1024)):
        for causal in (True, False):
            res["flash_attention"].append(attention(b, h, s, 128, causal))
            print("flash", res["flash_attention"][-1], flush=True)
    with open(os.path.join(OUT, "kernels_extra.json"), "w") as f:
        json.dump(res, f, indent=1)


def short_attention():
    """bf16 attention by kernel (cuDNN, flash, memory-efficient) at 128 to 2048 tokens and head sizes 64 and 128,
    causal or not, about 2^30 query-key pairs a call (ViT-B's 197 tokens of head size 64 among them)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__, "attention": []}
    kernels = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for name, backend in ([("math", SDPBackend.MATH)] if DRY else kernels.items()):
        for s_ in (128, 197, 256, 512, 1024, 2048):
            for d in (64, 128):
                for causal in (False, True):
                    h = 12
                    b = max(1, round(2 ** 30 / (s_ * s_ * h)) // (1024 if DRY else 1))
                    try:
                        with sdpa_kernel([backend]):
                            r = attention(b, h, s_ * SCALE, d, causal)
                    except Exception as e:   # noqa: BLE001 - a kernel that refuses the shape: recorded
                        r = {"b": b, "h": h, "s": s_, "d": d, "causal": causal, "error": repr(e)[:200]}
                    r["kernel"] = name
                    res["attention"].append(r)
                    print(name, r, flush=True)
    with open(os.path.join(OUT, "kernels_short_attention.json"), "w") as f:
        json.dump(res, f, indent=1)


def main():
    if "--extra" in sys.argv:
        return extra()
    if "--short-attention" in sys.argv:
        return short_attention()
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "sms": None if DRY else torch.cuda.get_device_properties(0).multi_processor_count,
           "linear": [], "square": [], "k_sweep": [], "m_sweep": [], "attention": []}
    t0 = time.time()
    for model, tokens, i, o in linear_shapes():
        for layout, (m, n, k) in (("nt", (tokens, o, i)), ("nn", (tokens, i, o)), ("tn", (o, i, tokens))):
            r = gemm(m, n, k, layout)
            r.update(model=model, tokens=tokens, inputs=i, outputs=o)
            res["linear"].append(r)
        print(model, tokens, i, o, [round(x["tflops"]) for x in res["linear"][-3:]], flush=True)
    for s in (256, 512, 1024, 2048, 4096, 8192, 16384):
        res["square"].append(gemm(s, s, s, "nn"))
    for k in (128, 256, 512, 1024, 2048, 4096, 8192, 16384):
        res["k_sweep"].append(gemm(8192, 8192, k, "nt"))
    for m in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384):
        res["m_sweep"].append(gemm(m, 4096, 4096, "nt"))
    for name in ("square", "k_sweep", "m_sweep"):
        print(name, [round(x["tflops"]) for x in res[name]], flush=True)
    for b, h, s in ((2, 32, 8192), (4, 32, 4096), (8, 32, 2048), (16, 32, 1024), (2, 64, 8192)):
        for causal in (True, False):
            res["attention"].append(attention(b, h, s, 128, causal))
            print("attention", res["attention"][-1], flush=True)
    res["seconds"] = time.time() - t0
    with open(os.path.join(OUT, "kernels.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("kernels done", round(res["seconds"], 1), "s", flush=True)


if __name__ == "__main__":
    main()
