"""Where sweep points run: a pool of local processes (the default) or Ray tasks (`--ray [ADDRESS]`).

Both run `work` on each point and yield (point index, outcome) as points finish, in any order. A worker that
dies (a crash in native code, killed for memory) fails only the point it ran: in the local pool, the points in
flight when a worker died run again one at a time, each in a fresh process, so the point that kills its process
is recorded as failed and the others get their result.
"""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.util
import os
import sys
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from ...network.errors import UserError
from ..core import interrupt, reuse

DIED = "the worker process died while running this point (a crash in native code, or killed for memory)"

_reuse: reuse.Reuse | None = None   # per worker process: what its points share


def work(index: int, options: dict, directory: str, max_memory: int | None, cache: str | bool) -> tuple:
    """Run one point in a worker; `cache`: False (no reuse), True (in memory) or a directory (also on disk).
    Returns (index, outcome, what the point captured or compiled, what it reused)."""
    global _reuse
    from . import point
    if cache is False:
        return index, point.run(options, directory, max_memory), {}, 0
    if _reuse is None:
        _reuse = reuse.Reuse(cache if isinstance(cache, str) else None)
    made, hits = dict(_reuse.made), _reuse.hits
    with reuse.using(_reuse):
        outcome = point.run(options, directory, max_memory)
    return index, outcome, {k: v - made[k] for k, v in _reuse.made.items()}, _reuse.hits - hits


def _failed(index: int, error: str) -> tuple:
    """What `work` returns for a point whose worker could not report: failed, nothing captured or reused."""
    return index, {"status": "error", "error": error, "elapsed_s": 0.0}, {}, 0


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start)


def _worker_start() -> None:
    """A worker that has captured a model takes over a second to tear its interpreter down (PyTorch's and MLIR's
    native destructors), and the sweep waits for that. By the time it exits, every result has gone to the parent
    through the pool's pipe and every cache file is written whole (atomically), so the worker ends at once, after
    the exit handlers registered once it started (which run first).
    Ctrl-C reaches the workers too (one process group): a worker leaves quietly, where Python's default would
    print a KeyboardInterrupt traceback from an idle worker's wait for work (the sweep says its one line).
    multiprocessing ends a worker by running its finalizers and then joining every thread that is not a daemon
    (before any exit handler): a thread a point's model file left running would hold the worker, and the sweep
    waiting for it, for ever. The last finalizer therefore runs the exit handlers itself, `_end_now` last."""
    atexit.register(_end_now)
    multiprocessing.util.Finalize(None, atexit._run_exitfuncs, exitpriority=-100)
    # SystemExit, not KeyboardInterrupt: a KeyboardInterrupt in a worker is then a point's model file's own error
    interrupt.install(interrupt.handler(lambda: SystemExit(130)))


def _end_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def local(tasks: list[tuple], workers: int):
    """Run `work(*task)` for each task on `workers` processes, at most `workers` in flight."""
    queue = list(reversed(tasks))
    while queue:
        pool = _pool(workers)
        flying, suspects, finished = {}, [], False
        try:
            while queue or flying:
                while queue and len(flying) < workers:
                    flying[pool.submit(work, *queue[-1])] = queue[-1]   # submit raises on a broken pool:
                    queue.pop()                                          # the task stays queued
                done, _ = wait(flying, return_when=FIRST_COMPLETED)
                for fut in done:
                    result = fut.result()   # BrokenProcessPool when a worker died
                    del flying[fut]
                    yield result
            pool.shutdown(wait=True)
            finished = True
        except BrokenProcessPool:
            suspects = list(flying.values())
        finally:  # also on an interrupt: running points are abandoned, not waited for
            if not finished and not suspects:
                _end_workers(pool)
            pool.shutdown(wait=False, cancel_futures=True)
        for task in suspects:  # one at a time, alone: the one that kills its process is the culprit
            yield _alone(task)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """The sweep stopped early (a results file it cannot write, Ctrl-C sent to it alone): its workers' points can no
    longer be recorded, so they are ended now; at exit the pool would otherwise wait for each to finish. (The pool
    has no public way to end its processes before Python 3.14's terminate_workers.)"""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


def _alone(task: tuple) -> tuple:
    with _pool(1) as pool:
        try:
            return pool.submit(work, *task).result()
        except BrokenProcessPool:
            return _failed(task[0], DIED)


class RayPool:
    """The same tasks as Ray tasks, on a local Ray instance (address None) or an existing cluster. Connects when
    made, so that a cluster that cannot be reached stops the sweep before anything is written."""

    def __init__(self, address: str | None, workers: int):
        try:
            import ray
        except ImportError:
            raise UserError("--ray needs Ray: pip install 'astra-compile[ray]'") from None
        import logging
        if address is not None:
            _reachable(address)
        kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        with tempfile.TemporaryFile() as log:
            try:
                with _stderr_to(log):  # Ray's core logs a warning a second while it retries: one line instead
                    if address is None:
                        ray.init(num_cpus=workers, object_store_memory=100 * 2**20, **kwargs)
                    else:
                        ray.init(address=address, **kwargs)
            except Exception as e:  # Ray's own errors: no cluster at "auto", a version mismatch, ...
                log.seek(0)
                hint = ("; the cluster wants token authentication: set RAY_AUTH_MODE=token (and its token) as "
                        "for `ray start`" if b"InvalidAuthToken" in log.read() else "")
                raise UserError(f"--ray {address or ''}: cannot start or reach Ray: {_first_line(e)}{hint}"
                                ) from None
        self.ray = ray

    def run(self, tasks: list[tuple]):
        ray = self.ray
        try:
            remote = ray.remote(num_cpus=1, max_retries=0)(work)
            pending = {remote.remote(*task): task for task in tasks}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    task = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as e:  # the task's worker died, or Ray lost it
                        result = _failed(task[0], f"Ray: {type(e).__name__}: {_first_line(e)}")
                    yield result
        finally:
            ray.shutdown()


@contextlib.contextmanager
def _stderr_to(file):
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _reachable(address: str) -> None:
    """A host:port cluster address is checked with a plain TCP connection first: Ray itself retries an address
    that does not answer for minutes, printing a warning every few seconds."""
    import socket
    if address == "auto" or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UserError(f"--ray {address}: expected the cluster's head as HOST:PORT (e.g. 10.0.0.1:6379), "
                        "ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UserError(f"--ray {address}: cannot reach a Ray cluster there ({e.strerror or e})") from None
