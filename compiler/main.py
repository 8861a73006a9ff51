"""astra-compile's entry point (the console script, `python -m astra_compile`): the command line goes to its
subcommand, `sweep` (sweep/command.py), `plan` (plan/command.py), `calibrate` (cli/calibrate.py),
`calibrate-compute` (cli/calibrate_compute.py) or a run (cli/cli.py), under one Ctrl-C handler. It sits above
every stage, the sweep and the plan included: a sweep point runs the CLI's own code path, a plan runs a sweep."""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading

from .cli.cli import run_command
from .core import interrupt


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv`; its exit status. Without `argv` this is the process's own command (the console
    script, `python -m`), and the process ends with it (`_end`). A Ctrl-C anywhere ends the run with one line and
    status 130, as shells expect."""
    command = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with interrupt.watched():
            code = _main(argv)
    except KeyboardInterrupt:   # the user's (a model file's own is its error: frontend/model_code.py)
        sys.stderr.write("astra-compile: interrupted\n")
        code = 130
    if command:
        _end(code)
    return code


def _end(code: int) -> None:
    """The command is done (its report printed, its outputs written). A Ctrl-C from here on ends the process at
    once, status 130, where Python's handler would print a traceback from the interpreter's teardown (PyTorch's
    and MLIR's destructors take a second). The process ends now, with `code`, after the exit handlers, when a
    thread a model file left running (not a daemon) would keep it alive for ever after the report, or when the run
    was interrupted: Python then kills itself with SIGINT at exit if the KeyboardInterrupt passed through code that
    a library ran with PyRun_* (seen once in a few runs: status -2 after the one-line message)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    stray = any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate())
    if stray or code == 130:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["sweep"]:  # `astra-compile sweep ...`: many runs from one file (sweep/command.py)
        from .sweep.command import main as sweep_main
        return sweep_main(argv[1:])
    if argv[:1] == ["plan"]:  # `astra-compile plan model.py --cluster ...`: the best layouts (plan/command.py)
        from .plan.command import main as plan_main
        return plan_main(argv[1:])
    if argv[:1] == ["calibrate-compute"]:  # a GPU's compute model fitted to torch.profiler traces
        from .cli.calibrate_compute import main as calibrate_compute_main
        return calibrate_compute_main(argv[1:])
    if argv[:1] == ["calibrate"]:  # `astra-compile calibrate LOG...`: the network fitted to nccl-tests logs
        from .cli.calibrate import main as calibrate_main
        return calibrate_main(argv[1:])
    return run_command(argv)


if __name__ == "__main__":
    sys.exit(main())
