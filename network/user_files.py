"""Reading a user's file: the one reader under every reader of an input (network, pool, sweep and system files,
traces, logs, table directories, modules), so each guard against a hostile file is written once.

- Size. A file is read whole, so it is refused past its reader's limit, and the read itself stops one byte past
  it: a file that grows, or a device whose size reads 0 but never ends (/dev/zero), is refused, not read forever.
- Files that are not regular files (a FIFO, a pipe such as /dev/stdin or <(...), a character device) are read with
  that cap and within NONREGULAR_WAIT_S seconds: a FIFO nobody writes to, or a pipe whose writer never closes it,
  is refused in one line instead of hanging the run.
- JSON: a key given twice in one object is refused (Python keeps the last silently), so are NaN and Infinity (not
  JSON), and nesting deeper than the parser's stack is one line.
- YAML: safe loading only; a key given twice in one mapping is refused, as is a key that is a list or mapping;
  aliases are counted before anything is built, so a value that expands past MAX_NODES values (a "billion laughs"
  alias bomb: 600 bytes that expand to 10^9 strings) or nests deeper than MAX_DEPTH is refused first, and a value
  that contains itself too.

Every refusal is one UserError naming the file (and where known its line and key); callers add what the file was
to be (`label`, e.g. "pool file ") and what it should hold (`expected`).
"""
from __future__ import annotations

import os
import select
import stat
import time

from .errors import UserError, one_line, show

DEFAULT_LIMIT = 256 << 20    # bytes of a file read whole when its reader names no smaller limit
NONREGULAR_WAIT_S = 10.0     # seconds a FIFO, pipe or device has to deliver its whole content
MAX_NODES = 1_000_000        # values a YAML document may expand to, aliases expanded (each once per use)
MAX_DEPTH = 64               # nesting of a YAML document: lists in lists in mappings ...
_CHUNK = 1 << 20


def read_bytes(path: str, label: str = "", limit: int | None = DEFAULT_LIMIT, regular: bool = False) -> bytes:
    """A user's file, whole; one UserError naming it when it cannot be read, holds more than `limit` bytes or (not
    a regular file) does not deliver them in time. `regular`: refuse anything but a regular file outright (a file
    astra-compile wrote, such as a table directory's, is one)."""
    limit = DEFAULT_LIMIT if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UserError(f"cannot read {label}{path}: {e.strerror}") from None
    except ValueError:   # a NUL in the name
        raise UserError(f"cannot read {label}{show(path)}: not a file name") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            size = os.fstat(fd).st_size
            if size > limit:
                raise UserError(_too_big(path, label, f"{size} bytes", limit))
            os.set_blocking(fd, True)
            data = _read_regular(fd, limit)
        elif stat.S_ISDIR(mode):
            raise UserError(f"cannot read {label}{path}: Is a directory")
        elif regular:
            raise UserError(f"{label}{path} is not a regular file (a FIFO or a device?)")
        else:
            data = _read_stream(fd, path, label, limit)
    except OSError as e:
        raise UserError(f"cannot read {label}{path}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UserError(_too_big(path, label, f"more than {limit} bytes", limit))
    return data


def _too_big(path: str, label: str, size: str, limit: int) -> str:
    return f"{path}: {size}; a {label.strip() or 'file'} is read whole, at most {limit} bytes"


def _read_regular(fd: int, limit: int) -> bytes:
    """At most limit + 1 bytes (one more than allowed tells a file that grew while it was read)."""
    parts, total = [], 0
    while total <= limit:
        part = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def _read_stream(fd: int, path: str, label: str, limit: int) -> bytes:
    """A FIFO, pipe or device read to its end, within NONREGULAR_WAIT_S seconds and limit + 1 bytes. A FIFO opened
    without a writer polls as not ready (Linux), so waiting for its writer is bounded too."""
    deadline = time.monotonic() + NONREGULAR_WAIT_S
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    parts, total = [], 0
    while total <= limit:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000))):
            state = "gave no data" if not total else f"did not end after {total} bytes"
            raise UserError(f"{label}{path} is not a regular file and {state} within {NONREGULAR_WAIT_S:g} s (a FIFO "
                            "or pipe nobody writes to or closes?); give a regular file")
        try:
            part = os.read(fd, min(_CHUNK, limit + 1 - total))
        except BlockingIOError:
            continue
        if not part:
            break
        parts.append(part)
        total += len(part)
    if total > limit:
        raise UserError(f"{label}{path} is not a regular file and gave more than {limit} bytes (a device that never "
                        "ends, such as /dev/zero?); give a regular file")
    return b"".join(parts)


def read_text(path: str, expected: str, label: str = "", limit: int | None = DEFAULT_LIMIT,
              regular: bool = False) -> str:
    """A user's UTF-8 text file (read_bytes' checks); a file that is not text is one UserError naming it (`label`,
    e.g. "sweep file ", says what the file was to be; `expected`, what it should hold)."""
    limit = DEFAULT_LIMIT if limit is None else limit
    data = read_bytes(path, label, limit, regular)
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, path, label, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text (a binary file?); expected {expected}") from None


