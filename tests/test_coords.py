"""NPU ranks and coordinates are numbered in one place (network/coords.py): dimension 0 varies fastest."""
import itertools
import os
import re

import numpy as np
import pytest

from astra_compile.compiler.frontend.mesh import mesh_coords
from astra_compile.network.coords import coordinate, coords, group_base, group_index, rank, strides
from astra_compile.network.parse import parse_topology

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SHAPES = [(4,), (2, 3), (4, 1, 2), (3, 2, 5)]


def _by_hand(shape):
    """Every NPU's coordinates, dimension 0 fastest, by counting."""
    return [c[::-1] for c in itertools.product(*(range(k) for k in reversed(shape)))]


@pytest.mark.parametrize("shape", SHAPES)
def test_coordinates_count_dimension_zero_fastest(shape):
    n = int(np.prod(shape))
    at = coords(np.arange(n), shape)
    assert at.tolist() == [list(c) for c in _by_hand(shape)]
    assert rank(at, shape).tolist() == list(range(n))
    assert strides(shape) == tuple(int(np.prod(shape[:d])) for d in range(len(shape)))
    for d, (k, st) in enumerate(zip(shape, strides(shape))):
        assert coordinate(np.arange(n), k, st).tolist() == at[:, d].tolist()
        # the group's base: the same NPU with coordinate 0 on d; its index: its rank with d left out
        zeroed = at.copy()
        zeroed[:, d] = 0
        assert group_base(np.arange(n), k, st).tolist() == rank(zeroed, shape).tolist()
        rest = [e for e in range(len(shape)) if e != d]
        assert group_index(np.arange(n), k, st).tolist() == rank(at[:, rest], [shape[e] for e in rest]).tolist()


def test_scalars_stay_python_ints():
    assert coordinate(13, 3, 2) == 0 and type(coordinate(13, 3, 2)) is int
    assert type(group_base(13, 3, 2)) is int and group_base(13, 3, 2) == 13
    assert coords(5, (4, 8)).tolist() == [1, 1]   # Ring(4)_Switch(8): NPU 5 is (1, 1)
    assert int(rank([], [])) == 0


def test_the_topology_numbers_npus_the_same_way():
    topology = parse_topology("Ring(3)_Switch(2)_Ring(5)")
    assert topology.strides() == strides((3, 2, 5)) == (1, 3, 6)
    assert topology.coords_array().tolist() == [list(c) for c in _by_hand((3, 2, 5))]
    assert [topology.coords(r) for r in range(topology.npus)] == _by_hand((3, 2, 5))
    assert all(type(c) is int for c in topology.coords(29))
    assert topology.peer(29, 1, 0) == 26


def test_a_mesh_is_row_major_the_network_order_reversed():
    axes = {"dp": 2, "pp": 3, "tp": 4}
    expected = list(itertools.product(range(2), range(3), range(4)))   # the last axis fastest
    assert [tuple(c) for c in mesh_coords(np.arange(24), axes).tolist()] == expected


def test_no_module_computes_strides_by_hand():
    """cumprod of a shape, or a product of a shape's first dimensions, is network/coords.py's strides()."""
    by_hand = re.compile(r"cumprod\(|prod\([^()]*\[:[^\]]*\]\)")
    found = []
    for folder, subfolders, files in os.walk(REPO):
        top = os.path.relpath(folder, REPO).split(os.sep)[0]
        if top in ("tests", "build") or top.endswith(".egg-info") or top.startswith(".") and top != ".":
            subfolders[:] = []
            continue
        for name in (f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path) as f:
                found += [f"{os.path.relpath(path, REPO)}:{i}" for i, line in enumerate(f, 1) if by_hand.search(line)]
    assert found == []
