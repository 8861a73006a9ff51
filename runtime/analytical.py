"""Analytical runtime: executes schedule tables with the ASTRA-sim analytical cost model.

Cost of a message (the rows of one step sharing peer and lane): latency x hops + bytes / link bandwidth; messages
of a step do not contend with each other (ASTRA-sim's congestion-unaware backend). A step of a phase ends on an NPU
when its own messages have arrived and the messages it receives in that step have come in; in a phase marked
`ends_on_send` (meta.json) when those it receives have come in, its own sent (ASTRA-sim's doubleBinaryTree).

Chunks pipeline across dimensions: chunk c's phase i+1 becomes ready when its phase i ends (and a collective's
first phase when the collectives it depends on have finished that chunk). Each NPU works on up to `active_chunks`
phases per dimension (default 1, ASTRA-sim's baseline), admitted first-in first-out or smallest chunk first; the
dimension's links take one step at a time (see _Engine).

Two executions with the same semantics:
- `symmetric`: when every NPU runs a relabelled copy of NPU 0's table (ring, direct, halving-doubling on the
  Ring/FC/Switch blocks, MultiTree's translated trees on tori, evenly split sizes), every NPU's timeline is
  identical, so NPU 0's table alone gives the exact result: a message it receives in step s left its peer when
  NPU 0's own step s began.
- `full`: every NPU's table, every message, with the receive side waiting for the real sender. Used for asymmetric
  schedules (trees that are not translations of one another, rings over ranks) and to check the symmetric
  shortcut.
"""
from __future__ import annotations

import heapq

from ..network.coords import group_base, strides
from ..network.memory import reduction_ns
from .phases import INTRA_POLICIES, OptionError, PhaseEngine, Result, Table, messages, tables_by_npu
from .tables import SWITCH, Schedule


def run(schedule: Schedule, mode: str = "auto", intra: str = "fifo", active_chunks: int = 1,
        local_mem_gbps: float | None = None) -> Result:
    """Execute the tables.

    mode: auto | symmetric | full; intra: the per-dimension queue policy, fifo | scf; active_chunks: phases a
    dimension works on at once (ASTRA-sim's active-chunks-per-dimension); local_mem_gbps: ASTRA-sim's local-mem-bw
    (network/memory.py): a step that reduces received bytes ends 3 x all the bytes it reduces / local_mem_gbps after
    its transfers (None: no reduction term)."""
    meta = schedule.meta
    if intra not in INTRA_POLICIES:
        raise OptionError(f"unknown intra-dimension policy {intra}")
    if active_chunks < 1:
        raise OptionError("active_chunks must be at least 1")
    if mode == "auto":
        mode = "symmetric" if meta.symmetric else "full"
    if mode not in ("symmetric", "full"):
        raise OptionError(f"unknown mode {mode}")
    if mode == "symmetric" and not meta.symmetric:  # NPU 0 would stand for NPUs that run other steps
        raise OptionError("--execution symmetric: this schedule's NPUs do not all run the same steps (trees, rings "
                         "over ranks, meshes, uneven splits); NPU 0 cannot stand for them: use --execution full")
    npus = [0] if mode == "symmetric" else list(range(meta.npus))
    return _Engine(meta, tables_by_npu(schedule, npus), mode, intra, active_chunks, local_mem_gbps).run()


