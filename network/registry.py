"""Plug-in discovery shared by the registries (network/blocks/, algorithms/): every module of a package is imported
and every subclass of its base class that has a name is registered, so adding an entry is adding its file."""
from __future__ import annotations

import importlib
import pkgutil


def discover(package: str, path, base: type) -> list[type]:
    """The named subclasses of `base` defined in the modules of `package`, in (order, name) order."""
    for info in pkgutil.iter_modules(path):
        if info.name != "base":
            importlib.import_module(f"{package}.{info.name}")
    return sorted((c for c in subclasses(base) if c.name), key=lambda c: (c.order, c.name))


def subclasses(cls):
    """Every subclass of `cls` defined so far, at any depth."""
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)
