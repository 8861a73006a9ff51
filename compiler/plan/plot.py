"""`astra-compile plan --plot FILE.png`: every layout that ran as a dot, step time against memory per rank, the
Pareto front (no other layout is both faster and smaller) drawn through them and the GPU's capacity as a line."""
from __future__ import annotations

from ...network.errors import UserError
from ..core import plotting
from ..sweep.plot import pareto_front


def plot(ranked: list, out: str) -> None:
    ran = [o for o in ranked if o.error is None and o.peak_bytes is not None and not o.estimated]   # run: timed
    if not ran:
        raise UserError(f"--plot {out}: no layout that ran reports its memory per rank")
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = [(o.peak_bytes / 2**30, o.step_us / 1e3) for o in ran]
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=14, color="0.55", label="layouts")
    front = pareto_front(points)
    ax.plot([p[0] for p in front], [p[1] for p in front], "o-", color="C0", label="Pareto front")
    capacity = next((o.capacity_bytes for o in ran if o.capacity_bytes), None)
    if capacity:
        ax.axvline(capacity / 2**30, color="C3", linestyle="--", label="GPU memory")
    ax.set_xlabel("memory per rank (GiB)")
    ax.set_ylabel("step time (ms)")
    ax.legend()
    plotting.save(fig, out, 150)
