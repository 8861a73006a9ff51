"""A computation handed to a forked copy of this process, to run on another core while this one goes on.

For pure-Python work on data already made whose answer is not needed at once: a pipeline stage's replay of the
caching allocator (frontend/step_memory.py) runs while the next stage is captured. The child sees the data as it
was at the fork (copy-on-write: nothing is copied or pickled), runs the one function, sends its pickled result
down a pipe and leaves with os._exit (no atexit handlers, no output buffers flushed twice). Its garbage collector
is off and its signals are the defaults: a collection could run a finalizer of torch's whose lock another thread
held at the fork, and the parent's handlers (a Ctrl-C noted, the capture's CPU limit) are the parent's business.

Whatever the child cannot deliver (an exception, a signal, a result that does not pickle) makes `result()` run the
function here instead, so the answer, or the error, is the one it would have been. Run here from the start, with
nothing forked: a process with one CPU (nothing to overlap), without os.fork, one running Ray (its gRPC threads
do not survive a fork), and wherever the kernel refuses the fork (ENOMEM: with the default overcommit heuristic a
process whose virtual size exceeds the machine's memory cannot fork, however little of it is resident; a Llama 3
405B pipeline stage's capture reaches 35 GB of it for a moment on this 24 GB machine). At most one child per spare
CPU runs at a time: a new one waits for the oldest.
"""
from __future__ import annotations

import atexit
import collections
import gc
import os
import pickle
import signal
import sys
import warnings

_running: collections.deque = collections.deque()   # Forked objects whose child has not been collected


def _spare_cpus() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus - 1


def _can_fork() -> bool:
    return hasattr(os, "fork") and "ray" not in sys.modules and _spare_cpus() > 0


class Forked:
    """`fn(*args)`, computed in a forked child where it can be (module docstring); `result()` gives it."""

    def __init__(self, fn, *args):
        self._fn, self._args = fn, args
        self._done, self._value, self._pid, self._fd = False, None, None, None
        if not _can_fork():
            return
        while len(_running) >= _spare_cpus():
            _running[0].result()
        read, write = os.pipe()
        try:
            with warnings.catch_warnings():   # Python 3.12 warns of forking a threaded process: the child runs no torch
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:   # refused (ENOMEM: the kernel's overcommit check counts untouched virtual memory too)
            os.close(read)
            os.close(write)
            return
        if pid == 0:   # the child: never returns
            _child(read, write, fn, args)
        os.close(write)
        self._pid, self._fd = pid, read
        _running.append(self)

    def result(self):
        if not self._done:
            value, ok = self._collect()
            self._value = value if ok else self._fn(*self._args)
            self._done, self._fn, self._args = True, None, None
        return self._value

    def _collect(self) -> tuple:
        """(the child's result, whether it delivered one)."""
        if self._pid is None:
            return None, False
        chunks = []
        try:
            while True:
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._fd)
            _, status = os.waitpid(self._pid, 0)
            self._pid = self._fd = None
            _running.remove(self)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None, False
        try:
            return pickle.loads(b"".join(chunks)), True
        except Exception:
            return None, False


def _child(read: int, write: int, fn, args) -> None:
    code = 1
    try:
        gc.disable()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPROF, signal.SIG_IGN)
        os.close(read)
        view = memoryview(pickle.dumps(fn(*args)))
        while view:
            view = view[os.write(write, view):]
        code = 0
    except BaseException:   # the parent computes it again and raises whatever it raises
        pass
    finally:
        os._exit(code)


@atexit.register
def _stop_children() -> None:
    """Children still running when the process ends (an error before their results were wanted): stopped, reaped."""
    while _running:
        f = _running.popleft()
        try:
            os.kill(f._pid, signal.SIGKILL)
            os.waitpid(f._pid, 0)
            os.close(f._fd)
        except OSError:
            pass
