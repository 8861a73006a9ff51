class UserError(Exception):
    """Bad user input: the CLI prints str(e) as one line and exits 2."""
