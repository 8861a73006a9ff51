"""The compiler's bottom stage (astra_compile.compiler.core): what every stage above may use and that knows no
stage itself: Ctrl-C handling (interrupt.py), the reuse cache of captured steps and compiled collectives (reuse.py)
and the plotting helpers (plotting.py). It imports only the layers below the compiler."""
