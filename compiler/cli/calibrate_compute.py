"""`astra-compile calibrate-compute`: fit a GPU's compute model (network/compute_model.py) to real profiles.

    astra-compile calibrate-compute PROFILE.json... --gpu-name NAME [--base DEVICE] [-o my_gpu.yaml]
    astra-compile calibrate-compute PROFILE.json... --gpu DEVICE          (evaluate a device on the profiles)

Each profile is a torch.profiler (Kineto) trace of a GPU run recorded with record_shapes=True; profile_ops.py
reads its op calls (measured kernel time, shapes, dtype, FLOPs, bytes), communication left out, and groups the
calls of one (name, shapes, dtype) by their median. The fit is scipy.optimize.least_squares over the efficiency
constants the profiles can tell (a constant with fewer than MIN_GROUPS groups of ops keeps its base value): the
residual of a group is its log time error (a 2x error weighs the same on a 5 us op as on a 5 ms one), weighted by
the square root of the mean of the group's share of the measured time (so big ops count by their time share) and
an equal share (so the small ops, which alone tell the launch time, count too), with the
soft_l1 loss (an odd kernel, a cuBLAS heuristic's miss, does not pull the rest). The peaks and bandwidth are
the base device's (--base, else the preset named --gpu-name); host_us is the profile's (profile_ops.host_issue_ns).
docs/compute.md ("Fitting your own GPU") states the choices and limits.
"""
from __future__ import annotations

import json
import math
import re
import sys

import numpy as np

from ...network.compute_model import FRACTIONS, GEMM_CLASSES, KEYS, MEMORY_CLASSES, PER_DTYPE_MEMORY, ComputeModel
from ...network.dtypes import DTYPES
from ...network.errors import UserError, show
from ...network.op_classes import CLASSES, CODE as CLASS_CODE, TENSOR_CORE, gemm_dims, op_class, parse_shapes

MIN_GROUPS = 3            # groups of ops (distinct name, shapes, dtype) a constant needs to be fitted
MIN_MEMORY_GROUPS = 2     # a memory class's one bandwidth fraction: a layer norm's forward and backward suffice
MIN_MEMORY_NS = 5e3       # ... counting only ops whose bytes take at least 5 us at the full bandwidth
FRACTION_FLOOR = 1e-3     # the fit's lower bound of a fraction (KEYS' bound is exclusive)
ROBUST_SCALE = 0.25       # soft_l1's scale: a log error of about 25 % on a group of average share


def build_parser():
    from .parser import Parser
    p = Parser(prog="astra-compile calibrate-compute",
               description="Fit a GPU's compute model (efficiency per op class, launch and host time) to "
                           "torch.profiler traces of real runs, or evaluate a device on them (docs/compute.md).")
    p.add_argument("profiles", nargs="*", metavar="PROFILE.json",
                   help="torch.profiler (Kineto) traces of GPU runs, recorded with record_shapes=True")
    p.add_argument("--gpu-name", help="the GPU the profiles were recorded on (checked against each profile's "
                                      "deviceProperties; a preset of this name gives the peaks and bandwidth)")
    p.add_argument("--base", metavar="DEVICE", help="a preset name or device file whose peaks, bandwidth and "
                                                    "constants the fit starts from (default: the preset --gpu-name)")
    p.add_argument("--gpu", metavar="DEVICE", help="evaluate this device (preset or file) on the profiles; no fit")
    p.add_argument("-o", "--output", help="write the fitted device file (.yaml, .yml or .json)")
    return p


def main(argv: list[str]) -> int:
    from .parser import run_subcommand
    return run_subcommand(build_parser, run, argv)


