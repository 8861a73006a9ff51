"""ASTRA-sim 2.0's Fig. 4 as a picture: the step time of one or more runs as stacked bars of compute, exposed local
memory, exposed remote memory, exposed communication and idle (the report's `breakdown_us`), side by side."""
from __future__ import annotations

from ..core.plotting import check_suffix, pyplot, save
from ...runtime.workload_engine import BREAKDOWN

COLOURS = {"compute": "#4c72b0", "exposed_local_memory": "#dd8452", "exposed_remote_memory": "#c44e52",
           "exposed_comm": "#55a868", "idle": "#bbbbbb"}


def write(path: str, bars: list[tuple[str, dict]], title: str = "step time breakdown",
          unit: str = "ms") -> None:
    """bars: (label, breakdown_us) per run, left to right; written atomically as PNG, PDF or SVG by suffix."""
    check_suffix(path, "--plot")
    plt = pyplot()
    scale = {"us": 1.0, "ms": 1e-3, "s": 1e-6}[unit]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(bars) + 2), 4.5))
    bottom = [0.0] * len(bars)
    for part in BREAKDOWN:
        heights = [b.get(part, 0.0) * scale for _, b in bars]
        ax.bar(range(len(bars)), heights, bottom=bottom, color=COLOURS[part], label=part.replace("_", " "))
        bottom = [x + h for x, h in zip(bottom, heights)]
    for i, total in enumerate(bottom):
        ax.text(i, total, f"{total:.4g}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 1.15 * max(bottom + [1e-9]))   # room for the totals above the bars
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([label for label, _ in bars], fontsize=8)
    ax.set_ylabel(f"step time ({unit})")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    save(fig, path, dpi=110)
