"""The compiler's upper floor (astra_compile.compiler), one folder per pipeline stage, each importing only those
below it: core/ < frontend/ (capture, traces, the reader registry) < lowering/ < report/ < driver/ < interop/ (the
ecosystem's files) < api/ < cli/ < sweep/ < main.py, the entry point (docs/architecture.md). It imports every layer
below it (network, algorithms, dialects, passes, runtime); nothing below imports it. The public API is the root
package's (astra_compile.compile, astra_compile.record).
"""
__version__ = "0.1.0"   # the package's version, written here once (setup.py reads it; --version prints it)
