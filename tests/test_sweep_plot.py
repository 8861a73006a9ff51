"""Sweep plots: a line never mixes points that differ in something else, a column zipped with the hue is named in
its label instead of refused, and string x values keep the sweep's order, not the order the points finished in."""
import csv

import pytest

from astra_compile.compiler.sweep import plot as sweep_plot
from helpers import cli, refused

COLS = ["point", "topology", "size", "scheduler", "intra", "status", "error", "elapsed_s", "total_time_us",
        "bw_utilization"]


def write_results(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLS)
        for r in rows:
            w.writerow([r.get(c, "") for c in COLS])


def themis_like(order):
    """The themis example's shape: scheduler zipped with intra (baseline+fifo, themis+scf), written in `order`."""
    rows = []
    for i, (topo, size, sched) in enumerate((t, s, c) for t in ("B_topo", "A_topo") for s in ("64MB", "128MB")
                                            for c in ("baseline", "themis")):
        rows.append({"point": i, "topology": topo, "size": size, "scheduler": sched,
                     "intra": "fifo" if sched == "baseline" else "scf", "status": "ok", "elapsed_s": 0.1,
                     "total_time_us": 100.0 + i, "bw_utilization": 0.5 + i / 100})
    return [rows[i] for i in order]


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot command would save: (axes) each, kept open for inspection."""
    saved = []
    monkeypatch.setattr(sweep_plot, "save", lambda fig, path, dpi: saved.append(fig.axes[0]))
    return saved


def test_a_column_zipped_with_the_hue_is_named_not_refused(tmp_path, capsys, figures):
    """The README's command on the themis example: intra goes with scheduler, so each line is one setting."""
    results = tmp_path / "r.csv"
    write_results(results, themis_like(range(8)))
    code, _, err = cli(capsys, "sweep", "--plot", results, "--x", "size", "--y", "bw_utilization", "--hue",
                       "scheduler", "--where", "topology=A_topo", "-o", tmp_path / "p.png")
    assert code == 0, err
    labels = sorted(line.get_label() for line in figures[0].get_lines())
    assert labels == ["baseline (intra=fifo)", "themis (intra=scf)"]


def test_a_column_that_varies_along_a_line_is_still_refused(tmp_path, capsys):
    results = tmp_path / "r.csv"
    rows = themis_like(range(8))
    rows[5]["intra"] = "fifo"  # themis on A_topo now mixes fifo and scf along its line
    write_results(results, rows)
    refused(capsys, "sweep", "--plot", results, "--x", "size", "--y", "bw_utilization", "--hue", "scheduler",
            "--where", "topology=A_topo", "-o", tmp_path / "p.png", match="also differ in intra")
    assert not (tmp_path / "p.png").exists()


def test_string_x_values_keep_the_sweeps_order_not_the_finishing_order(tmp_path, capsys, figures):
    results = tmp_path / "r.csv"
    write_results(results, themis_like([7, 6, 5, 4, 3, 2, 1, 0]))  # A_topo's points finished first
    code, _, err = cli(capsys, "sweep", "--plot", results, "--x", "topology", "--y", "total_time_us", "--hue",
                       "scheduler", "--where", "size=64MB", "-o", tmp_path / "p.png")
    assert code == 0, err
    ticks = [t.get_text() for t in figures[0].get_xticklabels()]
    assert ticks == ["B_topo", "A_topo"]  # points 0-3 are B_topo in the sweep file
