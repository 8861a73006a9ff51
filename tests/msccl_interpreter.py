"""An interpreter of MSCCL algorithm files, written independently of compiler/interop/msccl_xml.py to check what it
writes.

It checks what MSCCL's loader requires (attribute ranges, thread blocks numbered 0..n-1, a peer never the GPU
itself, at most one thread block per (send peer, channel) and per (recv peer, channel) on a GPU, offsets inside
the buffers, one dependency per step with extra ones on nop steps before it, `hasdep` on every step some other
step waits for), then executes the steps on data: each thread block runs its steps in order; a step waits for
the steps it depends on; a send and the receive it meets (the k-th send on a connection GPU a -> GPU b on channel
c meets the k-th receive there) execute together, as a rendezvous (stricter than MSCCL's buffered connections, so
a file that runs here cannot deadlock there). A file that cannot finish is reported with the steps left waiting.

`check` runs a file as MSCCL runs its `coll` and tests the result against NCCL's definition of that collective:
buffers as NCCL lays them out (C = nchunksperloop chunks in the larger buffer, K = C / ngpus per rank): allreduce
C in, C out, every rank ends with the sum; allgather K in, C out, rank g's input is output chunks [gK, (g+1)K);
reducescatter C in, K out, rank r's output is the sum of every rank's input chunks [rK, (r+1)K); alltoall C in,
C out, output block g of rank r is input block r of rank g. In place (inplace="1"), the buffers alias as MSCCL's
runtime makes them: an all-gather's input is its slot of the output, a reduce-scatter's output its slot of the
input, the others' input is the output; out of place they are apart.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

SENDS = {"s"}
RECVS = {"r", "rrc"}
LOCAL = {"nop", "cpy"}
MAX_COUNT = 72


class InvalidAlgorithm(Exception):
    pass


def _int(node, key):
    try:
        return int(node.attrib[key])
    except (KeyError, ValueError):
        raise InvalidAlgorithm(f"<{node.tag}> lacks an integer {key}") from None


def parse(text: str) -> dict:
    root = ET.fromstring(text)
    if root.tag != "algo":
        raise InvalidAlgorithm("the root element is not <algo>")
    ngpus, nchunks, nchannels = (_int(root, k) for k in ("ngpus", "nchunksperloop", "nchannels"))
    for key in ("name", "proto", "coll", "inplace", "outofplace", "minBytes", "maxBytes"):
        if key not in root.attrib:
            raise InvalidAlgorithm(f"<algo> lacks {key}")
    if root.attrib["proto"] not in ("Simple", "LL", "LL128"):
        raise InvalidAlgorithm(f"proto {root.attrib['proto']}")
    gpus = {}
    for g in root.findall("gpu"):
        gid = _int(g, "id")
        if gid in gpus or not 0 <= gid < ngpus:
            raise InvalidAlgorithm(f"gpu id {gid} repeated or outside 0..{ngpus - 1}")
        size = {"i": _int(g, "i_chunks"), "o": _int(g, "o_chunks"), "s": _int(g, "s_chunks")}
        tbs, used = [], set()
        for t in g.findall("tb"):
            tb = {"id": _int(t, "id"), "send": _int(t, "send"), "recv": _int(t, "recv"), "chan": _int(t, "chan"),
                  "steps": []}
            if tb["id"] != len(tbs):
                raise InvalidAlgorithm(f"gpu {gid}: thread block {tb['id']} out of order (MSCCL needs 0..n-1)")
            if gid in (tb["send"], tb["recv"]) or min(tb["send"], tb["recv"]) < -1 or \
                    max(tb["send"], tb["recv"]) >= ngpus or not 0 <= tb["chan"] < nchannels:
                raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']}: peers {tb['send']}/{tb['recv']} or channel "
                                       f"{tb['chan']} invalid")
            for role in ("send", "recv"):
                if tb[role] >= 0:
                    if (role, tb[role], tb["chan"]) in used:
                        raise InvalidAlgorithm(f"gpu {gid}: two thread blocks {role} with {tb[role]} on channel "
                                               f"{tb['chan']}")
                    used.add((role, tb[role], tb["chan"]))
            for s in t.findall("step"):
                st = {k: _int(s, k) for k in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")}
                st["type"], st["srcbuf"], st["dstbuf"] = s.attrib["type"], s.attrib["srcbuf"], s.attrib["dstbuf"]
                if st["s"] != len(tb["steps"]):
                    raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']}: step {st['s']} out of order")
                kind = st["type"]
                if kind not in SENDS | RECVS | LOCAL:
                    raise InvalidAlgorithm(f"step type {kind} (this interpreter knows s, r, rrc, cpy, nop)")
                if kind in SENDS and tb["send"] < 0 or kind in RECVS and tb["recv"] < 0:
                    raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']} step {st['s']}: {kind} without a peer")
                if kind != "nop":
                    if not 1 <= st["cnt"] < MAX_COUNT:
                        raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']} step {st['s']}: cnt {st['cnt']}")
                    for buf, off in ((st["srcbuf"], st["srcoff"]), (st["dstbuf"], st["dstoff"])):
                        if buf not in size or not 0 <= off <= size[buf] - st["cnt"]:
                            raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']} step {st['s']}: {buf}[{off}:+"
                                                   f"{st['cnt']}] outside its {size.get(buf)} chunks")
                tb["steps"].append(st)
            tbs.append(tb)
        gpus[gid] = {"size": size, "tbs": tbs}
    if len(gpus) != ngpus:
        raise InvalidAlgorithm(f"{len(gpus)} gpus, ngpus says {ngpus}")
    for gid, g in gpus.items():
        waited = set()
        for tb in g["tbs"]:
            pending = False
            for st in tb["steps"]:
                if st["depid"] >= 0:
                    if st["depid"] == tb["id"] or st["depid"] >= len(g["tbs"]) or \
                            not 0 <= st["deps"] < len(g["tbs"][st["depid"]]["steps"]):
                        raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']} step {st['s']}: depends on "
                                               f"{st['depid']}/{st['deps']}, no other thread block's step")
                    waited.add((st["depid"], st["deps"]))
                if st["type"] == "nop":
                    if st["depid"] < 0:
                        raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']} step {st['s']}: a nop without a dependency")
                    pending = True
                else:
                    if pending and st["depid"] < 0:
                        raise InvalidAlgorithm(f"gpu {gid} tb {tb['id']} step {st['s']}: nops before it, but it "
                                               "has no dependency of its own (MSCCL refuses that)")
                    pending = False
        for t, s in waited:
            if g["tbs"][t]["steps"][s]["hasdep"] != 1:
                raise InvalidAlgorithm(f"gpu {gid} tb {t} step {s}: others wait for it but hasdep is 0")
    return {"ngpus": ngpus, "nchunks": nchunks, "gpus": gpus, "coll": root.attrib["coll"],
            "inplace": root.attrib["inplace"] == "1"}


# NCCL's buffer sizes per collective, in chunks: (input, output) as multiples of (C, K)
SIZES = {"allreduce": ("C", "C"), "allgather": ("K", "C"), "reducescatter": ("C", "K"), "alltoall": ("C", "C")}


def _sizes(algo: dict) -> tuple[int, int]:
    if algo["coll"] not in SIZES:
        raise InvalidAlgorithm(f"coll {algo['coll']} (this interpreter checks {', '.join(SIZES)})")
    c, n = algo["nchunks"], algo["ngpus"]
    if c % n and "K" in SIZES[algo["coll"]]:
        raise InvalidAlgorithm(f"nchunksperloop {c} does not split over {n} ranks")
    return tuple(c if x == "C" else c // n for x in SIZES[algo["coll"]])


def address(algo: dict, gpu: int, buf: str, off: int, cnt: int = 1) -> int:
    """Where chunk `off` of buffer i, o or s lies in the GPU's memory: in place the input and the output alias as
    MSCCL's runtime passes them (sendbuff/recvbuff), out of place they are apart; the scratch comes after. Chunks
    [off, off + cnt) must lie inside the buffer NCCL's collective has there, whatever the file declares."""
    size_in, size_out = _sizes(algo)
    k = algo["nchunks"] // algo["ngpus"]
    real = {"i": size_in, "o": size_out, "s": algo["gpus"][gpu]["size"]["s"]}[buf]
    if not 0 <= off <= real - cnt:
        raise InvalidAlgorithm(f"gpu {gpu}: {buf}[{off}:+{cnt}] outside the {real} chunks {algo['coll']} has there")
    if algo["inplace"]:
        base = {"allgather": {"o": 0, "i": gpu * k}, "reducescatter": {"i": 0, "o": gpu * k}}.get(
            algo["coll"], {"i": 0, "o": 0})
        base["s"] = max(size_in, size_out)
    else:
        base = {"i": 0, "o": size_in, "s": size_in + size_out}
    return base[buf] + off


