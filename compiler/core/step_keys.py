"""The names a training step's collectives and messages are known by, on a topology: the dimensions a process
group spans (group_span), the key of a collective (its kind, bytes, dimensions, root place and the part of a
dimension its group covers: equal keys share one compiled schedule) and the stream a message runs on. The frontend
(Chakra traces made one SPMD program), the driver, the step directory and the reports all read them here.
"""
from __future__ import annotations

import math

import numpy as np

from ...dialects import workload as wl
from ...network.errors import UserError
from ...network.topology import Topology


def group_dims(topology: Topology, ranks) -> list[int]:
    """The topology dimensions a process group spans (group_span)."""
    return group_span(topology, ranks)[0]


def group_span(topology: Topology, ranks) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """(the dimensions a process group spans, {dimension: (members, stride)} where it covers only part of one).
    Along each dimension its members' coordinates are the whole dimension, a block of consecutive ones, or every
    stride-th one (what a mesh axis gives when it splits a dimension: tp=4 on Ring(8) takes 0-3 and 4-7, dp=2 takes
    0 and 4), and the group is every combination of them (docs/workloads.md)."""
    ranks = sorted(set(int(r) for r in ranks))
    if any(not 0 <= r < topology.npus for r in ranks):
        raise UserError(f"process group {_show(ranks)} names ranks outside the topology's {topology.npus} NPUs")
    coords = topology.coords_array()[ranks]
    dims, parts = [], {}
    for d, n in enumerate(topology.shape):
        at = np.unique(coords[:, d])
        k = len(at)
        if k == 1:
            continue
        step = int(at[1] - at[0])
        even = np.array_equal(at, at[0] + step * np.arange(k)) and n % k == 0
        if not even or not (k == n or (step == 1 and at[0] % k == 0) or (step * k == n and at[0] < step)):
            raise UserError(f"process group {_show(ranks)} does not map onto {topology.name}: along dimension {d} "
                            f"its coordinates {_show(at.tolist())} are not the whole dimension, a block of "
                            f"consecutive ones or every {n // k}-th one; give a --mesh whose axes split the "
                            "topology's dimensions (the last mesh axis takes dimension 0)")
        dims.append(d)
        if k < n:
            parts[d] = (k, step)
    if len(ranks) != math.prod(len(np.unique(coords[:, d])) for d in dims):
        raise UserError(f"process group {_show(ranks)} is not every combination of its coordinates on "
                        f"{topology.name}: a mesh axis's group is")
    return dims, parts


def _show(ranks) -> str:
    return "[" + ",".join(map(str, ranks[:6])) + (",...]" if len(ranks) > 6 else "]")


def group_key(topology: Topology, kind: str, nbytes: int, group, root: int = -1) -> tuple:
    """The collective_key of a frontend collective (an Op: kind, bytes, its group's ranks, root)."""
    dims, parts = group_span(topology, group)
    return span_key(kind, nbytes, dims, root, topology, part_key(dims, parts))


def part_key(dims, parts: dict) -> tuple:
    """The key element of a group covering part of some dimensions: ("part", (dim, members, stride), ...)."""
    return ("part",) + tuple((d,) + tuple(parts[d]) for d in dims if d in parts) if parts else ()


def span_key(kind: str, nbytes: int, dims, root: int, topology: Topology, part: tuple = ()) -> tuple:
    """The key of a `kind` collective over `dims` rooted at NPU `root` (-1: none), `part` its part_key."""
    # a root's place: its coordinates on `dims`, counted inside the group where it covers part of a dimension
    place = group_place(topology, {p[0]: p[1:] for p in part[1:]}, int(root), dims) if kind in wl.comm.ROOTED \
        else -1
    return key_of(kind, nbytes, dims, place, part)


def key_of(kind: str, nbytes: int, dims, place: int, part: tuple = ()) -> tuple:
    """A collective key from its parts: `place` is a rooted kind's root place (ignored for the others), `part`
    its part_key."""
    key = (kind, int(nbytes), tuple(dims))
    return key + ((int(place),) if kind in wl.comm.ROOTED else ()) + ((part,) if part else ())


def group_place(topology: Topology, parts: dict, npu: int, dims=None) -> int:
    """NPU `npu` in the network its group sees (Topology.within of `parts`): its coordinates on `dims` (default:
    every dimension; 0 on the others), each counted inside the group where it covers part of that dimension."""
    at = topology.coords(npu)
    inner = topology.within(parts) if parts else topology
    return sum(member_index(at[d], parts.get(d)) * inner.strides()[d]
               for d in (range(topology.ndims) if dims is None else dims))


def member_index(c: int, part) -> int:
    """Coordinate `c` counted inside a group covering `part` (members, stride) of its dimension (None: all of it)."""
    if part is None:
        return int(c)
    size, stride = part
    return int(c % size) if stride == 1 else int(c // stride)


def key_parts(key: tuple) -> dict[int, tuple[int, int]]:
    """{dimension: (members, stride)} of a collective key whose group covers part of some dimensions."""
    last = key[-1]
    return {p[0]: tuple(p[1:]) for p in last[1:]} if isinstance(last, tuple) and last[:1] == ("part",) else {}


def key_root(key: tuple) -> int:
    """The root place of a broadcast's or reduce's key (-1 for other kinds)."""
    return key[3] if len(key) > 3 and isinstance(key[3], int) else -1


def p2p_stream(op) -> tuple:
    """The stream a send or recv runs on: one per peer and direction. NCCL gives each peer pair a communicator and
    a stream, and torch's pipeline schedules post a stage's sends and receives of one step together
    (batch_isend_irecv, one NCCL group) so that neither waits for the other; messages in one direction keep
    their order."""
    return ("p2p", op.kind, wl.peer(op))
