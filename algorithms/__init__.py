"""Collective algorithms as a registry: one file per algorithm in this folder, each an `Algorithm` subclass
(base.py), named after its file; a file is imported when a run first names its algorithm (all_algorithms() reads
them all), and every subclass with a name is registered, so adding an algorithm is adding its file. Imports only
the network layer.

select-algorithm, the ordering passes' cost model, the lowering and the property tests read this registry; the
runtime needs none of it (it reads tables).
"""
from __future__ import annotations

import importlib

from ..network.errors import UserError
from ..network.registry import discover, subclasses
from .base import (ALL_GATHER, ALL_TO_ALL, BROADCAST, DIMENSION, NETWORK, RANKS, REDUCE,  # noqa: F401
                   REDUCE_SCATTER, Algorithm, Transfers, same_units)

REGISTRY: dict[str, Algorithm] = {}   # --algorithm name -> algorithm: those loaded so far (complete after all())
_SPELLINGS: dict[str, str] = {}       # name or alias without separators -> name
_state = {"complete": False}


def _collect() -> None:
    """Register every Algorithm subclass imported so far."""
    for cls in subclasses(Algorithm):
        if cls.name and cls.name not in REGISTRY:
            REGISTRY[cls.name] = alg = cls()
            for word in (alg.name,) + alg.aliases:
                _SPELLINGS.setdefault(_key(word), alg.name)


def _load(module: str) -> None:
    """Import algorithms/<module>.py when it exists (an algorithm's file is named after it): start-up pays only
    for the algorithms a run names."""
    if not module.isidentifier() or module == "base":
        return
    try:
        importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{module}":
            raise
        return
    _collect()


def all_algorithms() -> dict[str, Algorithm]:
    """Every algorithm of the folder, in listing order."""
    if not _state["complete"]:
        discover(__name__, __path__, Algorithm)
        _collect()
        ordered = sorted(REGISTRY.values(), key=lambda a: (a.order, a.name))
        REGISTRY.clear()
        REGISTRY.update((a.name, a) for a in ordered)
        _state["complete"] = True
    return REGISTRY


def _key(word: str) -> str:
    return word.strip().lower().replace("-", "").replace("_", "")


def canonical(word: str) -> str | None:
    """The --algorithm name a spelling means ('HD', 'halving-doubling' -> 'halving_doubling'), or None."""
    if not isinstance(word, str):
        return None
    key = _key(word)
    if not key.isalnum():  # '' or a per-dimension list ('ring,direct'): no single algorithm, nothing to load
        return None
    if key not in _SPELLINGS:
        _load(word.strip().lower().replace("-", "_"))
    if key not in _SPELLINGS:
        all_algorithms()  # an alias (hd, dbt, nvls) is known only once every file is read
    return _SPELLINGS.get(key)


def whole_network(word) -> Algorithm | None:
    """The algorithm `word` (one --algorithm name or alias) names when it schedules the whole network at once (one
    phase over every NPU: network or ranks scope); None for a per-dimension algorithm, a per-dimension list or a
    name that is no algorithm (select-algorithm names what is wrong with it)."""
    name = canonical(word)
    return REGISTRY[name] if name is not None and REGISTRY[name].scope != DIMENSION else None


def get(name: str) -> Algorithm:
    """The algorithm of a --algorithm name or alias; an unknown one is bad input."""
    found = canonical(name)
    if found is None:
        raise UserError(f"unknown algorithm '{name}'; expected one of {', '.join(all_algorithms())}")
    return REGISTRY[found]


def for_phase(word: str, flat: bool) -> Algorithm:
    """The algorithm a phase's `algorithm` attribute names. Per-dimension phases name dimension-scope algorithms;
    a phase over the whole network (dim -1) names a network- or ranks-scope one by its phase name ('ring' there
    is the Hamiltonian cycle, 'direct' the routed direct over ranks). Aliases are accepted ('hd')."""
    def fits(alg: Algorithm) -> bool:
        return (alg.scope != DIMENSION) == flat

    def find() -> Algorithm | None:
        for alg in REGISTRY.values():
            if alg.phase_name == word and fits(alg):
                return alg
        name = canonical(word)
        if name is not None:
            alg = REGISTRY[name]
            if fits(alg):
                return alg
            for other in REGISTRY.values():  # a dimension algorithm's name over the whole network: its flat twin
                if flat and other.phase_name == alg.name and fits(other):
                    return other
        return None
    found = find()
    if found is None and not _state["complete"]:
        all_algorithms()
        found = find()
    if found is None:
        names = ", ".join(dict.fromkeys(a.phase_name for a in REGISTRY.values() if fits(a)))
        raise UserError(f"unknown algorithm '{word}'; expected one of {names}")
    return found


def scoped(*scopes: str) -> list[Algorithm]:
    return [a for a in all_algorithms().values() if a.scope in scopes]
