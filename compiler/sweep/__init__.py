"""Sweeps (astra_compile.compiler.sweep): `astra-compile sweep`, many runs from one file (docs/sweeps.md): the sweep
file (spec.py), its points, each run through the command line's own code path (point.py), the results file, the
workers and the plots. Above the CLI, below the entry point (compiler/main.py)."""
