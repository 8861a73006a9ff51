"""The compiled congestion core (runtime/_linkcore.c) against the Python reference engine: identical phase
records, link statistics and transfers over random topologies, algorithms and runtime options."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.runtime import congestion
from astra_compile.runtime.phases import DeadlockError, Table
from astra_compile.network.parse import parse_topology
from helpers import compile_collective

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def test_compiled_core_is_built():
    # `pip install .` builds it wherever a C compiler exists (CI included); the speed figures depend on it
    assert congestion._linkcore is not None


def test_a_core_built_from_another_source_is_noticed():
    """An editable checkout pulled without reinstalling keeps yesterday's core: it must not be trusted with today's
    plans. The core carries the digest of the source it was built from."""
    assert not congestion.STALE_CORE  # this checkout's core was built from its source

    class OldCore:
        SOURCE_DIGEST = "0123456789abcdef"

    class UnmarkedCore:  # built before cores carried a digest
        pass

    source = os.path.join(os.path.dirname(congestion.__file__), "_linkcore.c")
    assert congestion._built_from_other_source(OldCore) == os.path.exists(source)
    assert congestion._built_from_other_source(UnmarkedCore) == os.path.exists(source)
    assert not congestion._built_from_other_source(congestion._linkcore)


def assert_same(schedule, **options):
    py = congestion.run(schedule, engine="python", **options)
    c = congestion.run(schedule, engine="compiled", **options)
    assert c.total_ns == py.total_ns and c.mode == py.mode
    assert set(c.phases) == set(py.phases)
    for k in py.phases:
        assert np.array_equal(c.phases[k], py.phases[k]), k
    assert c.links == py.links and c.link_transfers == py.link_transfers
    assert c.transfers == py.transfers
    assert c.dim_busy_ns == py.dim_busy_ns and c.collective_end_ns == py.collective_end_ns
    return c


@st.composite
def cases(draw):
    dims = draw(st.lists(st.tuples(st.sampled_from(["Ring", "FC", "Switch", "Mesh"]), st.sampled_from([2, 3, 4])),
                         min_size=1, max_size=3))
    algos = []
    for block, k in dims:
        choices = ["ring", "direct"] + (["halving_doubling"] if k & (k - 1) == 0 else [])
        algos.append(draw(st.sampled_from(choices)))
    kind = draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]))
    chunks = draw(st.integers(1, 3))
    npus = int(np.prod([k for _, k in dims]))
    size = chunks * npus * 2 * 3 * 4 * draw(st.integers(1, 16))
    options = {"switching": draw(st.sampled_from(congestion.SWITCHING)),
               "intra": draw(st.sampled_from(["fifo", "scf"])), "active_chunks": draw(st.integers(1, 3)),
               "timeline": draw(st.booleans()), "local_mem_gbps": draw(st.sampled_from([None, 5.0, 1600.0]))}
    delay = draw(st.sampled_from([None, 7.0]))   # the endpoint delay, at each message's delivery
    return "_".join(f"{b}({k})" for b, k in dims), kind, chunks, ",".join(algos), size, delay, options


@settings(max_examples=60, deadline=None, database=None)
@given(cases())
def test_compiled_core_equals_reference_engine(case):
    spec, kind, chunks, algos, size, delay, options = case
    sched = compile_collective(spec, kind, size, chunks=chunks, algorithm=algos, bandwidth="40", latency="250",
                               endpoint_delay=delay)
    assert_same(sched, mode="full", **options)
    if congestion.symmetric_ok(sched.meta) and not options["timeline"]:
        assert_same(sched, mode="symmetric", **options)


def compile_file(name, topology=None, **defaults):
    ctx = comm.new_context()
    module = driver.read_module(ctx, os.path.join(EXAMPLES, name))
    topo = driver.module_topology(module, parse_topology(topology) if topology else None)
    return driver.compile_schedule(str(module), ctx, topo, "baseline", defaults).schedule


@pytest.mark.parametrize("scheduler_options", [{}, {"intra": "scf", "active_chunks": 2}])
def test_dependent_collectives_and_graph_phases(scheduler_options):
    # an all-to-all waiting for a whole all-reduce (dependency across buffers), 8 chunks each
    assert_same(compile_file("torus_two_collectives.mlir"), mode="full", **scheduler_options)
    # MultiTree: phases over the whole network (dimension -1), one service group of every NPU
    topo = parse_topology("4x4_torus")
    ctx = comm.new_context()
    source = str(driver.build_module(ctx, topo, "all_reduce", 16 * 4096))
    tree = driver.compile_schedule(source, ctx, topo, "baseline", {"chunks": 2, "algorithm": "multitree"}).schedule
    assert_same(tree, mode="full", timeline=True, **scheduler_options)


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_deadlock_is_reported_by_both_engines(engine):
    sched = compile_collective("Switch(4)", "all_reduce", 4096)

    class Broken:
        meta = sched.meta

        def table(self, npu, deps=True):
            t = sched.table(npu)
            if npu == 1:  # NPU 1 never sends anything
                keep = t["op"] != 0
                return Table({c: v[keep] for c, v in t.cols.items()})
            return t
    with pytest.raises(DeadlockError, match="NPU 0 waits forever in collective 0 chunk 0 phase 0 step 1"):
        congestion.run(Broken(), mode="full", engine=engine)


def test_unknown_engine_is_refused():
    sched = compile_collective("Ring(4)", "all_reduce", 4096)
    with pytest.raises(ValueError, match="unknown engine"):
        congestion.run(sched, engine="fortran")
