"""Ctrl-C: told apart from a KeyboardInterrupt that code raises itself, and held while a native extension loads.

Both a Ctrl-C and a `raise KeyboardInterrupt` arrive as KeyboardInterrupt. A user's Ctrl-C ends the run as
interrupted (exit 130, as shells expect); a KeyboardInterrupt raised by a model file's code is that file's error
(exit 2, one line naming it). Where astra-compile owns SIGINT (the command, a sweep's workers) its handler notes
each signal before raising, so an exception with no signal noted was raised by code. Elsewhere (the Python API in
a notebook) nothing is noted and every KeyboardInterrupt is taken as the user's.

A Ctrl-C that lands while a native extension initialises is held until the extension is loaded: raised in the
Python code such an extension runs while it loads (MLIR's bindings build Python enums), it makes the extension
abort the process (SIGABRT, a C++ terminate message; a Ctrl-C early in start-up can land there). The same holds
for the packages whose own `__init__` calls native code that calls back into Python once their extension is
loaded (torch's `_C._initExtension`, MLIR's site initialisation: NATIVE_PACKAGES), for as long as that body runs
(about a second for torch). Elsewhere, an import included, it is raised at once: the run ends, so a module left
half made does not matter, and holding a Ctrl-C through every import would keep the user waiting.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from importlib.machinery import ExtensionFileLoader

# the loader's methods that run a native extension's initialisation (PyInit_*, then its module exec slots)
_NATIVE_INIT = {ExtensionFileLoader.create_module.__code__, ExtensionFileLoader.exec_module.__code__}
# the package bodies (file name endings) that run native code calling back into Python after their extension loads
NATIVE_PACKAGES = ("torch/__init__.py", "torch_mlir/_mlir_libs/__init__.py")

_watching = False    # is one of our handlers installed for SIGINT?
_signalled = False   # has SIGINT arrived since it was installed?


def note() -> None:
    """Record that SIGINT arrived."""
    global _signalled
    _signalled = True


def handler(exception=KeyboardInterrupt):
    """A SIGINT handler that notes the signal and raises `exception()` (once outside a native extension's
    initialisation)."""
    def on_sigint(signum, frame):
        note()
        if _in_native_init(frame):
            _raise_after_native_init(frame, exception)
        else:
            raise exception()
    return on_sigint


def _in_native_init(frame) -> bool:
    while frame is not None:
        code = frame.f_code
        if code in _NATIVE_INIT or code.co_name == "<module>" and code.co_filename.endswith(NATIVE_PACKAGES):
            return True
        frame = frame.f_back
    return False


def _raise_after_native_init(frame, exception) -> None:
    """Raise `exception()` at the next line run outside the extension's initialisation: the frames that wait for
    it are traced line by line (tracing switched on with a global function that traces nothing else)."""
    waiting = []
    old = sys.gettrace()

    def on_line(f, event, arg):
        if event == "line" and not _in_native_init(f):
            for w in waiting:
                w.f_trace = None
            sys.settrace(old)
            raise exception()
        return on_line

    while frame is not None:
        if not _in_native_init(frame):
            frame.f_trace_lines = True
            frame.f_trace = on_line
            waiting.append(frame)
        frame = frame.f_back
    sys.settrace(old if old is not None else (lambda f, event, arg: None))


@contextlib.contextmanager
def watched():
    """Run the block with `handler()` on SIGINT; the previous handler is put back after. Off the main thread
    signals cannot be handled, and a SIGINT the process was started ignoring (a background job, nohup) stays
    ignored: nothing changes then."""
    global _watching, _signalled
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    was = _watching, _signalled
    signal.signal(signal.SIGINT, handler())
    _watching, _signalled = True, False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before if before is not None else signal.SIG_DFL)
        _watching, _signalled = was


def install(on_sigint) -> None:
    """`on_sigint` (made by `handler`) on SIGINT for the rest of the process (a sweep's worker)."""
    global _watching
    signal.signal(signal.SIGINT, on_sigint)
    _watching = True


def raised_by_code() -> bool:
    """Was the KeyboardInterrupt being handled raised by code rather than by a Ctrl-C? (False where SIGINT is not
    watched: then it is taken as the user's.)"""
    return _watching and not _signalled
