"""ASTRA-sim's congestion-unaware network as its workload layer sees it (the astra-sim step semantics): one
message, and a collective on a process group smaller than the world.

- A message (ASTRA-sim's MultiDimTopology::send in astra-network-analytical) travels in one dimension only, the
  first in which its two NPUs differ, and takes  hops x latency + bytes / bandwidth  there: hops as the block
  routes it (Ring: the shorter way round; Switch: 2; FullyConnected: 1: Dimension.hops) and the bandwidth of
  one link as ASTRA-sim's network file gives it. On a Ring that is the dimension's whole bandwidth, where this
  compiler's two-way ring gives a message one direction's half. The workload layer sends it with no delay
  (Workload::issue_send_comm), so it pays no endpoint delay.
- A collective on a group smaller than the world runs as one ring over the group's members in NPU order
  (CommunicatorGroup::get_collective_plan: a RingTopology over the involved NPUs, the Ring implementation),
  whatever the system file's implementations; each of its messages goes as above. Consecutive members differ
  first in the group's lowest dimension, `stride` apart there, and every `members`-th pair wraps round it: the
  ring is one Ring dimension of the group's size whose latency is the mean of its pairs' and whose bandwidth is
  that dimension's link (group_ring).
"""
from __future__ import annotations

from .message import Message
from .topology import Dimension, Topology
from .units import gbps_to_bytes_per_ns


def link_gbps(topology: Topology, given: tuple | None = None) -> tuple:
    """Per dimension, the bandwidth ASTRA-sim gives one message: `given` (a network file's own per-link values,
    where this compiler converted them to per-NPU ones), else a Ring's whole bandwidth and every other block's
    link (its bandwidth over the links that share it)."""
    if given is not None:
        return tuple(float(b) for b in given)
    return tuple(d.bandwidth_gbps * d.links / (1 if d.block == "Ring" else d.kind.link_share(d.size))
                 for d in topology.dims)


def message(topology: Topology, src: int, dst: int, nbytes: int, links: tuple) -> Message:
    """The message's time in the first dimension where src and dst differ (module docstring); src == dst: none."""
    busy = [0.0] * topology.ndims
    if src == dst:
        return Message(0.0, 0, tuple(busy), "")
    a, b = topology.coords(src), topology.coords(dst)
    d = next(d for d in range(topology.ndims) if a[d] != b[d])
    dim = topology.dims[d]
    hops = dim.hops(a[d], b[d])   # the block's path (a Mesh walks back towards a lower coordinate)
    busy[d] = float(nbytes) / gbps_to_bytes_per_ns(links[d])
    return Message(hops * dim.latency_ns + busy[d], hops, tuple(busy), f"dim{d} {hops} hop{'s' * (hops != 1)}")


def group_ring(topology: Topology, dims: list, parts: dict, links: tuple) -> tuple[Topology, int]:
    """(the one-dimensional Ring a group's ring runs on, the topology dimension it runs in): `dims` the group
    spans, `parts` {dimension: (members, stride)} where it covers part of one (core/step_keys.group_span)."""
    d = min(dims)
    dim = topology.dims[d]
    members, stride = parts.get(d, (dim.size, 1))
    size = 1
    for e in dims:
        size *= parts.get(e, (topology.dims[e].size, 1))[0]
    step = dim.hops(0, stride) if members > 1 else 0
    wrap = dim.hops((members - 1) * stride, 0)   # the last member back to the first (a one-way ring: forward)
    hops = ((members - 1) * step + wrap) / members
    ring = Dimension("Ring", size, links[d], dim.latency_ns * hops)
    return Topology((ring,), endpoint_delay_ns=topology.endpoint_delay_ns), d
