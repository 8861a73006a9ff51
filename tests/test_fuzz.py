"""The fuzz harness (tests/fuzz.py) on every parser, a bounded number of inputs each: the contract of
docs/reliability.md holds (exit 0 with finite figures, or exit 2 and one line; no traceback, no hang, nothing
written outside the named output). `python tests/fuzz.py --minutes 30` runs it longer."""
import os

import pytest

import fuzz

EXAMPLES = int(os.environ.get("ASTRA_FUZZ_EXAMPLES", "12"))


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return fuzz.valid_table_dir(str(tmp_path_factory.mktemp("fuzz")))


@pytest.mark.parametrize("name", list(fuzz.CASES))
def test_contract_holds_on_hostile_input(name, tables, tmp_path_factory):
    examples = max(2, EXAMPLES // 4) if name == "model files" else EXAMPLES
    # the same inputs on every run (a new input that breaks the contract is found by the long run, then kept as a
    # test of its own kind in test_hostile_input.py)
    fuzz.checked(fuzz.CASES[name], str(tmp_path_factory.mktemp("fuzz")), tables, examples, derandomize=True)()
