"""The `comm` dialect: collectives on groups of topology dimensions and the per-dimension phases they lower to.

The dialect is defined in IRDL (comm.irdl.mlir beside this file) and loaded into an upstream MLIR context from
the torch-mlir wheel, so modules parse, print and verify with MLIR's own C++ parser and verifier. This file only
builds, reads and checks ops: no lowering logic lives here.

IRDL checks that required attributes are present and of the right kind; `verify_module` adds the value checks
IRDL cannot express (positive sizes, dimensions in range, known algorithms, chains of phases).
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from torch_mlir import ir
from torch_mlir._mlir_libs._mlir import globals as _mlir_globals
from torch_mlir.dialects import irdl

from ..network.errors import AstraError, show
from ..network.kinds import COLLECTIVES, PHASE_KINDS, ROOTED
from ..network.units import MAX_BYTES

# MLIR's Python bindings import a dialect's Python module (<prefix>.<namespace>) when they first wrap one of its
# ops, and retry on every op while none is found; this folder is where the comm and workload modules live.
if __package__ not in _mlir_globals.dialect_search_modules:
    _mlir_globals.append_dialect_search_prefix(__package__)

POINT_TO_POINT = ("send", "recv")
STRUCTURES = ("trees", "cycle", "placement")  # decisions passes record for whole-network phases (tokens they take)
_IRDL_FILE = os.path.join(os.path.dirname(__file__), "comm.irdl.mlir")
MAX_CHUNKS = 2 ** 20  # chunk index x bytes (<= 2^40) must stay inside int64 in the lowering

# Attributes an op may carry beyond those its IRDL definition requires: the pinned IRDL cannot declare an attribute
# optional, so the optional ones are declared here (IRDL checks the required ones' presence and kind).
OPTIONAL = {**{c: ("chunks", "part_of") for c in COLLECTIVES},
            "phase": ("algorithm", "order", "ports", "part_of", "fused", "root")}
# what every attribute's value must be, where IRDL's kinds (integer, string, dense array) say too little
VALUE_KINDS = {"ints": ("dims", "group_dims", "order", "parent", "step", "link", "ranks"),
               "str": ("name", "part_of", "collective", "kind", "algorithm", "method"),
               "int": ("bytes", "chunks", "root", "src", "dst", "dim", "stage", "group_bytes", "ports", "npus",
                       "steps", "fused")}
# module attributes: the topology (set_topology) and the decisions passes record there
MODULE_ATTRS = ("comm.topology", "comm.scheduler", "comm.balance", "comm.schedule", "comm.cp_sat_time_ns",
                "comm.themis_time_ns", "comm.baseline_time_ns", "comm.run")
# comm.scheduler: the scheduler whose per-chunk dimension orders the module holds (written by baseline-order, themis,
# optimal-balance and choose-schedule); comm.schedule: which candidate's orders choose-schedule kept; comm.run: the
# run options other than the defaults of the run that printed it (runtime/run_record.py, checked where it is read:
# compiler/driver/recorded_run.py)
SCHEDULERS = ("baseline", "themis", "optimal")
SCHEDULE_CANDIDATES = ("cp-sat", "themis", "baseline")
TOPOLOGY_ATTR = "comm.topology"


class IRError(AstraError):
    """Malformed or invalid comm IR (one line: the CLI prints it and exits 2)."""


_IRDL_ATTRS: dict[str, dict[str, tuple[str, ...]]] = {}  # IRDL file -> op name -> declared attributes


def load_irdl(ctx: ir.Context, path: str) -> ir.Context:
    """Load the dialects an IRDL file defines into `ctx` (and note, once, the attributes each op declares)."""
    with ctx, ir.Location.unknown():
        with open(path) as f:
            defs = ir.Module.parse(f.read())
        if path not in _IRDL_ATTRS:
            _IRDL_ATTRS[path] = _declared_attributes(defs)
        irdl.load_dialects(defs)
    return ctx


def _declared_attributes(defs: ir.Module) -> dict[str, tuple[str, ...]]:
    """op name -> the attributes its IRDL definition declares (read from the IRDL file itself, the one place they
    are written)."""
    out = {}
    for dialect in defs.body.operations:
        prefix = ir.StringAttr(dialect.attributes["sym_name"]).value
        for op in dialect.regions[0].blocks[0].operations:
            if op.operation.name != "irdl.operation":
                continue
            name = f"{prefix}.{ir.StringAttr(op.attributes['sym_name']).value}"
            out[name] = ()
            for inner in op.regions[0].blocks[0].operations:
                if inner.operation.name == "irdl.attributes":
                    out[name] = tuple(ir.StringAttr(a).value for a in inner.attributes["attributeValueNames"])
    return out


def new_context() -> ir.Context:
    """A fresh MLIR context with the comm dialect loaded from its IRDL definition."""
    return load_irdl(ir.Context(), _IRDL_FILE)


def _first_error_line(err: Exception) -> str:
    lines = [l.strip() for l in str(err).splitlines() if l.strip()]
    # MLIR reports "Unable to parse module assembly:" then "error: <loc>: message"; keep the message.
    for line in lines:
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return lines[0] if lines else type(err).__name__


def parse_module(text: str, ctx: ir.Context, source: str = "<input>") -> ir.Module:
    with ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            line = _first_error_line(e)
            # MLIR names the buffer "-"; point at the user's file instead: file:line:col: message
            line = line[len('"-":'):] if line.startswith('"-":') else " " + line
            raise IRError(f"{source}:{line}") from None
        _check_readable(module.operation, source)
        return module


def _check_readable(top, source: str) -> None:
    """Every attribute of every op can be read back: MLIR parses attributes the Python bindings cannot cast to a
    class (a dense array of i0, `array<i0: 0>`, raises TypeError on access), which would otherwise surface as a
    traceback wherever the attribute is first read."""
    ops = [top]
    while ops:
        op = ops.pop()
        for item in op.attributes:
            name = item if isinstance(item, str) else item.name
            try:
                values = [op.attributes[name]]
                while values:   # nested arrays and dictionaries too: their elements are cast one by one
                    a = values.pop()
                    if isinstance(a, ir.ArrayAttr):
                        values.extend(a)
                    elif isinstance(a, ir.DictAttr):   # by name: NamedAttribute.attr aborts the process instead
                        values.extend(a[a[i].name] for i in range(len(a)))
            except TypeError as e:
                raise IRError(f"{source}: {op.name}: attribute '{name}' is of a kind astra-compile cannot read "
                              f"({' '.join(str(e).split())[:120]})") from None
        for region in op.regions:
            for block in region.blocks:
                ops.extend(o.operation for o in block.operations)


def new_module(ctx: ir.Context) -> ir.Module:
    with ctx, ir.Location.unknown():
        return ir.Module.create()


def copy_module(module):
    """A deep copy of a module, in its context and held by no block (MLIR's Operation.clone): it reads, rewrites
    and prints like the module (body, operation, attributes), and costs neither a print nor a parse."""
    return getattr(module, "operation", module).clone(ip=False)


def token_type() -> ir.Type:
    return ir.Type.parse("!comm.token")


# ---- attribute conversion -----------------------------------------------------------------------------------

def check_int64(value: int) -> int:
    """The IR's integers are i64: a larger one is refused in one line (the bindings would throw std::bad_cast)."""
    if not -2**63 <= value < 2**63:
        raise IRError(f"{value} does not fit in the IR's 64-bit integers")
    return int(value)


def to_attr(value: Any) -> ir.Attribute:
    """Python value -> MLIR attribute (int -> i64, float -> f64, str, list[int] -> array<i64>, list[float] -> array<f64>)."""
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), check_int64(value))
    if isinstance(value, float):
        return ir.FloatAttr.get_f64(value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, dict):
        return ir.DictAttr.get({str(k): to_attr(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        vals = list(value)
        if vals and all(isinstance(v, dict) for v in vals):
            return ir.ArrayAttr.get([to_attr(v) for v in vals])
        if all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            return ir.DenseI64ArrayAttr.get([check_int64(v) for v in vals])
        if all(isinstance(v, (int, float)) for v in vals):
            return ir.DenseF64ArrayAttr.get([float(v) for v in vals])
        if all(isinstance(v, str) for v in vals):
            return ir.ArrayAttr.get([ir.StringAttr.get(v) for v in vals])
    raise TypeError(f"cannot store {show(value)} as an attribute")


def from_attr(attr: ir.Attribute) -> Any:
    """MLIR attribute -> Python value (inverse of to_attr; unknown kinds come back as their text).

    The bindings return attributes already downcast to their concrete class."""
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, (ir.IntegerAttr, ir.FloatAttr, ir.StringAttr)):
        return attr.value
    if isinstance(attr, (ir.DenseI64ArrayAttr, ir.DenseF64ArrayAttr)):
        return list(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [from_attr(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: from_attr(attr[i].attr) for i in range(len(attr))}
    return str(attr)


def attrs(op) -> dict:
    """All attributes of an op as a Python dict."""
    op = getattr(op, "operation", op)
    return _attr_dict(op.attributes)


def _attr_dict(attributes) -> dict:
    # iterating an op's attribute map yields names in these bindings (NamedAttribute in older ones)
    out = {}
    for item in attributes:
        name = item if isinstance(item, str) else item.name
        out[name] = from_attr(attributes[name])
    return out


def set_attr(op, name: str, value: Any) -> None:
    op = getattr(op, "operation", op)
    op.attributes[name] = to_attr(value)


class OpView:
    """A typed view of one comm op: each attribute the op declares (IRDL or OPTIONAL) reads as a Python attribute,
    None where an optional one is not set; a name the op does not declare raises AttributeError instead of passing
    quietly, and `set` writes declared attributes only, of the declared kind. `opname` is the op's short name
    ('phase', 'all_reduce'), `op` the operation."""

    def __init__(self, op):
        object.__setattr__(self, "op", getattr(op, "operation", op))
        object.__setattr__(self, "opname", short_name(self.op))

    def __getattr__(self, name: str):
        # read from the op when asked (not all at construction): passes build views of every chunk's phases
        if name.startswith("_") or name not in declared().get(self.opname, ()):
            raise AttributeError(f"comm.{self.opname} declares no attribute '{name}'")
        attributes = self.op.attributes
        return from_attr(attributes[name]) if name in attributes else None

    def __setattr__(self, name, value):
        raise AttributeError("write attributes with set(name=value)")

    def has(self, name: str) -> bool:
        return name in self.op.attributes

    def set(self, **values) -> None:
        for name, value in values.items():
            if name not in declared().get(self.opname, ()):
                raise AttributeError(f"comm.{self.opname} declares no attribute '{name}'")
            set_attr(self.op, name, value)

    def values(self) -> dict:
        """Every attribute set on the op (a copy)."""
        return attrs(self.op)


def view(op) -> OpView:
    return OpView(op)


def short_name(op) -> str:
    """'comm.all_reduce' -> 'all_reduce'."""
    return getattr(op, "operation", op).name.split(".", 1)[1]


# ---- building -----------------------------------------------------------------------------------------------

def create(name: str, attributes: dict, deps: Iterable[ir.Value] = (), ip: ir.InsertionPoint | None = None):
    """Create `comm.<name>` with the given attributes, token operands and one token result.

    Must run inside the module's context (and a Location); inserts at `ip` or the current insertion point."""
    kwargs = dict(results=[token_type()], operands=list(deps),
                  attributes={k: to_attr(v) for k, v in attributes.items()})
    if ip is not None:
        kwargs["ip"] = ip
    return ir.Operation.create(f"comm.{name}", **kwargs)


def add_dependency(op, value: ir.Value):
    """`op` again with `value` as one more token operand (an op's operand list cannot grow in place): the new op
    keeps every attribute and takes over every use. Returns the new op."""
    op = getattr(op, "operation", op)
    names = [item if isinstance(item, str) else item.name for item in op.attributes]
    new = ir.Operation.create(op.name, results=[token_type()], operands=list(op.operands) + [value],
                              attributes={n: op.attributes[n] for n in names}, ip=ir.InsertionPoint(op))
    op.result.replace_all_uses_with(new.result)
    op.erase()
    return new


def structure_of(op) -> tuple[str, dict] | None:
    """(kind, attributes) of the structure op (comm.trees, comm.cycle, comm.placement) whose token `op` takes."""
    for operand in getattr(op, "operation", op).operands:
        owner = operand.owner
        if owner.name.startswith("comm.") and short_name(owner) in STRUCTURES:
            return short_name(owner), attrs(owner)
    return None


def walk(module: ir.Module) -> list:
    """Every op of a module in program order, nested regions included (a workload module holds one module per
    rank)."""
    out = []

    def visit(block) -> None:
        for op in block.operations:
            op = op.operation
            out.append(op)
            for region in op.regions:
                for inner in region.blocks:
                    visit(inner)
    visit(module.body)
    return out


def ops(module: ir.Module) -> list:
    """The comm ops of a module in program order, nested ones included: a workload module's collectives and
    messages sit in its rank programs (the comm checks, verify_module, reach them there)."""
    return [op for op in walk(module) if op.name.startswith("comm.")]


# ---- the topology a module is compiled for --------------------------------------------------------------------

def set_topology(module: ir.Module, topo: dict) -> None:
    """Record the topology on the module as one dictionary attribute in the network's one serialised form
    (Topology.to_dict(), as meta.json holds it): `comm.topology = {dims = [{block = "Ring", size = 8, ...}],
    name = "Ring(8)"}` (a graph topology adds `graph`)."""
    module.operation.attributes[TOPOLOGY_ATTR] = to_attr(topo)


LEGACY_TOPOLOGY = ("comm.blocks", "comm.shape", "comm.bandwidth_gbps", "comm.latency_ns", "comm.links")


def get_topology(module: ir.Module) -> dict | None:
    """The topology recorded on the module (Topology.to_dict() form), or None when it has none."""
    a = _attr_dict(module.operation.attributes)
    legacy = [k for k in LEGACY_TOPOLOGY if k in a] + [k for k in a if k.startswith("comm.graph_")]
    if legacy:
        raise IRError(f"module attribute {legacy[0]}: a module records its topology as one attribute, comm.topology "
                      f"= {{name = ..., dims = [{{block = ..., size = ..., bandwidth_gbps = ..., latency_ns = ..., "
                      f"links = ...}}]}} (docs/architecture.md)")
    if TOPOLOGY_ATTR not in a:
        return None
    value = a[TOPOLOGY_ATTR]
    if not isinstance(value, dict) or not isinstance(value.get("dims"), list):
        raise IRError(f"module attribute {TOPOLOGY_ATTR} must be a dictionary with a dims list, got {show(value)}"[:200])
    return value


def schedule_choice(module: ir.Module) -> dict | None:
    """What choose-schedule recorded: {'schedule': 'cp-sat' | 'themis' | 'baseline', and each candidate's time
    '<candidate>_time_ns' (None where the module does not hold it: one written without the baseline as a candidate)}."""
    a = _attr_dict(module.operation.attributes)
    if "comm.schedule" not in a:
        return None
    return {"schedule": a["comm.schedule"],
            **{f"{c.replace('-', '_')}_time_ns": a.get(f"comm.{c.replace('-', '_')}_time_ns")
               for c in SCHEDULE_CANDIDATES}}


def recorded_scheduler(module: ir.Module) -> str | None:
    """The scheduler whose orders the module holds (comm.scheduler), or None where no scheduling pass ran."""
    return _attr_dict(module.operation.attributes).get("comm.scheduler")


# ---- value checks IRDL cannot express --------------------------------------------------------------------------

def _npus(shape: list[int]) -> int:
    out = 1
    for k in shape:
        out *= k
    return out


_DECLARED: dict | None = None


def declared() -> dict[str, set[str]]:
    """short op name -> every attribute it may carry (IRDL's required ones and OPTIONAL)."""
    global _DECLARED
    if _DECLARED is None:
        if _IRDL_FILE not in _IRDL_ATTRS:
            new_context()
        _DECLARED = {name.split(".", 1)[1]: set(attrs) | set(OPTIONAL.get(name.split(".", 1)[1], ()))
                     for name, attrs in _IRDL_ATTRS[_IRDL_FILE].items()}
    return _DECLARED


_KIND_OF = {attr: kind for kind, names in VALUE_KINDS.items() for attr in names}
_IS = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
       "str": lambda v: isinstance(v, str),
       "ints": lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)}
_SPELL = {"int": "an integer", "str": "a string", "ints": "an array<i64>"}


def _check_module_attrs(module: ir.Module) -> None:
    for name in _attr_dict(module.operation.attributes):
        if name.startswith("comm.") and name not in MODULE_ATTRS + LEGACY_TOPOLOGY and \
                not name.startswith("comm.graph_"):
            raise IRError(f"module attribute '{name}' is not declared by the comm dialect")
    _check_decisions(_attr_dict(module.operation.attributes))


def _check_decisions(a: dict) -> None:
    """The scheduling decisions a module records name a scheduler and a candidate the compiler knows, with times."""
    for name, known in (("comm.scheduler", SCHEDULERS), ("comm.schedule", SCHEDULE_CANDIDATES)):
        if name in a and a[name] not in known:
            raise IRError(f"module attribute {name} = {a[name]!r}: expected {', '.join(known[:-1])} or {known[-1]}")
    times = [f"comm.{c.replace('-', '_')}_time_ns" for c in SCHEDULE_CANDIDATES]
    for name in times:
        v = a.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf")):
            raise IRError(f"module attribute {name} = {v!r}: expected a time in ns (a non-negative number)")
    if "comm.schedule" in a and any(a.get(t) is None for t in times[:2]):
        raise IRError("module attribute comm.schedule needs comm.cp_sat_time_ns and comm.themis_time_ns beside it "
                      "(what choose-schedule timed)")

def _check_declared(kind: str, a: dict, where: str) -> None:
    """Refuse attributes nobody declared (a typo such as `chunk = 4` would otherwise be ignored) and values of the
    wrong kind (dims as floats, chunks as a string)."""
    allowed = declared().get(kind, set())
    for attr, value in a.items():
        if "." in attr and not attr.startswith("comm."):  # another dialect's discardable attribute (wl.group)
            continue
        if attr not in allowed:
            raise IRError(f"{where}: undeclared attribute '{attr}' (comm.{kind} takes "
                          f"{', '.join(sorted(allowed)) or 'none'})")
        want = _KIND_OF.get(attr)
        if want is not None and not _IS[want](value):
            raise IRError(f"{where}: attribute '{attr}' must be {_SPELL[want]}, got {show(value)}")
        if want == "int" and not -2 ** 63 <= value < 2 ** 63:
            raise IRError(f"{where}: attribute '{attr}' = {value} does not fit in int64")


def verify_module(module: ir.Module, shape: list[int] | None = None) -> None:
    """MLIR verification plus value checks; `shape` (sizes per topology dimension) bounds dimension indices."""
    if not module.operation.verify():
        raise IRError("module does not verify")
    _check_module_attrs(module)
    names = set()
    seen: set = set()
    for op in walk(module):
        seen.add(op)
        if op.name == "builtin.module":  # a workload module's rank program: its collectives are named apart
            names = set()
        if not op.name.startswith("comm."):
            continue
        kind, a = short_name(op), attrs(op)
        where = f"comm.{kind}" + (f" '{a['name']}'" if isinstance(a.get("name"), str) else "")
        _check_declared(kind, a, where)
        # a module body is a graph region: MLIR accepts a use before its definition, hence cycles; the compiler
        # reads dependencies in program order, so every op must come after the ops it waits for
        for operand in op.operands:
            if operand.owner == op:
                raise IRError(f"{where} depends on itself")
            if operand.owner not in seen:
                raise IRError(f"{where} waits for an op that comes after it (a dependency cycle, or ops out of "
                              f"dependency order)")
        if int(a.get("bytes", 1)) <= 0:
            raise IRError(f"{where}: bytes must be positive, got {a['bytes']}")
        if int(a.get("bytes", 1)) > MAX_BYTES:
            raise IRError(f"{where}: bytes {a['bytes']} exceeds the largest collective astra-compile takes "
                          f"({MAX_BYTES} bytes, 1TiB)")
        if int(a.get("chunks", 1)) > MAX_CHUNKS:
            raise IRError(f"{where}: chunks {a['chunks']} exceeds {MAX_CHUNKS}")
        if int(a.get("chunks", 1)) <= 0:
            raise IRError(f"{where}: chunks must be positive, got {a['chunks']}")
        if kind in COLLECTIVES:
            dims = a["dims"]
            if not isinstance(dims, list) or not dims:
                raise IRError(f"{where}: dims must be a non-empty array<i64>")
            if len(set(dims)) != len(dims):
                raise IRError(f"{where}: dims {dims} repeat a dimension")
            if shape is not None and any(d < 0 or d >= len(shape) for d in dims):
                raise IRError(f"{where}: dims {dims} outside the topology's {len(shape)} dimensions")
            if a["name"] in names:
                raise IRError(f"{where}: collective name used twice")
            names.add(a["name"])
        if kind in ROOTED and shape is not None:
            npus = _npus(shape)
            if not 0 <= a["root"] < npus:
                raise IRError(f"{where}: root {a['root']} outside 0..{npus - 1}")
        if kind in POINT_TO_POINT and shape is not None:
            npus = _npus(shape)
            for end in ("src", "dst"):
                if not 0 <= a[end] < npus:
                    raise IRError(f"{where}: {end} {a[end]} outside 0..{npus - 1}")
            if a["src"] == a["dst"]:
                raise IRError(f"{where}: src and dst are the same NPU {a['src']}")
        if kind == "trees":
            n = a["npus"]
            if n < 2 or any(len(a[k]) != n * n for k in ("parent", "step", "link")):
                raise IRError(f"{where}: parent, step and link must hold npus x npus = {n * n} entries")
            if shape is not None and n != _npus(shape):
                raise IRError(f"{where}: trees over {n} NPUs on a topology of {_npus(shape)}")
        if kind in ("cycle", "placement"):
            values = a["order" if kind == "cycle" else "ranks"]
            if sorted(values) != list(range(len(values))) or (shape is not None and len(values) != _npus(shape)):
                raise IRError(f"{where}: must list every NPU once")
        if kind == "phase":
            if a["kind"] not in PHASE_KINDS:
                raise IRError(f"{where}: phase kind '{a['kind']}' is not one of {', '.join(PHASE_KINDS)}")
            if shape is not None and not (0 <= a["dim"] < len(shape) or a["dim"] == -1):
                raise IRError(f"{where}: dim {a['dim']} outside the topology's {len(shape)} dimensions")
            if (a["kind"] in ROOTED) != ("root" in a):
                raise IRError(f"{where}: a broadcast or reduce phase needs a root, and other phases take none")
            if "root" in a and shape is not None and not 0 <= a["root"] < _npus(shape):
                raise IRError(f"{where}: root {a['root']} outside 0..{_npus(shape) - 1}")
            # the algorithm's name is checked against the registry where it is read (select-algorithm, lowering)
