"""Real-GPU ground truth for the compute model's host time: how long the host takes to issue a training step's ops,
phase by phase, when the GPU is not what it waits for.

The compute model issues ops one after another at `host_us` each (plus `view_us` per view, `CLASS.host_us` for a
class; network/compute_model.py), fitted to the bundled examples' host-bound steps. Held-out models at bf16 and
TF32 came out 8-31 % short with the GPU idle for the host (docs/compute.md). This records, for each model file and
mode, at its own batch and at one sample of it (where the kernels are short and the host sets the pace):
- the host's time to issue the forward and loss, the backward (loss.backward() returns once autograd has issued
  every kernel), the optimizer's step and zero_grad, each a median of 20 steps after 3 warm-ups (perf_counter, no
  synchronisation inside the step), and the whole step with a synchronisation at its end;
- the ATen ops each phase dispatches and how many of them are views (a TorchDispatchMode over one step, after the
  timing: it slows the host).

    python3 record_host.py MODELS_DIR OUT_DIR --models a,b [--dry]
"""
import json
import os
import statistics
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from model_steps import load_model

MODELS_DIR, OUT = sys.argv[1], sys.argv[2]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
NAMES = sys.argv[sys.argv.index("--models") + 1].split(",")
STEPS = 3 if DRY else 20
os.makedirs(OUT, exist_ok=True)
torch.set_default_device(DEV)


def sync():
    if not DRY:
        torch.cuda.synchronize()


class Counter(TorchDispatchMode):
    """ATen ops dispatched, and views among them, per phase."""

    def __init__(self):
        super().__init__()
        self.phase, self.ops = "forward", {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ops, views = self.ops.get(self.phase, (0, 0))
        self.ops[self.phase] = (ops + 1, views + int(func.is_view))
        return func(*args, **(kwargs or {}))


def phases(mod, model, inputs, opt, amp, counter=None) -> dict:
    """One step; the host's seconds per phase (no synchronisation inside), and the whole step's."""
    lossf = getattr(mod, "loss", None)
    t0 = time.perf_counter()
    with torch.autocast("cpu" if DRY else "cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(inputs)
        loss = lossf(out) if lossf else out.float().mean()
    t1 = time.perf_counter()
    if counter:
        counter.phase = "backward"
    loss.backward()
    t2 = time.perf_counter()
    if counter:
        counter.phase = "optimizer"
    opt.step()
    t3 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    t4 = time.perf_counter()
    sync()
    t5 = time.perf_counter()
    return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "zero_grad": t4 - t3, "step": t5 - t0}


def record(mod, model, inputs, amp) -> dict:
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(3):
        phases(mod, model, inputs, opt, amp)
    sync()
    runs = [phases(mod, model, inputs, opt, amp) for _ in range(STEPS)]
    got = {f"{k}_ms": statistics.median(r[k] for r in runs) * 1e3 for k in runs[0]}
    counter = Counter()
    with counter:
        phases(mod, model, inputs, opt, amp, counter)
    got["ops"] = {p: {"ops": n, "views": v} for p, (n, v) in counter.ops.items()}
    del opt
    return got


def main():
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__, "models": {}}
    for name in NAMES:
        mod = load_model(MODELS_DIR, name)
        res["models"][name] = {}
        for mode, amp in (("fp32", False), ("bf16_autocast", True)):
            for batch in ("own", "one"):
                torch.manual_seed(0)
                model = mod.build_model().to(DEV)
                inputs = mod.example_inputs()
                if batch == "one" or DRY:
                    inputs = inputs[:1]
                inputs = inputs.to(DEV)
                try:
                    r = record(mod, model, inputs, amp)
                except Exception as e:   # noqa: BLE001 - one model's failure must not lose the others
                    r = {"error": repr(e)[:300]}
                res["models"][name][f"{mode}_{batch}"] = r
                print(name, mode, batch, json.dumps(r), flush=True)
                del model
                if not DRY:
                    torch.cuda.empty_cache()
    with open(os.path.join(OUT, "host.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
