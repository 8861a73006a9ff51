"""Real-GPU ground truth at a published run's shapes: torchtitan's Llama 3.1 8B (benchmarks/published/
torchtitan_llama3_8b.py, the calibration runs T1/T2) at reduced depth on one GPU.

The file runs as written (its parallelize(): selective activation checkpointing, FSDP2 with bf16 parameters and
fp32 reductions; its loss() and optimizer(), clipped AdamW) on a one-rank mesh (NCCL, world size 1), with LAYERS
set to the depth asked and the file's CUDA_ALLOC_CONF in the environment (set by the caller, before CUDA starts).
Measured: the step's wall time (CUDA-synchronised; median of 5 after 3 warm-ups), its peak of allocated bytes per
phase (forward with the loss, backward, optimizer step and zero_grad: reset_peak_memory_stats between them) and
the reserved bytes' peak over the whole run, and one profiled step (chrome trace, with shapes, and a per-op
table).

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 record_llama_step.py MODEL_FILE LAYERS OUT_DIR [--dry]
        [--no-cudnn-attention]

`--no-cudnn-attention` turns PyTorch's cuDNN attention off (torch.backends.cuda.enable_cudnn_sdp(False)), so that
scaled_dot_product_attention runs the flash kernel, as the published run did and as the file's checkpointing
policy names it (with cuDNN's kernel, PyTorch 2.11's bf16 choice on Hopper, the policy saves no attention output
and the backward recomputes it). Its files are named ..._flash.
"""
import importlib.util
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

PATH, LAYERS, OUT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
DRY = "--dry" in sys.argv
DEV = "cpu" if DRY else "cuda"
FLASH = "--no-cudnn-attention" in sys.argv
TAG = f"llama8b_L{LAYERS}" + ("_flash" if FLASH else "")
os.makedirs(OUT, exist_ok=True)


def sync():
    if not DRY:
        torch.cuda.synchronize()


def gib(b):
    return b / 2 ** 30


def main():
    spec = importlib.util.spec_from_file_location("model_file", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if FLASH:
        torch.backends.cuda.enable_cudnn_sdp(False)
    mod.LAYERS = LAYERS                          # Llama() and parallelize() read the module's constant
    if DRY:
        mod.DIM, mod.FFN, mod.VOCAB, mod.SEQ, mod.HEADS, mod.KV_HEADS = 256, 512, 1000, 128, 4, 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo" if DRY else "nccl", rank=0, world_size=1)
    mesh = init_device_mesh(DEV, (1,), mesh_dim_names=("dp",))
    torch.manual_seed(0)
    with torch.device(DEV):
        model = mod.build_model()
    model = mod.parallelize(model, mesh)
    opt = mod.optimizer(model.parameters())
    tokens = mod.example_inputs().to(DEV)
    res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "file": os.path.basename(PATH), "layers": LAYERS, "cudnn_attention": not FLASH,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
           "params": sum(p.numel() for p in model.parameters()), "tokens": list(tokens.shape)}

    def step():
        mod.loss(model(tokens)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sync()
    times = []
    for _ in range(5):
        t = time.perf_counter(); step(); sync(); times.append(time.perf_counter() - t)
    res["step_ms"] = statistics.median(times) * 1e3
    res["step_ms_all"] = [x * 1e3 for x in times]
    print(TAG, "step", round(res["step_ms"], 2), "ms", flush=True)
    if not DRY:   # one step's peaks of allocated bytes, phase by phase
        from phase_peaks import phase_peaks
        peaks = phase_peaks(lambda: mod.loss(model(tokens)), opt)
        res["memory_gib"] = {k: gib(peaks[k]) for k in ("at_step_start", "forward_peak", "backward_peak",
                                                        "optimizer_peak", "step_peak")}
        res["memory_gib"].update(reserved_peak_whole_run=gib(peaks["reserved_peak"]),
                                 alloc_retries=peaks["alloc_retries"])
        print(json.dumps(res["memory_gib"]), flush=True)
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])
    with profile(activities=acts, record_shapes=True) as prof:
        step(); sync()
    prof.export_chrome_trace(os.path.join(OUT, f"{TAG}_kineto.json"))
    key = "self_cpu_time_total" if DRY else "self_cuda_time_total"
    with open(os.path.join(OUT, f"{TAG}_ops.txt"), "w") as f:
        f.write(prof.key_averages(group_by_input_shape=True).table(
            sort_by=key, row_limit=60, max_name_column_width=50, max_shapes_column_width=70))
    with open(os.path.join(OUT, f"{TAG}.json"), "w") as f:
        json.dump(res, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
