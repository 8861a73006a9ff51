"""compiler/core/forked.py: work run in a forked child while the process goes on gives what it would have given run
in place, whatever becomes of the child; nothing is forked where there is no spare CPU; no more children run at a
time than there are spare CPUs. And a pipeline stage's reserved bytes, replayed in a child, are the in-place
replay's (frontend/step_memory.py)."""
import os
import signal

import pytest

from astra_compile.compiler.core import forked
from astra_compile.compiler.frontend import step_memory

needs_fork = pytest.mark.skipif(not forked._can_fork(), reason="no os.fork or no spare CPU here")


def square_and_pid(x):
    return x * x, os.getpid()


@needs_fork
def test_the_child_computes_it_and_the_parent_reads_it():
    work = forked.Forked(square_and_pid, 12)
    value, pid = work.result()
    assert value == 144 and pid != os.getpid()   # computed elsewhere
    assert work.result() == (144, pid)           # once: asked again, the same answer
    assert not forked._running


def fails(x):
    raise ValueError(f"bad value {x}")


def test_an_error_in_the_child_is_raised_here_as_run_in_place():
    work = forked.Forked(fails, 3)
    with pytest.raises(ValueError, match="bad value 3"):
        work.result()
    assert not forked._running


def killed_in_the_child(parent):
    if os.getpid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return "run in place"


def test_a_child_killed_before_it_answers_is_run_in_place():
    assert forked.Forked(killed_in_the_child, os.getpid()).result() == "run in place"
    assert not forked._running


def unpicklable():
    return lambda: 5   # a result the child cannot send back


def test_a_result_that_does_not_pickle_is_run_in_place():
    assert forked.Forked(unpicklable).result()() == 5


def test_one_cpu_forks_nothing(monkeypatch):
    monkeypatch.setattr(forked, "_spare_cpus", lambda: 0)
    work = forked.Forked(square_and_pid, 3)
    assert not forked._running and work._pid is None
    assert work.result() == (9, os.getpid())


def test_a_fork_the_kernel_refuses_is_run_in_place(monkeypatch):
    def refused():
        raise OSError(12, "Cannot allocate memory")
    monkeypatch.setattr(forked.os, "fork", refused)
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    work = forked.Forked(square_and_pid, 4)
    assert work.result() == (16, os.getpid()) and not forked._running
    assert fds is None or len(os.listdir("/proc/self/fd")) == fds   # the pipe closed


@needs_fork
def test_no_more_children_at_a_time_than_spare_cpus(monkeypatch):
    monkeypatch.setattr(forked, "_spare_cpus", lambda: 1)
    works = []
    for x in range(4):
        works.append(forked.Forked(square_and_pid, x))
        assert len(forked._running) == 1   # the one before collected first
    assert [w.result()[0] for w in works] == [0, 1, 4, 9]
    assert not forked._running


def test_reserved_bytes_replayed_in_a_child_are_the_replay_in_place(monkeypatch):
    import torch
    monkeypatch.setattr(step_memory, "FORKED_FROM", 0)   # a step this small is replayed in place otherwise
    memory = step_memory.StepMemory()
    kept = [torch.empty(n) for n in (1000, 300000, 7)]
    memory.held_before(kept[:1], "parameters")
    for t in kept[1:]:
        memory.saw([], [t], "forward", False, False, False)
    for n in (5, 2_000_000, 40_000):   # allocated and freed within the step
        memory.saw([], [torch.empty(n)], "backward", False, False, False)
    now = memory.result()
    memory.recording = True
    later = memory.result(later=True)
    assert isinstance(later["reserved_bytes"], forked.Forked)
    assert step_memory.settled(later) == now and now["reserved_bytes"] > 0
    monkeypatch.setattr(step_memory, "FORKED_FROM", 10**9)
    memory.recording = True
    assert memory.result(later=True) == now
