"""How the capture tells tensor storages apart: a serial number given to a storage when first asked, kept on its
Python object.

The recorder's map of each storage's last writer and chunk_replay's mapping of a template's storages onto a copy's
are keyed by it. It used to be the storage's address with a count of the frees reported there, but a free is
reported only for a storage the step's memory watched while recording: one that died unseen (outside the
recording, or never touched by a recorded op) left its address to the next storage with the same key, and a copy
then took a dependency on a writer of the dead one (a stage's tensor-parallel gradients, in a run of many
captures in one process). A serial is never given twice. PyTorch keeps a storage's Python object, and so the
serial, alive exactly as long as the storage (step_memory.py relies on the same to see frees).
"""
from __future__ import annotations

import itertools

_SERIAL = itertools.count(1)   # positive: chunk_replay's stand-in storages take negative numbers


def storage_serial(storage) -> int:
    """The serial of an UntypedStorage (given now if it has none)."""
    try:
        return storage._astra_key
    except AttributeError:
        key = storage._astra_key = next(_SERIAL)
        return key


def storage_key(t) -> int:
    """A tensor's storage as the recorder tells storages apart (chunk_replay maps them the same way)."""
    return storage_serial(t.untyped_storage())
