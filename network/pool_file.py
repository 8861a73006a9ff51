"""Reader of a remote memory pool description (`--pool pool.yaml`, docs/memory.md): the one reader of the format.

    version: 1
    design: hiermem              # or zero-infinity
    nodes: 16
    gpus_per_node: 16
    in_node_gbps: 256            # hiermem: in-node pooled fabric, per GPU link
    out_node_switches: 16
    remote_groups: 256
    remote_group_gbps: 100
    gpu_side_out_gbps: 2048      # node <-> out-node switch link
    mem_side_out_gbps: 512       # remote memory group <-> out-node switch link
    chunk: 2MB                   # pipelining unit (a size, or bytes)
    latency_ns: 0                # optional: the pool's access latency

A zero-infinity pool has nodes, gpus_per_node, pcie_gbps, memory (cpu or nvme), memory_gbps (the node's CPU memory
or NVMe drives, shared by its GPUs), chunk and the optional latency_ns. Every problem is one UserError naming the
file, the field and the value.

ASTRA-sim 2.x's remote memory configuration (JSON, told apart by its "memory-type" key) is read too, as ASTRA-sim
reads it: memory-type (NO_MEMORY_EXPANSION, PER_NPU_MEMORY_EXPANSION, PER_NODE_MEMORY_EXPANSION, MEMORY_POOL),
remote-mem-latency (ns per access), remote-mem-bw (decimal GB/s, 10^9 B/s), and for PER_NODE num-nodes and
num-npus-per-node (memory_pool.AstraSimRemote). A key ASTRA-sim's analytical memory does not read is named in one
warning line.
"""
from __future__ import annotations

import math
import warnings

from .errors import InputWarning, UserError, show
from .memory import check_latency_ns
from .memory_pool import ASTRA_SIM_TYPES, AstraSimRemote, HierMem, ZeroInfinity
from .units import MAX_BYTES, MAX_GBPS, MIN_GBPS, parse_size
from .user_files import read_yaml

VERSION = 1
MAX_FILE_BYTES = 1 << 20
MAX_COUNT = 1 << 20     # nodes, GPUs, switches, groups: far past any machine, small enough for exact arithmetic
COUNTS = {"hiermem": ("nodes", "gpus_per_node", "out_node_switches", "remote_groups"),
          "zero-infinity": ("nodes", "gpus_per_node")}
RATES = {"hiermem": ("in_node_gbps", "remote_group_gbps", "gpu_side_out_gbps", "mem_side_out_gbps"),
         "zero-infinity": ("pcie_gbps", "memory_gbps")}
OTHERS = {"hiermem": ("chunk",), "zero-infinity": ("memory", "chunk")}
OPTIONAL = ("version", "design", "latency_ns")


def load(path: str):
    """The pool a file describes (HierMem or ZeroInfinity)."""
    data = read_yaml(path, "a YAML memory pool description", "pool file ", MAX_FILE_BYTES)
    return parse(data, path)


def parse(data, path: str):
    if not isinstance(data, dict):
        raise UserError(f"pool file {path}: expected a mapping of field: value, got {type(data).__name__}")
    if "memory-type" in data:
        return _astra_sim(data, path)
    version = data.get("version", VERSION)
    if version != VERSION or isinstance(version, bool):
        raise UserError(f"pool file {path}: field 'version' is {show(version)}; this reader knows version {VERSION}")
    design = data.get("design", "hiermem")
    if design not in COUNTS:
        raise UserError(f"pool file {path}: field 'design' is {show(design)}; expected hiermem or zero-infinity")
    known = COUNTS[design] + RATES[design] + OTHERS[design] + OPTIONAL
    for key in data:
        if key not in known:
            raise UserError(f"pool file {path}: unknown field {show(key)} for a {design} pool; expected "
                            f"{', '.join(known)}")
    for key in known:
        if key not in OPTIONAL and data.get(key) is None:
            raise UserError(f"pool file {path}: field '{key}' is missing (a {design} pool needs "
                            f"{', '.join(k for k in known if k not in OPTIONAL)})")
    values = {k: _count(path, k, data[k]) for k in COUNTS[design]}
    values.update({k: _rate(path, k, data[k]) for k in RATES[design]})
    values["chunk_bytes"] = _size(path, "chunk", data["chunk"])
    values["latency_ns"] = _field(path, "latency_ns", data.get("latency_ns", 0),
                                  lambda v: check_latency_ns(v, "latency_ns"))
    if values["nodes"] * values["gpus_per_node"] > MAX_COUNT:
        raise UserError(f"pool file {path}: nodes x gpus_per_node is {values['nodes'] * values['gpus_per_node']}; at "
                        f"most {MAX_COUNT} GPUs")
    if design == "zero-infinity":
        if data["memory"] not in ("cpu", "nvme"):
            raise UserError(f"pool file {path}: field 'memory' is {show(data['memory'])}; expected cpu or nvme")
        return ZeroInfinity(memory=data["memory"], **values)
    return HierMem(**values)


def _field(path: str, key: str, value, check):
    try:
        return check(value)
    except UserError as e:
        raise UserError(f"pool file {path}: field '{key}' is {show(value)}: {str(e).split(': ', 1)[-1]}") from None


