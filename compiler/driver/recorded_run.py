"""Run options recorded in what a run writes, and applied when it runs again (runtime/run_record.py: the keys and
the reader's checks; docs/tables.md, "Recorded run options").

Writing: `of_tables` (a collective's table directory, and as comm.run a comm module: `with_comm_record`),
`of_step` (a step directory) and `of_module` (a workload module) keep the options whose values differ from their
defaults, taken from the options the run really used.

Reading: `of_input` (the command line's input), `in_module` (a workload module parsed already).

Running again (the command line, and sweep points, which take its path): `filled` gives every recorded option the
command line does not name its recorded value, set on the run's Job before its options are checked (cli_rules) and
a system file fills what is left; `notes` then names each recorded option the run took another value of (one line
each, after the report). From Python, api.compile does the same for the Job's options left at their defaults
(api._with_recorded); it
also refuses the one option a step directory cannot re-run under another value of, its step semantics.
"""
from __future__ import annotations

import os
import re

from ... import algorithms

from . import driver
from ...network.errors import UserError, show
from ...passes import ALL_REDUCE_SPLITS
from ...runtime import run_record
from ...runtime.errors import TableError
from ...runtime.meta import read_json
from ...runtime.workload_engine import Roofline

# record key -> the command line's option (its argparse dest); astra_link_gbps is no option: a system file's
# network conventions set it (astra_system._network_conventions)
DEST = {"backend": "backend", "execution": "execution", "intra": "intra", "active_chunks": "active_chunks",
        "switching": "switching", "local_mem_gbps": "local_mem_bw", "peak_tflops": "peak_tflops",
        "mem_bw_gbps": "mem_bw", "mem_latency_ns": "mem_latency", "step_semantics": "step_semantics",
        "astra_link_gbps": "astra_link_gbps", "pool": "pool", "scheduler": "scheduler", "chunks": "chunks",
        "algorithm": "algorithm", "all_reduce": "all_reduce", "gpu": "gpu"}


def of_tables(run: driver.RunOptions) -> dict:
    """A collective's table directory: how its tables executed (RunOptions), where not the default."""
    default = driver.RunOptions()
    return {k: getattr(run, k) for k in run_record.TABLES if getattr(run, k) != getattr(default, k)}


def of_step(opts) -> dict:
    """A step directory: how its collectives executed, its roofline, memories and step semantics
    (workload_driver.WorkloadOptions), where not the default."""
    from ...network import pool_file
    out = {k: v for k, v in of_tables(opts.run).items() if k in run_record.STEP}
    roof = Roofline()
    values = {"peak_tflops": (opts.roofline.peak_tflops, roof.peak_tflops),
              "mem_bw_gbps": (opts.roofline.mem_gbps, roof.mem_gbps),
              "mem_latency_ns": (opts.mem_latency_ns, 0.0), "step_semantics": (opts.step.name, "streams"),
              "astra_link_gbps": (list(opts.step.link_gbps) if opts.step.link_gbps else None, None)}
    if opts.device is not None:   # the device's own fp32 peak and bandwidth come with it (`gpu` below)
        values["peak_tflops"] = (opts.roofline.peak_tflops, opts.device.peak("fp32"))
        values["mem_bw_gbps"] = (opts.roofline.mem_gbps, opts.device.mem_gbps)
    out.update({k: v for k, (v, default) in values.items() if v != default})
    if opts.pool is not None:
        out["pool"] = pool_file.to_data(opts.pool)
    if opts.device is not None:   # the compute model's device: without it a re-run times compute by the roofline
        out["gpu"] = run_record.recorded_device(opts.device)
    return out


def of_module(opts) -> dict:
    """A workload module: of_step's, and the compile options its collectives are compiled with again."""
    out = of_step(opts)
    if opts.scheduler != driver.DEFAULT_SCHEDULER:
        out["scheduler"] = opts.scheduler
    out.update({k: opts.defaults[k] for k in run_record.COMPILE if k in opts.defaults})
    return out


def check(record, where: str, keys: tuple, ndims: int) -> dict:
    """run_record.check, and the compile options' names (an algorithm list, an all-reduce split), as UserError."""
    try:
        out = run_record.check(record, where, keys, ndims)
    except TableError as e:
        raise UserError(str(e)) from None
    names = out.get("algorithm", "").split(",") if "algorithm" in out else []
    if any(algorithms.canonical(n) is None for n in names):
        raise UserError(f"{where}.algorithm must name algorithms (one, or one per dimension), got "
                        f"{show(out['algorithm'])}")
    if out.get("all_reduce", ALL_REDUCE_SPLITS[0]) not in ALL_REDUCE_SPLITS:
        raise UserError(f"{where}.all_reduce must be one of {', '.join(ALL_REDUCE_SPLITS)}, got "
                        f"{show(out['all_reduce'])}")
    return out


# what each kind of input records, under which key (recorded_run.of_input)
INPUTS = {"table directory": ("run", run_record.TABLES), "step tables": ("run", run_record.STEP),
          "workload module": ("wl.run", run_record.MODULE), "comm module": ("comm.run", run_record.TABLES)}


