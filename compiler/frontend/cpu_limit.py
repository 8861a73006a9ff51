"""A limit on the CPU time of running the user's model file, so a model that never finishes (a layer count of
2^31, a loop that does not end) ends in one line instead of running until the machine runs out of memory.

CPU time (ITIMER_PROF, SIGPROF) rather than wall time: a loaded machine does not make a model fail, and the
wall-clock alarm stays free for whoever runs the compiler in-process (test harnesses use it)."""
from __future__ import annotations

import contextlib
import signal
import threading

from ..network.errors import UserError

DEFAULT_SECONDS = 600.0


class _Expired(BaseException):
    """Raised inside the user's code when the limit passes; a BaseException, so `except Exception` in a model file
    or in the capture does not swallow it."""


def inside_import(frame) -> bool:
    """Is this frame running (under) a module's import? Stopped there, the module would stay in sys.modules half
    made (`module 'sympy' has no attribute 'logic'` for every later capture in the process)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def cpu_limit(seconds: float | None, what: str):
    """Run the block with at most `seconds` of CPU (None or 0: no limit; off the main thread there is no way to
    interrupt it, and no limit)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        if not inside_import(frame):   # else the timer fires again 0.1 s of CPU later, after the import
            raise _Expired()

    old = signal.signal(signal.SIGPROF, expire)
    # and again every 0.1 s of CPU after that: a handler that runs inside a __del__ or a weakref callback (the GC
    # of a model being built) has its exception swallowed, and a one-shot timer would then never stop the model
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.1)
    try:
        yield
    except _Expired:
        raise UserError(f"{what} used more than {seconds:g} s of CPU without finishing (a model that large, or a "
                        f"loop that does not end?); raise the limit with --capture-limit") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
