"""What every plot of the compiler shares: matplotlib off screen (one error line when it is not installed), the
file types a plot is written as, and the atomic write (runtime/atomic.py) by the file's suffix."""
from __future__ import annotations

from ...network.errors import UserError

SUFFIXES = (".png", ".pdf", ".svg")


def check_suffix(path: str, flag: str) -> None:
    if not path.lower().endswith(SUFFIXES):
        raise UserError(f"{flag} {path}: the plot is written as .png, .pdf or .svg")


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'astra-compile[plot]'") from None
    return plt


def save(fig, path: str, dpi: int) -> None:
    """The figure to `path` (complete or not at all), in the format its suffix names; the figure is closed."""
    from ...runtime import atomic
    fmt = path.rsplit(".", 1)[-1].lower()
    try:
        atomic.write_file(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi))
    finally:
        pyplot().close(fig)
