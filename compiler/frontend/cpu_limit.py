"""A limit on the CPU time of running the user's model file, so a model that never finishes (a layer count of
2^31, a loop that does not end) ends in one line instead of running until the machine runs out of memory.

CPU time (ITIMER_PROF, SIGPROF) rather than wall time: a loaded machine does not make a model fail, and the
wall-clock alarm stays free for whoever runs the compiler in-process (test harnesses use it).

The stop is raised in the model's own code, never inside torch, the standard library or the compiler: a signal
handler's exception lands between any two bytecodes, and one landing in torch's Python code between a change of
the thread's dispatch state and the `try` that undoes it (fake tensors' kernel invocation, a mode's __enter__)
leaves autograd switched off for every later capture in the process (seen once in about 500 stopped captures:
"element 0 of tensors does not require grad" for the rest of a test run). When the timer fires elsewhere, a trace
function waits for the model's code to run its next line or call, and stops it there."""
from __future__ import annotations

import contextlib
import os
import signal
import site
import sys
import sysconfig
import threading
import time

from ...network.errors import UserError

# CPU seconds the limit waits for the model's own code to run again before stopping wherever it is (a call into a
# library that never returns); torch's thread state is put back afterwards either way (torch_state.kept)
LIBRARY_GRACE_S = 5.0
# CPU seconds a stop is given to unwind before it is raised again (once raised inside a __del__ or a weakref
# callback, Python swallows it; raised again at once, it would land in the cleanup of the first)
UNWIND_S = 1.0
REPEAT_S = 0.1   # the timer fires again this often once the limit has passed


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


def library_dirs() -> tuple[str, ...]:
    """Where code that is not the model's lives: the standard library, installed packages, torch wherever it was
    imported from, and this compiler (its frontend's context managers restore torch's state too)."""
    paths = sysconfig.get_paths()
    dirs = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    dirs += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    dirs.append(site.getusersitepackages())
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(getattr(torch, "__file__", None), str):
        dirs.append(os.path.dirname(torch.__file__))
    for name, module in list(sys.modules.items()):   # the compiler's packages lie in several folders
        where = getattr(module, "__file__", None)
        if name.split(".")[0] == "astra_compile" and isinstance(where, str) and \
                os.path.basename(where) == "__init__.py":
            dirs.append(os.path.dirname(where))
    found = {os.path.join(p, "") for d in dirs for p in (d, os.path.realpath(d))}
    found = {d for d in found if not any(d != o and d.startswith(o) for o in found)}   # inside another: covered
    return tuple(sorted(found))


class _Stopper:
    """The SIGPROF handler and the trace functions that raise _Expired in the model's code."""

    def __init__(self):
        self.libraries = library_dirs()
        self.mine: dict[str, bool] = {}     # co_filename -> is it the model's code
        self.waiting_since = None           # CPU time the trace was armed at
        self.raised_at = None               # CPU time the last stop was raised at
        self.traced: list = []              # frames given a local trace function
        self.old_trace = None

    def model_code(self, frame) -> bool:
        name = frame.f_code.co_filename
        mine = self.mine.get(name)
        if mine is None:   # "<frozen ...>": the import system; other "<...>": code made by exec (fx, the user)
            mine = self.mine[name] = not name.startswith("<frozen") and not name.startswith(self.libraries)
        return mine

    def stop(self):
        self.disarm()
        self.raised_at = time.process_time()
        raise _Expired()

    def on_signal(self, signum, frame):
        now = time.process_time()
        if self.raised_at is not None and now - self.raised_at < UNWIND_S:
            return
        if inside_import(frame):   # the timer fires again REPEAT_S of CPU later, after the import
            return
        if self.model_code(frame):
            self.stop()
        if self.waiting_since is None:
            self.arm(frame)
            self.waiting_since = now
        elif now - self.waiting_since > LIBRARY_GRACE_S:
            self.stop()

    def arm(self, frame):
        """Trace the model's frames on the stack line by line, and every new call, until the model's code runs."""
        while frame is not None:
            if self.model_code(frame):
                frame.f_trace_lines = True
                frame.f_trace = self.on_line
                self.traced.append(frame)
            frame = frame.f_back
        self.old_trace = sys.gettrace()
        sys.settrace(self.on_call)

    def disarm(self):
        if self.waiting_since is None:
            return
        sys.settrace(self.old_trace)
        for frame in self.traced:
            frame.f_trace = None
        self.traced.clear()
        self.waiting_since = self.old_trace = None

    def on_call(self, frame, event, arg):
        if event == "call" and self.model_code(frame) and not inside_import(frame):
            self.stop()
        return None   # no line events inside library code

    def on_line(self, frame, event, arg):
        if event == "line" and not inside_import(frame):
            self.stop()
        return self.on_line


@contextlib.contextmanager
def cpu_limit(seconds: float | None, what: str):
    """Run the block with at most `seconds` of CPU (None or 0: no limit; off the main thread there is no way to
    interrupt it, and no limit)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "setitimer"):
        yield
        return
    stopper = _Stopper()
    old = signal.signal(signal.SIGPROF, stopper.on_signal)
    # and again every REPEAT_S of CPU after that: while an import runs, while library code runs, or when the stop
    # was raised inside a __del__ or a weakref callback (the GC of a model being built) and swallowed there
    signal.setitimer(signal.ITIMER_PROF, seconds, REPEAT_S)
    try:
        yield
    except _Expired:
        raise UserError(f"{what} used more than {seconds:g} s of CPU without finishing (a model that large, or a "
                        f"loop that does not end?); raise the limit with --capture-limit") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
        stopper.disarm()
