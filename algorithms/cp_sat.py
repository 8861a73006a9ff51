"""The CP-SAT solver as every optimisation of the compiler runs it (multitree_optimal's trees, the optimal-balance
pass's chunk split).

- Deterministic: a budget in CP-SAT's deterministic time, not the wall clock (on a loaded machine a wall-clock
  limit cut the search short and the same input got another answer: a sweep's resumed points disagreed), and one
  worker (several race to different optima).
- SIGINT left alone: by default CP-SAT installs its own SIGINT handler for a solve and puts the default one back
  afterwards, not the handler it found, so every later Ctrl-C killed the process outright (status -2, no message,
  a temporary output file left behind) instead of reaching astra-compile's handler (compiler/core/interrupt.py).
"""
from __future__ import annotations


def solver(time_limit_s: float):
    """A CpSolver with the project's settings and a deterministic-time budget of `time_limit_s`."""
    from ortools.sat.python import cp_model
    s = cp_model.CpSolver()
    s.parameters.max_deterministic_time = time_limit_s
    s.parameters.num_workers = 1
    s.parameters.catch_sigint_signal = False
    return s
