"""The verifiers (and the full analytical runtime) must reject broken schedules.

Each test takes a real compiled schedule, corrupts one row of one NPU's table (or the shard layout), and checks that
runtime.verifier.verify (on symbols) and verify_on_data (the reference) each raise VerificationError with the message
for that kind of fault. The unmodified wrapper must pass, so the wrapper itself is never the cause.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from astra_compile.compiler.driver import driver
from astra_compile.dialects import comm
from astra_compile.runtime import analytical
from astra_compile.runtime.tables import RECV_COPY, RECV_REDUCE, SEND, Table
from astra_compile.runtime import verifier
from astra_compile.runtime.verifier import VerificationError
from astra_compile.network.parse import parse_topology

TOPOLOGY = "Ring(4)_Switch(2)"
SIZE = 4096
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
VICTIM = 0  # the NPU whose table is corrupted


def compile_collective(kind: str, chunks: int = 2):
    topo = parse_topology(TOPOLOGY)
    ctx = comm.new_context()
    module = driver.build_module(ctx, topo, kind, SIZE)
    driver.run_passes(module, topo, None, {"chunks": chunks})
    return driver.lower(module, topo)


_CACHE: dict = {}


verify = verifier.verify


@pytest.fixture(autouse=True, params=["symbols", "data"])
def each_verifier(request, monkeypatch):
    """Every test runs with each verifier as `verify`."""
    monkeypatch.setitem(globals(), "verify", verifier.verify if request.param == "symbols" else verifier.verify_on_data)


@pytest.fixture(params=KINDS)
def sched(request):
    if request.param not in _CACHE:
        _CACHE[request.param] = compile_collective(request.param)
    return _CACHE[request.param]


class Wrapped:
    """A schedule whose table for one NPU goes through `edit` (a function of a column dict) and whose shard layout
    goes through `shards_edit`."""

    def __init__(self, sched, edit=None, npu: int = VICTIM, shards_edit=None):
        self.meta = sched.meta
        self._sched = sched
        self._edit = edit
        self._npu = npu
        self._shards_edit = shards_edit

    def export_meta(self):
        shards = {i: np.array(self._sched.shards(i), copy=True) for i in self._sched.export_meta().shards}
        if self._shards_edit:
            shards = {i: self._shards_edit(sh) for i, sh in shards.items()}
        return self.meta.with_(shards=shards)

    def table(self, npu: int, deps: bool = True) -> Table:
        t = self._sched.table(npu)
        if npu != self._npu or self._edit is None:
            return t
        cols = {c: v.copy() for c, v in t.cols.items()}
        return Table(self._edit(cols))


# ---- table surgery -----------------------------------------------------------------------------------------------

def when(cols, i):
    return (int(cols["coll"][i]), int(cols["stage"][i]), int(cols["step"][i]))


def overlaps(cols, i, j) -> bool:
    return (cols["offset"][i] < cols["offset"][j] + cols["bytes"][j]
            and cols["offset"][j] < cols["offset"][i] + cols["bytes"][i])


def drop_row(cols: dict, i: int) -> dict:
    """Remove row i; keep every dep naming the same row as before (a dep on row i becomes -1)."""
    keep = np.arange(len(cols["op"])) != i
    dep = cols["dep"].copy()
    dep = np.where(dep == i, -1, np.where(dep > i, dep - 1, dep))
    out = {c: v[keep] for c, v in cols.items()}
    out["dep"] = dep[keep]
    return out


def message_key(cols, i):
    return tuple(int(cols[c][i]) for c in ("coll", "flow", "stage", "step", "peer", "lane", "op"))


def single_row_message(cols, op_filter) -> int:
    """A row that is the only row of its message (so removing it removes the whole message)."""
    keys = [message_key(cols, i) for i in range(len(cols["op"]))]
    for i, k in enumerate(keys):
        if op_filter(cols["op"][i]) and keys.count(k) == 1:
            return i
    raise AssertionError("no single-row message in the table")


def name_of(sched, cols, i) -> str:
    return sched.meta.collectives[int(cols["coll"][i])].name


# ---- the wrapper is not the fault --------------------------------------------------------------------------------

def test_unmodified_wrapper_passes(sched):
    identity = Wrapped(sched, edit=lambda cols: cols, shards_edit=lambda sh: sh)
    assert verify(identity) == verify(sched)
    assert analytical.run(identity, "full").total_ns == pytest.approx(analytical.run(sched, "full").total_ns,
                                                                      rel=1e-12)


def test_schedules_have_what_the_corruptions_need(sched):
    t = sched.table(VICTIM)
    assert np.any(t["op"] == SEND) and np.any(t["op"] != SEND)
    assert np.any(t["dep"] >= 0), "multi-dimensional schedules forward received data"


# ---- matching of sends and receives ------------------------------------------------------------------------------

def drop_one_row_message(sched, sends: bool):
    """The victim's table without one single-row message (a send, or a receive); returns the broken schedule and
    what the dropped row was."""
    seen = {}

    def edit(cols):
        i = single_row_message(cols, (lambda op: op == SEND) if sends else (lambda op: op != SEND))
        seen.update(peer=int(cols["peer"][i]), name=name_of(sched, cols, i), flow=int(cols["flow"][i]),
                    stage=int(cols["stage"][i]), step=int(cols["step"][i]))
        return drop_row(cols, i)

    broken = Wrapped(sched, edit)
    broken.table(VICTIM)
    return broken, seen


@pytest.mark.parametrize("sends,expected", [
    # a send row removed from the victim: its peer waits for data that never comes
    (True, "NPU {peer} waits in {name} chunk {flow} phase {stage} step {step} for data from NPU {victim} that is "
           "never sent"),
    # a receive row removed from the victim: its peer's send is never received
    (False, "NPU {peer} sends to NPU {victim} in {name} chunk {flow} phase {stage} step {step} but NPU {victim} "
            "never receives it"),
])
def test_one_sided_message(sched, sends, expected):
    broken, seen = drop_one_row_message(sched, sends=sends)
    with pytest.raises(VerificationError, match=re.escape(expected.format(victim=VICTIM, **seen))):
        verify(broken)


def test_duplicated_send_row(sched):
    def edit(cols):
        i = int(np.flatnonzero(cols["op"] == SEND)[0])
        return {c: np.concatenate([v, v[i:i + 1]]) for c, v in cols.items()}

    with pytest.raises(VerificationError, match="sends and receives differ in number of rows per message"):
        verify(Wrapped(sched, edit))


def test_send_to_the_wrong_peer(sched):
    def edit(cols):
        i = int(np.flatnonzero(cols["op"] == SEND)[0])
        cols["peer"][i] = (cols["peer"][i] + 1) % sched.meta.npus or 1
        return cols

    with pytest.raises(VerificationError, match="never (sent|receives it)"):
        verify(Wrapped(sched, edit))


def test_receive_with_changed_byte_count(sched):
    seen = {}

    def edit(cols):
        i = int(np.flatnonzero(cols["op"] != SEND)[0])
        seen.update(nb=int(cols["bytes"][i]), step=int(cols["step"][i]), peer=int(cols["peer"][i]))
        cols["bytes"][i] -= 1
        return cols

    broken = Wrapped(sched, edit)
    broken.table(VICTIM)
    expected = (f"NPU {VICTIM} receives {seen['nb'] - 1} bytes at step {seen['step']} but NPU {seen['peer']} "
                f"sends {seen['nb']}")
    with pytest.raises(VerificationError, match=re.escape(expected)):
        verify(broken)


# ---- data ----------------------------------------------------------------------------------------------------------

def test_wrong_receive_operation(sched):
    """RECV_REDUCE -> RECV_COPY drops the NPU's own contribution (wrong sum); RECV_COPY -> RECV_REDUCE adds into
    data that should have been overwritten."""
    kind = sched.meta.collectives[0].buffer_kind
    t = sched.table(VICTIM)
    reducing = kind in ("all_reduce", "reduce_scatter")
    assert np.any(t["op"] == RECV_REDUCE) == reducing

    def edit(cols):
        if reducing:
            i = int(np.flatnonzero(cols["op"] == RECV_REDUCE)[0])
            cols["op"][i] = RECV_COPY
        else:
            i = int(np.flatnonzero(cols["op"] == RECV_COPY)[0])
            cols["op"][i] = RECV_REDUCE
        return cols

    with pytest.raises(VerificationError, match=rf"^{kind} '[^']+'.*: NPU \d+ differs from the definition"):
        verify(Wrapped(sched, edit))


@pytest.mark.parametrize("shift", [1, -1])
def test_send_offset_shifted_by_one_byte(sched, shift):
    def edit(cols):
        ok = (cols["op"] == SEND) & (cols["offset"] + shift >= 0) & (cols["offset"] + cols["bytes"] + shift <= SIZE)
        i = int(np.flatnonzero(ok)[0])
        cols["offset"][i] += shift
        return cols

    kind = sched.meta.collectives[0].buffer_kind
    with pytest.raises(VerificationError, match=rf"^{kind} '[^']+'.*: NPU \d+ differs from the definition"):
        verify(Wrapped(sched, edit))


def test_send_past_the_end_of_the_buffer():
    sched = compile_collective("all_to_all")
    t = sched.table(VICTIM)
    assert np.any((t["op"] == SEND) & (t["offset"] + t["bytes"] == SIZE))

    def edit(cols):
        i = int(np.flatnonzero((cols["op"] == SEND) & (cols["offset"] + cols["bytes"] == SIZE))[0])
        cols["offset"][i] += 1
        return cols

    with pytest.raises(VerificationError, match="outside what exists"):
        verify(Wrapped(sched, edit))


# ---- dependencies --------------------------------------------------------------------------------------------------

DEP_ERROR = (r"NPU 0: send at step \d+ \(chunk \d+\) names dep -?\d+, which is not an earlier receive of the bytes "
             r"it sends")


def assert_dep_rejected(sched, s: int, j: int) -> None:
    """Point send row s of the victim's table at row j: the verifier must reject the dep."""
    def edit(c):
        c["dep"][s] = j
        return c

    with pytest.raises(VerificationError, match=DEP_ERROR):
        verify(Wrapped(sched, edit))


