"""Timelines users can open: a Chrome trace (chrome://tracing, Perfetto) and a link-utilisation plot.

`write_chrome` is the one writer of the Chrome trace format (a training step's trace is built in
compiler/report/step_timeline.py); `chrome_trace` builds a schedule's.

Trace layout: process "NPUs" has a track per NPU with a span per phase (collective, chunk, stage, dimension);
process "links" has a track per link that carried traffic, with a span per transfer (congestion backend, full
execution). Times are microseconds, as the trace format expects.
"""
from __future__ import annotations

import json

import numpy as np

from . import atomic
from .tables import TableError


def chrome_trace(result, meta) -> dict:
    names = [c.name for c in meta.collectives]
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "NPUs"}},
              {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "links"}}]
    p = result.phases
    for npu in sorted(set(p["npu"].tolist())):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": int(npu), "args": {"name": f"npu {npu}"}})
    for npu, c, f, s, d, a, b in zip(*(p[k].tolist() for k in ("npu", "coll", "flow", "stage", "dim", "start", "end"))):
        events.append({"name": f"{names[c]} chunk {f} dim {d}", "cat": "phase", "ph": "X", "pid": 0, "tid": npu,
                       "ts": a / 1e3, "dur": (b - a) / 1e3, "args": {"collective": names[c], "chunk": f, "stage": s,
                                                                    "dim": d}})
    link_tid = {}
    for link, a, b, src, dst, nbytes in result.transfers:
        if link not in link_tid:
            link_tid[link] = len(link_tid)
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": link_tid[link], "args": {"name": link}})
        events.append({"name": f"{src}->{dst}", "cat": "transfer", "ph": "X", "pid": 1, "tid": link_tid[link],
                       "ts": a / 1e3, "dur": (b - a) / 1e3, "args": {"bytes": nbytes, "src": src, "dst": dst}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"backend": result.backend, "execution": result.mode, "total_us": result.total_ns / 1e3}}


def write_trace(path: str, result, meta) -> None:
    write_chrome(path, chrome_trace(result, meta))


def write_chrome(path: str, trace: dict) -> None:
    """Write a Chrome trace object (written under a temporary name, then renamed)."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(trace, f)
    atomic.write_file(path, write)


def utilisation_over_time(result, ndims: int, bins: int = 200):
    """(bin centres in us, per-dimension utilisation in [0, 1]): busy link time per bin over the links of the dim
    that carried traffic (congestion backend) or, without transfers, the dimension's phase occupancy on NPU 0."""
    total = result.total_ns or 1.0
    edges = np.linspace(0.0, total, bins + 1)
    width = edges[1] - edges[0]
    util = np.zeros((ndims, bins))
    if result.transfers:
        dim_of = {n: d for n, d in zip(result.links["name"], result.links["dim"])}
        nlinks = np.zeros(ndims)
        for name in {t[0] for t in result.transfers}:
            nlinks[dim_of[name]] += 1
        spans = [(dim_of[t[0]], t[1], t[2]) for t in result.transfers]
    else:
        p = result.phases
        sel = p["npu"] == (p["npu"].min() if len(p["npu"]) else 0)
        spans = list(zip(p["dim"][sel].tolist(), p["start"][sel].tolist(), p["end"][sel].tolist()))
        nlinks = np.ones(ndims)
    for d, a, b in spans:
        lo, hi = np.searchsorted(edges, a, "right") - 1, np.searchsorted(edges, b, "left")
        for i in range(max(lo, 0), min(hi, bins)):
            util[d, i] += max(0.0, min(b, edges[i + 1]) - max(a, edges[i]))
    util /= width * np.maximum(nlinks, 1)[:, None]
    return (edges[:-1] + width / 2) / 1e3, np.minimum(util, 1.0)


def write_plot(path: str, result, ndims: int, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TableError("--plot needs matplotlib: pip install 'astra-compile[plot]'") from None
    x, util = utilisation_over_time(result, ndims)
    fig, ax = plt.subplots(figsize=(9, 4))
    styles = ["-", "--", ":", "-."]
    for d in range(ndims):
        ax.plot(x, 100 * util[d], styles[d % len(styles)], label=f"dim {d}")
    ax.set_xlabel("time (us)")
    ax.set_ylabel("link utilisation (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()

    def write(tmp):
        fig.savefig(tmp, format="png", dpi=110)
    try:
        atomic.write_file(path, write)
    finally:
        plt.close(fig)
