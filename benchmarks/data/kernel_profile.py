"""The kernels a call launches, by torch.profiler: the helper record_composites.py and record_broadcast.py share
(beside them, as phase_peaks.py is beside the recorders that share it)."""
import torch


def kernels_of(fn, dry: bool, calls: int = 1) -> dict:
    """The kernels one call of `fn` launched (name and microseconds; with `calls` > 1 the mean of that many calls,
    the kernels of the first), after 3 warm-up calls. `dry`: on the host, its ATen ops' CPU time instead."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    if not dry:
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU] + ([] if dry else [ProfilerActivity.CUDA])
    with profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        if not dry:
            torch.cuda.synchronize()
    events = [e for e in prof.events() if (e.device_type.name == "CUDA") or dry and e.name.startswith("aten::")]
    got = [{"name": e.name[:120], "us": (e.device_time if not dry else e.cpu_time) / calls} for e in events]
    first = got[:len(got) // calls] if calls > 1 and len(got) >= calls else got
    return {"kernels": first, "count": len(got) / calls if calls > 1 else len(got), "us": sum(k["us"] for k in got)}