def _pick(cols, want):
    """(send row, row to name as its dep) satisfying want(send, other), or None."""
    n = len(cols["op"])
    for s in np.flatnonzero(cols["op"] == SEND):
        for j in range(n):
            if j != s and want(int(s), j):
                return int(s), j
    return None


def test_dep_pointing_at_a_send_row(sched):
    """Preferably an earlier send of overlapping bytes, so only the op makes it wrong."""
    t = sched.table(VICTIM)
    cols = dict(t.cols)
    pair = _pick(cols, lambda s, j: cols["op"][j] == SEND and when(cols, j) < when(cols, s) and overlaps(cols, s, j))
    kind = sched.meta.collectives[0].buffer_kind
    if kind != "reduce_scatter":
        assert pair is not None
    else:
        pair = _pick(cols, lambda s, j: cols["op"][j] == SEND)
    s, j = pair

    assert_dep_rejected(sched, s, j)


def test_dep_pointing_at_a_later_receive(sched):
    """Preferably a receive of overlapping bytes, so only the timing makes it wrong."""
    t = sched.table(VICTIM)
    cols = dict(t.cols)
    pair = _pick(cols, lambda s, j: cols["op"][j] != SEND and when(cols, j) > when(cols, s) and overlaps(cols, s, j))
    kind = sched.meta.collectives[0].buffer_kind
    if kind in ("all_reduce", "all_to_all"):
        assert pair is not None
    else:
        pair = _pick(cols, lambda s, j: cols["op"][j] != SEND and when(cols, j) > when(cols, s))
    s, j = pair
    assert j > s  # tables are in time order

    assert_dep_rejected(sched, s, j)


