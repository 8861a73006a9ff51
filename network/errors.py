class UserError(Exception):
    """Bad user input: the CLI prints str(e) as one line and exits 2."""


def one_line(text: str) -> str:
    """`text` as one printable line whatever it quotes: a newline or other control character of a user's value is
    escaped (error lines, a sweep's messages and results)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def read_text(path: str, expected: str, label: str = "") -> str:
    """A user's UTF-8 text file; a file that cannot be read or is not text is one UserError naming it (`label`, e.g.
    "sweep file ", says what the file was to be; `expected`, what it should hold)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {label}{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text (a binary file?); expected {expected}") from None
