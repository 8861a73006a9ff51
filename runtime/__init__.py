"""Runtime: executes schedule tables (cost models, data verifier). Reads tables only; imports nothing from the
compiler, so tables written by `astra-compile --emit tables -o DIR` can be executed on their own."""
