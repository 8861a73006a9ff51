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
  messages are delivered (in a phase that `ends_on_send`, once they are injected) and those it receives have come
  in; each NPU admits `active_chunks` phases per dimension in an order shared by the dimension's group.

- Ties: events of one instant run in the order they were created; then waiting phases are admitted in (NPU,
  dimension) order; then idle links start their next transfer in link-number order (network/links.py).

Engines: the plan (congestion_plan.py: messages, routes, injection order, service groups, as flat numpy arrays)
runs in the compiled event core (_linkcore.c, built by `pip install .`) or, without a C compiler at install time,
in the Python reference engine below. They give identical results (tests/test_linkcore.py).

Executions:
- `full`: every NPU, every message, every link.
- `symmetric`: for schedules whose every NPU runs a relabelling of NPU 0's table under a symmetry of the network
  that maps links to links (Meta.symmetric_links, as the lowering's algorithms answer: not halving-doubling across
  a Ring of more than two NPUs, whose XOR partners are not a rotation of the ring, nor whole-network trees), every
  link of a class carries the same traffic up to relabelling. Only NPU 0's messages run, over one representative
  link per class: its uplink and downlink of each switch dimension, its own link to each FC peer, one link per
  direction of each ring. A message NPU 0 receives is the mirror image of one it sends and arrives when that one is
  delivered. Tests check it against `full`.
"""
from __future__ import annotations

import hashlib
import heapq
import os
import warnings

import numpy as np

from ..network.errors import InputWarning
from .congestion_plan import Plan
from .run_record import SWITCHING  # noqa: F401 (the option's values, written once with the others)
from .phases import (INTRA_POLICIES, OptionError, PhaseEngine, Result, make_result, never_starts,
                     tables_by_npu, tables_of, waits_forever)
from .tables import Schedule, Table

try:  # the compiled event core (built by `pip install .`; without a C compiler the Python engine runs instead)
    from . import _linkcore
except ImportError:  # pragma: no cover - depends on the build machine
    _linkcore = None


def _built_from_other_source(core) -> bool:
    """True when this checkout's _linkcore.c is not the source `core` was built from (an editable install pulled
    without `pip install -e .` again): such a core reads today's plans with yesterday's layout, silently wrong or
    out of bounds. An installed wheel ships no source beside its core: nothing to compare, nothing stale."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_linkcore.c")
    if not os.path.exists(source):
        return False
    with open(source, "rb") as f:
        return getattr(core, "SOURCE_DIGEST", None) != hashlib.sha256(f.read()).hexdigest()[:16]


STALE_CORE = _linkcore is not None and _built_from_other_source(_linkcore)
if STALE_CORE:
    _linkcore = None


I64, F64 = np.int64, np.float64


def symmetric_ok(meta) -> bool:
    """Can NPU 0 over representative links stand for the whole network (see the module docstring)? The lowering
    answers (Meta.symmetric_links)."""
    return meta.symmetric and meta.symmetric_links


ENGINES = ("auto", "compiled", "python")


def run(schedule: Schedule, intra: str = "fifo", active_chunks: int = 1, timeline: bool = False,
        switching: str = "cut-through", mode: str = "auto", engine: str = "auto",
        local_mem_gbps: float | None = None) -> Result:
    """Execute the tables over the links. mode: auto (symmetric when valid), symmetric or full; `timeline` keeps
    every link transfer for a trace (full mode: every link of the network). engine: the compiled event core
    (auto: when built) or the Python reference engine; both give identical results (tested). local_mem_gbps:
    ASTRA-sim's local-mem-bw reduction term (network/memory.py; None: off)."""
    meta = schedule.meta
    if switching not in SWITCHING:
        raise OptionError(f"unknown switching {switching}")
    if mode == "auto":
        mode = "symmetric" if symmetric_ok(meta) and not timeline else "full"
    if mode == "symmetric" and not symmetric_ok(meta):
        raise OptionError("--execution symmetric: this schedule has no symmetry the congestion runtime can use (trees, "
                         "rings over ranks, meshes, uneven splits, halving-doubling across a Ring): use --execution full")
    if mode not in ("symmetric", "full"):
        raise OptionError(f"unknown mode {mode}")
    if intra not in INTRA_POLICIES:
        raise OptionError(f"unknown intra-dimension policy {intra}")
    if active_chunks < 1:
        raise OptionError("active_chunks must be at least 1")
    if engine not in ENGINES:
        raise OptionError(f"unknown engine {engine}")
    if engine == "compiled" and _linkcore is None:
        raise OptionError("the compiled congestion core is older than runtime/_linkcore.c: run pip install -e . "
                          "again" if STALE_CORE else "the compiled congestion core is not built (reinstall with a C "
                          "compiler)")
    if STALE_CORE:
        warnings.warn("the compiled congestion core was built from an older runtime/_linkcore.c (run pip install -e "
                      ". again); this run uses the Python engine: the same results, about 8x slower", InputWarning)
    npus = [0] if mode == "symmetric" else range(meta.npus)
    cut_through = switching == "cut-through"
    if engine == "python" or _linkcore is None:
        tables = tables_by_npu(schedule, npus)
        plan = Plan(meta, npus, lambda batch: Table.concat([tables[n] for n in batch.tolist()]), mode == "symmetric",
                    local_mem_gbps, ends=timeline)
        out = _Engine(plan, tables, intra, active_chunks, timeline, cut_through).simulate_links()
    else:  # tables are read in batches: only the plan is held
        plan = Plan(meta, npus, lambda n: tables_of(schedule, n, ordered=False), mode == "symmetric", local_mem_gbps,
                    ends=timeline)
        out = _compiled(plan, intra, active_chunks, timeline, cut_through)
    return _result(plan, *out)