# A gzip-compressed file (torch.profiler's export_chrome_trace("trace.json.gz") writes one) is read as the text it
# holds, under the same limit on the text's size: the decompressor stops one byte past it.
GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(data: bytes, path: str, label: str, limit: int) -> bytes:
    import zlib
    inflate = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        text = inflate.decompress(data, limit + 1)
    except zlib.error as e:
        raise UserError(f"{path}: a damaged gzip file ({e})") from None
    if len(text) > limit:
        raise UserError(_too_big(path, label, f"more than {limit} bytes once decompressed", limit))
    if not inflate.eof:
        raise UserError(f"{path}: a damaged gzip file (it ends before its compressed data does)")
    return text


# ---- JSON ----------------------------------------------------------------------------------------------------------

def read_json(path: str, expected: str, label: str = "", limit: int | None = DEFAULT_LIMIT,
              regular: bool = False):
    """The JSON value of a user's file (read_text's checks, then parse_json's)."""
    return parse_json(read_text(path, expected, label, limit, regular), path)


def parse_json(text: str, where: str):
    """The JSON value of `text` (`where` names the file in messages): a key given twice in one object, NaN or
    Infinity, malformed JSON or nesting past the parser's stack is one UserError."""
    import json

    def pairs(items):
        seen = set()
        for key, _ in items:
            if key in seen:
                raise UserError(f"{where}: key {show(key)} is given twice in one object (JSON would keep the last "
                                "silently)")
            seen.add(key)
        return dict(items)

    def constant(name):
        raise UserError(f"{where}: {name} is not a JSON number; give a finite number")

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        raise UserError(f"{where} is not JSON (it nests too deeply)") from None
    except ValueError as e:   # JSONDecodeError, and an integer of more than 4300 digits
        raise UserError(f"{where} is not JSON ({one_line(' '.join(str(e).split()), 100)})") from None


# ---- YAML ----------------------------------------------------------------------------------------------------------

def read_yaml(path: str, expected: str, label: str = "", limit: int | None = DEFAULT_LIMIT):
    """The YAML value of a user's file (read_text's checks, then parse_yaml's, naming it `label` + path)."""
    return parse_yaml(read_text(path, expected, label, limit), f"{label}{path}")


def parse_yaml(text: str, where: str):
    """The value of one YAML document, read safely (module notes); every problem is one UserError starting with
    `where` and, where known, the line."""
    import yaml
    loader = None
    try:
        loader = _strict_loader()(text)   # refuses a control character at once (yaml.reader.ReaderError)
        loader.where = where
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, where)
        return loader.construct_document(node)
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        raise UserError(f"{where}: malformed YAML at line {line}: character {e.character:#x} is not allowed "
                        "(a binary file?)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"{where}: malformed YAML{at}: {one_line(' '.join(str(problem).split()), 200)}") from None
    except RecursionError:
        raise UserError(f"{where}: malformed YAML: it nests too deeply (at most {MAX_DEPTH} levels)") from None
    except (ValueError, OverflowError) as e:   # an integer of more than 4300 digits, a date like 2024-13-45
        raise UserError(f"{where}: a value cannot be read ({one_line(str(e), 200)})") from None
    finally:
        if loader is not None:
            loader.dispose()


def _strict_loader():
    """A SafeLoader class whose mappings refuse a key given twice and a key that is a list or mapping (naming the
    line)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, (list, dict, set)):
                raise UserError(f"{loader.where} line {line}: a key must be a plain value (a name or a number), "
                                f"got a {type(key).__name__}")
            if key in keys:
                raise UserError(f"{loader.where} line {line}: key {show(key)} is given twice")
            keys.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return StrictLoader


def _check_nodes(root, where: str) -> None:
    """Refuse a composed YAML document that expands past MAX_NODES values or MAX_DEPTH levels, or contains
    itself, before any Python value is built: each node's expanded size and depth are computed once (aliases
    share nodes), iteratively, so the check costs as much as the text, not as much as what it expands to."""
    from yaml.nodes import MappingNode, SequenceNode

    def children(node):
        if isinstance(node, SequenceNode):
            return node.value
        if isinstance(node, MappingNode):
            return [n for pair in node.value for n in pair]
        return ()

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    active: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            kids = children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            active.discard(key)
            line = node.start_mark.line + 1
            if size[key] > MAX_NODES:
                raise UserError(f"{where} line {line}: this value expands to more than {MAX_NODES} values (aliases "
                                "expanded: an alias bomb?)")
            if depth[key] > MAX_DEPTH:
                raise UserError(f"{where} line {line}: values nest more than {MAX_DEPTH} levels deep")
            continue
        if key in size:
            continue
        if key in active:
            raise UserError(f"{where} line {node.start_mark.line + 1}: a value that contains itself (an alias to an "
                            "enclosing value)")
        active.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in children(node) if id(k) not in size)
