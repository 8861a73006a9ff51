import os
import sys

import pytest

# tests import helpers.py beside them; the code under test comes from the installed astra_compile package
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def engine_tables(monkeypatch):
    """The engine's program tables of every step compiled while the test runs, one list per step."""
    from astra_compile.compiler.driver import workload_driver
    made = []
    build = workload_driver.program_tables
    monkeypatch.setattr(workload_driver, "program_tables", lambda *a, **k: made.append(build(*a, **k)) or made[-1])
    return made