def memory_size(algo: dict) -> int:
    size_in, size_out = _sizes(algo)
    scratch = max(g["size"]["s"] for g in algo["gpus"].values())
    return (max(size_in, size_out) if algo["inplace"] else size_in + size_out) + scratch


def check(algo: dict, seed: int = 0, orders: int = 3) -> None:
    """Run the file `orders` times (random step orders) from random inputs; every rank's output must be what
    NCCL's `coll` defines (AssertionError naming the first rank that differs)."""
    size_in, size_out = _sizes(algo)
    n, k = algo["ngpus"], algo["nchunks"] // algo["ngpus"]
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, 1000, size=(n, size_in))
    total = inputs.sum(axis=0)
    want = {"allreduce": lambda r: total,
            "allgather": lambda r: inputs.reshape(-1),
            "reducescatter": lambda r: total[r * k:(r + 1) * k],
            "alltoall": lambda r: inputs[:, r * k:(r + 1) * k].reshape(-1)}[algo["coll"]]
    what = {"allreduce": "the sum of all inputs", "allgather": "every rank's input in rank order",
            "reducescatter": "the sum of its slot of all inputs", "alltoall": "its block of every rank's input"}
    for order in range(orders):
        mem = -(1 + np.arange(n * memory_size(algo)).reshape(n, -1))   # poison: no two chunks alike
        for g in range(n):
            mem[g, [address(algo, g, "i", x) for x in range(size_in)]] = inputs[g]
        final = execute(algo, mem, seed=seed + order)
        for r in range(n):
            out = final[r, [address(algo, r, "o", x) for x in range(size_out)]]
            assert (out == want(r)).all(), f"rank {r} does not end with {what[algo['coll']]}"


