"""What ASTRA-sim (revision 518bd51, Chakra f37c2bb) does with a Chakra trace directory, as read in its source
(astra-sim/workload/Workload.cc, the ETFeeder's node attributes, Roofline.cc): the tests' independent check that a
directory written by --emit chakra runs there as written, since no ASTRA-sim build is at hand.

`check(directory, peak_tflops, mem_gbps)` raises AssertionError naming the first node ASTRA-sim would crash on,
hang at or drop, then plays the directory's dependencies, messages and collectives to the end and asserts that
every rank finishes. It returns {rank: {node id: ASTRA-sim's time of the node in ns (compute nodes)}}.
"""
import json
import os
import re

from astra_compile.compiler.frontend.chakra import COMM_TYPES, NODE_TYPES, messages, schema

# Workload::issue_coll_comm: every other collective type throws "Unsupported collective comm type"
SUPPORTED = {"ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "BROADCAST"}
INTEGER = {"int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val", "sint64_val", "fixed32_val",
           "fixed64_val", "sfixed32_val", "sfixed64_val", "bool_val"}   # float-to-integer conversion is refused


def _attrs(node) -> dict:
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        out[a.name] = (which, getattr(a, which))
    return out


def _int(rank, node, attrs, key, default=None):
    if key not in attrs:
        assert default is not None, f"rank {rank} node {node.id}: {key} is read with no default and is missing"
        return default
    which, value = attrs[key]
    assert which in INTEGER, f"rank {rank} node {node.id}: {key} is a {which}, read as an integer"
    return int(value)


def compute_ns(num_ops: int, tensor_size: int, peak_tflops: float, mem_gbps: float) -> int:
    """Workload::issue_comp under roofline-enabled: peak-perf in TFLOPS, local-mem-bw in decimal GB/s (here the
    same bandwidth as --mem-bw's 2^30 GB/s)."""
    peak, bandwidth = peak_tflops * 1e12, mem_gbps * 2 ** 30
    perf = min(bandwidth * (num_ops / tensor_size), peak)
    return int(num_ops / perf * 1e9)


def check(directory: str, peak_tflops: float, mem_gbps: float) -> dict:
    _, Node = schema()
    files = {}
    for name in os.listdir(directory):
        m = re.match(r"^.*\.(\d+)\.et$", name)
        if m:
            files[int(m.group(1))] = os.path.join(directory, name)
    world = len(files)
    assert sorted(files) == list(range(world))
    groups = {int(k): v for k, v in json.load(open(os.path.join(directory, "comm_group.json"))).items()}
    assert all(isinstance(v, list) and all(isinstance(r, int) for r in v) for v in groups.values())
    nodes, times = {}, {}
    for rank, path in files.items():
        data = open(path, "rb").read()
        parts = list(messages(path, data))[1:]
        nodes[rank] = [Node.FromString(raw) for _, raw in parts]
        ids = {n.id for n in nodes[rank]}
        assert len(ids) == len(nodes[rank]), f"rank {rank}: node ids repeat"
        times[rank] = {}
        for n in nodes[rank]:
            assert all(d in ids for d in list(n.data_deps) + list(n.ctrl_deps)), f"rank {rank} node {n.id}: deps"
            kind, a = NODE_TYPES[n.type], _attrs(n)
            assert kind not in ("INVALID_NODE", "METADATA_NODE"), \
                f"rank {rank} node {n.id}: {kind} is skipped without its dependents being issued"
            assert not (kind != "COMP_NODE" and a.get("is_cpu_op", (None, False))[1]), \
                f"rank {rank} node {n.id}: a comm node on the CPU throws"
            if kind == "COMP_NODE":
                ops, size = _int(rank, n, a, "num_ops"), _int(rank, n, a, "tensor_size")
                assert size > 0, f"rank {rank} node {n.id}: tensor_size 0 is skipped without its dependents issued"
                assert ops > 0, f"rank {rank} node {n.id}: num_ops 0 gives a 0/0 time that never ends"
                took = compute_ns(ops, size, peak_tflops, mem_gbps)
                assert took >= 1, f"rank {rank} node {n.id}: {took} ns trips EventQueue::proceed's assertion"
                times[rank][n.id] = took
            elif kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
                assert _int(rank, n, a, "tensor_size") > 0
            elif kind == "COMM_COLL_NODE":
                ctype = COMM_TYPES[_int(rank, n, a, "comm_type")]
                assert ctype in SUPPORTED, f"rank {rank} node {n.id}: {ctype} is not supported"
                _int(rank, n, a, "comm_size")
                pg = a.get("pg_name", ("string_val", ""))[1]
                assert pg in ("", "0") or int(pg) in groups, f"rank {rank} node {n.id}: pg_name {pg!r}"
                assert pg in ("", "0") or rank in groups[int(pg)]
            else:
                src = _int(rank, n, a, "comm_src", rank if kind == "COMM_SEND_NODE" else None)
                dst = _int(rank, n, a, "comm_dst", rank if kind == "COMM_RECV_NODE" else None)
                assert (src if kind == "COMM_SEND_NODE" else dst) == rank, f"rank {rank} node {n.id}: not its own"
                _int(rank, n, a, "comm_size")
                _int(rank, n, a, "comm_tag")
    _play(nodes, groups, world)
    return times


def _play(nodes: dict, groups: dict, world: int) -> None:
    """Issue every dependency-free node and finish what can finish until nothing moves: a message when both ends
    are issued (matched by tag, source, destination and size, in order), a collective when every member of its
    group has issued its k-th collective on the group; then every node of every rank must be done."""
    done = {r: set() for r in nodes}
    issued = {r: set() for r in nodes}
    posted: dict = {}          # (tag, src, dst, size) -> [sends issued, recvs issued, finished]
    calls: dict = {}           # (group, k) -> members that issued it
    count = {r: {} for r in nodes}
    keys = {}
    for r, ns in nodes.items():
        for n in ns:
            kind, a = NODE_TYPES[n.type], _attrs(n)
            if kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
                src = a["comm_src"][1] if "comm_src" in a else r
                dst = a["comm_dst"][1] if "comm_dst" in a else r
                keys[r, n.id] = ("p2p", (a["comm_tag"][1], src, dst, a["comm_size"][1]), kind == "COMM_SEND_NODE")
            elif kind == "COMM_COLL_NODE":
                pg = a.get("pg_name", ("string_val", ""))[1]
                group = tuple(range(world)) if pg in ("", "0") else tuple(groups[int(pg)])
                k = count[r].get(group, 0)
                count[r][group] = k + 1
                keys[r, n.id] = ("coll", (group, k), None)
    moved = True
    while moved:
        moved = False
        for r, ns in nodes.items():
            for n in ns:
                if n.id in issued[r] or any(d not in done[r] for d in list(n.data_deps) + list(n.ctrl_deps)):
                    continue
                issued[r].add(n.id)
                moved = True
                what, key, is_send = keys.get((r, n.id), (None, None, None))
                if what == "p2p":
                    posted.setdefault(key, [[], []])[0 if is_send else 1].append((r, n.id))
                elif what == "coll":
                    calls.setdefault(key, []).append((r, n.id))
                else:
                    done[r].add(n.id)
        for key, (sends, recvs) in posted.items():
            while sends and recvs:
                (rs, ns_), (rr, nr) = sends.pop(0), recvs.pop(0)
                done[rs].add(ns_)
                done[rr].add(nr)
                moved = True
        for (group, k), members in list(calls.items()):
            if len(members) == len(group):
                for r, nid in members:
                    done[r].add(nid)
                del calls[group, k]
                moved = True
    for r, ns in nodes.items():
        stuck = [n.id for n in ns if n.id not in done[r]]
        assert not stuck, f"rank {r} never finishes: nodes {stuck[:5]} wait forever"
