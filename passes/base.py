"""Pass infrastructure: passes as frozen dataclasses whose typed fields are their options, a registry, pipelines
written as in mlir-opt with an order every pass declares and that is checked before anything runs, and upstream
MLIR's PassManager running them (each pass is a Python pass of the pinned bindings; IR printing and timing come
from MLIR).

A pipeline: comma-separated pass names, each optionally followed by options in braces, e.g.
`decompose-all-reduce,chunk{chunks=64},hierarchical-decompose,select-algorithm{algorithm=ring}`.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ..dialects import comm
from ..network.errors import AstraError, UserError


class PassError(AstraError):
    """A pass cannot run on this input (one line; the CLI prints it and exits 2)."""


@dataclass
class PassContext:
    """What passes may read besides the module: the topology (network.topology.Topology) and, where a pass must
    time a schedule on the cost model (choose-schedule), `evaluate(module) -> ns` from the driver (passes do not
    import the runtime). Options are the passes' own fields, never a context-wide dictionary."""
    topology: Any
    evaluate: Callable[[Any], float] | None = None


def option(parse: Callable[[str], Any], default: Any, help: str):
    """A pass option: a dataclass field that is None until given (in the pipeline text, or filled in by the driver
    from a command-line flag), `parse` turning pipeline text into its value, `default` what it means when unset."""
    return field(default=None, metadata={"parse": parse, "default": default, "help": help})


def positive_int(text: str) -> int:
    """An option's parse for a count: a whole number above zero (its error names the option and the value)."""
    value = int(text)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    # the declared order, checked before anything runs: passes that, when in the same pipeline, must come earlier
    # (after) or later (before) than this one
    after: ClassVar[tuple[str, ...]] = ()
    before: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def options(cls) -> dict[str, dataclasses.Field]:
        """Pipeline spelling (dashes) -> option field."""
        return {f.name.replace("_", "-"): f for f in dataclasses.fields(cls) if "parse" in f.metadata}

    @classmethod
    def from_text(cls, given: dict[str, str]) -> "Pass":
        fields = cls.options()
        values = {}
        for key, text in given.items():
            if key not in fields:
                raise PassError(f"pass '{cls.name}' has no option '{key}' (options: {', '.join(fields) or 'none'})")
            try:
                values[fields[key].name] = fields[key].metadata["parse"](text)
            except (ValueError, TypeError) as e:
                raise PassError(f"pass '{cls.name}': bad value '{text}' for option '{key}' ({e})") from None
        return cls(**values)

    def value(self, name: str) -> Any:
        """An option's value, or its default when unset."""
        v = getattr(self, name)
        return self.__dataclass_fields__[name].metadata["default"] if v is None else v

    def with_unset(self, values: dict) -> "Pass":
        """This pass with the options it has and that are still unset taken from `values` (command-line flags;
        text is parsed as in a pipeline)."""
        fill = {}
        for key, f in self.options().items():
            v = values.get(f.name)
            if getattr(self, f.name) is None and v is not None:
                try:
                    fill[f.name] = f.metadata["parse"](v) if isinstance(v, str) else v
                except (ValueError, TypeError) as e:
                    raise PassError(f"pass '{self.name}': bad value '{v}' for option '{key}' ({e})") from None
        return dataclasses.replace(self, **fill) if fill else self

    def resolved(self) -> "Pass":
        """This pass with every unset option at its default, so what runs is what its spec says. An option whose
        default is None (select-algorithm's `algorithm`: each block's own) stays unset: the pass decides it per
        phase, and no single value would say so."""
        fill = {f.name: f.metadata["default"] for f in self.options().values()
                if getattr(self, f.name) is None and f.metadata["default"] is not None}
        return dataclasses.replace(self, **fill) if fill else self

    def spec(self) -> str:
        """The pass as pipeline text with every option resolved (xDSL's pipeline_pass_spec): `chunk{chunks=1}`
        for a bare `chunk`; parse_pipeline(p.spec()) gives back [p.resolved()]."""
        p = self.resolved()
        given = [f"{k}={_show(getattr(p, f.name))}" for k, f in p.options().items() if getattr(p, f.name) is not None]
        return self.name + (f"{{{' '.join(given)}}}" if given else "")

    def requires(self, module, ctx: PassContext) -> None:
        """Precondition; raise PassError when the module is not what this pass expects."""

    def apply(self, module, ctx: PassContext) -> None:
        raise NotImplementedError

    def ensures(self, module, ctx: PassContext) -> None:
        """Postcondition; by default the module must still verify."""
        comm.verify_module(module, [d.size for d in ctx.topology.dims])

    def __call__(self, module, ctx: PassContext) -> None:
        self.requires(module, ctx)
        with module.context, comm.ir.Location.unknown():
            self.apply(module, ctx)
        self.ensures(module, ctx)


def _show(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value).lower() \
        if isinstance(value, bool) else str(value)


REGISTRY: dict[str, type[Pass]] = {}
# modules of this package that hold shared code, not a pass; every other module is the pass of its name
# (decompose_all_reduce.py is decompose-all-reduce), imported when a pipeline first names it
HELPERS = ("base", "phase_cost", "dimension_order", "structure")


