"""Estimated time of one phase of one chunk: the latency-aware cost model the scheduling passes balance with.

It follows the analytical runtime's rules (latency x hops + bytes / link bandwidth per step, the link model of
each building block, no contention), in closed form per algorithm, so a pass can weigh a chunk's phases without
lowering them. Trees are estimated (height-many latency steps, half the data per tree); the others are exact for
evenly split sizes.
"""
from __future__ import annotations

import math

from ..network import blocks
from ..network.units import gbps_to_bytes_per_ns

def _link(block: str, k: int, gbps: float) -> float:
    """Bytes per ns of one link: the NPU's bandwidth over the links that share it (network/blocks/; a Graph's
    per-NPU bandwidth is an estimate: its messages take paths whose links the lowering knows)."""
    return gbps_to_bytes_per_ns(gbps / blocks.BLOCKS[block].link_share(k))


def phase_steps(kind: str, algorithm: str, block: str, k: int, gbps: float, latency_ns: float,
                region: float) -> list[tuple[float, float]]:
    """(latency, transfer) in ns of every step of a `kind` phase of `algorithm` on a k-member dimension, for a chunk
    region of `region` bytes. Trees are one entry standing for all their steps."""
    link = _link(block, k, gbps)
    hop = lambda d: latency_ns * blocks.BLOCKS[block].cost_hops(k, d)  # noqa: E731
    neighbour = blocks.BLOCKS[block].neighbour_links
    if kind == "all_to_all":
        piece = region / k
        if algorithm == "direct":
            return [(max(hop(k // 2), hop(k - 1)), piece / link)]
        if algorithm == "halving_doubling":
            return [(hop(1 << s), region / 2 / link) for s in range(int(math.log2(k)))]
        if neighbour:  # ring: both neighbours at distance t in step t
            return [(max(hop(t), hop(k - t)), piece / link) for t in range(1, k // 2 + 1)]
        return [(hop(1), piece / link)] * k  # one partner per round
    if algorithm == "ring":
        per_link = region / k / (2 if neighbour else 1)
        return [(max(hop(1), hop(k - 1)), per_link / link)] * (k - 1)
    if algorithm == "direct":
        return [(max(hop(k // 2), hop(k - 1)), region / k / link)]
    if algorithm == "halving_doubling":
        steps = int(math.log2(k))
        dists = [k >> (s + 1) for s in range(steps)] if kind == "reduce_scatter" else [1 << s for s in range(steps)]
        return [(hop(d), region * d / k / link) for d in dists]
    if algorithm == "double_binary_tree":
        height = max(1, math.ceil(math.log2(k + 1)) - 1)
        return [(2 * height * hop(1), (k - 1) / k * region / 2 / link)]
    raise ValueError(f"no cost model for {algorithm}")


def phase_time_ns(kind: str, algorithm: str, block: str, k: int, gbps: float, latency_ns: float,
                  region: float, active: int = 1) -> float:
    """How long a phase occupies its dimension. With one active chunk per dimension a step holds the links for its
    latency and its transfer; with `active` chunks in progress the links serve other chunks' steps while a step's
    latency elapses, so a step costs max(transfer, (latency + transfer) / active) in steady state."""
    return sum(max(t, (lat + t) / active)
               for lat, t in phase_steps(kind, algorithm, block, k, gbps, latency_ns, region))


def region_sizes(kind: str, dims_in_order: list[int], shape: list[int], chunk: float) -> list[float]:
    """Region entering each phase of a chunk visiting `dims_in_order` (reduce-scatter shrinks, all-gather grows)."""
    if kind == "all_to_all":
        return [chunk] * len(dims_in_order)
    if kind == "reduce_scatter":
        out, region = [], chunk
        for d in dims_in_order:
            out.append(region)
            region /= shape[d]
        return out
    grown = region_sizes("reduce_scatter", dims_in_order[::-1], shape, chunk)
    return grown[::-1]
