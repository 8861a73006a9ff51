"""What the runs of one sweep share: captured workloads and the times of compiled collectives.

A sweep point that differs from another only in what these do not depend on (the compute roofline, say) takes
them from here instead of capturing the model again and recompiling the network side. Each key holds everything
its value depends on: a model file or trace by its content (not its name or date), the world size and mesh for a
capture; the collective, the network and every compile and run option for a collective's time. Nothing is
cached unless a `Reuse` is active (`with using(Reuse(...))`): the sweep's workers make one, and a single run
does with `--cache DIR`.

With a directory, values are also kept on disk as small JSON files (one per key, written atomically, with a
digest of the value), shared by the worker processes of a sweep and by later runs. A file that cannot be read,
whose value no longer matches its digest, or whose value is out of range (a number that is not finite, a time or
a count below zero: `from_json` refuses what its kind cannot hold) is a miss, never an error: the value is made
again and the file replaced. The digest catches damage, not a forged file (anyone can recompute it); the range
checks are what keep a forged file from yielding a negative or non-finite figure.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field

FORMAT = "astra-compile-reuse"
KINDS = ("workload", "collective")   # the values kept on disk, one folder each
VERSION = 11  # 2: a collective's time keeps its per-dimension busy time (link sharing); 3: captures hold
#                point-to-point ops and pipeline stages; 4: and its per-link-class busy time (congestion); 5:
#                captures hold each compute op's dtype (an older one would read as all fp32); 6: and its
#                tensor arguments' shapes; 7: and whether an attention op masked causally; 8: and the views
#                the host dispatched before each compute op; 9: a zero-bubble stage's weight gradients in its
#                parameters' order, an accumulated micro-batch's loss held to the next one's end; 10: masked_fill
#                and softmax's backward as the ops CUDA runs for them (frontend/gpu_composites.py); 11: host
#                scalars' .item() and an optimizer's step counters counted as the host's dispatches (views),
#                logsumexp as the ops CUDA runs for it


@dataclass
class Reuse:
    directory: str | None = None
    values: dict = field(default_factory=dict)
    made: dict = field(default_factory=lambda: {"workload": 0, "collective": 0})   # misses: work done
    hits: int = 0
    held: dict = field(default_factory=dict)   # id(value) -> the digest it is held under (values keep it alive)

    def get(self, kind: str, key, make, to_json, from_json):
        """The value for `key`: from memory, else from the directory, else `make()` (then kept in both)."""
        digest = _key_digest(kind, key)
        if digest in self.values:
            self.hits += 1
            return self.values[digest]
        value = self._load(kind, digest, from_json)
        if value is None:
            value = make()
            self.made[kind] += 1
            self._store(kind, digest, to_json(value))
        else:
            self.hits += 1
        self.values[digest] = value
        self.held[id(value)] = digest
        return value

    def memo(self, kind: str, key, make):
        """Like `get`, for a value derived cheaply from values that are cached (a workload lowered for one
        topology): kept in memory only, and not counted as work made or reused."""
        digest = _key_digest(kind, key)
        if digest not in self.values:
            self.values[digest] = make()
        return self.values[digest]

    def digest_of(self, value) -> str | None:
        """The digest `value` is held under, when it came from this Reuse (so what is derived from it can be
        keyed by it), else None."""
        return self.held.get(id(value))

    def _path(self, kind: str, digest: str) -> str:
        return os.path.join(self.directory, kind, digest + ".json")

    def _load(self, kind, digest, from_json):
        if self.directory is None:
            return None
        try:
            with open(self._path(kind, digest), encoding="utf-8") as f:
                data = json.load(f, parse_constant=_not_finite)
            if data.get("format") != FORMAT or data.get("version") != VERSION or \
                    data.get("digest") != _digest(data["value"]):
                return None  # another version, or edited or damaged since it was written
            return from_json(data["value"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None  # absent, torn by a crash, or not ours: compute it again

    def _store(self, kind, digest, value) -> None:
        if self.directory is None:
            return
        from ...runtime import atomic
        try:
            os.makedirs(os.path.join(self.directory, kind), exist_ok=True)
        except OSError as e:   # made a file since open_dir looked, or a disk that fails
            raise atomic.OutputError(f"--cache {self.directory}: cannot make {os.path.join(self.directory, kind)}: "
                                     f"{e.strerror}") from None
        atomic.write_text(self._path(kind, digest), json.dumps({"format": FORMAT, "version": VERSION,
                                                                "digest": _digest(value), "value": value}))


def open_dir(path: str) -> Reuse:
    """A Reuse keeping its values in the directory `path` (--cache DIR), which must be a directory or one that can
    be made, as must its folder for each kind of value: refused in one line otherwise (a file where a folder goes),
    before any work."""
    from ...network.errors import UserError
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"--cache {path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UserError(f"--cache {path}: cannot make the directory: {e.strerror}") from None
    for kind in KINDS:
        folder = os.path.join(path, kind)
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise UserError(f"--cache {path}: {folder} is not a directory (is {path} a cache of astra-compile?)")
    return Reuse(os.path.abspath(path))


def _not_finite(name: str):
    raise ValueError(f"{name} in a cache file")   # JSON's NaN and Infinity, which json.load accepts by default


def non_negative(value, what: str) -> float:
    """`value` as a finite number >= 0, else ValueError (a value from a cache file that no run can have made)."""
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{what} = {value!r}")
    return v


def _key_digest(kind: str, key) -> str:
    return hashlib.sha256(json.dumps([kind, key], sort_keys=True, default=str).encode()).hexdigest()


def _digest(value) -> str:
    """A file is used only if its value still hashes to what was written: a damaged or edited cache file is
    recomputed, never trusted (a value of the wrong shape would fail far from here)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


_current: Reuse | None = None


def current() -> Reuse | None:
    return _current


@contextlib.contextmanager
def using(reuse: Reuse | None):
    global _current
    before, _current = _current, reuse
    try:
        yield reuse
    finally:
        _current = before


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def options_key(obj) -> dict:
    """A dataclass of options as a key: every field except those that cannot change a result."""
    return {k: v for k, v in dataclasses.asdict(obj).items() if k not in ("max_memory", "timeline", "verify")}
