"""Analytical runtime: executes schedule tables with the ASTRA-sim analytical cost model.

Cost of a message (the rows of one step sharing peer and lane): latency x hops + bytes / link bandwidth; messages
of a step do not contend with each other (ASTRA-sim's congestion-unaware backend). A step of a phase ends on an NPU
when its own messages have arrived and the messages it receives in that step have come in.

Chunks pipeline across dimensions: chunk c's phase i+1 becomes ready when its phase i ends (and a collective's
first phase when the collectives it depends on have finished that chunk). Each NPU works on up to `active_chunks`
phases per dimension (default 1, ASTRA-sim's baseline), admitted first-in first-out or smallest chunk first; the
dimension's links take one step at a time (see _Engine).

Two executions with the same semantics:
- `symmetric`: when every NPU runs a relabelled copy of NPU 0's table (ring, direct, halving-doubling on the
  Ring/FC/Switch blocks, evenly split sizes), every NPU's timeline is identical, so NPU 0's table alone gives the
  exact result: a message it receives in step s left its peer when NPU 0's own step s began.
- `full`: every NPU's table, every message, with the receive side waiting for the real sender. Used for asymmetric
  schedules (trees) and to check the symmetric shortcut.
"""
from __future__ import annotations

import heapq

import numpy as np

from .phases import (INTRA_POLICIES, DeadlockError, Result, Table, Chains, GroupOrder, messages,  # noqa: F401
                     per_dim_bytes, phase_dim, phase_sizes, priority_key, make_result, table_of)
from .tables import Schedule


def run(schedule: Schedule, mode: str = "auto", intra: str = "fifo", active_chunks: int = 1) -> Result:
    """Execute the tables.

    mode: auto | symmetric | full; intra: the per-dimension queue policy, fifo | scf; active_chunks: phases a
    dimension works on at once (ASTRA-sim's active-chunks-per-dimension)."""
    meta = schedule.meta
    if intra not in INTRA_POLICIES:
        raise ValueError(f"unknown intra-dimension policy {intra}")
    if active_chunks < 1:
        raise ValueError("active_chunks must be at least 1")
    if mode == "auto":
        mode = "symmetric" if meta.get("symmetric") else "full"
    if mode not in ("symmetric", "full"):
        raise ValueError(f"unknown mode {mode}")
    npus = [0] if mode == "symmetric" else list(range(meta["npus"]))
    return _Engine(meta, {n: table_of(schedule, n) for n in npus}, mode, intra, active_chunks).run()


