"""astra-compile: collectives (and, through the frontends, PyTorch programs) -> per-accelerator schedule tables.

Layout once installed: astra_compile (this folder, compiler/: driver, CLI, topology, lowering),
astra_compile.dialects, astra_compile.passes, astra_compile.runtime. See README.md and docs/.
"""
__version__ = "0.1.0"
