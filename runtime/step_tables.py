"""Step tables: a whole training step as per-accelerator tables, one writer and one reader (this module).

    DIR/meta.json         format "astra-compile-step", version 3 (step_meta.schema.json beside this file)
    DIR/program_<k>.csv   a program: one row per op in issue order (PROGRAM_COLUMNS); accelerators whose programs
                          are identical (same rows, same groups) share one file
    DIR/collective_<c>/   the compiled schedule of distinct collective c: a table directory (docs/tables.md),
                          every accelerator's SEND/RECV rows

A program row that is a collective names its schedule (`collective`), its process group and the stream it runs
on; a send or recv row its `peer` (a global rank) and its stream (one per peer and direction), its time being the
routed message's on the topology (network/message.py); a load or store row its `location` (local or remote) and
`in_switch` (the GPUs whose tensor the pool's switches gather, 1: none), its time being the memory model's
(network/memory.py); a compute row its `dtype` (network/dtypes.py) where a program has one that is not fp32: the
column is left out of a program whose compute is all fp32 (as it is of directories written before it); and its
`shapes` (its tensor arguments' sizes, network/op_classes.format_shapes; "": not known) after the dtype column,
where a program has a compute row whose shapes are known (a program without any keeps the columns before); and
`causal` ("1": an attention op that masked causally, network/compute_model.attention_factor; "": not) after the shapes
column, where a program has such a row; and `views` (the kernel-less ops the host dispatched before a compute
row, network/compute_model.py view_us; "": none) after the causal column, where a program has a row with views. The
step's rows of accelerator k are its program's rows plus its rows in each collective directory. Nothing read
back is trusted: every key of meta.json, every cell of a program file and every collective directory is
checked before anything runs, and a fault is one line naming the file, the row or key and the value.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass

from . import atomic, run_record
from ..network import memory_record
from .errors import TableError, read_table_text
from .meta import FORMAT as TABLES_FORMAT, read_json
from .tables import DirSchedule, Schedule, fill_dir
from ..network.dtypes import DEFAULT as DEFAULT_DTYPE, DTYPES
from ..network.errors import show
from ..network.kinds import COLLECTIVES
from ..network.memory import LOCATIONS
from ..network.op_classes import MAX_SHAPES_TEXT, MAX_VIEWS, is_shapes, is_views

FORMAT = "astra-compile-step"
VERSION = 3   # 2: send / recv rows (the peer column), SPMD steps of several programs (pipeline stages); 3: load /
#               store rows (the location and in_switch columns)
SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "step_meta.schema.json")
MESSAGES = ("send", "recv")
MEMORY = ("load", "store")
ROW_KINDS = ("compute", "wait") + MESSAGES + MEMORY + COLLECTIVES
PROGRAM_COLUMNS = ("row", "kind", "name", "phase", "iteration", "flops", "bytes", "measured_ns", "collective",
                   "group", "stream", "peer", "location", "in_switch", "deps")
DTYPE_COLUMN = "dtype"   # after PROGRAM_COLUMNS, in a program with compute rows that are not fp32
SHAPES_COLUMN = "shapes"   # after DTYPE_COLUMN, in a program with compute rows whose shapes are known
CAUSAL_COLUMN = "causal"   # after SHAPES_COLUMN, in a program with a causal attention row
CAUSAL = "1"               # a causal row's cell; other rows' empty
VIEWS_COLUMN = "views"     # after CAUSAL_COLUMN, in a program with a compute row that has views
VIEWS_CELL = re.compile(r"0|[1-9][0-9]{0,9}")   # a row's views (written where it has any, else left empty)
HEADERS = (PROGRAM_COLUMNS, PROGRAM_COLUMNS + (DTYPE_COLUMN,), PROGRAM_COLUMNS + (DTYPE_COLUMN, SHAPES_COLUMN),
           PROGRAM_COLUMNS + (DTYPE_COLUMN, SHAPES_COLUMN, CAUSAL_COLUMN),
           PROGRAM_COLUMNS + (DTYPE_COLUMN, SHAPES_COLUMN, CAUSAL_COLUMN, VIEWS_COLUMN))
META_KEYS = {"format", "version", "npus", "topology", "spmd", "source", "mesh", "scheduler", "table_format",
             "programs", "collectives"}
OPTIONAL_KEYS = {"run"}   # the run options that shaped the step's figure, where not the defaults (run_record.py)
MAX_INT = 2 ** 63 - 1
MAX_MEASURED_NS = 1e18   # as a workload module's wl.measured_ns: a sum of a step's rows stays finite
_PROGRAM_FILE = re.compile(r"^program_[0-9]+\.csv$")
_COLLECTIVE_DIR = re.compile(r"^collective_[0-9]+$")


@dataclass
class ProgramRow:
    kind: str             # compute | wait | send | recv | load | store | a collective kind
    name: str
    phase: str
    iteration: int        # -1: not known
    flops: int
    bytes: int
    measured_ns: float    # NaN: the roofline's
    collective: int       # index into meta["collectives"], -1 for compute and wait rows
    group: str            # a collective's process group ("" otherwise)
    stream: int           # 0: compute stream; a collective's: its group's communication stream; a message's: its
    #                       peer's
    deps: tuple[int, ...]
    peer: int = -1        # send: the rank it goes to, recv: the one it comes from (-1 for other rows)
    location: str = ""    # load / store: local or remote ("" for other rows)
    in_switch: int = 0    # load / store: GPUs whose tensor the pool's switches gather (1: none; 0 for other rows)
    dtype: str = ""       # compute: the dtype it ran in where not fp32 ("": fp32, and for other rows)
    shapes: str = ""      # compute: its tensor arguments' sizes ("": not known, and for other rows)
    causal: bool = False  # compute: an attention op that masked causally
    views: int = 0        # compute: the kernel-less ops the host dispatched before it


@dataclass
class Program:
    file: str
    ranks: list[int]
    groups: dict[str, list[int]]
    rows: list[ProgramRow]
    memory: dict | None = None   # a captured program's memory (network/memory_record.py); None: not known


@dataclass
class StepTables:
    meta: dict
    programs: list[Program]
    collectives: list[Schedule]   # index c: collective c's schedule


def write(out_dir: str, step: StepTables, force: bool = False) -> None:
    """The whole directory appears complete or not at all (runtime/atomic.py)."""
    fmt = step.meta["table_format"]

    def fill(tmp: str) -> None:
        for c, schedule in enumerate(step.collectives):
            sub = os.path.join(tmp, step.meta["collectives"][c]["dir"])
            os.mkdir(sub)
            fill_dir(schedule, sub, fmt, stands_for_all(schedule.meta))
        for prog in step.programs:
            with open(os.path.join(tmp, prog.file), "w", newline="", encoding="utf-8") as f:
                write_program(prog.rows, f)
        with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(step.meta, f, indent=1)

    atomic.write_dir(out_dir, fill, not_a_step_dir, force, "step tables")


# up to this many NPUs a step directory holds every NPU's table of each collective, to be read and checked one by one
ALL_TABLES_UP_TO = 64


def stands_for_all(meta) -> bool:
    """Does NPU 0's table alone go into a step directory? Beyond ALL_TABLES_UP_TO NPUs, when it is enough to
    re-execute the schedule on either backend (symmetric on both), so the directory does not grow with the NPUs."""
    from .congestion import symmetric_ok
    return meta.npus > ALL_TABLES_UP_TO and meta.symmetric and symmetric_ok(meta)


def write_program(rows: list[ProgramRow], f) -> None:
    """A program's rows as CSV (PROGRAM_COLUMNS, header first) to the text stream f."""
    out = csv.writer(f, lineterminator="\n")
    header = HEADERS[4] if any(r.views for r in rows) else HEADERS[3] if any(r.causal for r in rows) else \
        HEADERS[2] if any(r.shapes for r in rows) else HEADERS[1] if any(r.dtype for r in rows) else HEADERS[0]
    extra = len(header) - len(PROGRAM_COLUMNS)
    out.writerow(header)
    for i, r in enumerate(rows):
        out.writerow([i, r.kind, r.name, r.phase, r.iteration, r.flops, r.bytes,
                      "" if math.isnan(r.measured_ns) else repr(r.measured_ns), r.collective, r.group, r.stream,
                      r.peer, r.location, r.in_switch, ";".join(map(str, r.deps))] +
                     [r.dtype, r.shapes, CAUSAL if r.causal else "", r.views or ""][:extra])


