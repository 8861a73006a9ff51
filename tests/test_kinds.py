"""The collective kinds are named once (network/kinds.py): no module elsewhere spells a list of them, the sets agree
with each other and the JSON schemas list the same kinds in the same order."""
import ast
import json
import os

import pytest

from astra_compile.network import kinds
from astra_compile.network.kinds import (ALL_REDUCE, ALL_REDUCE_HALVES, COLLECTIVES, IN_PLACE, PHASE_KINDS, REDUCING,
                                         ROOTED, SHARDED, WHOLE_CHUNK)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NAMES = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"}


def literal_kind_lists(root: str) -> list[str]:
    """'file:line: kinds' of every tuple, list or set literal in a .py file under `root` (tests/ and network/ aside)
    that holds two or more different kind names as strings: a set of kinds spelled out instead of named."""
    found = []
    for folder, subfolders, files in os.walk(root):
        top = os.path.relpath(folder, root).split(os.sep)[0]
        if top in ("tests", "network", "build") or top.endswith(".egg-info") or top.startswith(".") and top != ".":
            subfolders[:] = []
            continue
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    spelled = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in NAMES]
                    if len(set(spelled)) >= 2:
                        found.append(f"{os.path.relpath(path, root)}:{node.lineno}: {', '.join(spelled)}")
    return found


def test_no_module_outside_the_network_spells_a_list_of_kinds():
    assert literal_kind_lists(REPO) == []


def test_the_scan_finds_a_spelled_list(tmp_path):
    (tmp_path / "passes").mkdir()
    (tmp_path / "passes" / "p.py").write_text('if kind in ("broadcast", "reduce"):\n    pass\n'
                                              'PAIRS = (("allreduce", "all_reduce"), ("all_reduce", "all_reduce"))\n')
    (tmp_path / "network").mkdir()
    (tmp_path / "network" / "kinds.py").write_text('ROOTED = ("broadcast", "reduce")\n')
    assert literal_kind_lists(str(tmp_path)) == ["passes/p.py:1: broadcast, reduce"]


def test_the_sets_of_kinds():
    assert COLLECTIVES == ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce")
    assert PHASE_KINDS == ("reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce")
    assert ALL_REDUCE_HALVES == SHARDED == ("reduce_scatter", "all_gather")
    assert WHOLE_CHUNK == ("all_to_all", "broadcast", "reduce")
    assert ROOTED == ("broadcast", "reduce")
    assert REDUCING == ("all_reduce", "reduce_scatter", "reduce")
    assert IN_PLACE == ("all_reduce", "broadcast", "reduce")
    for name in ("PHASE_KINDS", "ALL_REDUCE_HALVES", "SHARDED", "WHOLE_CHUNK", "ROOTED", "REDUCING", "IN_PLACE"):
        subset = getattr(kinds, name)   # every set in COLLECTIVES' order, so messages list kinds in one order
        assert list(subset) == [k for k in COLLECTIVES if k in subset], name
    assert ALL_REDUCE not in PHASE_KINDS


def _kind_enums(schema, path=""):
    """(where, enum) of every enum in a JSON schema that names a collective kind."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "enum" and NAMES & {v for v in value if isinstance(v, str)}:
                yield path, value
            else:
                yield from _kind_enums(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _kind_enums(value, f"{path}[{i}]")


@pytest.mark.parametrize("schema", ["runtime/meta.schema.json", "runtime/step_meta.schema.json",
                                    "compiler/report/report.schema.json",
                                    "compiler/report/workload_report.schema.json"])
def test_the_schemas_list_a_named_set_of_kinds(schema):
    from astra_compile.dialects.workload import comm
    named = [list(COLLECTIVES), list(PHASE_KINDS), list(ROOTED), list(COLLECTIVES + comm.POINT_TO_POINT)]
    with open(os.path.join(REPO, schema)) as f:
        enums = list(_kind_enums(json.load(f)))
    assert enums
    for where, enum in enums:
        assert enum in named, f"{schema}{where}: {enum}"
