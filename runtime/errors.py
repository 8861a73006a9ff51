"""The runtime's error for malformed tables and table directories (one line; the CLI prints it and exits 2)."""


class TableError(Exception):
    """A malformed table or table directory."""
