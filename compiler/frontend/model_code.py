"""What a model file's code may do to the process around it, put right after each run of it.

A model file is Python run in the compiler's own process (capture.py). Around its loading and capture:

- the working directory it changes (`os.chdir`) is put back, so the paths the user gave relative to where the
  command started (-o, --timeline, --plot, --pool, --cache) still name the files they named;
- a KeyboardInterrupt it raises itself (not a Ctrl-C: interrupt.py tells them apart) is the file's error, one
  line naming it, rather than an interrupted run.

Threads it leaves running are outlived by the command (cli.main ends the process once the report is out).
"""
from __future__ import annotations

import contextlib
import os

from ..core import interrupt
from ...network.errors import UserError


@contextlib.contextmanager
def guarded(path: str):
    """Run the block (a model file's loading and capture; `path` names the file in messages)."""
    start = os.getcwd()
    try:
        yield
    except KeyboardInterrupt:
        if not interrupt.raised_by_code():
            raise   # the user's Ctrl-C: the run is interrupted
        raise UserError(f"model file {path} raised KeyboardInterrupt itself (no Ctrl-C was pressed); a model file "
                        "must not stop the compiler") from None
    finally:
        with contextlib.suppress(OSError):   # a folder the model removed: the paths that need it fail in one line
            os.chdir(start)
