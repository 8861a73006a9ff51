"""compiler/core/heap.py: what a compile keeps for its run is frozen out of the collector's walks while it runs and
handed back at its end; a process that froze objects of its own keeps them frozen and untouched."""
import gc
import os
import weakref

import astra_compile
from astra_compile.compiler.core import heap

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


class Node:
    pass


def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a


def test_settled_freezes_inside_a_compile_and_its_end_hands_everything_back():
    gc.collect()
    assert gc.get_freeze_count() == 0
    kept = [Node() for _ in range(1000)]
    with heap.compiling():
        heap.settled()
        assert gc.get_freeze_count() >= len(kept)
        with heap.compiling():   # nested: the inner end hands nothing back yet
            heap.settled()
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_freeze_count() == 0


def test_a_cycle_frozen_then_dropped_is_collected_after_the_compile():
    gone = []
    with heap.compiling():
        held = cycle()
        weakref.finalize(held, gone.append, True)
        heap.settled()
        del held
        gc.collect()
        assert gone == []      # frozen: the collector does not see it
    gc.collect()
    assert gone == [True]      # handed back at the end: collected


def test_outside_a_compile_or_beside_a_process_own_freeze_nothing_changes():
    heap.settled()
    assert gc.get_freeze_count() == 0
    mine = [Node() for _ in range(100)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with heap.compiling():
            heap.settled()
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen   # the process's own freeze is left as it was
    finally:
        gc.unfreeze()
    assert mine


def test_a_pipeline_capture_settles_each_stage_and_the_lowered_step(monkeypatch):
    from astra_compile.compiler.frontend import chunk_replay
    monkeypatch.setattr(chunk_replay, "REPLAY_FROM", 1000)   # a copied micro-batch settles its ops too: none here
    calls = []
    real = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (calls.append(gc.get_freeze_count()), real())[1])
    report = astra_compile.compile(os.path.join(EXAMPLES, "llama_pp_tp_dp.py"), "8x8_torus")
    assert report.total_time_us > 0
    assert len(calls) == 5   # one per captured stage (pp 4) and one after the lowering
    assert gc.get_freeze_count() == 0


def test_paused_holds_the_collector_off_and_restores_it_as_it_was():
    assert gc.isenabled()
    with heap.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with heap.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()   # a caller's own disable is kept
    finally:
        gc.enable()


def test_the_engine_runs_with_the_collector_paused(monkeypatch):
    from astra_compile.compiler.driver import workload_driver
    seen = []
    real = workload_driver.run_workload
    monkeypatch.setattr(workload_driver, "run_workload",
                        lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    astra_compile.compile(os.path.join(EXAMPLES, "mlp_dp.py"), "Ring(4)")
    assert seen == [False] and gc.isenabled()


def test_a_kept_phase_freezes_what_it_made_before_any_collection():
    with heap.paused(keep=True):
        [Node() for _ in range(500)]
    assert gc.get_freeze_count() == 0 and gc.isenabled()   # outside a compile: nothing
    frozen_at = []   # how many objects were frozen as each collection began
    gc.callbacks.append(seen := lambda phase, info: phase == "start" and frozen_at.append(gc.get_freeze_count()))
    try:
        with heap.compiling():
            with heap.paused(keep=True):
                made = [Node() for _ in range(50_000)]   # far past the first generation's threshold
                assert not gc.isenabled()
            [Node() for _ in range(5000)]   # the collector runs again, over none of them
            assert gc.isenabled() and frozen_at and min(frozen_at) >= len(made), frozen_at
    finally:
        gc.callbacks.remove(seen)
    assert gc.get_freeze_count() == 0
