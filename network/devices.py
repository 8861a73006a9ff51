"""The GPU an NPU is (`--gpu NAME|FILE`, docs/compute.md): per-dtype dense peaks, memory bandwidth and capacity.

One format serves the presets (gpus.json beside this file: one device per name, every number with its datasheet
source) and a user's device file (YAML or JSON), and one reader (`parse`) checks both; `to_dict` writes a device
back in that format. The format (version 1; device.schema.json beside this file is its JSON schema):

    version: 1                      # optional; this reader knows 1
    name: h200
    description: NVIDIA H200 SXM 141GB          # optional text
    peak_tflops: {fp64: 67, fp32: 67, tf32: 494.5, bf16: 989.5, fp16: 989.5, fp8: 1979}   # dense TFLOP/s, all six
    mem_bw_tb_s: 4.8                # decimal TB/s, as datasheets give it
    memory_gb: 141                  # decimal GB
    sources: {peak_tflops.bf16: "...", mem_bw_tb_s: "..."}   # optional: where each number comes from (text)
    multiprocessors: 132            # optional: SMs (CUs) the tiles of a matmul spread over (compute_model.py)
    efficiency: {matmul.bf16: 0.785, norm: 0.45, host_us: 8}   # optional: the compute model's constants

A field missing, negative, of the wrong type or unknown is one UserError naming the file, the field and the value.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .compute_model import ComputeModel, check_efficiency
from .dtypes import DTYPES
from .errors import UserError, show
from .units import GIB, MAX_GBPS, MAX_TFLOPS, MIN_GBPS, MIN_TFLOPS
from .user_files import read_json, read_yaml

VERSION = 1
MAX_FILE_BYTES = 1 << 20
PRESETS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpus.json")
REQUIRED = ("name", "peak_tflops", "mem_bw_tb_s", "memory_gb")
OPTIONAL = ("version", "description", "sources", "multiprocessors", "efficiency")
# what `sources` may name
NUMBERS = tuple(f"peak_tflops.{d}" for d in DTYPES) + ("mem_bw_tb_s", "memory_gb", "multiprocessors", "efficiency")
MAX_MEMORY_GB = 1e9
MAX_MULTIPROCESSORS = 1 << 20
MAX_TEXT = 1000   # characters of a name, description or source


@dataclass(frozen=True)
class Device:
    name: str
    peak_tflops: tuple        # dense TFLOP/s per network/dtypes.DTYPES code
    mem_bw_tb_s: float        # decimal TB/s
    memory_gb: float          # decimal GB
    description: str = ""
    sources: tuple = ()       # (field, text) pairs: where each number comes from
    efficiency: tuple = ()    # (key, value) pairs of the compute model (compute_model.KEYS; absent: its DEFAULTS)
    multiprocessors: int = 0  # SMs / CUs (0: not known; the compute model then skips wave quantisation)
    origin: str = ""          # "preset" or the device file's path

    @property
    def mem_gbps(self) -> float:
        """The bandwidth in the roofline's unit (--mem-bw: GB/s of 2^30 B)."""
        return self.mem_bw_tb_s * 1e12 / GIB

    def peak(self, dtype: str) -> float:
        return self.peak_tflops[DTYPES.index(dtype)]

    def compute_model(self) -> ComputeModel:
        return ComputeModel(self.efficiency, self.multiprocessors)

    def describe(self) -> dict:
        """The report's "gpu" object: the device's name and where its numbers came from."""
        source = f"preset {self.name} ({PRESET_SOURCE})" if self.origin == "preset" else \
            "a device file's fields, recorded with the step" if self.origin == RECORDED else f"device file {self.origin}"
        return {"name": self.name, "description": self.description, "source": source}

    def to_dict(self) -> dict:
        """The device in the device file format (parse reads it back to an equal Device)."""
        return {"version": VERSION, "name": self.name, "description": self.description,
                "peak_tflops": dict(zip(DTYPES, self.peak_tflops)), "mem_bw_tb_s": self.mem_bw_tb_s,
                "memory_gb": self.memory_gb, "sources": dict(self.sources),
                **({"multiprocessors": self.multiprocessors} if self.multiprocessors else {}),
                "efficiency": dict(self.efficiency)}


PRESET_SOURCE = "vendor datasheets, docs/compute.md"
RECORDED = "recorded"   # the origin of a device read back from a step's run record (a device file's fields)


def presets() -> dict[str, Device]:
    """Every preset by name (gpus.json)."""
    with open(PRESETS_FILE, encoding="utf-8") as f:
        table = json.load(f)["presets"]
    return {name: parse(data, f"preset {name}", "preset") for name, data in table.items()}