def run(args) -> int:
    from ...network import devices
    from ..frontend.profile_ops import group, read_profile
    if not args.profiles:
        raise UserError("give one or more torch.profiler traces: astra-compile calibrate-compute PROFILE.json... "
                        "--gpu-name NAME")
    if args.gpu is not None and (args.output or args.base):
        raise UserError("--gpu evaluates a device as it is; -o and --base are for a fit: give one or the other")
    if args.gpu is None and not args.gpu_name:
        raise UserError("--gpu-name is required: the GPU the profiles were recorded on (e.g. h200)")
    if args.output and not args.output.lower().endswith((".yaml", ".yml", ".json")):
        raise UserError(f"-o {show(args.output)}: a device file is .yaml, .yml or .json")
    device = devices.resolve(args.gpu) if args.gpu is not None else _base(args.base, args.gpu_name)
    profiles = [read_profile(p) for p in args.profiles]
    if args.gpu_name:
        for p in profiles:
            if _letters(args.gpu_name) not in _letters(p.gpu):
                raise UserError(f"{p.path}: recorded on {show(p.gpu)}, not on --gpu-name {show(args.gpu_name)}")
    groups = group([c for p in profiles for c in p.calls])
    table = _Table(groups, device)
    if args.gpu is not None:
        efficiency = dict(device.efficiency)
        status = {k: "the device's" if k in efficiency else "default (not in the device file)"
                  for k in list(free_keys(table)[1]) + ["host_us"]}
        model = device.compute_model()
    else:
        multiprocessors = profiles[0].multiprocessors or device.multiprocessors
        efficiency, status = fit(table, device, multiprocessors)
        host = [p.host_ns for p in profiles if p.host_ns > 0]
        if host:
            efficiency["host_us"] = float(f"{min(sum(host) / len(host) / 1e3, KEYS['host_us'][1]):.4g}")
            status["host_us"] = "from the profiles (median gap between outermost ATen calls; profiler included)"
        model = ComputeModel(tuple(sorted(efficiency.items())), multiprocessors)
        fitted = _fitted_device(device, efficiency, multiprocessors, args, profiles)
    text = format_table(table, model, efficiency, status, device, profiles, args)
    if args.output:
        from ...runtime import atomic
        data = fitted.to_dict()
        body = json.dumps(data, indent=1) + "\n" if args.output.lower().endswith(".json") else _yaml(data)
        atomic.write_text(args.output, body)
        text += f"\nwrote {args.output}"
    print(text)
    return 0


