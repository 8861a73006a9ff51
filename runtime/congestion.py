"""Congestion-aware runtime: executes schedule tables over the physical links of the topology.

Model (documented in docs/cost-model.md):
- Links are resources. A Switch dimension gives every NPU one uplink to its group's switch and one downlink from it
  (bandwidth B each); a FullyConnected dimension one link to each other member (B/(k-1)); a Ring dimension one link
  to each neighbour in each direction (B/2); a Mesh dimension the same without the wrap-around links, so a transfer
  between a line's ends walks every link in between. The switch itself is non-blocking: only its ports queue.
- A message follows its route hop by hop and takes every link on it for bytes / bandwidth. Every link serves its
  queue first-in first-out (ties by arrival order). Switching:
  - `cut-through` (default, as real switches and packetised transfers behave): the message's head reaches the next
    node latency after it started on a link and joins the next link's queue then; it is delivered latency after
    its tail leaves the last link. An uncontended message costs latency x hops + bytes / bandwidth, exactly the
    analytical model.
  - `store-and-forward` (ASTRA-sim's congestion-aware backend): a node forwards a message only once all of it has
    arrived, so each hop adds bytes / bandwidth.
- An NPU injects a step's messages in rotated peer order (the peer just after itself first), as collective
  libraries do to spread load over destinations.
- Phases, steps and chunk pipelining follow the analytical runtime (phases.py): a step ends when the NPU's own
  messages are delivered and those it receives have come in; each NPU admits `active_chunks` phases per dimension
  in an order shared by the dimension's group.

Executions:
- `full`: every NPU, every message, every link.
- `symmetric`: for schedules whose every NPU runs a relabelling of NPU 0's table under a symmetry of the network
  that maps links to links (meta.symmetric, and no halving-doubling across a Ring of more than two NPUs, whose XOR
  partners are not a rotation of the ring), every link of a class carries the same traffic up to relabelling. Only
  NPU 0's messages run, over one representative link per class: its uplink and downlink of each switch dimension,
  its own link to each FC peer, one link per direction of each ring. A message NPU 0 receives is the mirror image
  of one it sends and arrives when that one is delivered. Tests check it against `full`.
"""
from __future__ import annotations

import heapq

import numpy as np

from .phases import INTRA_POLICIES, PhaseEngine, Result, Table, messages, table_of
from .tables import Schedule


SWITCHING = ("cut-through", "store-and-forward")


def symmetric_ok(meta: dict) -> bool:
    """Can NPU 0 over representative links stand for the whole network (see the module docstring)?"""
    if not meta.get("symmetric"):
        return False
    dims = meta["topology"]["dims"]
    return not any(st["algorithm"] == "halving_doubling" and dims[st["dim"]]["block"] == "Ring"
                   and dims[st["dim"]]["size"] > 2 for c in meta["collectives"] for st in c["stages"])


def run(schedule: Schedule, intra: str = "fifo", active_chunks: int = 1, timeline: bool = False,
        switching: str = "cut-through", mode: str = "auto") -> Result:
    """Execute the tables over the links. mode: auto (symmetric when valid), symmetric or full; `timeline` keeps
    every link transfer for a trace (full mode: every link of the network)."""
    meta = schedule.meta
    if switching not in SWITCHING:
        raise ValueError(f"unknown switching {switching}")
    if mode == "auto":
        mode = "symmetric" if symmetric_ok(meta) and not timeline else "full"
    if mode == "symmetric" and not symmetric_ok(meta):
        raise ValueError("this schedule has no symmetry the congestion runtime can use: run it in full mode")
    if mode not in ("symmetric", "full"):
        raise ValueError(f"unknown mode {mode}")
    if intra not in INTRA_POLICIES:
        raise ValueError(f"unknown intra-dimension policy {intra}")
    if active_chunks < 1:
        raise ValueError("active_chunks must be at least 1")
    npus = [0] if mode == "symmetric" else range(meta["npus"])
    tables = {n: table_of(schedule, n) for n in npus}
    return _Engine(meta, tables, intra, active_chunks, timeline, switching == "cut-through", mode).run()


