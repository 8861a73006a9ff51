"""NPU ranks and coordinates over a multi-dimensional shape, numbered one way everywhere: dimension 0 varies
fastest, so an NPU's rank is the sum of coordinate[d] * stride[d], with stride[0] = 1 and stride[d + 1] =
stride[d] * shape[d] (Ring(4)_Switch(8): NPU 5 is (1, 1)). The topology, the link map, the blocks (handed their
dimension's size k and stride), the runtimes, the verifiers and the lowering all number NPUs with these.

Every function takes a rank as a Python int (and gives Python ints back) or numpy arrays of them (element-wise)."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The rank stride of each dimension of `shape` (1 for dimension 0)."""
    out, stride = [], 1
    for k in shape:
        out.append(stride)
        stride *= int(k)
    return tuple(out)


def coordinate(ranks, k, stride):
    """The coordinate of `ranks` along a dimension of k NPUs with rank stride `stride`."""
    return (ranks // stride) % k


def coords(ranks, shape: Sequence[int]) -> np.ndarray:
    """The coordinates of `ranks` (an int or an array), one per dimension along a new last axis: (..., ndims)."""
    r = np.asarray(ranks, np.int64)[..., None]
    return coordinate(r, np.asarray(shape, np.int64), np.asarray(strides(shape), np.int64))


def rank(coordinates, shape: Sequence[int]):
    """The rank of the NPU at `coordinates` (one per dimension along the last axis; no dimensions: rank 0)."""
    return np.asarray(coordinates, np.int64) @ np.asarray(strides(shape), np.int64).reshape(-1)


def group_base(ranks, k, stride):
    """The NPU whose coordinate along the dimension (k NPUs, rank stride `stride`) is 0 and whose others are those of
    `ranks`: the first member of their group along the dimension, the name the runtimes give the group."""
    return ranks - coordinate(ranks, k, stride) * stride


def group_index(ranks, k, stride):
    """The number of `ranks`'s group along the dimension (k NPUs, rank stride `stride`), 0 .. npus / k - 1 in the
    order of the groups' bases: the rank in the shape without that dimension."""
    return ranks % stride + (ranks // (stride * k)) * stride