def _letters(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _base(spec: str | None, gpu_name: str):
    """The device whose peaks and bandwidth the fit uses: --base, else the preset named --gpu-name."""
    from ...network import devices
    table = devices.presets()
    if spec is None:
        if gpu_name.lower() not in table:
            raise UserError(f"--gpu-name {show(gpu_name)} is no preset: give --base PRESET|FILE for its peaks and "
                            f"bandwidth (presets: {', '.join(table)})")
        return table[gpu_name.lower()]
    if spec.lower() in table:
        return table[spec.lower()]
    if spec.lower().endswith((".yaml", ".yml", ".json")):
        return devices.load(spec)
    raise UserError(f"--base {show(spec)}: unknown GPU; known: {', '.join(table)} (or a .yaml/.json device file)")


class _Table:
    """The groups as the compute model's columns."""

    def __init__(self, groups: list, device):
        self.groups = groups
        args = [_shapes(g.shapes) for g in groups]
        self.cls = np.array([CLASS_CODE[op_class(g.name, a)] for g, a in zip(groups, args)], dtype=np.int64)
        self.dtype = np.array([DTYPES.index(g.dtype) for g in groups], dtype=np.int64)
        self.flops = np.array([float(g.flops) for g in groups])
        self.nbytes = np.array([float(g.nbytes) for g in groups])
        self.gemm = np.array([gemm_dims(g.name, a, g.flops) for g, a in zip(groups, args)], dtype=np.int64)
        self.causal = np.array([g.causal for g in groups], dtype=bool)
        self.measured = np.array([g.kernel_ns for g in groups])
        self.calls = np.array([g.calls for g in groups], dtype=float)
        self.total = np.array([g.total_ns for g in groups])
        self.peaks = np.array(device.peak_tflops)
        self.bandwidth = device.mem_bw_tb_s * 1e3    # bytes/ns

    def predict(self, model: ComputeModel) -> np.ndarray:
        """Each group's kernel time (one call)."""
        return model.kernel_ns(self.peaks, self.bandwidth, self.cls, self.dtype, self.flops, self.nbytes, self.gemm,
                               self.causal)


def _shapes(text: str) -> list:
    try:
        return parse_shapes(text)
    except ValueError:
        return []


def needed(key: str) -> int:
    return MIN_MEMORY_GROUPS if key.split(".")[0] in MEMORY_CLASSES and not key.endswith("host_us") else MIN_GROUPS


def free_keys(table: _Table) -> tuple[list, dict]:
    """The constants the groups can tell (MIN_GROUPS each), and per constant the groups behind it."""
    counts: dict[str, int] = {}
    for c, d, g, nbytes in zip(table.cls, table.dtype, table.gemm, table.nbytes):
        name = CLASSES[c]
        # a memory-bound op tells its class's bandwidth only if its bytes take a while (a 1 MB gelu takes 0.3 us
        # at full bandwidth: its time is its launch)
        tells = name in TENSOR_CORE or nbytes / table.bandwidth >= MIN_MEMORY_NS
        keys = [f"{name}.{DTYPES[d]}"] if name in TENSOR_CORE or name in PER_DTYPE_MEMORY and tells \
            else [name] if tells else []
        if name in GEMM_CLASSES and g[0] > 0:
            keys.append(f"{name}.k_overhead")
        for k in keys + ["launch_us"]:
            counts[k] = counts.get(k, 0) + 1
    free = [k for k in KEYS if counts.get(k, 0) >= needed(k) and k != "host_us"]
    return free, counts


def fit(table: _Table, device, multiprocessors: int) -> tuple[dict, dict]:
    """(the efficiency mapping: the base device's with the fitted constants, how each constant was set)."""
    from scipy.optimize import least_squares
    free, counts = free_keys(table)
    base = ComputeModel(device.efficiency, multiprocessors)
    efficiency = dict(device.efficiency)
    status = {}
    for k in sorted(counts):
        if k not in free:
            status[k] = f"default ({counts[k]} group(s) of ops; {needed(k)} needed)"
    use = table.measured > 0
    if not free or not use.any():
        return efficiency, status
    share = table.total[use] / table.total[use].sum()
    # half by time share (big ops count by their time), half the same for every group: the small ops alone tell
    # the launch time, and with no weight it would drift to wherever the big ones leave it
    root = np.sqrt((share + 1 / len(share)) / 2)
    low = np.array([FRACTION_FLOOR if k in FRACTIONS else KEYS[k][0] for k in free])
    high = np.array([KEYS[k][1] for k in free])
    x0 = np.clip([base.value(k) for k in free], low, high)

    def residuals(x):
        model = ComputeModel(tuple(sorted({**efficiency, **dict(zip(free, x))}.items())), multiprocessors)
        return root * (np.log(table.predict(model)[use]) - np.log(table.measured[use]))

    result = least_squares(residuals, x0, bounds=(low, high), loss="soft_l1",
                           f_scale=ROBUST_SCALE / math.sqrt(len(share)), x_scale="jac")
    for k, v in zip(free, result.x):
        efficiency[k] = float(f"{v:.4g}")
        status[k] = f"fitted ({counts[k]} group(s))"
    return efficiency, status


def _fitted_device(device, efficiency: dict, multiprocessors: int, args, profiles):
    from dataclasses import replace
    from ...network import devices
    names = ", ".join(p.path for p in profiles)
    names = names if len(names) <= 300 else names[:297] + "..."
    description = (f"{profiles[0].gpu}: efficiency, launch_us and host_us fitted by astra-compile calibrate-compute "
                   f"to {names}; peaks, bandwidth and memory from {device.name} ({device.describe()['source']})")
    fitted = replace(device, name=args.gpu_name, description=description[:devices.MAX_TEXT],
                     efficiency=tuple(sorted(efficiency.items())), multiprocessors=multiprocessors)
    return devices.parse(fitted.to_dict(), f"the fitted device for {args.output or 'the table'}", args.output or "")


def _yaml(data: dict) -> str:
    import yaml
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


def format_table(table: _Table, model: ComputeModel, efficiency: dict, status: dict, device, profiles, args) -> str:
    predicted = table.predict(model) * table.calls
    calls = int(table.calls.sum())
    what = (f"device {device.name} ({device.describe()['source']})" if args.gpu is not None
            else f"fitted; peaks and bandwidth from {device.name}")
    lines = [f"calibrate-compute: {profiles[0].gpu}, {len(profiles)} profile(s), {calls} op call(s) in "
             f"{len(table.groups)} group(s); {what}",
             f"{'class':<20} {'ops':>6} {'measured_ms':>12} {'predicted_ms':>13} {'error_%':>8}"]
    for code, name in enumerate(CLASSES):
        mine = table.cls == code
        if mine.any():
            lines.append(_row(name, int(table.calls[mine].sum()), table.total[mine].sum(), predicted[mine].sum()))
    lines.append(_row("total", calls, table.total.sum(), predicted.sum()))
    comm = sum(p.comm_ns for p in profiles)
    if comm:
        lines.append(f"left out: {comm / 1e6:.3f} ms of communication (NCCL and DDP's kernels)")
    if any(p.foreach_guessed for p in profiles):
        lines.append("note: the optimizer's _foreach_ lists were recorded without sizes; taken as the parameters "
                     "AccumulateGrad received")
    lines.append("constants:")
    keys = sorted(set(status), key=lambda k: list(KEYS).index(k))   # the constants these profiles tell
    for k in keys:
        value = efficiency.get(k, model.value(k))
        lines.append(f"  {k:<26} {value:>10.4g}  {status.get(k, 'from the device')}")
    return "\n".join(lines)


def _row(name: str, ops: int, measured_ns: float, predicted_ns: float) -> str:
    error = (predicted_ns - measured_ns) / measured_ns * 100 if measured_ns > 0 else float("nan")
    return f"{name:<20} {ops:>6} {measured_ns / 1e6:>12.3f} {predicted_ns / 1e6:>13.3f} {error:>8.1f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