def not_a_step_dir(path: str) -> str | None:
    """None when `path` is provably a step directory astra-compile wrote; otherwise why not, naming a file."""
    names = sorted(os.listdir(path))
    foreign = [n for n in names if n != "meta.json" and not _PROGRAM_FILE.match(n) and not _COLLECTIVE_DIR.match(n)]
    if foreign:
        return f"it holds files astra-compile did not write ({foreign[0]})"
    meta = _load_json(path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return f"its meta.json is not an {FORMAT} file"
    return None


def is_step_dir(path: str) -> bool:
    meta = _load_json(path)
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def _load_json(folder: str):
    """folder/meta.json's value, None when it cannot be read (the readers then say why)."""
    try:
        return read_json(folder)
    except TableError:
        return None


def read(path: str) -> StepTables:
    meta_path = os.path.join(path, "meta.json")
    meta = read_json(path)
    _check_meta(meta, meta_path)
    programs = [_read_program(path, entry, meta, meta_path) for entry in meta["programs"]]
    collectives = []
    for c, entry in enumerate(meta["collectives"]):
        sub = os.path.join(path, entry["dir"])
        if not os.path.isdir(sub):
            raise TableError(f"{meta_path}: collectives[{c}].dir: {entry['dir']} is missing from {path}")
        # its network is the one its group sees: compiler/interop/step_dir.py checks
        collectives.append(DirSchedule(sub))
    return StepTables(meta, programs, collectives)


def _fail(where: str, message: str):
    raise TableError(f"{where}: {message}")


def _is_int(v, lo: int = 0, hi: int = MAX_INT) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _check_meta(meta, where: str) -> None:
    if not isinstance(meta, dict):
        _fail(where, "not a JSON object")
    if meta.get("format") != FORMAT:
        _fail(where, f"format: {show(meta.get('format'))} is not {FORMAT!r}"
              + (" (a collective's table directory: run it alone)" if meta.get("format") == TABLES_FORMAT else ""))
    if meta.get("version") != VERSION:
        _fail(where, f"version: {show(meta.get('version'))}; this astra-compile reads version {VERSION}")
    missing = sorted(META_KEYS - set(meta))
    extra = sorted(set(meta) - META_KEYS - OPTIONAL_KEYS)
    if missing or extra:
        _fail(where, f"missing key {missing[0]}" if missing else f"unknown key {extra[0]}")
    if not _is_int(meta["npus"], 1, 2 ** 31 - 1):
        _fail(where, f"npus: {show(meta['npus'])} is not a positive count")
    npus = meta["npus"]
    for key in ("source", "mesh", "scheduler"):
        if not isinstance(meta[key], str):
            _fail(where, f"{key}: {show(meta[key])} is not a string")
    if not isinstance(meta["spmd"], bool):
        _fail(where, f"spmd: {show(meta['spmd'])} is not true or false")
    if meta["table_format"] not in ("csv", "json"):
        _fail(where, f"table_format: {show(meta['table_format'])} is not csv or json")
    if not isinstance(meta["topology"], dict):
        _fail(where, f"topology: {show(meta['topology'])} is not an object")
    if "run" in meta:
        dims = meta["topology"].get("dims")
        run_record.check(meta["run"], f"{where}: run", run_record.STEP, len(dims) if isinstance(dims, list) else 0)
    colls = meta["collectives"]
    if not isinstance(colls, list):
        _fail(where, "collectives: not a list")
    for c, e in enumerate(colls):
        at = f"collectives[{c}]"
        if not isinstance(e, dict) or set(e) != {"dir", "kind", "bytes", "dims", "root", "part", "algorithm",
                                                  "fallback"}:
            _fail(where, f"{at}: needs exactly dir, kind, bytes, dims, root, part, algorithm, fallback")
        if not isinstance(e["dir"], str) or e["dir"] != f"collective_{c}":
            _fail(where, f"{at}.dir: {show(e['dir'])} is not collective_{c}")
        if e["kind"] not in COLLECTIVES:
            _fail(where, f"{at}.kind: {show(e['kind'])} is not one of {', '.join(COLLECTIVES)}")
        if not _is_int(e["bytes"], 1):
            _fail(where, f"{at}.bytes: {show(e['bytes'])} is not a positive byte count")
        if not isinstance(e["dims"], list) or not e["dims"] or not all(_is_int(d, 0, 63) for d in e["dims"]) or \
                len(set(e["dims"])) != len(e["dims"]):
            _fail(where, f"{at}.dims: {show(e['dims'])} is not a list of distinct dimensions")
        if not isinstance(e["part"], list) or not all(
                isinstance(p, list) and len(p) == 3 and all(_is_int(v, 0, npus) for v in p) and p[1] >= 2 and
                p[2] >= 1 for p in e["part"]) or len({p[0] for p in e["part"]}) != len(e["part"]):
            _fail(where, f"{at}.part: {show(e['part'])} is not a list of [dimension, members >= 2, stride >= 1]")
        if not _is_int(e["root"], -1, npus - 1):
            _fail(where, f"{at}.root: {show(e['root'])} is not -1 or an NPU below {npus}")
        if not isinstance(e["algorithm"], str) or not isinstance(e["fallback"], str):
            _fail(where, f"{at}: algorithm and fallback must be strings")
    progs = meta["programs"]
    if not isinstance(progs, list) or not progs:
        _fail(where, "programs: not a non-empty list")
    seen: dict[int, str] = {}
    files = set()
    for k, e in enumerate(progs):
        at = f"programs[{k}]"
        if not isinstance(e, dict) or set(e) - {"memory"} != {"file", "ranks", "groups"}:
            _fail(where, f"{at}: needs exactly file, ranks, groups (and memory, where captured)")
        if "memory" in e and memory_record.problem(e["memory"]):
            _fail(where, f"{at}.memory: {memory_record.problem(e['memory'])}")
        if not isinstance(e["file"], str) or not _PROGRAM_FILE.match(e["file"]) or e["file"] in files:
            _fail(where, f"{at}.file: {show(e['file'])} is not a new program_<k>.csv name")
        files.add(e["file"])
        if not isinstance(e["ranks"], list) or not e["ranks"] or not all(_is_int(r, 0, npus - 1) for r in e["ranks"]):
            _fail(where, f"{at}.ranks: {show(e['ranks'])} is not a list of NPUs below {npus}")
        for r in e["ranks"]:
            if r in seen:
                _fail(where, f"{at}.ranks: rank {r} already runs {seen[r]}")
            seen[r] = e["file"]
        if not isinstance(e["groups"], dict):
            _fail(where, f"{at}.groups: not an object")
        for name, members in e["groups"].items():
            if not isinstance(members, list) or not members or \
                    not all(_is_int(r, 0, npus - 1) for r in members) or members != sorted(set(members)):
                _fail(where, f"{at}.groups.{name}: {show(members)} is not an ascending list of NPUs below {npus}")
    several = meta["spmd"] and len(progs) > 1   # pipeline stages: each program lists the ranks that run it
    if meta["spmd"] and not several and progs[0]["ranks"] != [0]:
        _fail(where, "programs: an SPMD step of one program has rank 0's, standing for every rank")
    if several and any(e["ranks"] != sorted(e["ranks"]) for e in progs):
        _fail(where, "programs: an SPMD step's programs list the ranks that run them in ascending order (the first "
                     "is the one it was captured on)")
    if (several or not meta["spmd"]) and len(seen) != npus:
        absent = min(set(range(npus)) - set(seen))
        _fail(where, f"programs: rank {absent} has no program (each of the {npus} ranks needs one)")


def _read_program(path: str, entry: dict, meta: dict, meta_path: str) -> Program:
    file = os.path.join(path, entry["file"])
    try:
        text = read_table_text(file, "a CSV program table")
    except TableError as e:
        raise TableError(f"{e} ({meta_path} names it for rank(s) {entry['ranks'][:4]})") from None
    try:
        lines = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise TableError(f"{file}: not a CSV program table: {e}") from None
    columns = tuple(lines[0]) if lines else ()
    if columns not in HEADERS:
        raise TableError(f"{file}: the header must be {','.join(PROGRAM_COLUMNS)}[,{DTYPE_COLUMN}[,{SHAPES_COLUMN}"
                         f"[,{CAUSAL_COLUMN}[,{VIEWS_COLUMN}]]]]")
    colls, rows, streams = meta["collectives"], [], {}
    for i, cells in enumerate(lines[1:]):
        at = f"{file}: row {i}"
        if len(cells) != len(columns):
            _fail(at, f"has {len(cells)} cells, the header {len(columns)}")
        v = dict(zip(columns, cells))
        dtype = v.get(DTYPE_COLUMN, "")
        if (dtype and v["kind"] != "compute") or dtype not in DTYPES + ("",):
            _fail(at, f"dtype: {show(dtype)} (a compute row's is empty or one of {', '.join(DTYPES)}; other rows' "
                      f"empty)")
        shapes = v.get(SHAPES_COLUMN, "")
        if (shapes and v["kind"] != "compute") or not is_shapes(shapes):
            _fail(at, f"shapes: {show(shapes)} (a compute row's is empty or tensor sizes as \"64x4096,4096x4096\", "
                      f"at most {MAX_SHAPES_TEXT} characters; other rows' empty)")
        causal = v.get(CAUSAL_COLUMN, "")
        if causal not in ("", CAUSAL) or (causal and v["kind"] != "compute"):
            _fail(at, f"causal: {show(causal)} (a causal attention row's is {CAUSAL}, other rows' empty)")
        views = v.get(VIEWS_COLUMN, "")
        if views and (v["kind"] != "compute" or not VIEWS_CELL.fullmatch(views) or not is_views(int(views))):
            _fail(at, f"views: {show(views)} (a compute row's is empty or a whole number 0..{MAX_VIEWS}; other rows' "
                      f"empty)")
        ints = {}
        for col, lo in (("row", 0), ("iteration", -1), ("flops", 0), ("bytes", 0), ("collective", -1), ("stream", 0),
                        ("peer", -1), ("in_switch", 0)):
            try:
                ints[col] = int(v[col])
            except ValueError:
                _fail(at, f"{col}: {show(v[col])} is not a whole number")
            if not lo <= ints[col] <= MAX_INT:
                _fail(at, f"{col}: {ints[col]} is out of range")
        if ints["row"] != i:
            _fail(at, f"row: {ints['row']} (rows are numbered in order from 0)")
        kind = v["kind"]
        if kind not in ROW_KINDS:
            _fail(at, f"kind: {show(kind)} is not one of {', '.join(ROW_KINDS)}")
        try:
            measured = float(v["measured_ns"]) if v["measured_ns"] else math.nan
        except ValueError:
            measured = -1.0
        if v["measured_ns"] and not (math.isfinite(measured) and 0 <= measured < MAX_MEASURED_NS):
            _fail(at, f"measured_ns: {show(v['measured_ns'])} is not empty or a time in ns from 0 to "
                      f"{MAX_MEASURED_NS:g}")
        try:
            deps = tuple(int(d) for d in v["deps"].split(";")) if v["deps"] else ()
        except ValueError:
            _fail(at, f"deps: {show(v['deps'])} is not a ;-separated list of rows")
        for d in deps:
            if not 0 <= d < i:
                _fail(at, f"deps: row {d} is not an earlier row of this program")
        c, peer, switch = ints["collective"], ints["peer"], ints["in_switch"]
        if (kind in MEMORY) != bool(v["location"]) or (kind in MEMORY) != (switch > 0):
            _fail(at, f"location {show(v['location'])}, in_switch {switch}: a load or store row has a location and "
                      "in_switch >= 1, other rows an empty location and in_switch 0")
        if kind in ("compute", "wait") + MEMORY:
            if c != -1 or v["group"] or ints["stream"] != 0 or peer != -1:
                _fail(at, f"a {kind} row has collective -1, no group, stream 0 and peer -1")
            if kind in MEMORY and (v["location"] not in LOCATIONS or (switch > 1 and v["location"] != "remote")):
                _fail(at, f"location: {show(v['location'])} with in_switch {switch} (local or remote; the switches "
                          "gather remote loads and stores only)")
        elif kind in MESSAGES:
            if c != -1 or v["group"]:
                _fail(at, f"a {kind} row has collective -1 and no group")
            if not 0 <= peer < meta["npus"] or peer == entry["ranks"][0]:
                _fail(at, f"peer: {peer} is not another NPU below {meta['npus']}")
            want = streams.setdefault(("p2p", kind, peer), len(streams) + 1)
            if ints["stream"] != want:
                _fail(at, f"stream: {ints['stream']} but {kind}s {'to' if kind == 'send' else 'from'} rank {peer} run "
                          f"on stream {want} (the program's groups and its peers in each direction take streams 1, "
                          "2, ... in the order they first appear)")
        else:
            if peer != -1:
                _fail(at, f"peer: {peer} on a {kind} row (only send and recv rows have a peer)")
            if not 0 <= c < len(colls):
                _fail(at, f"collective: {c} is not one of meta.json's {len(colls)} collectives")
            if colls[c]["kind"] != kind:
                _fail(at, f"kind: {kind} but collective {c} is a {colls[c]['kind']}")
            if v["group"] not in entry["groups"]:
                _fail(at, f"group: {show(v['group'])} is not a group of this program ({', '.join(entry['groups'])})")
            want = streams.setdefault(v["group"], len(streams) + 1)
            if ints["stream"] != want:
                _fail(at, f"stream: {ints['stream']} but group {show(v['group'])} runs on stream {want} (the program's "
                          "groups and peers take streams 1, 2, ... in the order they first appear)")
        rows.append(ProgramRow(kind, v["name"], v["phase"], ints["iteration"], ints["flops"], ints["bytes"],
                               measured, c, v["group"], ints["stream"], deps, peer, v["location"], switch,
                               "" if dtype == DEFAULT_DTYPE else dtype, shapes, causal == CAUSAL,
                               int(views) if views else 0))
    return Program(entry["file"], entry["ranks"], entry["groups"], rows, entry.get("memory"))
