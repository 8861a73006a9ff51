"""astra-compile: collectives (and, through the frontends, PyTorch programs) -> per-accelerator schedule tables.

Layout once installed: astra_compile (this folder, compiler/: driver, CLI, topology, lowering),
astra_compile.dialects, astra_compile.passes, astra_compile.runtime. See README.md and docs/.
"""
__version__ = "0.1.0"


def compile(source, topology="8x8_torus", **options):
    """Capture or import a training step and time it on `topology`; see astra_compile.api.compile."""
    from .api import compile as _compile  # torch and MLIR load on first use, not on import
    return _compile(source, topology, **options)


def record(source: str = "recorded step"):
    """`with astra_compile.record() as rec: train_step()`, then `rec.report(topology=...)`: the step the script
    really ran, compiled for a topology; see astra_compile.frontend.record."""
    from .frontend.record import record as _record
    return _record(source)
