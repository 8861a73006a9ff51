"""The runtime's error for malformed tables and table directories (one line; the CLI prints it and exits 2), and the
one reader of a table directory's files."""
from ..network.errors import AstraError


# A table directory's file (meta.json, a table, a program) is read whole; the memory estimate
# (compiler/driver/resources.py) sizes the run from the files before they are read.
MAX_TABLE_FILE_BYTES = 1 << 30


class TableError(AstraError):
    """A malformed table or table directory."""


def read_table_text(path: str, expected: str) -> str:
    """A table directory's text file: a regular file (astra-compile wrote it: a FIFO or device in its place is
    refused, never waited on) of at most MAX_TABLE_FILE_BYTES, as TableError naming it when it is not."""
    from ..network.errors import UserError
    from ..network.user_files import read_text
    try:
        return read_text(path, expected, limit=MAX_TABLE_FILE_BYTES, regular=True)
    except UserError as e:
        raise TableError(str(e)) from None


def read_table_json(path: str, expected: str):
    """A table directory's JSON file (read_table_text's checks, then the JSON reader's: no key given twice, no NaN,
    no nesting past the parser's stack)."""
    from ..network.errors import UserError
    from ..network.user_files import parse_json
    text = read_table_text(path, expected)
    try:
        return parse_json(text, path)
    except UserError as e:
        raise TableError(str(e)) from None
