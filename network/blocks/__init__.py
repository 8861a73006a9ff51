"""The building blocks of network dimensions: one file per block in this folder, each a `Block` subclass
(base.py). Every module here is imported and every Block subclass with a name registered, so adding a block is
adding its file.
"""
from __future__ import annotations

from ..errors import UserError, show
from ..registry import discover
from .base import ANY, BACKWARD, FORWARD, ROTATION, SHORTEST, XOR, Block, Symmetry  # noqa: F401

BLOCKS: dict[str, Block] = {}
_SPELLINGS: dict[str, str] = {}  # lower-case spelling -> canonical name


def register_all() -> None:
    """Register every Block subclass of this folder's modules, in listing order: run on import, and again after a
    folder is added to `__path__` (a test's blocks, tests/test_extend_block.py) to take in its files too."""
    found = discover(__name__, __path__, Block)
    BLOCKS.clear()
    _SPELLINGS.clear()
    for cls in found:
        BLOCKS[cls.name] = cls()
        for word in (cls.name,) + cls.spellings + cls.aliases:
            _SPELLINGS[word.lower()] = cls.name


def canonical(word: str) -> str | None:
    """The block a spelling names (case-insensitive), or None."""
    return _SPELLINGS.get(word.strip().lower()) if isinstance(word, str) else None


def block(name: str) -> Block:
    """The block of a canonical name; an unknown one is bad input (never silently routed as something else)."""
    found = BLOCKS.get(name) if isinstance(name, str) else None   # a hostile file's list or dict: not a name
    if found is None:
        raise UserError(f"unknown topology block {show(name)}; {expected()}")
    return found


def expected(notation: bool = True) -> str:
    """'expected Ring(k), FullyConnected(k)/FC(k), ... or Mesh(k)/Line(k)': the blocks the notation accepts (or,
    with notation=False, their names as network files write them: 'expected Ring, FullyConnected, ...')."""
    forms = ["/".join(f"{s}(k)" for s in b.spellings) if notation else b.name for b in BLOCKS.values() if b.listed]
    return "expected " + (", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else forms[0])


register_all()