class _Engine(PhaseEngine):
    """Steps of the analytical model.

    Per NPU and dimension: up to `active` phases in progress; their ready steps queue first-in first-out for the
    dimension's links, which serialise one step at a time (the step's longest transmission, bytes / link
    bandwidth). A step starts when the links take it: its messages leave, arrive latency x hops + bytes / bandwidth
    later, and the step ends when its own messages have arrived and those it receives have come in. With active = 1
    a phase's steps follow each other with nothing in between (ASTRA-sim's baseline); with more, other chunks' steps
    use the links while a step's latency elapses. In symmetric mode only NPU 0 runs and a message it receives in a
    step arrives as its own twin message would."""

    def __init__(self, meta, tables: dict, mode: str, intra: str, active: int, local_mem_gbps: float | None = None):
        super().__init__(meta, tables, intra, active, mode == "symmetric")
        self.local_mem_gbps = local_mem_gbps
        self.strides = strides(self.meta.shape)
        self.switch_senders: dict = {}  # (dim, group, coll, flow, stage, step) -> members that send to the switch
        self._build_steps(Table.concat(list(tables.values())))
        self.links: dict = {}       # (npu, dim) -> heap of (ready time, seq, (pk, step))
        self.link_busy: set = set()
        self.touched: set = set()   # link servers that may start a step now
        self.arrived: dict = {}     # (pk, step) -> [count, latest arrival]
        self.switch_in: dict = {}   # (dim, group, coll, flow, stage, step) -> [members in, first bytes, last bytes]

    def _build_steps(self, table: Table) -> None:
        """steps[(npu, c, f, s)] = list of [link time, sends [(peer, cost)], own cost, receives, own-receive cost,
        (latency, send ns, receive ns) of a transfer with the switch or None, reduction ns].

        A transfer with the switch (peer SWITCH: in-network reduction) is cut through the switch: the sum for a
        receiver streams out one latency after the members' first bytes are in and ends one latency after their
        last, so when every member starts at once a step ends 2 x latency + max(sent, received) / bandwidth after
        it began."""
        m = messages(table, self.meta)
        m["reduce_ns"] = reduction_ns(m["reduced"], self.local_mem_gbps)
        cols = [m[k].tolist() for k in ("npu", "coll", "flow", "stage", "step", "send", "peer", "dim", "cost",
                                        "link_ns", "reduce_ns")]
        # phases whose steps end once their messages are sent (meta: ends_on_send): the sender waits neither for
        # their arrival nor for the links (ASTRA-sim's congestion-unaware network sends each at full bandwidth)
        sent_only = {(c, s) for c, coll in enumerate(self.meta.collectives) for s, st in enumerate(coll.stages)
                     if st.ends_on_send}
        for npu, c, f, s, st, snd, peer, d, cost, link_ns, red in zip(*cols):
            steps = self.steps.setdefault((npu, c, f, s), [])
            while len(steps) <= st:
                steps.append([0.0, [], 0.0, 0, 0.0, None, 0.0])
            rec = steps[st]
            if peer == SWITCH:
                lat, up, down = rec[5] or (cost - link_ns, 0.0, 0.0)
                rec[5] = (lat, max(up, link_ns), down) if snd else (lat, up, max(down, link_ns))
                if snd:  # a reduction waits for every member; a multicast (broadcast) for its one sender
                    key = self._switch_key((npu, c, f, s), st, d)
                    self.switch_senders[key] = self.switch_senders.get(key, 0) + 1
            if snd:
                rec[1].append((peer, cost))
                if (c, s) not in sent_only:
                    rec[0] = max(rec[0], link_ns)
                    rec[2] = max(rec[2], cost)
            else:
                rec[3] += 1
                rec[4] = max(rec[4], cost)
                rec[6] += red
        for steps in self.steps.values():
            for rec in steps:
                if rec[5] is not None and rec[3]:  # what the switch sends back, as seen from this NPU's own start
                    lat, up, down = rec[5]
                    rec[4] = max(rec[4], 2 * lat + max(up, down))

    def start_phase(self, pk, now: float) -> None:
        self.start_step(pk, 0, now)

    def start_step(self, pk, st: int, now: float) -> None:
        """The step is ready: it queues for its dimension's links."""
        server = (pk[0], self.dim_of(pk[1:]))
        heapq.heappush(self.links.setdefault(server, []), (now, self.seq, (pk, st)))
        self.seq += 1
        self.touched.add(server)

    def _record(self, pk, st):
        return self.steps[pk][st] if st < self.nsteps(pk) else (0.0, (), 0.0, 0, 0.0, None, 0.0)

    def _begin(self, pk, st: int, now: float) -> float:
        """The links take the step: its messages leave now. Returns how long the links stay busy."""
        link_ns, sends, own, expect, self_recv, switch, _ = self._record(pk, st)
        if self.symmetric:  # the twin of every message it receives left its peer now
            self.arrived[(pk, st)] = [expect, now + self_recv]
        else:
            for peer, cost in sends:
                if peer == SWITCH:
                    self._to_switch(pk, st, now, switch)
                    continue
                rk = ((peer,) + pk[1:], st)
                a = self.arrived.setdefault(rk, [0, 0.0])
                a[0] += 1
                a[1] = max(a[1], now + cost)
                self._check(rk)
        self.begun[(pk, st)] = (now, now + own)
        self._check((pk, st))
        return link_ns

    def _to_switch(self, pk, st: int, now: float, switch) -> None:
        """A member's contribution reaches its group's switch; once every member's is in, each member's receive
        from the switch arrives one latency after the last first byte plus its bytes, and no sooner than one
        latency after the last byte in."""
        lat, up, _ = switch
        d = self.dim_of(pk[1:])
        key = self._switch_key(pk, st, d)
        state = self.switch_in.setdefault(key, [0, 0.0, 0.0])
        state[0] += 1
        state[1], state[2] = max(state[1], now + lat), max(state[2], now + lat + up)
        if state[0] < self.switch_senders[key]:
            return
        del self.switch_in[key]
        k, stride, base = self.meta.shape[d], self.strides[d], key[1]
        c, f, s = pk[1:]
        for member in range(base, base + k * stride, stride):
            rk = ((member, c, f, s), st)
            rec = self._record(*rk)
            if not rec[3] or rec[5] is None:
                continue
            a = self.arrived.setdefault(rk, [0, 0.0])
            a[0] += 1
            a[1] = max(a[1], state[1] + lat + rec[5][2], state[2] + lat)
            self._check(rk)

    def _switch_key(self, pk, st: int, d: int) -> tuple:
        """(dim, group, coll, flow, stage, step): one switch's sum; the group is its member with coordinate 0."""
        npu, c, f, s = pk
        k, stride = self.meta.shape[d], self.strides[d]
        return (d, group_base(npu, k, stride), c, f, s, st)

    def _check(self, sk) -> None:
        if sk not in self.begun:
            return
        a = self.arrived.get(sk, [0, 0.0])
        if a[0] < self._record(*sk)[3]:
            return
        begin, own = self.begun.pop(sk)
        self.arrived.pop(sk, None)
        # a reduction (ASTRA-sim's local-memory term) follows the step's transfers before the data can move on
        self.push(max(own, a[1], begin) + self._record(*sk)[6], "step_done", sk)

    def on_event(self, kind: str, data, now: float) -> None:
        if kind == "link_free":
            self.link_busy.discard(data)
            self.touched.add(data)
        else:  # step_done
            self.step_finished(*data, now)

    def serve(self, now: float) -> None:
        for server in sorted(self.touched):
            if server in self.link_busy or not self.links.get(server):
                continue
            _, _, (pk, st) = heapq.heappop(self.links[server])
            self.link_busy.add(server)
            self.push(now + self._begin(pk, st, now), "link_free", server)
        self.touched = set()

    def run(self) -> Result:
        return self.simulate()
