"""Collective algorithms as a registry: one file per algorithm in this folder, each an `Algorithm` subclass
(base.py); every module here is imported and every subclass with a name registered, so adding an algorithm is
adding its file. Imports only the network layer.

select-algorithm, the ordering passes' cost model, the lowering and the property tests read this registry; the
runtime needs none of it (it reads tables).
"""
from __future__ import annotations

from ..network.errors import UserError
from ..network.registry import discover
from .base import (ALL_GATHER, ALL_TO_ALL, DIMENSION, NETWORK, RANKS, REDUCE_SCATTER, Algorithm,  # noqa: F401
                   Transfers, same_units)

REGISTRY: dict[str, Algorithm] = {}   # --algorithm name -> algorithm
_SPELLINGS: dict[str, str] = {}       # name or alias without separators -> name


def _register_all() -> None:
    found = discover(__name__, __path__, Algorithm)
    for cls in found:
        REGISTRY[cls.name] = cls()
    for alg in REGISTRY.values():
        for word in (alg.name,) + alg.aliases:
            _SPELLINGS.setdefault(_key(word), alg.name)


def _key(word: str) -> str:
    return word.strip().lower().replace("-", "").replace("_", "")


def canonical(word: str) -> str | None:
    """The --algorithm name a spelling means ('HD', 'halving-doubling' -> 'halving_doubling'), or None."""
    return _SPELLINGS.get(_key(word)) if isinstance(word, str) else None


def get(name: str) -> Algorithm:
    """The algorithm of a --algorithm name or alias; an unknown one is bad input."""
    found = canonical(name)
    if found is None:
        raise UserError(f"unknown algorithm '{name}'; expected one of {', '.join(REGISTRY)}")
    return REGISTRY[found]


def for_phase(word: str, flat: bool) -> Algorithm:
    """The algorithm a phase's `algorithm` attribute names. Per-dimension phases name dimension-scope algorithms;
    a phase over the whole network (dim -1) names a network- or ranks-scope one by its phase name ('ring' there
    is the Hamiltonian cycle, 'direct' the routed direct over ranks). Aliases are accepted ('hd')."""
    def fits(alg: Algorithm) -> bool:
        return (alg.scope != DIMENSION) == flat
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
    names = ", ".join(dict.fromkeys(a.phase_name for a in REGISTRY.values() if fits(a)))
    raise UserError(f"unknown algorithm '{word}'; expected one of {names}")


def scoped(*scopes: str) -> list[Algorithm]:
    return [a for a in REGISTRY.values() if a.scope in scopes]


_register_all()
