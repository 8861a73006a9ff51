"""Flat arrays of a schedule for the congestion-aware execution, built with numpy.

Both execution engines (the compiled one in _linkcore.c and the Python reference in congestion.py) read the same
plan, so they see the same messages, injection order, routes and link numbering. Integers are int64, times float64.

Numbering:
- a key is (coll, flow, stage), kid = key_base[coll] + flow * nstages[coll] + stage;
- a phase is (simulated NPU index si, key): pid = si * K + kid; its steps are step_start[pid]..step_start[pid+1];
- a step's sends are send_order[step_send[g]:step_send[g+1]] (message ids in injection order: the peer just after
  the sender first); `expect[g]` receives complete it (none in symmetric execution, where a receive is the mirror
  of an own send);
- a message's links are route[route_start[m]:route_start[m+1]], numbered 0..L-1 (link_id[l] is the LinkMap id);
  route_lat holds each hop's latency;
- a server is (si, dim) with dim -1 for phases over the whole network: sid = si * (ndims + 1) + dim + 1; servers of
  one group (the members of a dimension's group, or one NPU in symmetric execution) share one service order.
"""
from __future__ import annotations

import numpy as np

from ..network.links import LinkMap
from ..network.memory import reduction_ns
from .phases import OptionError, Table, messages, per_dim_bytes, successors
from .tables import SWITCH


I64 = np.int64


ROWS_PER_BATCH = 1 << 21  # table rows read at once: enough to amortise the lowering, a bounded peak of memory