class _Links:
    """Integer ids for the physical links, and the route of a transfer as a list of link ids."""

    def __init__(self, meta: dict, representative: bool = False):
        self.representative = representative
        dims = meta["topology"]["dims"]
        self.blocks = [d["block"] for d in dims]
        self.shape = [d["size"] for d in dims]
        self.strides = [int(np.prod(self.shape[:d])) for d in range(len(dims))]
        self.ids: dict = {}
        self.names: list = []

    def _id(self, key) -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.names)
            self.names.append(key)
        return i

    def route(self, src: int, dst: int, dim: int, lane: int, hops: int) -> list[int]:
        block = self.blocks[dim]
        if self.representative:  # one link per class stands for all its images under the network's symmetry
            if block == "Switch":
                return [self._id(("up", dim, src)), self._id(("down", dim, src))]
            if block == "FullyConnected":
                return [self._id(("fc", dim, src, dst))]
            return [self._id(("ring", dim, lane, src))] * hops
        if block == "Switch":
            return [self._id(("up", dim, src)), self._id(("down", dim, dst))]
        if block == "FullyConnected":
            return [self._id(("fc", dim, src, dst))]
        k, stride = self.shape[dim], self.strides[dim]
        c0 = (src // stride) % k
        if block == "Mesh":  # a line: towards the receiver, never round
            step = 1 if (dst // stride) % k > c0 else -1
            lane = 0 if step == 1 else 1
        else:
            step = 1 if lane == 0 else -1
        nodes = [src + (((c0 + step * i) % k) - c0) * stride for i in range(hops)]
        return [self._id(("ring", dim, lane, node)) for node in nodes]

    def describe(self, link: int) -> str:
        kind, dim, *rest = self.names[link]
        if kind == "up":
            return f"dim{dim} npu{rest[0]}->switch"
        if kind == "down":
            return f"dim{dim} switch->npu{rest[0]}"
        if kind == "fc":
            return f"dim{dim} npu{rest[0]}->npu{rest[1]}"
        lane, node = rest
        return f"dim{dim} npu{node}->{'next' if lane == 0 else 'prev'}"


class _Engine(PhaseEngine):
    """Steps over the links: a step injects its messages into their first links; links serve their queues."""

    def __init__(self, meta, tables: dict, intra: str, active: int, timeline: bool, cut_through: bool, mode: str):
        super().__init__(meta, tables, intra, active, mode == "symmetric")
        self.timeline, self.cut_through = timeline, cut_through
        self.latency = [float(x) for x in meta["latency_ns"]]
        self.links = _Links(meta, representative=self.symmetric)
        self._build(Table.concat(list(tables.values())))
        nlinks = len(self.links.names)
        self.queues = [[] for _ in range(nlinks)]  # per link: heap of (ready time, seq, message, hop)
        self.link_busy = [False] * nlinks
        self.link_time = [0.0] * nlinks
        self.link_bytes = [0] * nlinks
        self.transfers = []
        self.own_left: dict = {}   # (pk, step) -> sends not yet delivered
        self.got: dict = {}        # (pk, step) -> receives arrived
        self.touched: set = set()  # links that may start a transfer now
        self.served = 0            # link transfers simulated

    def _build(self, table: Table) -> None:
        """Per (npu, c, f, s): steps of [message ids in injection order, receives expected]; per message its route."""
        m = messages(table, self.meta["latency_ns"])
        self.msg_route, self.msg_ns, self.msg_lat, self.msg_dst, self.msg_src, self.msg_bytes = [], [], [], [], [], []
        cols = [m[k].tolist() for k in ("npu", "coll", "flow", "stage", "step", "send", "peer", "lane", "dim", "bytes",
                                        "link_ns", "hops")]
        pending_sends: dict = {}
        for npu, c, f, s, st, snd, peer, lane, d, nbytes, link_ns, hops in zip(*cols):
            pk = (npu, c, f, s)
            steps = self.steps.setdefault(pk, [])
            while len(steps) <= st:
                steps.append([[], 0])
            if snd:
                mid = len(self.msg_route)
                self.msg_route.append(self.links.route(npu, peer, d, lane, hops))
                self.msg_ns.append(link_ns)
                self.msg_lat.append(self.latency[d])
                self.msg_src.append((pk, st))
                self.msg_dst.append(((peer, c, f, s), st))
                self.msg_bytes.append(nbytes)
                pending_sends.setdefault((pk, st), []).append((((peer - npu) % self.npus), mid))
            elif not self.symmetric:  # symmetric: each receive is the mirror of an own send, delivered with it
                steps[st][1] += 1
        for (pk, st), sends in pending_sends.items():
            self.steps[pk][st][0] = [mid for _, mid in sorted(sends)]  # rotated peer order

    def _enqueue(self, mid: int, hop: int, now: float) -> None:
        link = self.msg_route[mid][hop]
        heapq.heappush(self.queues[link], (now, self.seq, mid, hop))
        self.seq += 1
        self.touched.add(link)

    def start_phase(self, pk, now: float) -> None:
        self.start_step(pk, 0, now)

    def start_step(self, pk, st: int, now: float) -> None:
        sends = self.steps[pk][st][0] if st < self.nsteps(pk) else []
        self.own_left[(pk, st)] = len(sends)
        self.begun[(pk, st)] = now
        for mid in sends:
            self._enqueue(mid, 0, now)
        self._check((pk, st), now)

    def _check(self, sk, now: float) -> None:
        if sk not in self.begun:
            return
        pk, st = sk
        expect = self.steps[pk][st][1] if st < self.nsteps(pk) else 0
        if self.own_left.get(sk, 0) == 0 and self.got.get(sk, 0) >= expect:
            del self.begun[sk]
            self.own_left.pop(sk, None)
            self.got.pop(sk, None)
            self.push(now, "step_done", sk)

    def on_event(self, kind: str, data, now: float) -> None:
        if kind == "link_free":
            self.link_busy[data] = False
            self.touched.add(data)
        elif kind == "hop_done":
            mid, hop = data
            if hop + 1 < len(self.msg_route[mid]):
                self._enqueue(mid, hop + 1, now)
                return
            sk = self.msg_src[mid]  # delivered
            self.own_left[sk] -= 1
            self._check(sk, now)
            if not self.symmetric:
                rk = self.msg_dst[mid]
                self.got[rk] = self.got.get(rk, 0) + 1
                self._check(rk, now)
        else:  # step_done
            self.step_finished(*data, now)

    def serve(self, now: float) -> None:
        while self.touched:
            link = self.touched.pop()
            if self.link_busy[link] or not self.queues[link]:
                continue
            _, _, mid, hop = heapq.heappop(self.queues[link])
            end = now + self.msg_ns[mid]
            self.link_busy[link] = True
            self.served += 1
            self.link_time[link] += self.msg_ns[mid]
            self.link_bytes[link] += self.msg_bytes[mid]
            if self.timeline:
                self.transfers.append((link, now, end, mid))
            self.push(end, "link_free", link)
            last = hop + 1 == len(self.msg_route[mid])
            # the next node has the head `latency` after it left (cut-through) or the whole message after the tail
            # arrived (store-and-forward); delivery is always the tail's arrival
            ahead = now if self.cut_through and not last else end
            self.push(ahead + self.msg_lat[mid], "hop_done", (mid, hop))

    def run(self) -> Result:
        result = self.simulate()
        result.backend = "congestion"
        nlinks = len(self.links.names)
        # every NPU's links repeat the representative ones in symmetric execution
        result.link_transfers = {"simulated": self.served,
                                 "modelled": self.served * (self.npus if self.symmetric else 1)}
        result.links = {"name": [self.links.describe(i) for i in range(nlinks)],
                        "busy_ns": self.link_time, "bytes": self.link_bytes,
                        "dim": [self.links.names[i][1] for i in range(nlinks)]}
        result.transfers = [(self.links.describe(l), a, b, self.msg_src[mid][0][0], self.msg_dst[mid][0][0],
                             self.msg_bytes[mid]) for l, a, b, mid in self.transfers]
        return result
