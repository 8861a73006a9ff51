"""astra-compile: PyTorch training steps and collectives -> per-accelerator collective schedules, timed.

The checkout is the import tree: this folder is the package `astra_compile`, each top-level folder its subpackage
of the same name, layered from the bottom up (docs/architecture.md):

    network/    astra_compile.network      the one network model: topology, blocks, links, parsers (numpy only)
    algorithms/ astra_compile.algorithms   one file per collective algorithm, a registry (imports network/)
    dialects/   astra_compile.dialects     the comm and workload dialects in IRDL (imports network/)
    passes/     astra_compile.passes       one pass per file (imports dialects/, algorithms/, network/)
    runtime/    astra_compile.runtime      reads schedule tables and executes them (imports network/)
    compiler/   astra_compile.compiler     frontends, lowering, driver, reports, CLI, API, sweeps (imports all)

This module is the public API: `compile` (a training step, timed), `record` (the step a script really runs) and
`__version__`. `python -m astra_compile` is the command line.
"""
from .compiler import __version__  # noqa: F401 (written once, in compiler/__init__.py)


def compile(source, topology=..., **options):
    """Capture or import a training step and time it on `topology` (... : the `job=`'s, else 8x8_torus); see
    astra_compile.compiler.api.api.compile."""
    from .compiler.api.api import compile as _compile  # torch and MLIR load on first use, not on import
    return _compile(source, topology, **options)


def record(source: str = "recorded step"):
    """`with astra_compile.record() as rec: train_step()`, then `rec.report(topology=...)`: the step the script
    really ran, compiled for a topology; see astra_compile.compiler.api.record."""
    from .compiler.api.record import record as _record
    return _record(source)
