"""The compiler's bottom stage (astra_compile.compiler.core): what every stage above may use and that knows no
stage itself: Ctrl-C handling (interrupt.py), the reuse cache of captured steps and compiled collectives (reuse.py),
the plotting helpers (plotting.py) and the garbage collector kept off a compile's long-lived objects (heap.py). It
imports only the layers below the compiler."""
