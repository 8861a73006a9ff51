import reprlib


class AstraError(Exception):
    """The base of every error astra-compile raises on purpose, each subclass in the layer that raises it: bad
    input (UserError), malformed IR (dialects' IRError), a pass that cannot run (PassError), a table or table
    directory refused (runtime's TableError), run options the tables cannot honour (OptionError), programs that
    cannot run (WorkloadError), an output that cannot be written safely (OutputError), a schedule that does not
    implement its collective (VerificationError). A command turns one into its one `astra-compile: error:` line
    (a failed verification into its own, status 1); anything else reaching it is a defect. InputWarning is a
    warning, not an error: it is not one of them."""


class UserError(AstraError):
    """Bad user input: the CLI prints str(e) as one line and exits 2."""


class InputWarning(UserWarning):
    """Input the run can go on with but whose result a user must know is partial (warnings.warn it): the CLI
    prints it as one "astra-compile: warning:" line after the run."""


# The longest error line printed or recorded: a message quoting a user's value never grows with the value.
MAX_LINE = 2000
# The longest quotation of a user's value inside a message (show()).
MAX_SHOWN = 80


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """`text` as one printable line whatever it quotes: a newline or other control character of a user's value is
    escaped (error lines, a sweep's messages and results), and a text past `limit` characters is cut (only its
    first `limit` characters are looked at)."""
    text = str(text)
    cut = len(text) > limit
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return line[:limit - 3] + "..." if cut or len(line) > limit else line


class _Bounded(reprlib.Repr):
    """reprlib's abbreviating repr, with no part of it built whole from a big value: a long integer is named by its
    digit count (repr() of a 10^5-digit integer is refused by Python and quadratic below that), a bytes value is
    cut before it is shown."""

    def __init__(self, limit: int):
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 3, 4, 6, 6, 6
        self.maxfrozenset, self.maxdeque, self.maxarray = 6, 6, 6
        self.maxstring = self.maxother = self.maxlong = limit

    def repr_int(self, x, level):
        if x.bit_length() > 4000:   # about 1200 digits: named, not written out
            return f"<integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return reprlib.Repr.repr_int(self, x, level)

    def repr_bytes(self, x, level):
        return repr(x[:self.maxstring]) + ("..." if len(x) > self.maxstring else "")

    def repr_instance(self, x, level):
        try:
            text = repr(x)
        except Exception:  # noqa: BLE001 (a value whose repr fails is still named)
            return f"<{type(x).__name__}>"
        return text if len(text) <= self.maxother else text[:self.maxother - 3] + "..."


def show(value, limit: int = MAX_SHOWN) -> str:
    """repr(value) as a message quotes a user's value: one line of at most `limit` characters, built from the
    value's first items only, so a value of any size (a YAML alias bomb's 10^9-element list, a deeply nested one, a
    huge integer) costs next to nothing to quote."""
    return one_line(_Bounded(limit).repr(value), limit)
