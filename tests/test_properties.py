"""Property tests: random topologies, collectives, algorithms, chunk counts and sizes through the whole compiler.

Every compiled schedule must implement its collective on real data (runtime.verifier), the symmetric shortcut of
the analytical runtime must agree with full execution, each NPU must send the closed-form byte count of its
algorithms, and no schedule may beat the ideal (bandwidth-bound) time.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_compile import algorithms

from astra_compile.compiler.driver import driver
from astra_compile.compiler.report.report import ideal_time_ns
from astra_compile.dialects import comm
from astra_compile.runtime import analytical, verifier
from astra_compile.runtime.tables import RECV_COPY, RECV_REDUCE, SEND, SWITCH, DirSchedule, write_dir
from astra_compile.network.errors import UserError
from astra_compile.network.parse import parse_topology

BLOCKS = ("Ring", "FC", "Switch", "Mesh", "HC")
BLOCK_NAMES = {"Ring": "Ring", "FC": "FullyConnected", "Switch": "Switch", "Mesh": "Mesh", "HC": "Hypercube"}
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
CLOSED_FORM = ("ring", "direct", "halving_doubling")
SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _pow2(k: int) -> bool:
    return k & (k - 1) == 0


def applicable(kind: str, k: int, block: str) -> list[str]:
    """Per-dimension algorithms of the registry that have a schedule for a `kind` phase on a group of k members
    of `block` (each algorithm's own check): a new algorithm file is property-tested without a word here."""
    out = []
    for alg in algorithms.scoped(algorithms.DIMENSION):
        if alg.blocks is not None and BLOCK_NAMES[block] not in alg.blocks:
            continue
        try:
            for phase in (("reduce_scatter", "all_gather") if kind == "all_reduce" else (kind,)):
                alg.check(phase, k, "the group")
        except UserError:
            continue
        out.append(alg.name)
    return out


@dataclass
class Case:
    spec: str
    dims: list            # [(block, size)]
    kind: str
    chunks: int
    size: int
    algorithm: str | None  # the `algorithm` default passed to the pipeline (None: block defaults)
    algos: list           # the algorithm each dimension ends up with
    bandwidth: list | None = None  # GB/s per dimension (None: topology default)
    latency: float | None = None   # ns per hop (None: topology default)

    @property
    def npus(self) -> int:
        return math.prod(k for _, k in self.dims)

    @property
    def even(self) -> bool:
        """Every floor split is exact: chunks, then in every phase (dimensions nested in ascending order) the
        region into the algorithm's units (2 per member for ring on a Ring and for trees, else 1 per member), so
        every NPU moves the same byte counts."""
        if self.size % self.chunks:
            return False
        if self.kind == "all_to_all":
            return True  # sizes are drawn as whole slots
        region = self.size // self.chunks
        for (block, k), algo in zip(self.dims, self.algos):
            units = 2 * k if (algo == "ring" and block in ("Ring", "Mesh")) or algo == "double_binary_tree" else k
            if region % units:
                return False
            region //= k
        return True

    @property
    def symmetric(self) -> bool:
        # the all-to-all "ring" off a Ring dimension pairs one partner per round: members idle in different rounds
        one_partner = self.kind == "all_to_all" and any(a == "ring" and b not in ("Ring", "Mesh")
                                                        for (b, _), a in zip(self.dims, self.algos))
        # a Mesh's end NPUs have one neighbour, the others two: no two positions on a line are alike
        line = any(b == "Mesh" for b, _ in self.dims)
        # a ring's neighbour c+1 on a hypercube is one link away from even c, more from odd c
        cube_ring = any(b == "HC" and a == "ring" for (b, _), a in zip(self.dims, self.algos))
        return (all(a in CLOSED_FORM + ("in_switch",) for a in self.algos) and self.even and not one_partner
                and not line and not cube_ring)


# an all-reduce taking each chunk whole up a tree and back down (the root only adds, a leaf only copies)
WHOLE_CHUNK_TREES = ("tree_reduce_broadcast", "astra_sim_double_binary_tree")
DEFAULT = {"Ring": "ring", "FC": "direct", "Switch": "halving_doubling", "Mesh": "ring", "HC": "halving_doubling"}


@st.composite
def cases(draw, mode=None, allow_tree=True, big=False, ndims=None):
    """mode: None (any), "default" (no algorithm option) or "symmetric" (ring/direct/halving_doubling only).
    big: bandwidth-bound sizes (up to ~100 MB) on random link bandwidths and latencies (only for the runtime:
    the verifier would execute every byte)."""
    ndims = draw(st.integers(1, 3)) if ndims is None else ndims
    kind = draw(st.sampled_from(KINDS))
    how = "default" if mode == "default" else draw(st.sampled_from(["default", "single", "per_dim"]))
    dims = []
    for _ in range(ndims):
        block = draw(st.sampled_from(BLOCKS))
        dims.append((block, draw(st.sampled_from([2, 4, 8] if block == "HC" else [2, 3, 4, 5]))))
    tree_ok = allow_tree and mode != "symmetric"

    def options(k, block):
        return [a for a in applicable(kind, k, block) if tree_ok or a != "double_binary_tree"]

    if how == "default":
        # a Switch whose size is not a power of two defaults to ring (halving_doubling has no schedule there); an
        # all-to-all on a Switch runs direct, as ASTRA-sim
        algos = ["direct" if b == "Switch" and kind == "all_to_all" else
                 DEFAULT[b] if not (b == "Switch" and k & (k - 1)) else "ring" for b, k in dims]
        algorithm = None
    elif how == "single":
        common = [a for a in options(2, "Ring") if all(a in options(k, b) for b, k in dims)]
        name = draw(st.sampled_from(common))
        algorithm, algos = name, [name] * ndims
    else:
        algos = [draw(st.sampled_from(options(k, b))) for b, k in dims]
        algorithm = ",".join(algos)
    chunks = draw(st.integers(1, 4))
    npus = math.prod(k for _, k in dims)
    if big:
        size = chunks * npus * draw(st.integers(1, 1 << 16)) * (1 if kind == "all_to_all" else 4)
        if kind != "all_to_all" and draw(st.booleans()):
            size += draw(st.integers(1, npus * chunks))
        spec = "_".join(f"{b}({k})" for b, k in dims)
        bandwidth = [draw(st.sampled_from([12.5, 50.0, 100.0, 400.0])) for _ in dims]
        latency = draw(st.sampled_from([0.0, 10.0, 500.0]))
        return Case(spec, dims, kind, chunks, size, algorithm, algos, bandwidth, latency)
    if kind == "all_to_all":
        size = chunks * npus * draw(st.integers(1, 6))
    else:
        extra = 0 if draw(st.booleans()) else draw(st.integers(1, npus * chunks))
        size = npus * chunks * 4 * draw(st.integers(1, 3)) + extra
    spec = "_".join(f"{b}({k})" for b, k in dims)
    return Case(spec, dims, kind, chunks, size, algorithm, algos)


def compile_case(case: Case):
    topo = parse_topology(case.spec, case.bandwidth, case.latency)
    ctx = comm.new_context()
    module = driver.build_module(ctx, topo, case.kind, case.size)
    defaults = {"chunks": case.chunks}
    if case.algorithm is not None:
        defaults["algorithm"] = case.algorithm
    driver.run_passes(module, topo, None, defaults)
    return driver.lower(module, topo)


def chunk_lengths(size: int, chunks: int) -> np.ndarray:
    b = (np.arange(chunks + 1) * size) // chunks
    return np.diff(b)


def coords(npu: int, shape: list[int]) -> list[int]:
    out = []
    for k in shape:
        out.append(npu % k)
        npu //= k
    return out


def phase_region(length: int, dim: int, shape: list[int], xs: list[int]) -> int:
    """Length of the region an NPU with coordinates xs works on in the phase on `dim` (nested in lower dims)."""
    for d in range(dim):
        lo, hi = (xs[d] * length) // shape[d], ((xs[d] + 1) * length) // shape[d]
        length = hi - lo
    return length


# ---- every schedule implements its collective --------------------------------------------------------------------

@settings(max_examples=200, **SETTINGS)
@given(cases())
def test_schedule_verifies_on_data(case):
    sched = compile_case(case)
    for c in sched.meta.collectives:
        assert [s.algorithm for s in c.stages] == [case.algos[s.dim] for s in c.stages]
    stats = verifier.verify(sched)
    n = case.npus
    total = 0
    for npu in range(n):
        t = sched.table(npu)
        total += len(t)
        assert np.all(t["npu"] == npu)
        assert np.all(t["bytes"] >= 1), "empty transfer row"
        # another NPU, or (in-network reduction) the switch of an in_switch dimension
        in_switch = np.isin(t["dim"], [d for d, a in enumerate(case.algos) if a == "in_switch"])
        assert np.all(((t["peer"] >= 0) & (t["peer"] < n) & (t["peer"] != npu)) | ((t["peer"] == SWITCH) & in_switch))
        assert np.all((t["offset"] >= 0) & (t["offset"] + t["bytes"] <= case.size))
        recv_ops = set(t["op"][(t["op"] != SEND) & ~in_switch].tolist())  # a switch's sum is copied, not added
        expected = {"all_reduce": {RECV_REDUCE, RECV_COPY}, "reduce_scatter": {RECV_REDUCE},
                    "all_gather": {RECV_COPY}, "all_to_all": {RECV_COPY}}[case.kind]
        # (a switch's sum comes back as a copy; in a reduce-broadcast tree the root only adds, a leaf only copies)
        whole = in_switch.any() or any(a in WHOLE_CHUNK_TREES for a in case.algos)
        assert recv_ops == expected if not whole else recv_ops <= expected
    assert stats["rows"] == total


@settings(max_examples=40, **SETTINGS)
@given(cases().filter(lambda c: c.kind == "all_reduce"), st.data())
def test_all_reduce_halves_share_one_buffer(case, data):
    """The decomposed halves keep naming their all_reduce (part_of) through hierarchical-decompose, so they are
    lowered onto one buffer and verified against the all_reduce definition (the all-gather half starts from exactly
    the shards the reduce-scatter half produced), and the all-gather's first sends name the reduce-scatter receives
    that wrote the shard they forward."""
    sched = compile_case(case)
    colls = sched.meta.collectives
    assert [(c.kind, c.buffer, c.buffer_kind) for c in colls] == [
        ("reduce_scatter", "all_reduce", "all_reduce"), ("all_gather", "all_reduce", "all_reduce")]
    assert verifier.verify(sched)["buffers"] == 1
    t = sched.table(data.draw(st.integers(0, case.npus - 1), label="npu"))
    first_ag_sends = np.flatnonzero((t["coll"] == 1) & (t["stage"] == 0) & (t["step"] == 0) & (t["op"] == SEND))
    trees = ("double_binary_tree",) + WHOLE_CHUNK_TREES
    if not any(a in trees for a in case.algos) and case.algos != ["in_switch"]:
        # (in a tree only the leaves send at step 0; a one-dimension in-switch all-reduce has no all-gather rows,
        # its fused reduce-scatter returned the whole sum)
        assert len(first_ag_sends)
    deps = t["dep"][first_ag_sends]
    assert np.all(deps >= 0)
    assert np.all(t["coll"][deps] == 0) and np.all(t["op"][deps] != SEND)
    assert np.all(t["flow"][deps] == t["flow"][first_ag_sends])


@settings(max_examples=12, **SETTINGS)
@given(cases())
def test_written_tables_verify_on_their_own(case):
    """write_dir exports the shard layouts, so a table directory verifies without the compiler, and reads back
    the very tables the compiler produced."""
    sched = compile_case(case)
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/tables"
        write_dir(sched, out, "csv")
        back = DirSchedule(out)
        assert back.meta.collectives == sched.meta.collectives
        verifier.verify(back)
        for npu in range(case.npus):
            a, b = sched.table(npu), back.table(npu)
            for c in a.cols:
                assert np.array_equal(a[c], b[c]), (npu, c)


# ---- analytical runtime ------------------------------------------------------------------------------------------

@settings(max_examples=150, **SETTINGS)
@given(cases(mode="symmetric"))
def test_symmetric_execution_matches_full(case):
    """meta.symmetric promises that NPU 0's table alone gives the exact result: it must be set exactly for
    ring/direct/halving_doubling schedules whose splits are even (uneven floor splits give NPUs byte counts that
    differ by a byte here and there), and then agree with full execution."""
    sched = compile_case(case)
    assert sched.meta.symmetric is case.symmetric
    full = analytical.run(sched, "full").total_ns
    assert full > 0
    if case.symmetric:
        assert analytical.run(sched, "symmetric").total_ns == pytest.approx(full, rel=1e-9)
    else:
        assert analytical.run(sched).mode == "full"


@pytest.mark.parametrize("size, symmetric", [(60, True), (62, False)])
def test_symmetric_only_for_even_splits(size, symmetric):
    """62 bytes over the 10 units of a bidirectional ring on Ring(5) split unevenly, so the schedule is not symmetric:
    the symmetric shortcut (2000.969 ns) would disagree with full execution (2001.043 ns)."""
    case = Case("Ring(5)", [("Ring", 5)], "all_gather", 1, size, None, ["ring"])
    sched = compile_case(case)
    assert sched.meta.symmetric is symmetric
    full = analytical.run(sched, "full").total_ns
    auto = analytical.run(sched)
    assert auto.mode == ("symmetric" if symmetric else "full")
    assert auto.total_ns == pytest.approx(full, rel=1e-9)


@settings(max_examples=25, **SETTINGS)
@given(cases().filter(lambda c: "double_binary_tree" in c.algos))
def test_tree_schedules_run_in_full_mode(case):
    sched = compile_case(case)
    assert sched.meta.symmetric is False
    res = analytical.run(sched)
    assert res.mode == "full"
    assert res.total_ns > 0
    assert len(res.collective_end_ns) == len(sched.meta.collectives)
    assert max(res.collective_end_ns) == pytest.approx(res.total_ns)


@settings(max_examples=120, **SETTINGS)
@given(cases(mode="default", big=True).filter(lambda c: not (c.kind == "all_to_all" and
                                                              any(b == "Switch" for b, _ in c.dims))))
def test_not_faster_than_ideal(case):
    """No schedule beats sending the lower-bound bytes over all of an NPU's bandwidth. Direct on a Switch is left
    out: the analytical model lets it use the full link to every peer at once (messages never contend there, as in
    ASTRA-sim's congestion-unaware backend), and it is the default of an all-to-all on a Switch."""
    sched = compile_case(case)
    ideal = ideal_time_ns(sched)[0]
    assert ideal > 0
    for mode in ("auto", "full"):
        assert analytical.run(sched, mode).total_ns >= ideal * (1 - 1e-9)


@settings(max_examples=60, **SETTINGS)
@given(cases(mode="default", big=True, ndims=1).filter(lambda c: c.kind != "all_to_all"
                                                      and c.dims[0][0] not in ("Mesh", "HC")))
def test_single_dimension_defaults_reach_ideal_without_latency(case):
    """On one dimension the block's default algorithm is bandwidth-optimal: with no latency and an even split, the
    runtime's time is exactly the ideal time, whatever the chunk count. (Not on a Mesh: its end NPUs have one of
    the two B/2 links the ideal counts, so Mesh(2) takes twice the ideal. Not on a Hypercube: halving-doubling
    uses one of its n links per step, so it takes n times the ideal.)"""
    case.latency = 0.0
    case.size -= case.size % (2 * case.npus * case.chunks)
    sched = compile_case(case)
    ideal = ideal_time_ns(sched)[0]
    assert analytical.run(sched, "symmetric").total_ns == pytest.approx(ideal, rel=1e-9)
    assert analytical.run(sched, "full").total_ns == pytest.approx(ideal, rel=1e-9)


# ---- bytes on the wire -------------------------------------------------------------------------------------------

def expected_sent(case: Case, npu: int):
    """Closed-form bytes `npu` sends per dimension (None where the algorithm has no closed form here) and the
    allowed error per dimension."""
    shape = [k for _, k in case.dims]
    xs = coords(npu, shape)
    lengths = chunk_lengths(case.size, case.chunks)
    halves = 2 if case.kind == "all_reduce" else 1
    exp, tol = [], []
    for d, k in enumerate(shape):
        algo = case.algos[d]
        if case.kind == "all_to_all":
            if algo in ("ring", "direct"):  # every slot group goes straight to its destination coordinate
                per = (k - 1) / k
            elif algo == "halving_doubling":  # log2(k) swaps of half the chunk
                per = (k.bit_length() - 1) / 2
            else:
                exp.append(None), tol.append(None)
                continue
            exp.append(per * case.size)
            tol.append(0)
            continue
        if algo not in CLOSED_FORM:
            exp.append(None), tol.append(None)
            continue
        regions = [phase_region(int(length), d, shape, xs) for length in lengths]
        exp.append(halves * (k - 1) / k * sum(regions))
        tol.append(halves * k * case.chunks)
    return exp, tol


@settings(max_examples=200, **SETTINGS)
@given(cases(), st.data())
def test_bytes_sent_per_dimension_closed_form(case, data):
    sched = compile_case(case)
    ndims = len(case.dims)
    for npu in sorted({0, data.draw(st.integers(0, case.npus - 1), label="npu")}):
        t = sched.table(npu)
        s = t["op"] == SEND
        sent = np.bincount(t["dim"][s].astype(np.int64), weights=t["bytes"][s], minlength=ndims)
        received = np.bincount(t["dim"][~s].astype(np.int64), weights=t["bytes"][~s], minlength=ndims)
        exp, tol = expected_sent(case, npu)
        for d in range(ndims):
            if exp[d] is not None:
                assert abs(sent[d] - exp[d]) <= tol[d], (npu, d, sent[d], exp[d])
                if case.kind == "all_to_all":  # a swap: as much comes in as goes out
                    assert received[d] == sent[d]
            else:
                assert sent[d] > 0
        if case.kind == "all_reduce" and all(e is not None for e in exp):
            n, size = case.npus, case.size
            assert abs(sent.sum() - 2 * (n - 1) / n * size) <= sum(tol) + 1
    # symmetric and evenly split: every NPU sends what NPU 0 sends, so the runtime's per-dimension bytes (NPU 0's in
    # symmetric mode, the maximum over NPUs in full mode) agree
    if case.symmetric:
        t0 = sched.table(0)
        s0 = t0["op"] == SEND
        sent0 = [int(x) for x in np.bincount(t0["dim"][s0].astype(np.int64), weights=t0["bytes"][s0],
                                             minlength=ndims)]
        assert analytical.run(sched, "symmetric").per_dim_bytes == sent0
        assert analytical.run(sched, "full").per_dim_bytes == sent0


def test_full_mode_does_not_deadlock_with_trees():
    """With a per-NPU FIFO per dimension, the tree roots could start the all_gather's chunk 0 while the other members
    of their Switch group start the reduce_scatter's chunk 2, each waiting for the other forever: it must not."""
    case = Case("Ring(4)_Switch(5)", [("Ring", 4), ("Switch", 5)], "all_reduce", 3, 3000, "ring,double_binary_tree",
                ["ring", "double_binary_tree"])
    sched = compile_case(case)
    verifier.verify(sched)  # the schedule itself is correct
    assert analytical.run(sched, "full").total_ns > 0


def test_full_mode_does_not_deadlock_with_uneven_split():
    """Uneven floor splits make NPUs finish phases at slightly different times, so a per-NPU FIFO per dimension
    could queue an all_reduce's chunks in different orders on different NPUs and deadlock full execution, even for
    the default algorithms: it must not."""
    case = Case("FC(3)_Ring(3)", [("FC", 3), ("Ring", 3)], "all_reduce", 4, 146, None, ["direct", "ring"],
                bandwidth=[50.0, 12.5], latency=0.0)
    sched = compile_case(case)
    verifier.verify(sched)  # the schedule itself is correct
    assert analytical.run(sched, "full").total_ns >= ideal_time_ns(sched)[0]
