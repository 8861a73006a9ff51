"""All-to-all along one dimension, in place, as pairwise exchanges of slot groups.

A phase along a dimension of k members moves, for every member m and peer p, the slots whose coordinate in this
dimension is x (a slot is the buffer piece for one destination NPU of the group). The receiver stores a slot sent
with coordinate x at coordinate x XOR m XOR p. For direct and ring exchanges x = p, so the slot lands at m, the
sender: after every dimension has been processed, slot j of NPU n holds what NPU j had for n. For
halving-doubling (hypercube exchange, k a power of two) step s swaps, with partner m XOR 2^s, the slot groups whose
bit s differs from m's; the XOR relabelling makes the received groups land exactly in the slots just sent, and after
the last step every slot index equals its source (slot = destination XOR all flipped bits = source).

Each exchange is a swap: what a member receives in a step overwrites only what it sent in that same step.
"""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def exchanges(algorithm: str, k: int, bidirectional: bool = True) -> tuple[tuple[int, int, int, int, int], ...]:
    """(step, src, dst, x, direction) for every slot group sent; stored at x ^ src ^ dst by dst.

    `bidirectional`: the dimension is a Ring, whose two neighbour links can carry one exchange each per step."""
    rows = []
    if algorithm == "direct":
        rows = [(0, m, p, p, 0) for m in range(k) for p in range(k) if p != m]
    elif algorithm == "ring" and not bidirectional:
        # one partner per step (a switch port or one FC link at a time): round t pairs m with (t - m) mod k, an
        # involution, so every exchange is still a swap; k rounds, each NPU idle in at most one
        for t in range(k):
            for m in range(k):
                p = (t - m) % k
                if p != m:
                    rows.append((t, m, p, p, 0))
        used = sorted({r[0] for r in rows})
        rows = [(used.index(r[0]),) + r[1:] for r in rows]
    elif algorithm == "ring":
        # ring-distance-ordered pairwise exchange: step t-1 swaps with the members t ahead and t behind
        for t in range(1, k // 2 + 1):
            for m in range(k):
                ahead, behind = (m + t) % k, (m - t) % k
                rows.append((t - 1, m, ahead, ahead, 1))
                if behind != ahead:
                    rows.append((t - 1, m, behind, behind, -1))
    elif algorithm == "halving_doubling":
        if k & (k - 1):
            raise ValueError(f"halving_doubling needs a power-of-two group, got {k}")
        for s in range(k.bit_length() - 1):
            bit = 1 << s
            for m in range(k):
                for x in range(k):
                    if (x & bit) != (m & bit):
                        rows.append((s, m, m ^ bit, x, 0))
    else:
        raise ValueError(f"no all_to_all schedule for {algorithm}")
    return tuple(rows)
