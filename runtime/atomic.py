"""Every file and directory astra-compile writes goes through here: written under a temporary name beside the
target, then renamed into place, so an interrupted run leaves the old output or none, never a half-written one.

The compiler removes only what it can prove it wrote: a directory is replaced when it is empty, or when `owned`
recognises it as an earlier output of ours and the user said `--force`; anything else is refused with one line.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable


class OutputError(Exception):
    """An output that cannot be written safely (one line; the CLI prints it and exits 2)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_name(path: str) -> None:
    if not isinstance(path, str) or not path or "\0" in path:
        raise OutputError(f"cannot write to {path!r}: not a file name")


def _prefix(path: str, kind: str) -> str:
    """A hidden temporary name beside `path` (the base cut short, so a long but valid name stays valid)."""
    return f".{os.path.basename(os.path.abspath(path))[:64]}.astra-{kind}-"


def _parent(path: str) -> str:
    _check_name(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"cannot write {path}: {parent} does not exist")
    return parent


def write_file(path: str, write: Callable[[str], None]) -> None:
    """Call write(tmp) to fill a temporary file beside `path`, then rename it to `path` (an existing file named as
    the output is replaced, as compilers replace their -o file; a directory there is refused)."""
    _check_name(path)
    if os.path.isdir(path):
        raise OutputError(f"cannot write {path}: it is a directory; name a file")
    try:
        fd, tmp = tempfile.mkstemp(dir=_parent(path), prefix=_prefix(path, "tmp"))
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror}") from None
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; give the user's usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):  # a name too long, a full disk, a read-only folder: one line, not a traceback
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        raise


def write_text(path: str, text: str) -> None:
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    write_file(path, write)


def _is_cwd_or_above(path: str) -> bool:
    here, target = os.path.realpath(os.getcwd()), os.path.realpath(path)
    return here == target or here.startswith(target.rstrip(os.sep) + os.sep)


def write_dir(out_dir: str, fill: Callable[[str], None], owned: Callable[[str], str | None], force: bool,
              what: str = "output") -> None:
    """Call fill(tmp) to fill a temporary directory beside `out_dir`, then move it to `out_dir`.

    `owned(dir)` returns None when `dir` is provably an earlier output of ours, else a reason it is not (naming a
    file it holds). An existing `out_dir` is replaced only when it is empty, or owned and `force` is set; the
    current directory and its ancestors are never replaced. Killed midway, the old directory or none is left."""
    _check_name(out_dir)
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise OutputError(f"cannot write {what} to {out_dir}: it exists and is not a directory")
    replace = os.path.isdir(out_dir) and bool(os.listdir(out_dir))
    if os.path.isdir(out_dir):
        if _is_cwd_or_above(out_dir):
            raise OutputError(f"cannot write {what} to {out_dir}: it is the current directory or one above it; "
                              f"name a new directory, e.g. {os.path.join(out_dir, 'tables')}")
        if replace:
            reason = owned(out_dir)
            if reason is not None:
                raise OutputError(f"refusing to write {what} to {out_dir}: {reason}; name a new or empty directory")
            if not force:
                raise OutputError(f"{out_dir} holds earlier {what} of astra-compile; add --force to replace them")
    parent = _parent(out_dir)
    base = os.path.basename(os.path.abspath(out_dir))
    try:
        tmp = tempfile.mkdtemp(prefix=_prefix(out_dir, "tmp"), dir=parent)
    except OSError as e:
        raise OutputError(f"cannot write {what} to {out_dir}: {e.strerror}") from None
    old = None
    try:
        fill(tmp)
        mask = _umask()
        os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes the folder private; give the user's usual permissions
        for folder, subdirs, files in os.walk(tmp):
            for name in subdirs:
                os.chmod(os.path.join(folder, name), 0o777 & ~mask)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o666 & ~mask)
        if replace:  # move ours aside first: a kill between the renames leaves no output, never a mixed one
            old = tempfile.mkdtemp(prefix=_prefix(out_dir, "old"), dir=parent)
            os.replace(out_dir, os.path.join(old, base))
        os.replace(tmp, out_dir)  # rename(2) replaces an empty directory in one step
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not os.path.exists(out_dir) and os.path.isdir(os.path.join(old, base)):
            os.replace(os.path.join(old, base), out_dir)  # put the earlier output back
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {what} to {out_dir}: {e.strerror}") from None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