def _result(plan: Plan, rec: dict, link_time, link_bytes, served: int, transfers) -> Result:
    result = make_result(plan.meta, "symmetric" if plan.symmetric else "full", rec, plan.ndims, plan.per_dim_bytes)
    result.backend = "congestion"
    # every NPU's links repeat the representative ones in symmetric execution
    result.link_transfers = {"simulated": served, "modelled": served * (plan.npus if plan.symmetric else 1)}
    names = plan.link_names()
    result.links = {"name": names, "busy_ns": list(link_time), "bytes": list(link_bytes), "dim": plan.link_dims(),
                    "id": plan.link_id.tolist()}   # network/links.py's numbering (symmetric: NPU 0's links)
    if transfers:
        mids = np.array([t[3] for t in transfers], np.int64)
        src, dst, nbytes = plan.msg_src[mids].tolist(), plan.msg_dst[mids].tolist(), plan.message_bytes(mids).tolist()
        result.transfers = [(names[l], a, b, s, d, n) for (l, a, b, _), s, d, n in zip(transfers, src, dst, nbytes)]
    return result


def _compiled(plan: Plan, intra: str, active: int, timeline: bool, cut_through: bool):
    """Run the plan in the C event core; returns what _Engine.simulate_links returns."""
    arrays = {k: v for k, v in vars(plan).items() if isinstance(v, np.ndarray)}
    out = _linkcore.simulate(arrays, plan.P, plan.NS, plan.M, plan.L, plan.G, plan.K, len(plan.sim), plan.ndims,
                             active, int(intra == "scf"), int(cut_through), int(plan.symmetric), int(timeline),
                             plan.endpoint_ns)
    rec_pid, rec_start, rec_end, link_time = (np.frombuffer(b, t) for b, t in zip(out[:4], (I64, F64, F64, F64)))
    link_bytes, served = np.frombuffer(out[4], I64), out[5]
    xfer, begun, started = np.frombuffer(out[6], F64), np.frombuffer(out[7], np.int8), np.frombuffer(out[8], np.int8)
    if begun.any():  # a step that started but whose receives never all came
        _deadlock_waiting(plan, np.flatnonzero(begun))
    never = np.flatnonzero((plan.nsteps > 0) & ~started.astype(bool))
    if len(never):
        _deadlock_never(plan, never)
    si, kid = np.divmod(rec_pid, plan.K)
    rec = {"npu": plan.sim[si], "coll": plan.key_coll[kid], "flow": plan.key_flow[kid],
           "stage": plan.key_stage[kid], "dim": plan.key_dim[kid], "start": rec_start, "end": rec_end}
    transfers = [(int(l), a, b, int(mid)) for l, a, b, mid in xfer.reshape(-1, 4).tolist()]
    return rec, link_time.tolist(), link_bytes.tolist(), int(served), transfers


def _phase_tuple(plan: Plan, pid: int):
    si, kid = divmod(int(pid), plan.K)
    return (int(plan.sim[si]), int(plan.key_coll[kid]), int(plan.key_flow[kid]), int(plan.key_stage[kid]))


