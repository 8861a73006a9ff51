"""The symbolic verifier (`verify`, what --verify runs) agrees with the data verifier (`verify_on_data`, the
reference): on every small schedule the compiler makes (random topologies, algorithms, kinds, chunks, sizes, roots,
MultiTree) both accept, and on each such schedule with one row or shard corrupted both give the same verdict in the
same words."""
from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology
from astra_compile.runtime.tables import RECV_COPY, RECV_REDUCE, SEND, Table
from astra_compile.runtime.verifier import VerificationError, verify, verify_on_data
from test_broadcast import cases as rooted_cases, compile_broadcast
from test_properties import SETTINGS, cases, compile_case
from test_verifier_negative import Wrapped, drop_row


def outcome(check, schedule) -> str:
    try:
        check(schedule)
    except VerificationError as e:
        return str(e)
    return "verified"


def agree(schedule) -> str:
    """Both verifiers' verdict on `schedule`, which must be the same. The data verifier's values are random (0 to
    2^20 - 1): a wrong byte can hold the right value by chance, and its message then counts a byte fewer (or names a
    later first offset); the symbols cannot. Its verdict with another seed stands where the first one was such a
    chance."""
    symbols = outcome(verify, schedule)
    data = [outcome(lambda s: verify_on_data(s, seed), schedule) for seed in range(3)]
    assert symbols in data, (symbols, data)
    return symbols


def multitree(spec: str, size: int, chunks: int):
    topo = parse_topology(spec)
    source = str(driver.build_module(comm.new_context(), topo, "all_reduce", size))
    return driver.compile_schedule(source, comm.new_context(), topo, "baseline",
                                   {"chunks": chunks, "algorithm": "multitree"}).schedule


@st.composite
def schedules(draw):
    """A compiled schedule small enough for the data verifier: per-dimension algorithms of every block, a broadcast
    or reduce from a random root, or MultiTree on a small torus or ring."""
    which = draw(st.sampled_from(["hierarchical", "hierarchical", "rooted", "multitree"]))
    if which == "hierarchical":
        return compile_case(draw(cases()))
    if which == "rooted":
        kind, spec, _, algos, chunks, size, root, group = draw(rooted_cases())
        return compile_broadcast(spec, size, root, chunks, ",".join(algos), group, kind)
    spec = draw(st.sampled_from(["Ring(4)", "4x4_torus", "FC(4)_Ring(3)"]))
    npus = math.prod(parse_topology(spec).shape)
    chunks = draw(st.integers(1, 3))
    return multitree(spec, npus * chunks * draw(st.integers(1, 12)) + draw(st.integers(0, 7)), chunks)


@settings(max_examples=150, **SETTINGS)
@given(schedules())
def test_both_verify_every_compiled_schedule(schedule):
    assert agree(schedule) == "verified"


# a row's column changed, the row dropped or given twice, a receive that reduces made to copy or back, or an NPU's
# reduce-scatter output or all-gather input shard moved or resized
DATA_FAULT = r"differs from the definition|is owned by|is the input of"  # what only executing the rows finds
CORRUPTIONS = ("op", "offset", "bytes", "peer", "step", "dep", "drop", "duplicate", "receive", "shard")


@settings(max_examples=300, **SETTINGS)
@given(schedules(), st.sampled_from(CORRUPTIONS), st.data())
def test_both_give_the_same_verdict_on_a_corrupted_schedule(schedule, corruption, data):
    npus = schedule.meta.npus
    victim = data.draw(st.integers(0, npus - 1), label="npu")
    table = schedule.table(victim)
    rows = len(table)
    receives = np.flatnonzero(table["op"] != SEND)
    if corruption == "receive" and len(receives):
        row = int(data.draw(st.sampled_from(receives), label="row"))
    else:
        row = data.draw(st.integers(0, rows - 1), label="row") if rows else 0
    delta = data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3, 8]), label="delta")

    def edit(cols):
        cols = {c: v.copy() for c, v in cols.items()}
        if corruption == "op":
            cols["op"][row] = (cols["op"][row] + (1 if delta > 0 else 2)) % 3
        elif corruption == "receive":
            cols["op"][row] = RECV_COPY if cols["op"][row] == RECV_REDUCE else RECV_REDUCE
        elif corruption in ("offset", "bytes", "step"):
            cols[corruption][row] = max(cols[corruption][row] + delta, 0)
        elif corruption == "peer":
            cols["peer"][row] = (cols["peer"][row] + delta) % npus
        elif corruption == "dep":
            cols["dep"][row] = max(cols["dep"][row] + delta, -1)
        elif corruption == "drop":
            return drop_row(cols, row)
        elif corruption == "duplicate":
            return {c: np.concatenate([v, v[row:row + 1]]) for c, v in cols.items()}
        return cols

    def shards_edit(sh):
        n, c = data.draw(st.integers(0, sh.shape[0] - 1)), data.draw(st.integers(0, sh.shape[1] - 1))
        field = data.draw(st.integers(0, 1))
        sh[n, c, field] = max(sh[n, c, field] + delta, 0)
        return sh

    sharded = bool(schedule.export_meta().shards)
    if corruption == "shard" and not sharded:
        corruption = "offset"
    if not rows and corruption != "shard":
        return
    broken = Wrapped(schedule, edit=None if corruption == "shard" else edit, npu=victim,
                     shards_edit=shards_edit if corruption == "shard" else None)
    verdict = agree(Frozen(broken))
    event(f"{corruption}: " + ("verified" if verdict == "verified" else "data" if re.search(DATA_FAULT, verdict)
                               else "rows"))


class Frozen:
    """A schedule whose tables and meta are read once (the corruption draws its values only once)."""

    def __init__(self, schedule):
        self.meta = schedule.meta
        self._meta = schedule.export_meta()
        self._tables = {n: Table(dict(schedule.table(n).cols)) for n in range(self.meta.npus)}

    def export_meta(self):
        return self._meta

    def table(self, npu: int, deps: bool = True) -> Table:
        return self._tables[npu]