def execute(algo: dict, mem: np.ndarray, seed: int = 0) -> np.ndarray:
    """Run the algorithm on mem[gpu, chunk] (each GPU's memory, buffers placed by `address`), picking among the
    steps ready at each moment at random (seeded); returns the final memory.

    A send of one chunk may complete before its receive is posted, into the connection (one such send at a time
    per connection, as MSCCL's FIFO always holds one chunk's transmission: a one-chunk step is at most one NCCL
    chunk per loop); a send of more meets its receive (a rendezvous, stricter than MSCCL)."""
    rng = np.random.default_rng(seed)
    buf = mem.copy()
    gpus = algo["gpus"]

    def at(g, name, off, cnt):
        start = address(algo, g, name, off, cnt)
        return slice(start, start + cnt)
    pc = {(g, t["id"]): 0 for g in gpus for t in gpus[g]["tbs"]}
    done = set()

    def head(g, t):
        steps = gpus[g]["tbs"][t]["steps"]
        return steps[pc[(g, t)]] if pc[(g, t)] < len(steps) else None

    def ready(g, st):
        return st["depid"] < 0 or (g, st["depid"], st["deps"]) in done

    def finish(g, t):
        done.add((g, t, pc[(g, t)]))
        pc[(g, t)] += 1

    receiver, sender = {}, {}
    for g in gpus:
        for t in gpus[g]["tbs"]:
            if t["recv"] >= 0:
                receiver[(t["recv"], g, t["chan"])] = t["id"]
            if t["send"] >= 0:
                sender[(g, t["send"], t["chan"])] = t["id"]
    pending: dict = {}   # connection (sender, receiver, channel) -> a one-chunk send's payload not yet received
    waiters: dict = {}   # (gpu, tb, step) -> thread blocks whose head waits for it
    ready_now: list = []  # (gpu, tb) whose head can run now, in a list for random picks
    where: dict = {}

    def check(g, t):
        """Is (g, t)'s head runnable? Keep ready_now up to date."""
        st = head(g, t)
        ok = st is not None
        if ok and not ready(g, st):
            waiters.setdefault((g, st["depid"], st["deps"]), set()).add((g, t))
            ok = False
        tb = gpus[g]["tbs"][t]
        if ok and st["type"] in SENDS:
            conn = (g, tb["send"], tb["chan"])
            rt = receiver.get(conn)
            if rt is None:
                raise InvalidAlgorithm(f"gpu {g} sends to {tb['send']} on channel {tb['chan']}, which never "
                                       "receives from it")
            if conn in pending:   # the connection is full until its receive takes what is there
                ok = False
            elif st["cnt"] > 1:
                other = head(tb["send"], rt)
                ok = other is not None and other["type"] in RECVS and ready(tb["send"], other)
                if other is not None and not ready(tb["send"], other):
                    waiters.setdefault((tb["send"], other["depid"], other["deps"]), set()).add((g, t))
        elif ok and st["type"] in RECVS:
            ok = (tb["recv"], g, tb["chan"]) in pending
        if ok and (g, t) not in where:
            where[(g, t)] = len(ready_now)
            ready_now.append((g, t))
        elif not ok and (g, t) in where:
            i = where.pop((g, t))
            last = ready_now.pop()
            if i < len(ready_now):
                ready_now[i] = last
                where[last] = i

    def recheck_after(g, t):
        """(g, t) finished a step: its new head, whoever waited for that step, and the sender feeding it."""
        for w in waiters.pop((g, t, pc[(g, t)] - 1), ()):
            check(*w)
        check(g, t)
        tb = gpus[g]["tbs"][t]
        if tb["recv"] >= 0:
            st = sender.get((tb["recv"], g, tb["chan"]))
            if st is not None:
                check(tb["recv"], st)

    def deliver(p, rt, payload, cnt, src):
        """Receive step of (p, rt) takes `payload` (sent by gpu `src`)."""
        other = head(p, rt)
        if other["cnt"] != cnt:
            raise InvalidAlgorithm(f"gpu {src} sends {cnt} chunks, gpu {p} receives {other['cnt']}")
        dst = at(p, other["dstbuf"], other["dstoff"], other["cnt"])
        if other["type"] == "rrc":
            buf[p, dst] = buf[p, at(p, other["srcbuf"], other["srcoff"], other["cnt"])] + payload
        else:
            buf[p, dst] = payload
        finish(p, rt)

    for g in gpus:
        for t in gpus[g]["tbs"]:
            check(g, t["id"])
    while ready_now:   # one ready step (or send-receive pair) at a time, chosen at random: any order MSCCL may take
        g, t = ready_now[int(rng.integers(len(ready_now)))]
        st = head(g, t)
        tb = gpus[g]["tbs"][t]
        if st["type"] in SENDS:
            p = tb["send"]
            rt = receiver[(g, p, tb["chan"])]
            payload = buf[g, at(g, st["srcbuf"], st["srcoff"], st["cnt"])].copy()
            finish(g, t)
            if st["cnt"] > 1:
                deliver(p, rt, payload, st["cnt"], g)
                recheck_after(p, rt)
            else:
                pending[(g, p, tb["chan"])] = (payload, g)
                check(p, rt)
            recheck_after(g, t)
        elif st["type"] in RECVS:
            payload, src = pending.pop((tb["recv"], g, tb["chan"]))
            deliver(g, t, payload, len(payload), src)
            recheck_after(g, t)
        else:
            if st["type"] == "cpy":
                buf[g, at(g, st["dstbuf"], st["dstoff"], st["cnt"])] = \
                    buf[g, at(g, st["srcbuf"], st["srcoff"], st["cnt"])]
            finish(g, t)
            recheck_after(g, t)
    left = [(g, t, pc[(g, t)]) for (g, t) in pc if pc[(g, t)] < len(gpus[g]["tbs"][t]["steps"])]
    if left:
        raise InvalidAlgorithm(f"deadlock: {len(left)} thread blocks wait forever, first gpu {left[0][0]} tb "
                               f"{left[0][1]} at step {left[0][2]}")
    if pending:
        (g, p, chan), _ = next(iter(pending.items()))
        raise InvalidAlgorithm(f"gpu {g} sends to gpu {p} on channel {chan} what gpu {p} never receives")
    return buf
