"""Templates built with array operations equal the row-by-row construction they replace (an independent oracle
written out here), transfer for transfer and in the same order."""
import numpy as np
import pytest

from astra_compile import algorithms
from astra_compile.algorithms import Transfers, same_units


def ring_rows(kind, k, bidirectional):
    """The ring as its docstring says it: k-1 steps, each member passes one block (half) to its neighbour."""
    parts = 2 if bidirectional else 1
    rows = []
    for m in range(k):
        for s in range(k - 1):
            for q in range(parts):
                d = 1 if q == 0 else -1
                b = (m - d * (s + 1)) % k if kind == "reduce_scatter" else (m - d * s) % k
                rows.append(same_units(s, m, (m + d) % k, b * parts + q, b * parts + q + 1, d))
    return Transfers.build(k * parts, rows, reduce=kind == "reduce_scatter")


FIELDS = ("step", "src", "dst", "src_lo", "src_hi", "dst_lo", "dst_hi", "reduce", "direction")


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_ring_template_equals_the_row_by_row_ring(kind, bidirectional):
    ring = algorithms.get("ring")
    for k in range(2, 34):
        built, oracle = ring.template(kind, k, bidirectional), ring_rows(kind, k, bidirectional)
        assert (built.units, built.steps) == (oracle.units, oracle.steps)
        for name in FIELDS:
            assert np.array_equal(getattr(built, name), getattr(oracle, name)), (k, name)


def tree_rows(kind, trees):
    """MultiTree as its docstring says it: tree r carries block r, up the trees for a reduce-scatter (reverse step
    order), down them for an all-gather, each edge on its recorded link."""
    n = trees.parent.shape[0]
    rows = []
    for r in range(n):
        for v in range(n):
            p = int(trees.parent[r, v])
            if p < 0:
                continue
            t, lid = int(trees.step[r, v]), int(trees.link[r, v])
            rows.append((same_units(trees.steps - t, v, p, r, r + 1) if kind == "reduce_scatter" else
                         same_units(t - 1, p, v, r, r + 1)) + (lid,))
    return Transfers.build(n, rows, reduce=kind == "reduce_scatter")


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("topology", ["4x4_torus", "3x5_torus", "4x4_mesh", "FC(4)_Ring(3)", "2x2x2_torus"])
def test_tree_template_equals_the_row_by_row_trees(kind, topology):
    from astra_compile.algorithms import multitree
    from astra_compile.network.parse import parse_topology
    trees, _ = multitree.allocate(parse_topology(topology))
    built, oracle = multitree.template(kind, trees), tree_rows(kind, trees)
    assert (built.units, built.steps) == (oracle.units, oracle.steps)
    for name in FIELDS + ("link",):
        assert np.array_equal(getattr(built, name), getattr(oracle, name)), name
