"""Every file and directory astra-compile writes goes through here: written under a temporary name beside the
target, then renamed into place, so an interrupted run leaves the old output or none, never a half-written one.

The compiler removes only what it can prove it wrote: a directory is replaced when it is empty, or when `owned`
recognises it as an earlier output of ours and the user said `--force`; anything else is refused with one line.

A file output is renamed into place only over a regular file (or nothing). A symbolic link is followed: the file
it names is the output, written beside it, and the link stays. A character device or a named pipe (`/dev/null`, a
FIFO) and a descriptor of this process (`/dev/stdout`, `/dev/fd/N`) are written into, never renamed over (as root,
a rename would replace the system's /dev/null); a FIFO nobody reads is refused rather than waited on. A block
device or a socket is refused.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import sys
import tempfile
from typing import Callable

from ..network.errors import AstraError


class OutputError(AstraError):
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


_OWN_FD = re.compile(r"/proc/(?:self|thread-self|(\d+))/fd/(\d+)$")
MAX_LINKS = 40   # as the kernel's limit on the symbolic links of one path (ELOOP)


def _resolve(path: str) -> tuple[str, int | None]:
    """(the file `path` names with every symbolic link followed, None) or, where the links lead into /proc/PID/fd
    of this process (/dev/stdout, /dev/fd/1), (that path, the descriptor). Followed one link at a time because
    os.path.realpath would go on through /proc's links to whatever the descriptor has open (the file a shell
    redirected stdout to), which must be written through the descriptor, not renamed over."""
    p = os.path.abspath(path)
    for _ in range(MAX_LINKS):
        folder = os.path.realpath(os.path.dirname(p))
        p = os.path.join(folder, os.path.basename(p))
        own = _OWN_FD.match(p)
        if own and own.group(1) in (None, str(os.getpid())):
            return p, int(own.group(2))
        if not os.path.islink(p):
            return p, None
        p = os.path.join(folder, os.readlink(p))   # a relative link is relative to its own folder
    raise OutputError(f"cannot write {path}: {os.strerror(errno.ELOOP)}")


def _kind(mode: int) -> str | None:
    """What a special file is called in a message, for those that are refused; None for those written into."""
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def write_file(path: str, write: Callable[[str], None]) -> None:
    """Call write(tmp) to fill a temporary file beside `path`, then rename it to `path` (an existing file named as
    the output is replaced, as compilers replace their -o file; a directory there is refused). A symbolic link is
    followed (the file it names is replaced, the link kept); a device, a named pipe or one of this process's
    descriptors is written into (`_write_into`)."""
    _check_name(path)
    if os.path.isdir(path):
        raise OutputError(f"cannot write {path}: it is a directory; name a file")
    target, fd = _resolve(path)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None   # nothing there yet (or a name the write below reports on)
    if fd is not None or (mode is not None and not stat.S_ISREG(mode)):
        if mode is not None and _kind(mode):
            raise OutputError(f"cannot write {path}: it is {_kind(mode)}; name a file")
        _write_into(path, target, fd, write)
        return
    if target == os.path.abspath(path):
        target = path   # no link on the way: messages name the path as the user gave it
    try:
        tmp_fd, tmp = tempfile.mkstemp(dir=_parent(target), prefix=_prefix(target, "tmp"))
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror}") from None
    os.close(tmp_fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; give the user's usual permissions
        os.replace(tmp, target)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):  # a name too long, a full disk, a read-only folder: one line, not a traceback
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        raise


def _write_into(path: str, target: str, own_fd: int | None, write: Callable[[str], None]) -> None:
    """Fill a private temporary file (in the system's temporary folder: nothing can be made beside a device), then
    copy it into the device, the pipe, or this process's descriptor `own_fd` (stdout, written through so that its
    offset stays the one the report's lines use)."""
    with tempfile.TemporaryDirectory(prefix="astra-compile-") as folder:
        tmp = os.path.join(folder, "output")
        try:
            write(tmp)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            if own_fd is not None:
                fd = os.dup(own_fd)
            else:  # non-blocking, so that a FIFO with no reader is an error (ENXIO) rather than a wait for ever
                fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == errno.ENXIO and _is_fifo(target):
                raise OutputError(f"cannot write {path}: it is a named pipe that nobody reads; start its reader "
                                  "first") from None
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        try:
            os.set_blocking(fd, True)   # a reader slower than us is waited for
            with open(tmp, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    view = memoryview(block)
                    while view:
                        view = view[os.write(fd, view):]
        except OSError as e:  # the reader went away (EPIPE), /dev/full, a descriptor closed
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        finally:
            os.close(fd)


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


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
    current directory and its ancestors are never replaced. Killed midway, the old directory or none is left.
    A symbolic link is followed: the directory it names is the one replaced, and the link stays."""
    _check_name(out_dir)
    target, fd = _resolve(out_dir)
    if fd is not None:
        raise OutputError(f"cannot write {what} to {out_dir}: it is a file descriptor, not a directory")
    if target != os.path.abspath(out_dir):
        out_dir = target
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
