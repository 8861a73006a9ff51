"""Schedule.tables builds a phase once per member position over all the NPUs at that position (no Python loop per
NPU): for any set of NPUs its rows must be exactly their own tables (Schedule.table), joined in NPU order, and the
congestion plan read in batches must equal the plan read NPU by NPU."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology
from astra_compile.runtime import phases
from astra_compile.runtime.congestion_plan import Plan
from astra_compile.runtime.phases import tables_of
from astra_compile.runtime.tables import COLUMN_NAMES, Table

from test_properties import SETTINGS, cases, compile_case


def assert_joined(sched, npus) -> None:
    joined = sched.tables(npus)
    for c in COLUMN_NAMES:
        if c == "dep":  # tables() leaves the dependency work to table(npu, deps=True)
            continue
        ref = np.concatenate([sched.tables([int(n)])[c] for n in npus])   # each NPU's own, built alone
        assert joined[c].dtype == ref.dtype, c
        assert np.array_equal(joined[c], ref), c


@settings(max_examples=80, **SETTINGS)
@given(cases(), st.data())
def test_tables_of_any_npus_are_their_own_tables(case, data):
    sched = compile_case(case)
    npus = sorted(data.draw(st.sets(st.integers(0, case.npus - 1), min_size=1, max_size=case.npus)))
    assert_joined(sched, npus)


def compiled(kind, size, topology, root=0, **flags):
    topo = parse_topology(topology)
    ctx = comm.new_context()
    module = driver.build_module(ctx, topo, kind, size, None, root)
    return driver.compile_schedule(str(module), ctx, topo, "themis", flags).schedule


# whole-network phases (trees, cycles, routed rings over ranks, HDRM's placement), graphs, rooted collectives
# with the root off NPU 0, in-switch templates, meshes
CASES = [
    ("all_reduce", 1 << 22, "4x4_torus", 0, {"algorithm": "multitree"}),
    ("all_reduce", 1 << 22, "4x8_bigraph", 0, {"algorithm": "hdrm"}),
    ("all_reduce", 1 << 22, "4x4_torus", 0, {"algorithm": "flat_ring"}),
    ("all_reduce", 1 << 22, "2x4_bigraph", 0, {"algorithm": "rank_ring"}),
    ("all_reduce", 1 << 24, "4x4_torus", 0, {"algorithm": "flat_double_binary_tree"}),
    ("all_gather", 1 << 24, "Ring(4)_Switch(4)", 0, {"algorithm": "flat_direct"}),
    ("all_reduce", 1 << 22, "dgx1", 0, {}),
    ("broadcast", 1 << 22, "Ring(4)_FC(2)_Switch(4)", 5, {"chunks": 2}),
    ("reduce", 1 << 22, "4x4x4_torus", 37, {"chunks": 2}),
    ("reduce", 1 << 22, "Switch(4)_Ring(4)", 9, {"algorithm": "ring", "chunks": 2}),
    ("broadcast", 1 << 22, "Switch(4)_Switch(4)", 7, {"algorithm": "in_switch", "chunks": 2}),
    ("all_reduce", 1 << 22, "Switch(4)_Switch(4)", 0, {"algorithm": "in_switch", "chunks": 2}),
    ("all_to_all", 1 << 22, "Ring(4)_FC(2)_Switch(4)", 0, {"chunks": 2}),
    ("all_reduce", 3000, "Mesh(4)_Ring(3)", 0, {"algorithm": "direct", "chunks": 3}),
]


@pytest.mark.parametrize("kind, size, topology, root, flags", CASES)
def test_tables_of_every_kind_of_phase(kind, size, topology, root, flags):
    sched = compiled(kind, size, topology, root, **flags)
    n = sched.meta.npus
    assert_joined(sched, list(range(n)))
    assert_joined(sched, list(range(1, n, 3)))


@pytest.mark.parametrize("topology, chunks, algorithm", [
    ("Ring(4)_Switch(4)_FC(2)", 3, None),
    ("Mesh(4)_Ring(3)", 2, "ring"),    # a line's ends send over several hops, its middle over one: batches of both
    ("4x4_torus", 2, "multitree"),
])
def test_plan_read_in_batches_equals_the_plan_read_at_once(monkeypatch, topology, chunks, algorithm):
    flags = {"chunks": chunks, **({"algorithm": algorithm} if algorithm else {})}
    sched = compiled("all_reduce", 3 * 2 ** 20, topology, **flags)
    npus = range(sched.meta.npus)
    whole = Plan(sched.meta, npus, lambda batch: Table.concat([sched.table(int(n), deps=False) for n in batch]),
                 False, ends=True)
    monkeypatch.setattr(phases, "ROWS_PER_BATCH", 1)  # one NPU per batch, unordered rows
    batched = Plan(sched.meta, npus, lambda batch: tables_of(sched, batch, ordered=False), False, ends=True)
    for name, value in vars(whole).items():
        if isinstance(value, np.ndarray):
            assert value.dtype == getattr(batched, name).dtype, name
            assert np.array_equal(value, getattr(batched, name)), name
    assert len(whole.route_start) == (0 if algorithm == "multitree" else whole.M + 1)


@settings(max_examples=40, **SETTINGS)
@given(cases(), st.data())
def test_table_reads_ahead_and_gives_each_npu_its_own_table_in_any_order(case, data):
    """table(npu) builds the NPUs after it in growing batches while the requests come in order; whatever the
    order (in order, backwards, random, repeated), each table is the NPU's own with its dep column."""
    from astra_compile.compiler.lowering.dependencies import dependencies
    sched = compile_case(case)
    order = data.draw(st.sampled_from(["in order", "backwards", "random"]))
    npus = list(range(case.npus)) if order == "in order" else list(range(case.npus))[::-1] if order == "backwards" \
        else data.draw(st.lists(st.integers(0, case.npus - 1), min_size=1, max_size=2 * case.npus))
    buffers = [p.buffer for p in sched.plans]
    for n in npus:
        got, own = sched.table(n), sched.tables([n])
        for c in COLUMN_NAMES:
            ref = dependencies(own, buffers) if c == "dep" else own[c]
            assert got[c].dtype == ref.dtype and np.array_equal(got[c], ref), (n, c)


def test_read_ahead_batches_grow_in_order_and_stay_bounded(monkeypatch):
    from astra_compile.compiler.lowering import lower
    monkeypatch.setattr(lower, "READ_AHEAD_ROWS", 4000)
    sched = compiled("all_reduce", 1 << 22, "4x4x4_torus", chunks=2)
    built = []
    tables = sched.tables
    monkeypatch.setattr(sched, "tables", lambda npus, ordered=True: built.append(len(npus)) or tables(npus, ordered))
    rows = [len(sched.table(n)) for n in range(64)]
    assert built[:4] == [1, 2, 4, 8] and sum(built) == 64
    assert max(b * max(rows) for b in built) <= 2 * 4000   # a batch holds about READ_AHEAD_ROWS rows at most
    built.clear()
    sched.table(5)
    assert built == [1]   # out of order: that NPU alone