def _count(path: str, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise UserError(f"pool file {path}: field '{key}' is {show(value)}; expected a whole number from 1 to "
                        f"{MAX_COUNT}")
    return value


def _rate(path: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not MIN_GBPS <= value <= MAX_GBPS:
        raise UserError(f"pool file {path}: field '{key}' is {show(value)}; expected GB/s between {MIN_GBPS:g} and "
                        f"{MAX_GBPS:g}")
    return float(value)


def _size(path: str, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UserError(f"pool file {path}: field '{key}' is {show(value)}; expected a size such as 2MB or a number "
                        "of bytes")
    nbytes = value if isinstance(value, int) else _field(path, key, value, parse_size)
    if not 1 <= nbytes <= MAX_BYTES:
        raise UserError(f"pool file {path}: field '{key}' is {show(value)}; expected 1 B to {MAX_BYTES} B")
    return nbytes


ASTRA_SIM_KEYS = ("memory-type", "remote-mem-latency", "remote-mem-bw", "num-nodes", "num-npus-per-node")


def _astra_sim(data: dict, path: str) -> AstraSimRemote:
    """ASTRA-sim's remote memory JSON (module notes); its bandwidth becomes GB/s of 2^30 B."""
    kind = data["memory-type"]
    if not isinstance(kind, str) or kind not in ASTRA_SIM_TYPES:
        raise UserError(f"pool file {path}: field 'memory-type' is {show(kind)}; expected one of "
                        f"{', '.join(ASTRA_SIM_TYPES)}")
    kind = ASTRA_SIM_TYPES[kind]
    for key in data:
        if key not in ASTRA_SIM_KEYS:
            warnings.warn(f"pool file {path}: {show(key)} is not read (ASTRA-sim's analytical remote memory reads "
                          f"{', '.join(ASTRA_SIM_KEYS)})", InputWarning, stacklevel=2)
    latency = _field(path, "remote-mem-latency", data.get("remote-mem-latency", 0),
                     lambda v: check_latency_ns(v, "remote-mem-latency"))
    if kind == "none":
        return AstraSimRemote("none", 0, 1, 1.0, latency, f"pool file {path}")
    if "remote-mem-bw" not in data:
        raise UserError(f"pool file {path}: field 'remote-mem-bw' is missing (memory-type {data['memory-type']} "
                        "needs it: decimal GB/s)")
    gbps = _rate(path, "remote-mem-bw", data["remote-mem-bw"]) * 1e9 / 2**30
    nodes, per_node = 0, 1   # every NPU of the run (AstraSimRemote.for_npus)
    if kind == "per_node":
        for key in ("num-nodes", "num-npus-per-node"):
            if key not in data:
                raise UserError(f"pool file {path}: field '{key}' is missing (PER_NODE_MEMORY_EXPANSION needs "
                                "num-nodes and num-npus-per-node)")
        nodes, per_node = _count(path, "num-nodes", data["num-nodes"]), \
            _count(path, "num-npus-per-node", data["num-npus-per-node"])
        if nodes * per_node > MAX_COUNT:
            raise UserError(f"pool file {path}: num-nodes x num-npus-per-node is {nodes * per_node}; at most "
                            f"{MAX_COUNT} NPUs")
    return AstraSimRemote(kind, nodes, per_node, gbps, latency, f"pool file {path}")


def to_data(pool) -> dict:
    """A pool as the mapping of its file (the inverse of `parse`: parse(to_data(p), ...) == p, exactly), so that a
    step directory or workload module records the pool its run used (runtime/run_record.py) and reads it back with
    this one reader."""
    if isinstance(pool, AstraSimRemote):
        kind = next(k for k, v in ASTRA_SIM_TYPES.items() if v == pool.memory_type)
        data = {"memory-type": kind, "remote-mem-latency": pool.latency_ns}
        if pool.memory_type != "none":
            data["remote-mem-bw"] = _decimal_gbps(pool.gbps)
        if pool.memory_type == "per_node":
            data.update({"num-nodes": pool.nodes, "num-npus-per-node": pool.gpus_per_node})
        return data
    design = "zero-infinity" if isinstance(pool, ZeroInfinity) else "hiermem"
    data = {"version": VERSION, "design": design}
    data.update({k: getattr(pool, k) for k in COUNTS[design] + RATES[design]})
    if design == "zero-infinity":
        data["memory"] = pool.memory
    data.update({"chunk": pool.chunk_bytes, "latency_ns": pool.latency_ns})
    return data


def _decimal_gbps(gbps: float) -> float:
    """The decimal GB/s an ASTRA-sim file gives for `gbps` (GB/s of 2^30 B): the value `_astra_sim` converts back to
    exactly `gbps` (the nearest decimal figure, or a neighbour where rounding moved it by a unit in the last place)."""
    near = gbps * 2 ** 30 / 1e9
    for value in (near, math.nextafter(near, math.inf), math.nextafter(near, -math.inf)):
        if value * 1e9 / 2 ** 30 == gbps:
            return value
    return near
