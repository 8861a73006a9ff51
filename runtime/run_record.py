"""The run options a written artefact records, so that running it again gives the figure its writer printed.

A table directory (`run` in its meta.json), a step directory (`run` in the step's meta.json) and a workload module
(`wl.run` on the module) hold what the run that wrote them computed; how that run executed it (the backend, the
queue policy, the roofline, the memory pool, ...) is not in the tables, and a re-run would take it from the
defaults. Each of them records the options of that kind whose values differed from the defaults, and only those:
an artefact written without any is byte for byte what it was before this record existed.

This module is the record's one list of keys per artefact and its one reader check (every key's type and range, a
fault one TableError naming the file, the key and the value); compiler/driver/recorded_run.py builds a record from
a run's options and applies one to a re-run (docs/tables.md, "Recorded run options").
"""
from __future__ import annotations

import math

from ..network.errors import UserError, show
from ..network.memory import check_latency_ns, check_local_mem_gbps
from ..network.units import MAX_GBPS, MIN_GBPS, check_peak_tflops
from .errors import TableError

BACKENDS = ("analytical", "congestion")
EXECUTIONS = ("auto", "symmetric", "full")
INTRA_POLICIES = ("fifo", "scf")                  # a dimension's queue order (phases.py)
SWITCHING = ("cut-through", "store-and-forward")  # how the congestion runtime forwards a message (congestion.py)
STREAMS, ASTRA_SIM = "streams", "astra-sim"       # the step semantics (workload_engine.py)
SEMANTICS = (STREAMS, ASTRA_SIM)
# how tables execute: what a collective's table directory records
TABLES = ("backend", "execution", "intra", "active_chunks", "switching", "local_mem_gbps")
# how a step's collectives execute, its roofline, memories and step semantics: what a step directory records
STEP = ("backend", "intra", "switching", "local_mem_gbps", "peak_tflops", "mem_bw_gbps", "mem_latency_ns",
        "step_semantics", "astra_link_gbps", "pool", "gpu")
# a workload module is compiled again when it runs: the compile options too (checked by compiler/driver/recorded_run.py)
COMPILE = ("scheduler", "chunks", "algorithm", "all_reduce")
# `chunks` is a count or this: each collective ran with the fastest of several chunk counts (--chunks fastest)
FASTEST_CHUNKS = "fastest"
MODULE = STEP + COMPILE


def check(record, where: str, keys: tuple, ndims: int) -> dict:
    """A record read back (`where` names the file and the key holding it), every key checked: the record, with a
    pool as its object (network/pool_file.py reads it). Compile keys are checked for their type here and their
    names by the compiler."""
    if not isinstance(record, dict):
        raise TableError(f"{where} must be an object of run options, got {show(record)}")
    out = {}
    for key, value in record.items():
        at = f"{where}.{key}"
        if key not in keys:
            raise TableError(f"{where}: unknown key {show(key)} (this artefact records {', '.join(keys)})")
        out[key] = _value(key, value, at, ndims)
    if "astra_link_gbps" in out and out.get("step_semantics") != "astra-sim":
        raise TableError(f"{where}.astra_link_gbps goes with step_semantics \"astra-sim\" (the per-link bandwidths of "
                         "an ASTRA-sim network file, which only its messages use)")
    return out


def _value(key: str, value, at: str, ndims: int):
    words = {"backend": BACKENDS, "execution": EXECUTIONS, "intra": INTRA_POLICIES, "switching": SWITCHING,
             "step_semantics": SEMANTICS, "scheduler": ("baseline", "themis", "optimal")}
    if key in words:
        if value not in words[key] or not isinstance(value, str):
            raise TableError(f"{at} must be one of {', '.join(words[key])}, got {show(value)}")
        return value
    if key == "chunks" and value == FASTEST_CHUNKS:
        return value
    if key in ("active_chunks", "chunks"):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2 ** 31:
            raise TableError(f"{at} must be a whole number from 1 to 2^31-1, got {show(value)}")
        return value
    if key in ("algorithm", "all_reduce"):
        if not isinstance(value, str) or not value or len(value) > 1000:
            raise TableError(f"{at} must be a non-empty name, got {show(value)}")
        return value
    if key == "astra_link_gbps":
        if not isinstance(value, list) or len(value) != ndims or not all(_rate(v) for v in value):
            raise TableError(f"{at} must list {ndims} bandwidths (GB/s, {MIN_GBPS:g} to {MAX_GBPS:g}), one per "
                             f"dimension, got {show(value)}")
        return [float(v) for v in value]
    if key == "gpu":   # --gpu's device: a preset's name, or a device file's fields (network/devices.py)
        return _device(value, at)
    if key == "pool":
        from ..network import pool_file
        try:
            return pool_file.parse(value, at)
        except UserError as e:
            raise TableError(str(e)) from None
    checks = {"local_mem_gbps": check_local_mem_gbps, "peak_tflops": check_peak_tflops,
              "mem_latency_ns": check_latency_ns, "mem_bw_gbps": _mem_bw}
    try:
        return checks[key](value, at)
    except UserError as e:
        raise TableError(str(e)) from None


def _device(value, at: str):
    """A recorded device, checked, as recorded (network/devices.resolve reads either form)."""
    from ..network import devices
    if isinstance(value, str):
        if value not in devices.presets():
            raise TableError(f"{at} must be a GPU preset ({', '.join(devices.presets())}) or a device's fields, "
                             f"got {show(value)}")
        return value
    try:
        devices.parse(value, at, devices.RECORDED)
    except UserError as e:
        raise TableError(str(e)) from None
    return value


def recorded_device(device) -> str | dict:
    """A --gpu device as a record holds it: a preset by its name, any other device by its fields."""
    return device.name if device.origin == "preset" else device.to_dict()


def _rate(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and \
        MIN_GBPS <= value <= MAX_GBPS


def _mem_bw(value, at: str) -> float:
    if not _rate(value):
        raise UserError(f"{at} must be a number of GB/s between {MIN_GBPS:g} and {MAX_GBPS:g}, got {show(value)}")
    return float(value)
