"""Real-GPU ground truth for the memory model: each bundled example's peak of allocated bytes per phase.

Each example runs as record_examples.py runs it (one rank's batch, unsharded, AdamW, zero_grad(set_to_none=True))
in fp32 (TF32 off) and under bf16 autocast. After 3 warm-up steps (AdamW's states exist), one step is measured
phase by phase with torch.cuda.reset_peak_memory_stats between the phases: forward with the loss, backward,
optimizer step with zero_grad; also the allocated bytes at the step's start and the reserved bytes' peak.
One bf16 step of the GPT is profiled (chrome trace with shapes, for calibrate-compute).
Then ResNet-18's step in PyTorch's default mode and in TF32 mode, alternated 4 times (median of 10 steps each),
to tell whether the two modes' measured gap (11.6 against 9.1 ms) is the mode or run-to-run spread.

    python3 record_memory.py EXAMPLES_DIR OUT_DIR [--dry]
"""
import json
import os
import statistics
import sys
import time

import torch

from model_steps import load_model

EX, OUT = sys.argv[1], sys.argv[2]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
torch.set_default_device(DEV)    # the examples make masks with torch.ones(...) and no device
os.makedirs(OUT, exist_ok=True)


def sync():
    if not DRY:
        torch.cuda.synchronize()


def setup(name):
    mod = load_model(EX, name)
    torch.manual_seed(0)
    model = mod.build_model().to(DEV)
    inputs = mod.example_inputs()
    if DRY:
        inputs = inputs[: max(1, inputs.shape[0] // 16)] if torch.is_tensor(inputs) else inputs
    inputs = inputs.to(DEV) if torch.is_tensor(inputs) else tuple(i.to(DEV) for i in inputs)
    return mod, model, inputs, torch.optim.AdamW(model.parameters())


def phases(mod, model, inputs, opt, amp):
    lossf = getattr(mod, "loss", None)

    def forward():
        with torch.autocast("cuda" if not DRY else "cpu", dtype=torch.bfloat16, enabled=amp):
            out = model(inputs)
            return lossf(out) if lossf else out.float().mean()

    for _ in range(3):
        forward().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    sync()
    if DRY:
        return {}
    from phase_peaks import phase_peaks
    peaks = phase_peaks(forward, opt)
    del peaks["alloc_retries"]
    return peaks


def profiled(mod, model, inputs, opt, path):
    from torch.profiler import ProfilerActivity, profile
    lossf = getattr(mod, "loss", None)
    acts = [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])
    with profile(activities=acts, record_shapes=True) as prof:
        with torch.autocast("cuda" if not DRY else "cpu", dtype=torch.bfloat16):
            out = model(inputs)
            l = lossf(out) if lossf else out.float().mean()
        l.backward(); opt.step(); opt.zero_grad(set_to_none=True); sync()
    prof.export_chrome_trace(path)


def step_ms(mod, model, inputs, opt, n=10):
    lossf = getattr(mod, "loss", None)

    def step():
        out = model(inputs)
        (lossf(out) if lossf else out.float().mean()).backward(); opt.step(); opt.zero_grad(set_to_none=True)
    for _ in range(3):
        step()
    sync()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); step(); sync(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main():
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "bytes": {}, "resnet_modes_ms": {"defaults": [], "tf32": []}}
    for name in ("mlp_dp", "resnet_dp", "llama_fsdp_tp", "gpt_tp_dp"):
        for mode, amp in (("fp32", False), ("bf16_autocast", True)):
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            try:
                if not DRY:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                mod, model, inputs, opt = setup(name)
                res["bytes"][f"{name}.{mode}"] = phases(mod, model, inputs, opt, amp)
                print(name, mode, res["bytes"][f"{name}.{mode}"], flush=True)
                if name == "gpt_tp_dp" and amp:   # one bf16 step's profile, for calibrate-compute
                    profiled(mod, model, inputs, opt, os.path.join(OUT, "gpt_bf16_kineto.json"))
                del mod, model, inputs, opt
            except Exception as e:   # one model's failure must not lose the others
                res["bytes"][f"{name}.{mode}"] = {"error": repr(e)[:300]}
                print(name, mode, "ERROR", repr(e)[:300], flush=True)
            if DRY:
                break
        if DRY:
            break
    if not DRY:
        mod, model, inputs, opt = setup("resnet_dp")
        for _ in range(4):
            for mode, matmul_tf32 in (("defaults", False), ("tf32", True)):
                torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
                torch.backends.cudnn.allow_tf32 = True
                res["resnet_modes_ms"][mode].append(step_ms(mod, model, inputs, opt))
        print("resnet modes", res["resnet_modes_ms"], flush=True)
    with open(os.path.join(OUT, "memory.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
