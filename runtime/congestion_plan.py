"""Flat arrays of a schedule for the congestion-aware execution, built with numpy.

Both execution engines (the compiled one in _linkcore.c and the Python reference in congestion.py) read the same
plan, so they see the same messages, injection order, routes and link numbering. Arrays of one entry per step or per
message (the large ones: tens of millions on 4096 NPUs) are int32, the rest int64; times are float64.

Numbering:
- a key is (coll, flow, stage), kid = key_base[coll] + flow * nstages[coll] + stage;
- a phase is (simulated NPU index si, key): pid = si * K + kid; its steps are step_start[pid]..step_start[pid+1];
- messages are numbered in injection order: a step's sends are messages step_send[g]..step_send[g+1] (the peer just
  after the sender first, then table order); step_left[g] counts what completes step g: its sends delivered and the
  receives it expects (none in symmetric execution, where a receive is the mirror of an own send); msg_src_step[m]
  is the step that waits for message m's delivery, -1 where none does (a phase that `ends_on_send`: its steps end
  once their messages are sent, ASTRA-sim's doubleBinaryTree);
- a message's size is its class: class_bytes[msg_class[m]], class_ns[msg_class[m]] (bytes / bandwidth; a network's
  messages come in few sizes);
- a message's links are route[route_start[m]:route_start[m+1]] (route_start is empty when every message takes one
  hop: message m's link is route[m]), numbered 0..L-1 (link_id[l] is the LinkMap id); each hop pays its link's
  latency, link_lat[l];
- a server is (si, dim) with dim -1 for phases over the whole network: sid = si * (ndims + 1) + dim + 1; servers of
  one group (the members of a dimension's group, or one NPU in symmetric execution) share one service order.
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

from ..network.coords import group_index, strides as strides_of
from ..network.links import LinkMap
from ..network.memory import reduction_ns
from .phases import OptionError, batches, messages, per_dim_bytes, successors
from .tables import SWITCH


I64, I32 = np.int64, np.int32


def _release() -> None:
    """Freed memory back to the system: the batches' pieces are a few megabytes each, below glibc's threshold for
    their own mappings, so after joining they would stay in the heap and keep the process's resident size at
    twice the plan's (glibc's malloc_trim; nothing elsewhere)."""
    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None


def _i32(a, what: str) -> np.ndarray:
    a = np.asarray(a)
    if len(a) and (a.max() > np.iinfo(I32).max or a.min() < np.iinfo(I32).min):
        raise OptionError(f"the congestion plan has too many {what} for its 32-bit numbering")
    return a.astype(I32)


class Plan:
    """`fetch(npus)` gives the tables of several NPUs joined (phases.tables_of); they are read in batches, so only
    their messages are held at once. `ends`: keep each message's source and destination NPU (msg_src, msg_dst;
    a timeline names them)."""

    def __init__(self, meta, npus, fetch, symmetric: bool, local_mem_gbps: float | None = None, ends: bool = False):
        self.meta, self.symmetric, self.local_mem_gbps = meta, symmetric, local_mem_gbps
        self.npus, self.ndims = meta.npus, meta.ndims
        self.sim = np.array(sorted(npus), I64)
        self.links = LinkMap(meta.topology, representative=symmetric)
        self._keys(meta)
        self._phases_and_messages(fetch, ends)
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

    def _phases_and_messages(self, fetch, ends: bool) -> None:
        """One pass over the tables in batches of NPUs. The simulated NPUs' phases are numbered NPU by NPU, so a
        batch's phases, steps and messages are each one contiguous range, numbered as they come; only a message's
        destination step may lie in a later batch: it is resolved once every phase's steps are counted."""
        S, K = len(self.sim), self.K
        si_of = np.full(self.npus, -1, I64)
        si_of[self.sim] = np.arange(S)
        self.P = S * K
        _i32([self.P], "phases")
        self.phase_size = np.zeros(self.P)  # the span of a phase's rows on its NPU (smallest-chunk-first service)
        self.per_dim_bytes = np.zeros(self.ndims, I64)  # the most any NPU sends per dimension
        self.nsteps = np.zeros(self.P, I64)
        classes: dict = {}  # (bytes, link time's bits) -> class, numbered as first met
        id_space = int(self.links.offset[-1])
        used = np.zeros(id_space, bool)  # LinkMap ids some route takes
        out = {k: [] for k in ("step_send", "step_left", "step_reduce_ns", "msg_src_step", "dst_pid", "dst_step",
                               "msg_class", "route_start", "route", "msg_src", "msg_dst")}
        steps = msgs = hops = 0  # steps, messages and route entries numbered so far
        low, high = np.full(self.P, np.iinfo(I64).max), np.zeros(self.P, I64)  # each phase's lowest and highest byte
        # (coll, stage) of phases whose steps do not wait for their own messages' delivery
        width = int(self.nstages.max()) if len(self.nstages) else 1
        sent_only = np.zeros((len(self.nstages), width), bool)
        for c, coll in enumerate(self.meta.collectives):
            for st, stage in enumerate(coll.stages):
                sent_only[c, st] = stage.ends_on_send
        for t in batches(self.sim, fetch):
            self.per_dim_bytes = np.maximum(self.per_dim_bytes, per_dim_bytes(t, self.meta))
            if not len(t):
                continue
            if np.any(t["peer"] == SWITCH):
                raise OptionError("the congestion backend does not model a switch that reduces and multicasts "
                                  "(in_switch); time it with --backend analytical")
            # rows may come in any order (phases.tables_of): each phase's span from its lowest and highest byte
            rp = si_of[t["npu"]] * K + self.kid(t["coll"], t["flow"], t["stage"])
            np.minimum.at(low, rp, t["offset"])
            np.maximum.at(high, rp, t["offset"] + t["bytes"])
            del rp
            m = messages(t, self.meta, rotated=True)  # sends come in injection order: messages take its numbers
            del t
            pid = si_of[m["npu"]] * K + self.kid(m["coll"], m["flow"], m["stage"])
            lo, hi = int(pid.min()) // K * K, (int(pid.max()) // K + 1) * K  # the batch's NPUs' phases
            # messages come sorted by phase, then step: a phase's last message has its last step
            last = np.flatnonzero(np.concatenate([pid[1:] != pid[:-1], [True]]))
            self.nsteps[pid[last]] = m["step"][last].astype(I64) + 1
            local_start = np.concatenate([[0], np.cumsum(self.nsteps[lo:hi])]).astype(I64) + steps
            nsteps = int(local_start[-1] - steps)
            gstep = local_start[pid - lo] + m["step"]
            send = m["send"] == 1
            s = np.flatnonzero(send)
            src, dst = m["npu"][s].astype(I64), m["peer"][s].astype(I64)
            # each batch's pieces are int32 at once: the plan's peak is its final size, not twice it
            out["step_send"].append(_i32(np.searchsorted(gstep[s], np.arange(steps, steps + nsteps)) + msgs,
                                         "messages"))
            waits = ~sent_only[m["coll"][s], m["stage"][s]]   # a sender waits for this message's delivery
            left = np.bincount(gstep[s][waits] - steps, minlength=nsteps)
            if not self.symmetric:
                left += np.bincount(gstep[~send] - steps, minlength=nsteps)
            out["step_left"].append(_i32(left, "messages"))
            if self.local_mem_gbps is not None:
                reduce_ns = np.zeros(nsteps)
                np.add.at(reduce_ns, gstep[~send] - steps, reduction_ns(m["reduced"][~send], self.local_mem_gbps))
                out["step_reduce_ns"].append(reduce_ns)
            out["msg_src_step"].append(_i32(np.where(waits, gstep[s], -1), "steps"))
            out["dst_pid"].append(_i32(pid[s] + (si_of[dst] - si_of[src]) * K, "phases"))  # the same key there
            out["dst_step"].append(_i32(m["step"][s], "steps"))
            out["msg_class"].append(_i32(self._classes(m["bytes"][s], m["link_ns"][s], classes), "message sizes"))
            start, ids = self.links.routes(src, dst, m["dim"][s], m["lane"][s], m["hops"][s])
            used[ids] = True
            # a batch whose messages all take one hop keeps no route starts (they are its message numbers)
            out["route_start"].append(_i32(start[:-1] + hops, "route links") if len(ids) > len(s) else
                                      (hops, len(s)))
            out["route"].append(_i32(ids, "links"))
            if ends:
                out["msg_src"].append(src)
                out["msg_dst"].append(dst)
            steps, msgs, hops = steps + nsteps, msgs + len(s), hops + len(ids)
            del m, pid, gstep, send, s, src, dst, start, ids
        has = high > 0  # every row holds at least one byte
        self.phase_size[has] = (high - low)[has]
        del low, high, has
        _release()  # the last batch's temporaries
        self.step_start = np.concatenate([[0], np.cumsum(self.nsteps)]).astype(I64)
        self.NS, self.M = int(self.step_start[-1]), msgs
        assert self.NS == steps

        def join(key, dtype=I32):
            """A batch-by-batch array joined, its pieces let go and their pages handed back to the system."""
            whole = np.concatenate(out.pop(key)) if out[key] else np.zeros(0, dtype)
            _release()
            return whole

        self.step_send = np.append(join("step_send"), I32(msgs))
        self.step_left = join("step_left")
        self.step_phase = _i32(np.repeat(np.arange(self.P, dtype=I64), self.nsteps), "phases")
        self.step_reduce_ns = join("step_reduce_ns", np.float64)
        self.msg_src_step = join("msg_src_step")
        # a receive's step on the destination NPU (every phase's steps are known now); -1 when it is not simulated
        for i, (dst_pid, step) in enumerate(zip(out["dst_pid"], out["dst_step"])):
            ok = (dst_pid >= 0) & (step < self.nsteps[np.maximum(dst_pid, 0)]) & (not self.symmetric)
            out["dst_step"][i] = _i32(np.where(ok, self.step_start[np.maximum(dst_pid, 0)] + step, -1), "steps")
            out["dst_pid"][i] = None
        del out["dst_pid"]
        self.msg_dst_step = join("dst_step")
        self.msg_class = join("msg_class")
        sizes = np.array(list(classes), I64).reshape(-1, 2)
        self.class_bytes, self.class_ns = sizes[:, 0].copy(), sizes[:, 1].view(np.float64).copy()
        # every message one hop (rings, fully connected): route_start is left empty, message m's link is route[m]
        if hops > msgs:
            out["route_start"] = [p if isinstance(p, np.ndarray) else _i32(p[0] + np.arange(p[1], dtype=I64),
                                                                            "route links") for p in out["route_start"]]
            self.route_start = np.append(join("route_start"), I32(hops))
        else:
            self.route_start = np.zeros(0, I32)
            del out["route_start"]
        # links numbered densely in LinkMap order
        self.link_id = np.flatnonzero(used).astype(I64)
        dense = _i32(np.cumsum(used, dtype=I64) - 1, "links")
        out["route"] = [dense[ids] for ids in out["route"]]
        self.route = join("route")
        self.L = len(self.link_id)
        self.link_lat = self.links.latency(self.link_id).astype(np.float64)
        self.endpoint_ns = self.meta.endpoint_delay_ns   # once per message, at delivery
        if ends:
            self.msg_src, self.msg_dst = join("msg_src", I64), join("msg_dst", I64)

    def route_starts(self) -> np.ndarray:
        """route_start, spelled out when every message takes one hop."""
        return self.route_start if len(self.route_start) else np.arange(self.M + 1, dtype=I32)

    def _classes(self, nbytes: np.ndarray, ns: np.ndarray, classes: dict) -> np.ndarray:
        """Each message's class (bytes, link time), classes numbered as first met across batches."""
        bits_u, bits_i = np.unique(ns.astype(np.float64).view(I64), return_inverse=True)
        nbytes = nbytes.astype(I64)
        if len(nbytes) and int(nbytes.max()) < np.iinfo(I64).max // len(bits_u):  # one int64 key per message
            key_u, inverse = np.unique(nbytes * len(bits_u) + bits_i.ravel(), return_inverse=True)
            uniq = np.stack([key_u // len(bits_u), bits_u[key_u % len(bits_u)]], axis=1)
        else:
            uniq, inverse = np.unique(np.stack([nbytes, bits_u[bits_i.ravel()]], axis=1), axis=0, return_inverse=True)
        ids = np.array([classes.setdefault((b, bits), len(classes)) for b, bits in uniq.tolist()], I64)
        return ids[inverse.ravel()]

    def message_bytes(self, mid) -> np.ndarray:
        return self.class_bytes[self.msg_class[mid]]

    def _groups(self) -> None:
        """Service groups: the members of a dimension's group (full execution) or NPU 0 alone (symmetric)."""
        S, nd = len(self.sim), self.ndims
        shape = self.meta.shape
        if self.symmetric:
            shape = [1] * nd
        strides = strides_of(shape)
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
            sgroup[:, d + 1] = goff[d + 1] + group_index(npu, k, st)
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
