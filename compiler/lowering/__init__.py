"""Lowering (astra_compile.compiler.lowering): a compiled comm module's collectives, as plans (plans.py), to
per-accelerator schedule tables (lower.py), with the dependencies between their rows (dependencies.py)."""