def register(cls: type[Pass]) -> type[Pass]:
    REGISTRY[cls.name] = cls
    return cls


def lookup(name: str) -> type[Pass] | None:
    """The pass of a name, its module imported on first use (start-up pays only for the passes a run uses)."""
    if name not in REGISTRY:
        module = name.replace("-", "_")
        if module.isidentifier() and module not in HELPERS:
            try:
                importlib.import_module(f"{__package__}.{module}")
            except ModuleNotFoundError as e:
                if e.name != f"{__package__}.{module}":
                    raise
    return REGISTRY.get(name)


def all_passes() -> dict[str, type[Pass]]:
    """Every pass of the package (--list-passes, error messages)."""
    for info in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        if info.name not in HELPERS:
            importlib.import_module(f"{__package__}.{info.name}")
    return REGISTRY


def _split_top_level(text: str, sep: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PassError(f"unbalanced '}}' in pipeline '{text}'")
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth != 0:
        raise PassError(f"unbalanced '{{' in pipeline '{text}'")
    parts.append(cur)
    return parts


def parse_pipeline(text: str) -> list[Pass]:
    """'a,b{x=1 y=2}' -> [A(), B(x=1, y=2)]. Accepts an mlir-opt style 'builtin.module(...)' wrapper."""
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module("):-1]
    passes = []
    for item in _split_top_level(text, ","):
        item = item.strip()
        if not item:
            continue
        name, opts = item, {}
        if "{" in item:
            if not item.endswith("}"):
                raise PassError(f"malformed pass options in '{item}'")
            name, body = item[:-1].split("{", 1)
            for kv in body.split():
                if "=" not in kv:
                    raise PassError(f"pass option '{kv}' in '{item}' is not key=value")
                k, v = kv.split("=", 1)
                opts[k.strip()] = v.strip()
        name = name.strip()
        cls = lookup(name)
        if cls is None:
            raise PassError(f"unknown pass '{name}'; available: {', '.join(sorted(all_passes()))}")
        passes.append(cls.from_text(opts))
    check_order(passes)
    return passes


def check_order(passes: list[Pass]) -> None:
    """Refuse a pipeline that runs a pass before one it declares must come first (or after one it must precede),
    before any pass runs."""
    position = {}
    for i, p in enumerate(passes):
        position.setdefault(p.name, i)
    for i, p in enumerate(passes):
        for earlier in p.after:
            if earlier in position and position[earlier] > i:
                raise PassError(f"pipeline order: {p.name} must come after {earlier}")
        for later in p.before:
            if later in position and position[later] < i:
                raise PassError(f"pipeline order: {p.name} must come before {later}")


def pipeline_spec(passes: list[Pass]) -> str:
    """A pipeline as text with every option resolved: the passes' specs, comma-joined (what --json reports as
    `pass_pipeline` and parse_pipeline reads back)."""
    return ",".join(p.spec() for p in passes)


class PassManager:
    """Runs passes in upstream MLIR's PassManager, one Python pass each (the pinned bindings' PassManager.add of a
    callable): `print_ir` is mlir-opt's --mlir-print-ir-after-all, its header naming each pass with its spec
    (ir_dump_header), `timing` its --mlir-timing (both print to stderr from MLIR). The passes run resolved: every
    option at the value their spec shows."""

    def __init__(self, passes: list[Pass]):
        check_order(passes)
        self.passes = [p.resolved() for p in passes]

    def spec(self) -> str:
        return pipeline_spec(self.passes)

    def run(self, module, ctx: PassContext, print_ir: bool = False, timing: bool = False) -> None:
        from torch_mlir import passmanager
        with module.context:
            pm = passmanager.PassManager("builtin.module")
            for i, p in enumerate(self.passes):
                pm.add(_runner(p, [q.name for q in self.passes[:i]], module, ctx), name=p.name,
                       argument=p.spec(), description=p.summary)
            if print_ir:
                pm.enable_ir_printing()
            if timing:
                pm.enable_timing()
            pm.run(module.operation)


# what a pass raises on input it cannot take; anything else is a defect and keeps its traceback
_REFUSALS = (PassError, UserError, comm.IRError)


def _runner(p: Pass, earlier: list[str], module, ctx: PassContext):
    def run(op, _external_pass) -> None:  # MLIR hands the module operation; the passes work on the module
        try:
            p(module, ctx)
        except _REFUSALS as e:  # the same kind of error, in one line that says how far the pipeline got
            raise type(e)(failed_after(p.name, earlier, str(e))) from None
    return run


def failed_after(name: str, earlier: list[str], message: str) -> str:
    """The line of a pass that fails: which pass, after which passes (those that ran, in order), and why."""
    ran = f"after {', '.join(earlier)}" if earlier else "as the first pass"
    return f"pass {name} failed {ran}: {message}"


def ir_dump_header(p: Pass) -> str:
    """The banner MLIR prints before the module with --mlir-print-ir-after-all: the Python pass's name, then its
    argument, which PassManager makes its spec."""
    return f"// -----// IR Dump After {p.name}: {p.spec()} //----- //"
