class UserError(Exception):
    """Bad user input: the CLI prints str(e) as one line and exits 2."""


class InputWarning(UserWarning):
    """Input the run can go on with but whose result a user must know is partial (warnings.warn it): the CLI
    prints it as one "astra-compile: warning:" line after the run."""


def one_line(text: str) -> str:
    """`text` as one printable line whatever it quotes: a newline or other control character of a user's value is
    escaped (error lines, a sweep's messages and results)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _within(path: str, label: str, limit: int | None) -> None:
    """Refuse a file of more than `limit` bytes before it is read whole (OSError left to the reader)."""
    import os
    if limit is not None and os.path.getsize(path) > limit:
        raise UserError(f"{path}: {os.path.getsize(path)} bytes; a {label.strip() or 'file'} is read whole, at most "
                        f"{limit} bytes")


def read_bytes(path: str, label: str = "", limit: int | None = None) -> bytes:
    """A user's binary file, whole; one UserError naming it when it cannot be read or holds more than `limit`
    bytes."""
    try:
        _within(path, label, limit)
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {label}{path}: {e.strerror}") from None


def read_text(path: str, expected: str, label: str = "", limit: int | None = None) -> str:
    """A user's UTF-8 text file; a file that cannot be read, holds more than `limit` bytes or is not text is one
    UserError naming it (`label`, e.g. "sweep file ", says what the file was to be; `expected`, what it should
    hold)."""
    try:
        _within(path, label, limit)
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {label}{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text (a binary file?); expected {expected}") from None


def read_json(path: str, expected: str, label: str = "", limit: int | None = None, unique_keys: bool = False):
    """The JSON value of a user's file (read_text's checks, then one line for JSON that does not parse, including
    nesting past Python's recursion limit). With `unique_keys` a key given twice in one object is refused: JSON
    parsers keep the last silently, so one of the user's two values would be ignored without a word."""
    import json

    def no_twice(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise UserError(f"{path}: key '{one_line(key)}' is given twice")
            seen.add(key)
        return dict(pairs)

    text = read_text(path, expected, label, limit)
    try:
        return json.loads(text, object_pairs_hook=no_twice if unique_keys else None)
    except (ValueError, RecursionError) as e:
        raise UserError(f"{path} is not JSON ({' '.join(str(e).split())[:100]})") from None
