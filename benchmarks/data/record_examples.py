"""Real-GPU ground truth for astra-compile's compute model.

For each bundled example model (unsharded, one rank's batch): the measured time of one training step
(forward, loss, backward, AdamW step, zero_grad) on this GPU in fp32 (TF32 off), fp32 with TF32, and bf16
autocast; the GPU's measured matmul and copy ceilings; a per-op profile; and one real execution trace +
Kineto trace of a DDP step (NCCL, world size 1) for the trace importer.
Usage: python3 record_examples.py EXAMPLES_DIR OUT_DIR [--cpu-dry-run] [--gpt-only] [--models a,b] [--no-traces]
       [--bf16-profiles] [--tf32-profiles] [--fp32-profiles] [--host-counters]
--models: these model files of EXAMPLES_DIR instead of the four examples (benchmarks/models/heldout: models the
compute model was not fitted on); --no-traces: no DDP execution traces; --bf16-profiles (--tf32-profiles, --fp32-profiles):
also one bf16-autocast (fp32 with TF32, fp32) step's Kineto trace per model (NAME_bf16_kineto.json,
NAME_tf32_kineto.json, NAME_fp32_kineto.json, with shapes); --host-counters: AdamW's step counters kept on the host
after its first step, as the examples' reference recording had them (PyTorch 2.11 makes them on the default device,
the GPU here, where each of their two .item() reads a parameter waits for the GPU).
"""
import json, os, statistics, sys, time
import torch
from model_steps import counters_to_host, load_model

EX, OUT = sys.argv[1], sys.argv[2]
DRY = "--cpu-dry-run" in sys.argv
dev = "cpu" if DRY else "cuda"
torch.set_default_device(dev)   # the examples make masks with torch.ones(...) and no device
os.makedirs(OUT, exist_ok=True)
res = {"device": "cpu" if DRY else torch.cuda.get_device_name(0), "torch": torch.__version__, "models": {}}
MODELS = ("mlp_dp", "gpt_tp_dp", "resnet_dp", "llama_fsdp_tp")
if "--models" in sys.argv:
    MODELS = tuple(sys.argv[sys.argv.index("--models") + 1].split(","))
elif "--gpt-only" in sys.argv:
    MODELS = ("gpt_tp_dp",)


def sync():
    if not DRY:
        torch.cuda.synchronize()


