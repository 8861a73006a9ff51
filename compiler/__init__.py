"""The compiler's upper floor (astra_compile.compiler): frontends that capture or import a training step, the
lowering of the comm IR to schedule tables, the driver, reports, the ecosystem's file formats, the CLI, the Python
API and sweeps. It imports every layer below it (network, algorithms, dialects, passes, runtime); nothing below
imports it. The public API is the root package's (astra_compile.compile, astra_compile.record).
"""
__version__ = "0.1.0"   # the package's version, written here once (setup.py reads it; --version prints it)
