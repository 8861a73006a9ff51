"""The Python API (astra_compile.compiler.api): astra_compile.compile (api.py) and astra_compile.record
(record.py); the root package re-exports both."""