def _batches(npus: np.ndarray, fetch):
    """The tables of `npus` in batches of about ROWS_PER_BATCH rows, sized by the first NPU's table."""
    if not len(npus):
        return
    first = fetch(npus[:1])
    yield first
    per = max(1, ROWS_PER_BATCH // max(1, len(first)))
    for a in range(1, len(npus), per):
        yield fetch(npus[a:a + per])


class Plan:
    """`fetch(npus)` gives the tables of several NPUs joined (phases.tables_of); they are read in batches, so only
    their messages are held at once."""

    def __init__(self, meta, npus, fetch, symmetric: bool, local_mem_gbps: float | None = None):
        self.meta, self.symmetric, self.local_mem_gbps = meta, symmetric, local_mem_gbps
        self.npus, self.ndims = meta.npus, meta.ndims
        self.sim = np.array(sorted(npus), I64)
        self.links = LinkMap(meta.topology, representative=symmetric)
        self._keys(meta)
        self._phases_and_messages(fetch)
        self._groups()
        self._chains(meta)

    def _keys(self, meta) -> None:
        colls = meta.collectives
        self.nstages = np.array([len(c.stages) for c in colls], I64)
        self.chunks = np.array([c.chunks for c in colls], I64)
        self.key_base = np.concatenate([[0], np.cumsum(self.nstages * self.chunks)]).astype(I64)
        self.K = int(self.key_base[-1])
        coll = np.repeat(np.arange(len(colls)), self.nstages * self.chunks)
        local = np.arange(self.K) - self.key_base[coll]
        self.key_coll, self.key_flow, self.key_stage = coll.astype(I64), local // self.nstages[coll], \
            local % self.nstages[coll]
        self.key_dim = np.array([colls[c].chunk_dims[f][s] for c, f, s in
                                 zip(coll.tolist(), self.key_flow.tolist(), self.key_stage.tolist())], I64)

    def kid(self, coll, flow, stage):
        return self.key_base[coll] + flow * self.nstages[coll] + stage

    def _phases_and_messages(self, fetch) -> None:
        S, K = len(self.sim), self.K
        si_of = np.full(self.npus, -1, I64)
        si_of[self.sim] = np.arange(S)
        self.P = S * K
        self.phase_size = np.zeros(self.P)  # the span of a phase's rows on its NPU (smallest-chunk-first service)
        self.per_dim_bytes = np.zeros(self.ndims, I64)  # the most any NPU sends per dimension
        parts = []
        for t in _batches(self.sim, fetch):
            self.per_dim_bytes = np.maximum(self.per_dim_bytes, per_dim_bytes(t, self.meta))
            if len(t):
                rp = si_of[t["npu"]] * K + self.kid(t["coll"], t["flow"], t["stage"])
                # the lowering gives an NPU's rows phase by phase; a table read back may come in any order
                order = np.argsort(rp, kind="stable") if np.any(rp[1:] < rp[:-1]) else slice(None)
                rp, off, end = rp[order], t["offset"][order], t["offset"][order] + t["bytes"][order]
                starts = np.flatnonzero(np.concatenate([[True], rp[1:] != rp[:-1]]))
                lo, hi = np.minimum.reduceat(off, starts), np.maximum.reduceat(end, starts)
                self.phase_size[rp[starts]] = hi - lo
            if np.any(t["peer"] == SWITCH):
                raise OptionError("the congestion backend does not model a switch that reduces and multicasts "
                                  "(in_switch); time it with --backend analytical")
            parts.append(messages(t, self.meta))
        m = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else messages(Table.empty(), self.meta)
        pid = si_of[m["npu"]] * K + self.kid(m["coll"], m["flow"], m["stage"])
        nsteps = np.zeros(self.P, I64)
        np.maximum.at(nsteps, pid, m["step"].astype(I64) + 1)
        self.nsteps = nsteps
        self.step_start = np.concatenate([[0], np.cumsum(nsteps)]).astype(I64)
        self.NS = int(self.step_start[-1])
        self.step_phase = np.repeat(np.arange(self.P, dtype=I64), nsteps)
        gstep = self.step_start[pid] + m["step"]
        send = m["send"] == 1
        self.expect = np.zeros(self.NS, I64) if self.symmetric else \
            np.bincount(gstep[~send], minlength=self.NS).astype(I64)
        self.step_reduce_ns = np.zeros(self.NS)
        np.add.at(self.step_reduce_ns, gstep[~send], reduction_ns(m["reduced"][~send], self.local_mem_gbps))
        s = np.flatnonzero(send)
        src, dst = m["npu"][s].astype(I64), m["peer"][s].astype(I64)
        self.M = len(s)
        self.msg_src, self.msg_dst, self.msg_bytes = src, dst, m["bytes"][s].astype(I64)
        self.msg_ns = m["link_ns"][s].astype(np.float64)
        self.msg_src_step = gstep[s]
        dst_pid = si_of[dst] * K + self.kid(m["coll"][s], m["flow"][s], m["stage"][s])
        step = m["step"][s].astype(I64)
        ok = (si_of[dst] >= 0) & (step < nsteps[np.maximum(dst_pid, 0)]) & (not self.symmetric)
        self.msg_dst_step = np.where(ok, self.step_start[np.maximum(dst_pid, 0)] + step, -1).astype(I64)
        # injection order inside a step: rotated peer order, then table order
        order = np.lexsort((np.arange(self.M), (dst - src) % self.npus, self.msg_src_step))
        self.send_order = order.astype(I64)
        self.step_send = np.searchsorted(self.msg_src_step[order], np.arange(self.NS + 1)).astype(I64)
        start, ids = self.links.routes(src, dst, m["dim"][s], m["lane"][s], m["hops"][s])
        self.link_id, route = np.unique(ids, return_inverse=True)
        self.route_start, self.route = start, route.astype(I64)
        self.L = len(self.link_id)
        # each hop pays the latency of its link's dimension (a routed message crosses several)
        self.route_lat = self.links.latency(ids)

    def _groups(self) -> None:
        """Service groups: the members of a dimension's group (full execution) or NPU 0 alone (symmetric)."""
        S, nd = len(self.sim), self.ndims
        shape = self.meta.shape
        if self.symmetric:
            shape = [1] * nd
        strides = [int(np.prod(shape[:d])) for d in range(nd)]
        total = int(np.prod(shape)) if nd else 1
        ngroups = [1] + [total // k for k in shape]            # per dim -1, 0, 1, ...
        goff = np.concatenate([[0], np.cumsum(ngroups)]).astype(I64)
        self.G = int(goff[-1])
        self.group_size = np.concatenate([np.full(n, total if d < 0 else shape[d], I64)
                                          for d, n in zip(range(-1, nd), ngroups)])
        self.group_local = np.concatenate([np.arange(n, dtype=I64) for n in ngroups])
        npu = self.sim
        sgroup = np.zeros((S, nd + 1), I64)
        for d in range(nd):  # a group is numbered by its base NPU's position among the bases
            k, st = shape[d], strides[d]
            sgroup[:, d + 1] = goff[d + 1] + (npu // (st * k)) * st + npu % st
        self.server_group = sgroup.ravel()
        order = np.argsort(self.server_group, kind="stable")
        self.member = order.astype(I64)   # servers by group, each group's in NPU order
        self.member_start = np.searchsorted(self.server_group[order], np.arange(self.G + 1)).astype(I64)
        # per (group, key) readiness counters: only groups of the key's dimension
        per_key = np.array(ngroups, I64)[self.key_dim + 1]
        self.count_base = np.concatenate([[0], np.cumsum(per_key)]).astype(I64)

    def _chains(self, meta) -> None:
        colls = meta.collectives
        succ = successors(meta)
        cons, per_chunk, start = [], [], [0]
        for ci, c in enumerate(colls):
            for consumer in succ.get(ci, []):
                other = colls[consumer]
                cons.append(consumer)
                per_chunk.append(int(c.buffer == other.buffer and c.chunks == other.chunks))
            start.append(len(cons))
        self.cons_start, self.cons = np.array(start, I64), np.array(cons, I64)
        self.cons_per_chunk = np.array(per_chunk, I64)
        self.ndeps = np.array([len(c.deps) for c in colls], I64)
        self.chunk_base = np.concatenate([[0], np.cumsum(self.chunks)]).astype(I64)

    def link_names(self) -> list[str]:
        return [self.links.describe(i) for i in self.link_id.tolist()]

    def link_dims(self) -> list[int]:
        return self.links.dim_of(self.link_id).tolist()
