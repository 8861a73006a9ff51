"""Pass infrastructure: a registry of named passes, pipeline parsing and a pass manager.

A pipeline is written as in mlir-opt: comma-separated pass names, each optionally followed by options in braces,
e.g. `decompose-all-reduce,chunk{chunks=64},select-algorithm{algorithm=ring}`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..dialects import comm


class PassError(Exception):
    """A pass cannot run on this input (one line; the CLI prints it and exits 2)."""


@dataclass
class PassContext:
    """What passes may read besides the module: the topology (network.topology.Topology), driver-level defaults
    for pass options (e.g. {'chunks': 64, 'algorithm': 'ring'}) and, where a pass must time a schedule on the
    cost model (choose-schedule), `evaluate(module) -> ns` from the driver (passes do not import the runtime)."""
    topology: Any
    defaults: dict = field(default_factory=dict)
    evaluate: Callable[[Any], float] | None = None


class Pass:
    name: str = ""
    summary: str = ""
    # option name -> (converter, default, help); defaults may be overridden by PassContext.defaults
    options: dict[str, tuple[Callable[[str], Any], Any, str]] = {}

    def __init__(self, **given: str):
        unknown = set(given) - set(self.options)
        if unknown:
            raise PassError(f"pass '{self.name}' has no option '{sorted(unknown)[0]}'"
                            f" (options: {', '.join(self.options) or 'none'})")
        self.given = given

    def option(self, key: str, ctx: PassContext) -> Any:
        conv, default, _ = self.options[key]
        raw = self.given.get(key, ctx.defaults.get(key, default))
        if raw is None or not isinstance(raw, str):
            return raw
        try:
            return conv(raw)
        except (ValueError, TypeError) as e:
            raise PassError(f"pass '{self.name}': bad value '{raw}' for option '{key}' ({e})") from None

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


REGISTRY: dict[str, type[Pass]] = {}


def register(cls: type[Pass]) -> type[Pass]:
    REGISTRY[cls.name] = cls
    return cls


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
    """'a,b{x=1 y=2}' -> [A(), B(x='1', y='2')]. Accepts an mlir-opt style 'builtin.module(...)' wrapper."""
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
        if name not in REGISTRY:
            raise PassError(f"unknown pass '{name}'; available: {', '.join(sorted(REGISTRY))}")
        passes.append(REGISTRY[name](**opts))
    return passes


class PassManager:
    def __init__(self, passes: list[Pass]):
        self.passes = passes

    def run(self, module, ctx: PassContext, after_each: Callable[[Pass, Any], None] | None = None) -> None:
        for p in self.passes:
            p(module, ctx)
            if after_each is not None:
                after_each(p, module)


def ir_dump_header(pass_name: str) -> str:
    """The banner mlir-opt prints with --mlir-print-ir-after-all."""
    return f"// -----// IR Dump After {pass_name} //----- //"