def timeit(fn, warm=3, n=10):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); sync(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3   # ms


# ceilings
def ceilings():
    n = 512 if DRY else 8192
    out = {}
    for name, dt, tf32 in (("bf16", torch.bfloat16, False), ("fp32_tf32", torch.float32, True), ("fp32", torch.float32, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn(n, n, device=dev, dtype=dt)
        ms = timeit(lambda: a @ b, 2, 5)
        out[f"matmul_{name}_tflops"] = 2 * n ** 3 / (ms * 1e-3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.empty(2 * 1024 ** 3 // (64 if DRY else 1), dtype=torch.uint8, device=dev); y = torch.empty_like(x)
    ms = timeit(lambda: y.copy_(x), 2, 5)
    out["copy_GBps_rw"] = 2 * x.numel() / (ms * 1e-3) / 1e9
    return out


res["ceilings"] = ceilings()
print(json.dumps(res["ceilings"]), flush=True)


HOST_COUNTERS = "--host-counters" in sys.argv


def step_fn(mod, model, inputs, opt, amp):
    lossf = getattr(mod, "loss", None)
    def step():
        with torch.autocast("cuda" if not DRY else "cpu", dtype=torch.bfloat16, enabled=amp):
            out = model(inputs)
            l = lossf(out) if lossf else out.float().mean()
        l.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        if HOST_COUNTERS:
            counters_to_host(opt)
    return step


for name in MODELS:
    try:
        mod = load_model(EX, name)
        torch.manual_seed(0)
        model = mod.build_model().to(dev)
        inputs = mod.example_inputs()
        if DRY:   # a short CPU check of the code path: a quarter of the batch
            inputs = inputs[: max(1, inputs.shape[0] // 16)]
        inputs = inputs.to(dev) if torch.is_tensor(inputs) else tuple(i.to(dev) for i in inputs)
        if DRY:   # keep the CPU dry run short: the first model only proves the code path
            pass
        opt = torch.optim.AdamW(model.parameters())
        r = {"params": sum(p.numel() for p in model.parameters())}
        modes = (("fp32", False, False), ("fp32_tf32", True, False), ("bf16_autocast", False, True))
        for mode, tf32, amp in (modes[:1] if DRY else modes):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            r[f"step_ms_{mode}"] = timeit(step_fn(mod, model, inputs, opt, amp), 2 if DRY else 3, 2 if DRY else 10)
            # forward only, no grad
            with torch.no_grad():
                def fwd():
                    with torch.autocast("cuda" if not DRY else "cpu", dtype=torch.bfloat16, enabled=amp):
                        model(inputs)
                r[f"fwd_ms_{mode}"] = timeit(fwd, 2, 2 if DRY else 10)
        torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False
        # per-op profile, fp32 (the project's default dtype for these files)
        from torch.profiler import profile, ProfilerActivity
        acts = [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])
        st = step_fn(mod, model, inputs, opt, False)
        with profile(activities=acts, record_shapes=True) as prof:
            st(); sync()
        key = "self_cpu_time_total" if DRY else "self_cuda_time_total"
        with open(os.path.join(OUT, "ops.txt"), "a") as f:
            f.write(f"\n===== {name} (fp32, one step)\n")
            f.write(prof.key_averages(group_by_input_shape=True).table(sort_by=key, row_limit=40, max_name_column_width=50, max_shapes_column_width=60))
        for short, tf32, amp in (("bf16", False, True), ("tf32", True, False), ("fp32", False, False)):
            if f"--{short}-profiles" in sys.argv:
                torch.backends.cuda.matmul.allow_tf32 = tf32; torch.backends.cudnn.allow_tf32 = tf32
                st = step_fn(mod, model, inputs, opt, amp)
                for _ in range(2):
                    st()
                with profile(activities=acts, record_shapes=True) as prof:
                    st(); sync()
                prof.export_chrome_trace(os.path.join(OUT, f"{name}_{short}_kineto.json"))
        torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False
        res["models"][name] = r
        print(name, json.dumps(r), flush=True)
        del model, opt
        if not DRY:
            torch.cuda.empty_cache()
    except Exception as e:   # record and go on: one model's failure must not lose the others
        res["models"][name] = {"error": repr(e)[:300]}
        print(name, "ERROR", repr(e)[:300], flush=True)
    if DRY:
        break

with open(os.path.join(OUT, "gpu_results.json"), "w") as f:
    json.dump(res, f, indent=1)
if "--no-traces" in sys.argv:
    for f in os.listdir(OUT):   # what comes back is at most 16 MiB a file
        if f.endswith("_kineto.json"):
            os.system(f"gzip -f {os.path.join(OUT, f)}")
    print("done", flush=True)
    sys.exit(0)

# One real DDP step's execution trace + Kineto trace (NCCL, world size 1) for mlp_dp and gpt_tp_dp.
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import profile, ProfilerActivity, ExecutionTraceObserver
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29511")
dist.init_process_group("gloo" if DRY else "nccl", rank=0, world_size=1)
for name in (("gpt_tp_dp",) if "--gpt-only" in sys.argv else ("mlp_dp", "gpt_tp_dp")):
    try:
        mod = load_model(EX, name)
        model = mod.build_model().to(dev)
        ddp = DDP(model, device_ids=None if DRY else [0])
        opt = torch.optim.AdamW(ddp.parameters())
        x = mod.example_inputs().to(dev)
        if DRY:
            x = x[:1]
        lossf = getattr(mod, "loss", None)
        def st():
            out = ddp(x)
            (lossf(out) if lossf else out.float().mean()).backward(); opt.step(); opt.zero_grad(set_to_none=True)
        for _ in range(3):
            st()
        sync()
        short = name.split("_")[0]
        et = ExecutionTraceObserver().register_callback(os.path.join(OUT, f"{short}_et_rank0.json"))
        acts = [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])
        with profile(activities=acts, record_shapes=True, execution_trace_observer=et) as prof:
            st(); sync()
        prof.export_chrome_trace(os.path.join(OUT, f"{short}_kineto_rank0.json"))
        t = timeit(st, 2, 2 if DRY else 10)
        res[f"ddp_{short}_step_ms_fp32"] = t
        print(name, "ddp step ms", t, flush=True)
        del model, ddp, opt
        if DRY:
            break
    except Exception as e:
        res[f"ddp_{name}_trace_error"] = repr(e)[:300]
        print("DDP TRACE ERROR", name, repr(e)[:300], flush=True)
dist.destroy_process_group()
for f in os.listdir(OUT):   # what comes back is at most 16 MiB a file
    if os.path.getsize(os.path.join(OUT, f)) > 15 * 2 ** 20:
        os.system(f"gzip -f {os.path.join(OUT, f)}")

with open(os.path.join(OUT, "gpu_results.json"), "w") as f:
    json.dump(res, f, indent=1)
print("done", flush=True)