class _Engine:
    """Event simulation shared by both executions.

    Per NPU and dimension: up to `active` phases in progress, admitted in one order per dimension group (policy
    fifo or scf); their ready steps queue first-in first-out for the dimension's links, which serialise one step
    at a time (the step's longest transmission, bytes / link bandwidth). A step starts when the links take it: its
    messages leave, arrive latency x hops + bytes / bandwidth later, and the step ends when its own messages have
    arrived and those it receives have come in. With active = 1 a phase's steps follow each other with nothing in
    between (ASTRA-sim's baseline); with more, other chunks' steps use the links while a step's latency elapses.
    In symmetric mode only NPU 0 runs and a message it receives in a step arrives as its own twin message would."""

    def __init__(self, meta, tables: dict, mode: str, intra: str, active: int):
        self.meta, self.mode, self.active = meta, mode, active
        self.ndims = len(meta["latency_ns"])
        self.npus = list(tables)
        self.symmetric = mode == "symmetric"
        shape = [d["size"] for d in meta["topology"]["dims"]]
        sizes = {n: phase_sizes(t) for n, t in tables.items()}
        self.order = GroupOrder([1] * len(shape) if self.symmetric else shape,
                                 lambda npu, now, key: priority_key(intra, sizes[npu].get(key, 0), now, *key))
        self.per_dim = np.max([per_dim_bytes(t, self.ndims) for t in tables.values()], axis=0)
        self._build_steps(Table.concat(list(tables.values())))

    def _build_steps(self, table: Table) -> None:
        """steps[(npu, c, f, s)] = list of [link time, sends [(peer, cost)], own cost, receives, own-receive cost]."""
        m = messages(table, self.meta["latency_ns"])
        self.steps = {}
        cols = [m[k].tolist() for k in ("npu", "coll", "flow", "stage", "step", "send", "peer", "dim", "cost",
                                        "link_ns")]
        for npu, c, f, s, st, snd, peer, d, cost, link_ns in zip(*cols):
            pk = (npu, c, f, s)
            steps = self.steps.setdefault(pk, [])
            while len(steps) <= st:
                steps.append([0.0, [], 0.0, 0, 0.0])
            rec = steps[st]
            if snd:
                rec[0] = max(rec[0], link_ns)
                rec[1].append((peer, cost))
                rec[2] = max(rec[2], cost)
            else:
                rec[3] += 1
                rec[4] = max(rec[4], cost)

    def dim_of(self, npu, key) -> int:
        return phase_dim(self.meta, key)

    def run(self) -> Result:
        chains = Chains(self.meta)
        events = []   # (time, seq, kind, data)
        seq = 0
        links: dict = {}      # (npu, dim) -> heap of (ready time, seq, (pk, step))
        link_busy: set = set()
        arrived: dict = {}    # (pk, step) -> [count, latest arrival]
        begun: dict = {}      # (pk, step) -> (begin, own messages done)
        starts: dict = {}
        rec = {k: [] for k in ("npu", "coll", "flow", "stage", "dim", "start", "end")}

        def push(time, kind, data):
            nonlocal seq
            heapq.heappush(events, (time, seq, kind, data))
            seq += 1

        def step_ready(pk, st, now, touched):
            nonlocal seq
            server = (pk[0], self.dim_of(pk[0], pk[1:]))
            heapq.heappush(links.setdefault(server, []), (now, seq, (pk, st)))
            seq += 1
            touched.add(("link",) + server)

        def begin(pk, st, now):
            link_ns, sends, own, _, self_recv = self.steps[pk][st] if st < len(self.steps.get(pk, ())) else \
                (0.0, (), 0.0, 0, 0.0)
            for peer, cost in sends:
                if not self.symmetric:
                    rk = ((peer,) + pk[1:], st)
                    a = arrived.setdefault(rk, [0, 0.0])
                    a[0] += 1
                    a[1] = max(a[1], now + cost)
                    check(rk)
            if self.symmetric:  # the twin of every message it receives left its peer now
                arrived[(pk, st)] = [self.steps[pk][st][3] if st < len(self.steps.get(pk, ())) else 0,
                                     now + self_recv]
            begun[(pk, st)] = (now, now + own)
            check((pk, st))
            return link_ns

        def check(sk):
            if sk not in begun:
                return
            pk, st = sk
            expect = self.steps[pk][st][3] if st < len(self.steps.get(pk, ())) else 0
            a = arrived.get(sk, [0, 0.0])
            if a[0] < expect:
                return
            b, own = begun.pop(sk)
            arrived.pop(sk, None)
            push(max(own, a[1], b), "step_done", sk)

        def dispatch(now, touched):
            touched |= {("phase",) + s for s in self.order.flush()}
            for item in sorted(touched):
                if item[0] == "phase":
                    server = item[1:]
                    while self.order.active(server) < self.active:
                        key = self.order.dispatch(server)
                        if key is None:
                            break
                        pk = (server[0],) + key
                        starts[pk] = now
                        step_ready(pk, 0, now, touched)
            for item in sorted(t for t in touched if t[0] == "link"):
                server = item[1:]
                if server in link_busy or not links.get(server):
                    continue
                _, _, (pk, st) = heapq.heappop(links[server])
                link_busy.add(server)
                push(now + begin(pk, st, now), "link_free", server)

        for npu in self.npus:
            for key in chains.initial(npu):
                self.order.ready(npu, self.dim_of(npu, key), key, 0.0)
        dispatch(0.0, set())
        while events:
            now = events[0][0]
            touched = set()
            while events and events[0][0] == now:
                _, _, kind, data = heapq.heappop(events)
                if kind == "link_free":
                    link_busy.discard(data)
                    touched.add(("link",) + data)
                    continue
                if kind == "step_done":
                    pk, st = data
                    if st + 1 < len(self.steps.get(pk, ())):
                        step_ready(pk, st + 1, now, touched)
                        continue
                npu, c, f, s = pk
                d = self.dim_of(npu, (c, f, s))
                for name, v in zip(rec, (npu, c, f, s, d, starts[pk], now)):
                    rec[name].append(v)
                self.order.release((npu, d))
                touched.add(("phase", npu, d))
                for nxt in chains.finished(npu, c, f, s):
                    self.order.ready(npu, self.dim_of(npu, nxt), nxt, now)
            dispatch(now, touched)
        if begun:  # a step that started but whose receives never all came
            (npu, c, f, s), st = min(begun)
            raise DeadlockError(f"NPU {npu} waits forever in collective {c} chunk {f} phase {s} step {st}")
        never = sorted(pk for pk in self.steps if pk not in starts)
        if never:
            npu, c, f, s = never[0]
            raise DeadlockError(f"NPU {npu} never starts collective {c} chunk {f} phase {s}: an earlier phase of its "
                                f"group never completes")
        return make_result(self.meta, self.mode, rec, self.ndims, self.per_dim)