def resolve(spec) -> Device:
    """`--gpu`'s value: a preset's name, or a device file's path (.yaml, .yml or .json); or a Device, or a
    device's fields (a run record's)."""
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, dict):   # a device's fields, as a step's run record holds a device file's (run_record)
        return parse(spec, "the step's recorded gpu", RECORDED)
    if not isinstance(spec, str) or not spec:
        raise UserError(f"--gpu must be a GPU name or a device file, got {show(spec)}")
    table = presets()
    if spec.lower() in table:
        return table[spec.lower()]
    if spec.lower().endswith((".yaml", ".yml", ".json")):
        return load(spec)
    raise UserError(f"--gpu {show(spec)}: unknown GPU; known: {', '.join(table)} (or a .yaml/.json device file, "
                    "docs/compute.md)")


def load(path: str) -> Device:
    """The device a user's file describes."""
    read = read_json if path.lower().endswith(".json") else read_yaml
    data = read(path, "a GPU device file (docs/compute.md)", "device file ", MAX_FILE_BYTES)
    return parse(data, f"device file {path}", path)


def parse(data, where: str, origin: str) -> Device:
    """A device from its format's mapping; `where` names it in messages ("device file PATH")."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping of field: value, got {type(data).__name__}")
    for key in data:
        if key not in REQUIRED + OPTIONAL:
            raise UserError(f"{where}: unknown field {show(key)}; expected {', '.join(REQUIRED + OPTIONAL)}")
    for key in REQUIRED:
        if key not in data:
            raise UserError(f"{where}: field '{key}' is missing (a device needs {', '.join(REQUIRED)})")
    version = data.get("version", VERSION)
    if version != VERSION or isinstance(version, bool):
        raise UserError(f"{where}: field 'version' is {show(version)}; this reader knows version {VERSION}")
    peaks = data["peak_tflops"]
    if not isinstance(peaks, dict):
        raise UserError(f"{where}: field 'peak_tflops' is {show(peaks)}; expected a mapping of dtype: TFLOP/s "
                        f"({', '.join(DTYPES)})")
    for key in peaks:
        if key not in DTYPES:
            raise UserError(f"{where}: unknown field {show(f'peak_tflops.{key}')}; expected {', '.join(DTYPES)}")
    for key in DTYPES:
        if key not in peaks:
            raise UserError(f"{where}: field 'peak_tflops.{key}' is missing (every dtype needs its dense peak: "
                            f"{', '.join(DTYPES)})")
    return Device(name=_text(where, "name", data["name"]),
                  peak_tflops=tuple(_number(where, f"peak_tflops.{d}", peaks[d], MIN_TFLOPS, MAX_TFLOPS, "TFLOP/s")
                                    for d in DTYPES),
                  mem_bw_tb_s=_number(where, "mem_bw_tb_s", data["mem_bw_tb_s"], MIN_GBPS * GIB / 1e12,
                                      MAX_GBPS * GIB / 1e12, "decimal TB/s"),
                  memory_gb=_number(where, "memory_gb", data["memory_gb"], 1e-3, MAX_MEMORY_GB, "decimal GB"),
                  description=_text(where, "description", data.get("description", "")),
                  sources=_mapping(where, "sources", data.get("sources"), NUMBERS, _text),
                  efficiency=check_efficiency(where, data.get("efficiency")),
                  multiprocessors=_count(where, "multiprocessors", data.get("multiprocessors", 0)),
                  origin=origin)


def _number(where: str, key: str, value, low: float, high: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise UserError(f"{where}: field '{key}' is {show(value)}; expected {unit} between {low:g} and {high:g}")
    return float(value)


def _text(where: str, key: str, value) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or (key == "name" and not value.strip()):
        raise UserError(f"{where}: field '{key}' is {show(value)}; expected text of at most {MAX_TEXT} characters")
    return value


def _count(where: str, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_MULTIPROCESSORS:
        raise UserError(f"{where}: field '{key}' is {show(value)}; expected a whole number from 1 to "
                        f"{MAX_MULTIPROCESSORS}")
    return value


def _mapping(where: str, key: str, value, known, check) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise UserError(f"{where}: field '{key}' is {show(value)}; expected a mapping")
    for name in value:
        if not isinstance(name, str) or (known is not None and name not in known):
            raise UserError(f"{where}: unknown field {show(f'{key}.{name}')}" +
                            (f"; expected {', '.join(known)}" if known is not None else ""))
    return tuple((name, check(where, f"{key}.{name}", v)) for name, v in value.items())