def _deadlock_waiting(plan: Plan, steps) -> None:
    raise waits_forever(*min((_phase_tuple(plan, plan.step_phase[g]), int(g - plan.step_start[plan.step_phase[g]]))
                             for g in steps))


def _deadlock_never(plan: Plan, phases) -> None:
    raise never_starts(min(_phase_tuple(plan, p) for p in phases))


class _Engine(PhaseEngine):
    """The Python reference engine: steps over the links, a step injects its messages into their first links, links
    serve their queues. The compiled core (_linkcore.c) follows it event for event."""

    def __init__(self, plan: Plan, tables: dict, intra: str, active: int, timeline: bool, cut_through: bool):
        super().__init__(plan.meta, tables, intra, active, plan.symmetric)
        self.plan, self.timeline, self.cut_through = plan, timeline, cut_through
        phase = [_phase_tuple(plan, p) for p in range(plan.P)]
        step_key = [(phase[p], g - int(plan.step_start[p])) for g, p in enumerate(plan.step_phase.tolist())]
        sends, left = plan.step_send.tolist(), plan.step_left.tolist()
        # the sends each step waits to see delivered (none in a phase that ends_on_send: msg_src_step -1)
        waited = np.bincount(plan.msg_src_step[plan.msg_src_step >= 0], minlength=plan.NS).tolist()
        for p, (a, b) in enumerate(zip(plan.step_start[:-1].tolist(), plan.step_start[1:].tolist())):
            if b > a:  # a step's messages (numbered in injection order), the receives it expects, the sends it waits for
                self.steps[phase[p]] = [[range(sends[g], sends[g + 1]), left[g] - waited[g], waited[g]]
                                        for g in range(a, b)]
        self.step_reduce = dict(zip(step_key, plan.step_reduce_ns.tolist()))
        rs, route = plan.route_starts().tolist(), plan.route.tolist()
        self.msg_route = [route[a:b] for a, b in zip(rs[:-1], rs[1:])]
        self.msg_ns, self.msg_bytes = plan.class_ns[plan.msg_class].tolist(), plan.message_bytes(slice(None)).tolist()
        lat = plan.link_lat[plan.route].tolist()
        self.hop_lat = [lat[a:b] for a, b in zip(rs[:-1], rs[1:])]
        self.msg_src = [step_key[g] if g >= 0 else None for g in plan.msg_src_step.tolist()]
        self.msg_dst = [step_key[g] if g >= 0 else None for g in plan.msg_dst_step.tolist()]
        self.queues = [[] for _ in range(plan.L)]  # per link: heap of (ready time, seq, message, hop)
        self.link_busy = [False] * plan.L
        self.link_time = [0.0] * plan.L
        self.link_bytes = [0] * plan.L
        self.transfers = []
        self.own_left: dict = {}   # (pk, step) -> sends not yet delivered
        self.got: dict = {}        # (pk, step) -> receives arrived
        self.touched: set = set()  # links that may start a transfer now
        self.served = 0            # link transfers simulated

    def _enqueue(self, mid: int, hop: int, now: float) -> None:
        link = self.msg_route[mid][hop]
        heapq.heappush(self.queues[link], (now, self.seq, mid, hop))
        self.seq += 1
        self.touched.add(link)

    def start_phase(self, pk, now: float) -> None:
        self.start_step(pk, 0, now)

    def start_step(self, pk, st: int, now: float) -> None:
        sends, _, waited = self.steps[pk][st] if st < self.nsteps(pk) else ([], 0, 0)
        self.own_left[(pk, st)] = waited
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
            self.push(now + self.step_reduce.get(sk, 0.0), "step_done", sk)

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
            if sk is not None:   # (None: its step ended once it was sent)
                self.own_left[sk] -= 1
                self._check(sk, now)
            rk = self.msg_dst[mid]
            if rk is not None:
                self.got[rk] = self.got.get(rk, 0) + 1
                self._check(rk, now)
        else:  # step_done
            self.step_finished(*data, now)

    def serve(self, now: float) -> None:
        for link in sorted(self.touched):  # in link order, so both engines break ties alike
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
            # delivery waits the endpoint delay too (ASTRA-sim's endpoint-delay), the link already free
            self.push(ahead + self.hop_lat[mid][hop] + (self.plan.endpoint_ns if last else 0.0), "hop_done",
                      (mid, hop))
        self.touched.clear()

    def simulate_links(self):
        self.execute()
        return self.rec, self.link_time, self.link_bytes, self.served, self.transfers
