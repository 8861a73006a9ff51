"""Real-GPU ground truth for the compute model's host time of an optimizer step, and of the dispatches it is made of.

The compute model times the host op by op (network/compute_model.py: `host_us` an op, `view_us` a kernel-less
dispatch, `optimizer.host_us` a foreach op of the optimizer). A held-out model's AdamW step took the host 10-12 ms
for 150 parameters (h200_host.json) where the model counted 9 foreach ops, 1 ms: the step's host time grows with
the number of parameters. This measures how, on one machine, so that the cost per parameter can be told in units of
the same machine's cost per op and per view:
- `optimizers`: the host's time of `optimizer.step()` (perf_counter, no synchronisation inside; median of 30 after
  5 warm-ups) for torch.optim's AdamW, Adam, SGD with momentum and plain SGD as PyTorch picks their implementation
  (foreach on CUDA), over N parameters of 1024 fp32 each (the GPU's work is a few microseconds), N = 1 ... 256;
  and `zero_grad(set_to_none=True)` over the same parameters;
- `dispatch`: the host's time per call of a chain of 400 calls each: an out-of-place add of a 1024-element GPU
  tensor (one kernel), a view of it (no kernel), `.item()` of a 0-dim CPU tensor and an in-place add to one (what
  AdamW does per parameter with its step counters, on the host).
Like the examples' recording (record_examples.py), it runs with `torch.set_default_device("cuda")`, which adds its
own time to every factory call, and under which PyTorch 2.11's AdamW and Adam keep their step counters on the GPU:
each `.item()` of one (two a parameter) is then a wait for the GPU (h200_optimizer_host.json was recorded so).

    python3 record_optimizer_host.py OUT_DIR [--dry]
"""
import json
import os
import statistics
import sys
import time

import torch

OUT = sys.argv[1]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
os.makedirs(OUT, exist_ok=True)
torch.set_default_device(DEV)
COUNTS = (1, 4, 16, 64, 256)
REPEAT, WARM, CHAIN = (5, 2, 50) if DRY else (30, 5, 400)


def sync():
    if not DRY:
        torch.cuda.synchronize()


def host_ms(fn) -> float:
    """Median host time of fn() in ms, the GPU drained before each call so that it never makes the host wait."""
    for _ in range(WARM):
        fn()
    times = []
    for _ in range(REPEAT):
        sync()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    sync()
    return statistics.median(times) * 1e3


def optimizers() -> dict:
    makers = {"adamw": lambda ps: torch.optim.AdamW(ps), "adam": lambda ps: torch.optim.Adam(ps),
              "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
              "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1)}
    out = {}
    for name, make in makers.items():
        out[name] = {}
        for n in COUNTS:
            params = [torch.nn.Parameter(torch.randn(1024)) for _ in range(n)]
            for p in params:
                p.grad = torch.randn(1024)
            opt = make(params)
            step = host_ms(opt.step)

            def zero():
                for p in params:
                    p.grad = torch.ones(1024) if p.grad is None else p.grad
                opt.zero_grad(set_to_none=True)
            refill = host_ms(lambda: [setattr(p, "grad", torch.ones(1024)) for p in params])
            out[name][str(n)] = {"step_ms": step, "zero_grad_ms": max(host_ms(zero) - refill, 0.0)}
            print(name, n, json.dumps(out[name][str(n)]), flush=True)
    return out


def dispatch() -> dict:
    x = torch.randn(1024)
    m = torch.randn(32, 32)
    step = torch.tensor(0.0, device="cpu")

    def adds():
        for _ in range(CHAIN):
            torch.add(x, 1)

    def views():
        for _ in range(CHAIN):
            m.t()

    def items():
        for _ in range(CHAIN):
            step.item()

    def cpu_adds():
        for _ in range(CHAIN):
            step.add_(1)
    out = {name: host_ms(fn) * 1e3 / CHAIN for name, fn in
           (("add_us", adds), ("view_us", views), ("item_us", items), ("cpu_add_us", cpu_adds))}
    print("dispatch", json.dumps(out), flush=True)
    return out


def main():
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "recorded": "record_optimizer_host.py", "params_elements": 1024, "counts": list(COUNTS)}
    res["dispatch"] = dispatch()
    res["optimizers"] = optimizers()
    res["dispatch_again"] = dispatch()   # the machine's drift over the recording
    with open(os.path.join(OUT, "optimizer_host.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
