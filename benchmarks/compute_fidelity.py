"""Predicted compute time of each bundled example against one H200's measured training step (benchmarks/data/).

For every model and precision mode in benchmarks/data/h200_examples.json, the example file is rewritten into a
temporary folder the way the recording set the mode (`allow_tf32` lines at its top; bf16 autocast through a
`step_context()`) and with a `parallelize()` that returns the model as built, then timed by `astra-compile
--gpu h200 --json`. A topology has at least 2 NPUs, so the run is `--mesh dp=2` on "Switch(2)"; with that
`parallelize()` there is no DDP (no gradient buckets, no all-reduce): rank 0 runs the unsharded model on one
rank's batch, as the recording did. The same runs without `--gpu` (the A100 roofline of one peak for every
dtype) follow for contrast.

The measured step is wall time (kernel-launch gaps and host work included); the prediction is rank 0's step time
under the H200 preset's compute model (docs/compute.md: each op class's efficiency, the kernel launch, and the
host issuing the ops one after another). `--by-class` splits the predicted compute by op class (from
`--timeline`), beside the fp32 profiler tables' CUDA time per class where the data has them (their 40 rows of
most CUDA time only).

    python benchmarks/compute_fidelity.py [--models mlp_dp,gpt_tp_dp] [--modes fp32,bf16_autocast] [--by-class]
    python benchmarks/compute_fidelity.py --examples benchmarks/models/heldout --data benchmarks/data/h200_heldout.json

`--examples DIR --data FILE`: other model files and their measurements in the same format (the held-out models,
which no constant was fitted on).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from astra_compile.network.op_classes import CLASSES, classify   # the compute model's own classes

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
EXAMPLES = os.path.join(HERE, "..", "examples")
TOPOLOGY, MESH = "Switch(2)", "dp=2"      # 1-NPU topologies are refused; UNSHARDED keeps each rank's model whole

# What each recorded mode set (h200_examples.json "modes"), as lines put at the top of the example file.
TF32 = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = {on}\ntorch.backends.cudnn.allow_tf32 = {on}\n"
# One rank's whole model, no DDP or sharding, as recorded. The second NPU is there only because a topology needs
# two; the tool refuses a mesh axis that parallelize() never reads (right for a training file), so it reads dp.
UNSHARDED = ("\n\ndef parallelize(model, mesh):\n"
             "    mesh[\"dp\"]\n"
             "    return model\n")
AUTOCAST = ("\n\ndef step_context():\n"
            "    return torch.autocast(\"cuda\", dtype=torch.bfloat16)\n")


def mode_file(directory: str, model: str, mode: str, examples: str = EXAMPLES) -> str:
    """The example as the recording ran it in `mode`, written to directory/mode/model.py."""
    with open(os.path.join(examples, model + ".py")) as f:
        text = f.read()
    if re.search(r"^def step_context\b", text, re.M):
        raise SystemExit(f"compute_fidelity: examples/{model}.py has its own step_context(); bf16 would replace it")
    if mode == "fp32":
        text = TF32.format(on=False) + text
    elif mode == "fp32_tf32":
        text = TF32.format(on=True) + text
    elif mode == "bf16_autocast":
        text = TF32.format(on=False) + text + AUTOCAST
    elif mode != "pytorch_defaults":
        raise SystemExit(f"compute_fidelity: unknown mode {mode!r} in the data")
    text += UNSHARDED   # a later def wins over the file's own parallelize()
    os.makedirs(os.path.join(directory, mode), exist_ok=True)
    path = os.path.join(directory, mode, model + ".py")
    with open(path, "w") as f:
        f.write(text)
    return path


def op_class(name: str, phase: str) -> str:
    """The compute model's class of an aten op (`aten.mm.default` or `aten::mm`), every op of the optimizer phase
    counted as the optimizer's (a for-loop optimizer's mul_ and add_ too)."""
    return "optimizer" if phase == "optimizer" else classify(name)


def predict(path: str, gpu: str | None, cache: str, timeline: str | None) -> dict:
    argv = [sys.executable, "-m", "astra_compile", path, "--topology", TOPOLOGY, "--mesh", MESH, "--json",
            "--cache", cache]
    argv += ["--gpu", gpu] if gpu else []
    argv += ["--timeline", timeline] if timeline else []
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compute_fidelity: {' '.join(argv)} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def predicted_classes(timeline: str) -> dict:
    """Predicted compute microseconds per op class of rank 0 (accelerator 0's compute track)."""
    with open(timeline) as f:
        events = json.load(f)["traceEvents"]
    out = dict.fromkeys(CLASSES, 0.0)
    for e in events:
        if e.get("cat") == "compute" and e.get("pid") == 0:
            out[op_class(e["name"], e.get("args", {}).get("phase", ""))] += e["dur"]
    return out


def measured_classes(models, gpu: str = "h200") -> dict:
    """{model: CUDA microseconds per op class} of these models from the fp32 profiler tables recorded on `gpu`
    (benchmarks/data/GPU_*.txt; their top 40 rows only)."""
    out, model = {}, None
    unit = {"us": 1.0, "ms": 1e3, "s": 1e6}
    for name in sorted(os.listdir(DATA)):
        if not (name.startswith(gpu + "_") and name.endswith(".txt")):
            continue
        with open(os.path.join(DATA, name)) as f:
            for line in f:
                header = re.match(r"===== (\S+) \(fp32", line)
                if header:
                    model = header.group(1) if header.group(1) in models else None
                    if model:
                        out[model] = dict.fromkeys(CLASSES, 0.0)
                    continue
                row = re.match(r"\s*(aten::\S+)\s+(.*)$", line)
                if model and row:   # columns: Self CPU %, Self CPU, CPU total %, CPU total, CPU avg, Self CUDA
                    self_cuda = re.match(r"([\d.]+)(us|ms|s)", row.group(2).split()[5])
                    out[model][op_class(row.group(1), "")] += float(self_cuda.group(1)) * unit[self_cuda.group(2)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated models (default: every model in the data)")
    ap.add_argument("--modes", help="comma-separated precision modes (default: every mode in the data)")
    ap.add_argument("--by-class", action="store_true", help="also the predicted compute per op class")
    ap.add_argument("--gpu", default="h200", help="the device to predict with (default: the h200 preset; a device "
                                                  "file to try other constants)")
    ap.add_argument("--examples", default=EXAMPLES, help="the folder of the model files (default: examples/)")
    ap.add_argument("--data", default=os.path.join(DATA, "h200_examples.json"),
                    help="their measurements (default: benchmarks/data/h200_examples.json)")
    args = ap.parse_args()
    with open(args.data) as f:
        data = json.load(f)
    models = args.models.split(",") if args.models else list(data["models"])
    modes = args.modes.split(",") if args.modes else list(data["modes"])
    print(f"measured: {data['gpu']}; one unsharded rank, AdamW step")
    print(f"predicted: astra-compile FILE --topology {TOPOLOGY} --mesh {MESH} --json, rank 0's step (total_time_us)\n")
    rows, classes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        for model in models:
            for mode in modes:
                path = mode_file(tmp, model, mode, args.examples)
                timeline = os.path.join(tmp, f"{model}.{mode}.timeline.json") if args.by_class else None
                h200 = predict(path, args.gpu, cache, timeline)
                a100 = predict(path, None, cache, None)
                measured = data["models"][model][f"step_ms_{mode}"]
                fwd = data["models"][model][f"fwd_ms_{mode}"]
                phases = {p["phase"]: p["end_us"] / 1e3 for p in h200["phases"]}   # forward: from the step's start
                rows.append((model, mode, measured, h200["total_time_us"] / 1e3, fwd, phases.get("forward", 0.0),
                             h200.get("host_wait_us", 0.0) / 1e3, a100["total_time_us"] / 1e3))
                if timeline:
                    classes[model, mode] = predicted_classes(timeline)
                print(f"  ran {model} {mode}", file=sys.stderr, flush=True)
    head = (f"{'model':<14} {'mode':<17} {'meas ms':>9} {'h200 ms':>9} {'ratio':>6} {'err %':>7} "
            f"{'fwd meas':>9} {'fwd h200':>9} {'err %':>7} {'host ms':>8} {'a100 ms':>9} {'err %':>7}")
    print(head)
    print("-" * len(head))
    for model, mode, meas, pred, fwd, pfwd, host, a100 in rows:
        print(f"{model:<14} {mode:<17} {meas:9.2f} {pred:9.2f} {pred / meas:6.2f} {100 * (pred / meas - 1):7.1f} "
              f"{fwd:9.2f} {pfwd:9.2f} {100 * (pfwd / fwd - 1):7.1f} {host:8.2f} "
              f"{a100:9.2f} {100 * (a100 / meas - 1):7.1f}")
    errors = [abs(pred / meas - 1) for _, _, meas, pred, *_ in rows]
    median = statistics.median(errors)
    print(f"\n|error| of the step with --gpu h200: median {100 * median:.1f} %, "
          f"max {100 * max(errors):.1f} %, within 10 %: {sum(e <= 0.10 for e in errors)} of {len(errors)}")
    print("meas: measured step (wall); h200: predicted step with --gpu h200; fwd: forward only (measured without "
          "grad; predicted: the end of the forward phase);\nhost: of the prediction, time the GPU waited for the "
          "host to issue kernels; a100: predicted step without --gpu (the A100 roofline)")
    if classes:
        measured = measured_classes(models, os.path.basename(args.data).split("_")[0])
        print("\npredicted compute per op class, ms (--gpu h200); 'meas' rows: fp32 profiler CUDA time, top 40 rows")
        width = {c: max(11, len(c)) for c in CLASSES}
        print(f"{'model':<14} {'mode':<17} " + " ".join(f"{c:>{width[c]}}" for c in CLASSES))
        for (model, mode), per in classes.items():
            print(f"{model:<14} {mode:<17} " + " ".join(f"{per[c] / 1e3:{width[c]}.2f}" for c in CLASSES))
            if mode == "fp32" and model in measured:
                cuda = measured[model]
                print(f"{model:<14} {'meas fp32':<17} " + " ".join(f"{cuda[c] / 1e3:{width[c]}.2f}" for c in CLASSES))


if __name__ == "__main__":
    main()