def of_input(kind: str, path: str) -> tuple[dict, str]:
    """The run options an input of `kind` (INPUTS) records, checked, and where they are, for messages. An input that
    cannot be read gives ({}, ""): the run's own reader names the fault, after the options' checks; a damaged
    record is refused here."""
    from ...dialects.comm import IRError
    key, keys = INPUTS[kind]
    try:
        if kind in ("table directory", "step tables"):
            data, where = read_json(path), f"{os.path.join(path, 'meta.json')}: run"
        else:
            data, where = driver.comm.attrs(_module(kind, path).operation), f"{path}: {key}"
    except (UserError, IRError, TableError):
        return {}, ""
    return _held(data, key, keys, where), where


def _held(data, key: str, keys: tuple, where: str) -> dict:
    """The record under `key` of a meta.json object or a module's attributes, checked (an astra_link_gbps list has
    one bandwidth per dimension of the topology beside it); {} where it holds none."""
    if not isinstance(data, dict) or key not in data:
        return {}
    topology = data.get("topology" if key == "run" else "comm.topology")
    dims = topology.get("dims") if isinstance(topology, dict) else None
    return check(data[key], where, keys, len(dims) if isinstance(dims, list) else 0)


def _module(kind: str, path: str):
    from ...dialects import workload as wl
    from ...network.user_files import read_text
    if kind == "workload module":
        return wl.parse_module(read_text(path, "a workload .mlir module"), wl.new_context(), source=path)
    return driver.read_module(driver.comm.new_context(), path)


def with_comm_record(module, run: driver.RunOptions) -> None:
    """Set on a compiled comm module the options its run took (of_tables), as comm.run; none: no attribute."""
    record = of_tables(run)
    attributes = module.operation.attributes
    if record:
        with module.context:
            driver.comm.set_attr(module.operation, "comm.run", record)
    elif "comm.run" in attributes:
        del attributes["comm.run"]


def in_module(module, path: str) -> dict:
    """The wl.run record of a parsed workload module (workload_driver.read_lowered), checked."""
    return _held(driver.comm.attrs(module.operation), "wl.run", run_record.MODULE, f"{path}: wl.run")


def filled(named: set, record: dict) -> dict:
    """The recorded value of every option the command line does not name (`named`: the options typed, even at
    their defaults): what the run takes from the record (blamed)."""
    return {k: v for k, v in record.items() if DEST[k] not in named}


def as_options(values: dict) -> dict:
    """Record keys -> the command-line options they stand for (Job.with_options takes them)."""
    return {DEST[k]: v for k, v in values.items()}


def blamed(error: Exception, filled: dict, where: str) -> Exception:
    """`error` (a refusal of the run) with the record in front where it names an option the record set (its flag,
    or for --algorithm an algorithm it names): the user never typed that option."""
    text = str(error)
    for key, value in filled.items():
        named = [_flag(key)] + (str(value).split(",") if key == "algorithm" else [])
        if any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text) for n in named):
            return type(error)(f"{where} records {_flag(key)} {_shown(key, value)}: {text}")
    return error


def notes(job, record: dict, where: str) -> list[str]:
    """One line for each recorded option this run (its Job) took another value of (the command line's or a system
    file's)."""
    out = []
    for key, value in record.items():
        now = _effective(job, key)
        if not _same(key, now, value):
            out.append(f"astra-compile: note: {where} records {_flag(key)} {_shown(key, value)}; this run takes "
                       f"{_shown(key, now)}")
    return out


def _effective(job, key: str):
    """The value the run takes for `key`, in the record's form (None: not set)."""
    value = job.option(DEST[key])
    if key in ("active_chunks", "chunks") and value is not None:
        try:
            return int(value)
        except ValueError:
            return value
    if key == "astra_link_gbps" and value is not None:
        return [float(v) for v in value]
    if key == "pool" and value is not None:
        from ...network import pool_file
        return pool_file.load(value) if isinstance(value, (str, os.PathLike)) else value
    if key == "scheduler" and value is None:
        return driver.DEFAULT_SCHEDULER
    return value


def _flag(key: str) -> str:
    return "the ASTRA-sim link bandwidths" if key == "astra_link_gbps" else "--" + DEST[key].replace("_", "-")


def _shown(key: str, value) -> str:
    if value is None:
        return "none" if key == "pool" else "(not given)"
    if key == "pool":
        return f"({value.describe()})"
    if key == "gpu":
        from ...network import devices
        return devices.resolve(value).name
    if key == "astra_link_gbps":
        return ",".join(map(_number, value))
    return _number(value) if isinstance(value, float) else str(value)


def _number(value: float) -> str:
    """A float as typed: 1600, 0.1, 2.5e-05 (repr, exact, without a trailing .0)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _same(key: str, a, b) -> bool:
    if key == "gpu":   # the same device whatever named it: their fields agree
        from ...network import devices
        return (a is None) == (b is None) and (a is None or devices.resolve(a).to_dict() ==
                                                 devices.resolve(b).to_dict())
    if key == "pool":   # the same memory whatever file or object described it: their file forms agree
        from ...network import pool_file
        return (a is None) == (b is None) and (a is None or pool_file.to_data(a) == pool_file.to_data(b))
    return a == b