def test_dep_pointing_at_a_receive_of_the_same_step(sched):
    t = sched.table(VICTIM)
    cols = dict(t.cols)
    pair = _pick(cols, lambda s, j: cols["op"][j] != SEND and when(cols, j) == when(cols, s))
    assert pair is not None
    s, j = pair

    assert_dep_rejected(sched, s, j)


def test_dep_pointing_at_an_earlier_receive_of_other_bytes(sched):
    t = sched.table(VICTIM)
    cols = dict(t.cols)
    pair = _pick(cols, lambda s, j: (cols["op"][j] != SEND and when(cols, j) < when(cols, s)
                                     and not overlaps(cols, s, j)))
    assert pair is not None
    s, j = pair

    assert_dep_rejected(sched, s, j)


def test_dep_past_the_end_of_the_table(sched):
    last = sched.meta.npus - 1

    def edit(c):
        i = int(np.flatnonzero(c["op"] == SEND)[0])
        c["dep"][i] = len(c["op"])
        return c

    with pytest.raises(VerificationError, match=DEP_ERROR.replace("NPU 0", rf"NPU {last}")):
        verify(Wrapped(sched, edit, npu=last))
    # on NPU 0 the same index lands in NPU 1's rows: still not a row of this NPU
    with pytest.raises(VerificationError, match=DEP_ERROR):
        verify(Wrapped(sched, edit))


