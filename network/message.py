"""One point-to-point message on the topology (send/recv): its route and its time.

A message from NPU `src` to NPU `dst` takes the dimension-order route the lowering gives routed messages
(links.LinkMap.legs: one leg per dimension in which they differ, a Ring leg the shorter way, a Graph topology's
shortest path). It is cut through: its first byte pays every link's latency on the way and its bytes stream at
the slowest link's bandwidth, so it takes  sum(latency of each link) + endpoint delay + bytes / min(link
bandwidth)  -- the analytical model's cost of a routed message (runtime/phases.messages). Each dimension it
crosses is busy for the bytes' time, and so is each link it takes (what link sharing between concurrent transfers
reads, per dimension or per link: runtime/link_sharing.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .links import LANE_SHORTEST, ROUTED, LinkMap
from .topology import Topology
from .units import gbps_to_bytes_per_ns


@dataclass(frozen=True)
class Message:
    time_ns: float
    hops: int                  # links on the route
    dim_busy_ns: tuple         # per topology dimension: how long the message keeps its links busy
    route: str                 # the links it takes, as LinkMap.describe names them
    links: tuple = ()          # (owning NPU, link class) of each link it takes (LinkMap.owner_class); none on a Graph


def message(topology: Topology, src: int, dst: int, nbytes: int, store_and_forward: bool = False) -> Message:
    """The message's route and time (module docstring); src == dst moves nothing and takes no time. Stored and
    forwarded (ASTRA-sim's congestion-aware backend), each link takes the whole message at its own bandwidth
    before the next starts: sum(latency + bytes / bandwidth) over the links, plus the endpoint delay."""
    busy = [0.0] * topology.ndims
    if src == dst:
        return Message(0.0, 0, tuple(busy), "")
    links, bandwidth = _network(topology)
    _, ids = links.routes([src], [dst], [ROUTED], [LANE_SHORTEST], [0])
    stream_ns = float(nbytes) / gbps_to_bytes_per_ns(float(bandwidth[ids].min()))
    for d in set(links.dim_of(ids).tolist()) if topology.graph is None else {0}:
        busy[d] = stream_ns
    route = " ".join(links.describe(int(i)) for i in ids[:8]) + (" ..." if len(ids) > 8 else "")
    owned = tuple(zip(*(a.tolist() for a in links.owner_class(ids)))) if topology.graph is None else ()
    travel_ns = float((float(nbytes) / gbps_to_bytes_per_ns(bandwidth[ids])).sum()) if store_and_forward else \
        stream_ns
    return Message(float(links.latency(ids).sum()) + topology.endpoint_delay_ns + travel_ns, int(len(ids)),
                   tuple(busy), route, owned)


@lru_cache(maxsize=8)
def _network(topology: Topology) -> tuple[LinkMap, np.ndarray]:
    """The link map and every link's bandwidth by its id (a step sends many messages over one topology)."""
    graph = topology.links()
    bandwidth = np.zeros(int(graph.id.max()) + 1 if len(graph) else 0)
    bandwidth[graph.id] = graph.gbps
    return LinkMap(topology.to_dict()), bandwidth
