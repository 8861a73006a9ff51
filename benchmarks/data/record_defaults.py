"""Which convolution kernels PyTorch runs for a model file as written (its defaults: no allow_tf32 line), against
TF32 and fp32 set explicitly, in one fresh process: the flags PyTorch starts with, the step (median of 10 after 3
warm-ups, as record_examples.py times it, AdamW's counters on the host) and, per mode, the GPU kernels of one
profiled step whose names say TF32 or fp32 and their time. ResNet-18's "defaults" and TF32 steps were measured
11.6 and 9.1 ms on the reference H200 though they differ only in the fc layer (docs/compute.md).

    python3 record_defaults.py EXAMPLES_DIR OUT_DIR [--models resnet_dp]
"""
import json
import os
import re
import statistics
import sys
import time

import torch

from model_steps import counters_to_host, load_model

EX, OUT = sys.argv[1], sys.argv[2]
MODELS = sys.argv[sys.argv.index("--models") + 1].split(",") if "--models" in sys.argv else ["resnet_dp"]
os.makedirs(OUT, exist_ok=True)


def flags() -> dict:
    out = {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
           "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
           "float32_matmul_precision": torch.get_float32_matmul_precision()}
    for name in ("torch.backends.fp32_precision", "torch.backends.cudnn.fp32_precision",
                 "torch.backends.cudnn.conv.fp32_precision", "torch.backends.cuda.matmul.fp32_precision"):
        obj = torch
        try:
            for part in name.split(".")[1:]:
                obj = getattr(obj, part)
            out[name] = str(obj)
        except AttributeError:
            pass
    return out


START = flags()   # before anything sets them
torch.set_default_device("cuda")


def run(mod, mode):
    torch.manual_seed(0)
    model = mod.build_model().to("cuda")
    x = mod.example_inputs().to("cuda")
    opt = torch.optim.AdamW(model.parameters())
    lossf = getattr(mod, "loss", None)

    def step():
        out = model(x)
        (lossf(out) if lossf else out.float().mean()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        counters_to_host(opt)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kind = "tf32" if re.search(r"tf32|xmma.*f32f32_tf32|_tf32", e.name) else \
                "f32" if re.search(r"f32f32|sgemm|implicit_convolve_sgemm|fft", e.name) else "other"
            k = kernels.setdefault(kind, [0, 0.0])
            k[0] += 1
            k[1] += e.device_time_total / 1e3 if hasattr(e, "device_time_total") else e.cuda_time_total / 1e3
    return {"mode": mode, "flags": flags(), "step_ms": statistics.median(times) * 1e3,
            "kernels_ms_by_precision": kernels}


def main():
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "flags_at_start": START, "models": {}}
    for name in MODELS:
        mod = load_model(EX, name)
        rows = [run(mod, "defaults")]
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        rows.append(run(mod, "tf32"))
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        rows.append(run(mod, "fp32"))
        res["models"][name] = rows
        print(name, json.dumps(rows), flush=True)
    with open(os.path.join(OUT, "defaults.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