def test_dep_past_the_end_landing_on_a_fitting_receive_of_the_next_npu(sched):
    """dep indexes this NPU's table only: an index past its end must not be taken as the next NPU's row, even when
    that row is an earlier receive of the very bytes the send reads."""
    own = dict(sched.table(VICTIM).cols)
    nxt = dict(sched.table(VICTIM + 1).cols)
    found = None
    for s in np.flatnonzero(own["op"] == SEND):
        for j in np.flatnonzero(nxt["op"] != SEND):
            earlier = when(nxt, j) < when(own, s)
            overlap = nxt["offset"][j] < own["offset"][s] + own["bytes"][s] and \
                own["offset"][s] < nxt["offset"][j] + nxt["bytes"][j]
            if earlier and overlap:
                found = int(s), int(j)
                break
        if found:
            break
    assert found is not None
    s, j = found

    def edit(c):
        c["dep"][s] = len(c["op"]) + j
        return c

    with pytest.raises(VerificationError, match=DEP_ERROR):
        verify(Wrapped(sched, edit))


# ---- shard layouts -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rs():
    return compile_collective("reduce_scatter")


@pytest.fixture(scope="module")
def ag():
    return compile_collective("all_gather")


def test_reduce_scatter_shifted_shards(rs):
    def shift(sh):
        sh[:, :, 0] += 1
        return sh

    with pytest.raises(VerificationError,
                       match=r"reduce_scatter 'reduce_scatter' shard: NPU \d+ differs from the definition"):
        verify(Wrapped(rs, shards_edit=shift))


def test_reduce_scatter_shards_that_do_not_tile_the_chunk(rs):
    """Every shard still holds the group sum, but one byte per shard is owned by nobody."""
    def shrink(sh):
        sh[:, :, 1] -= 1
        return sh

    with pytest.raises(VerificationError, match=r"reduce_scatter 'reduce_scatter': byte \d+ is owned by 0 NPUs of "
                                                r"group 0, not exactly one"):
        verify(Wrapped(rs, shards_edit=shrink))


def test_all_gather_overlapping_inputs(ag):
    def shift(sh):
        sh[0, :, 1] += 1  # NPU 0's input grows into the next NPU's
        return sh

    with pytest.raises(VerificationError, match=r"all_gather 'all_gather': byte \d+ is the input of 2 NPUs of group 0, "
                                                r"not exactly one"):
        verify(Wrapped(ag, shards_edit=shift))


def test_all_gather_shifted_inputs(ag):
    def shift(sh):
        sh[:, :, 0] += 1
        return sh

    with pytest.raises(VerificationError, match=r"all_gather 'all_gather': "):
        verify(Wrapped(ag, shards_edit=shift))


# ---- the analytical runtime ----------------------------------------------------------------------------------------

def test_full_runtime_detects_a_receive_that_waits_forever(sched):
    def edit(cols):
        return drop_row(cols, single_row_message(cols, lambda op: op == SEND))

    with pytest.raises(RuntimeError, match=r"NPU \d+ waits forever in collective \d+ chunk \d+ phase \d+ step \d+"):
        analytical.run(Wrapped(sched, edit), "full")


def test_dep_below_minus_one_is_rejected():
    sched = compile_collective("all_reduce")

    def edit(cols):
        cols["dep"][int(np.flatnonzero(cols["op"] == SEND)[0])] = -5
        return cols

    with pytest.raises(VerificationError, match="outside what exists"):
        verify(Wrapped(sched, edit))
