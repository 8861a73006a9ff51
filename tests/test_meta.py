"""meta.json has one schema (runtime/meta.schema.json, shipped with the package), one writer and one reader
(runtime/meta.py): everything written validates against the schema and reads back equal; another version, an
unknown key or a damaged value is refused in one line."""
import json
import os

import jsonschema
import pytest

from astra_compile.compiler.main import main
from astra_compile.runtime.meta import SCHEMA_FILE, Meta
from astra_compile.runtime.tables import TableError

with open(SCHEMA_FILE) as f:
    SCHEMA = json.load(f)

CASES = [
    ["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)_Switch(2)", "--chunks", "3"],
    ["--collective", "all_to_all", "--size", "64KB", "--topology", "FC(4)", "--table-format", "json"],
    ["--collective", "all_gather", "--size", "96KB", "--topology", "2x4_bigraph", "--algorithm", "multitree"],
    ["--collective", "reduce_scatter", "--size", "64KB", "--topology", "3x3_mesh", "--algorithm", "rank_ring"],
    ["--collective", "all_reduce", "--size", "1MB", "--topology", "HC(8)", "--scheduler", "themis"],
]


@pytest.mark.parametrize("argv", CASES)
def test_written_meta_validates_and_reads_back_equal(capsys, tmp_path, argv):
    out = tmp_path / "t"
    assert main([*argv, "--emit", "tables", "-o", str(out)]) == 0
    data = json.loads((out / "meta.json").read_text())
    jsonschema.validate(data, SCHEMA)
    meta = Meta.read(str(out))
    assert meta.to_json() == data


def _written(tmp_path) -> dict:
    out = tmp_path / "t"
    assert main([*CASES[0], "--emit", "tables", "-o", str(out)]) == 0
    return json.loads((out / "meta.json").read_text())


@pytest.mark.parametrize("edit,match", [
    (lambda m: dict(m, version=2), "version 2; this astra-compile reads version 1"),
    (lambda m: dict(m, format="other"), "is not an astra-compile-tables file"),
    (lambda m: dict(m, extra=1), "unknown key 'extra'"),
    (lambda m: dict(m, npus=-3), "npus"),
    (lambda m: dict(m, latency_ns=[-1.0, 1.0]), "latency_ns"),
    (lambda m: dict(m, collectives=[dict(m["collectives"][0], chunks=0)]), "chunks"),
    (lambda m: dict(m, collectives=[{k: v for k, v in m["collectives"][0].items() if k != "buffer"}]), "buffer"),
])
def test_the_reader_and_the_schema_refuse_the_same_damage(tmp_path, edit, match):
    bad = edit(_written(tmp_path))
    with pytest.raises(TableError, match=match):
        Meta.from_json(bad, "meta.json")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_the_schema_ships_with_the_package():
    assert os.path.isfile(SCHEMA_FILE) and SCHEMA["properties"]["version"]["const"] == 1


@pytest.mark.parametrize("edit,match", [
    (lambda m: dict(m, latency_ns=[1.0]), "latency_ns must have 2 entries"),
    (lambda m: dict(m, npus=9), "npus is 9 but the topology's dimensions hold 8"),
    (lambda m: dict(m, collectives=[dict(m["collectives"][0], deps=[0])]), "a collective before this one"),
])
def test_the_reader_checks_what_a_schema_cannot(tmp_path, edit, match):
    with pytest.raises(TableError, match=match):
        Meta.from_json(edit(_written(tmp_path)), "meta.json")


REPORT_CASES = [
    ["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)_Switch(2)", "--chunks", "3", "--verify"],
    ["--collective", "all_to_all", "--size", "64KB", "--topology", "FC(4)", "--backend", "congestion"],
    ["--collective", "all_gather", "--size", "96KB", "--topology", "2x4_bigraph", "--algorithm", "multitree"],
    ["--collective", "all_reduce", "--size", "64MB", "--topology", "8_switch", "--algorithm", "direct"],
]


@pytest.mark.parametrize("argv", REPORT_CASES)
def test_json_reports_follow_their_schema(capsys, argv):
    from astra_compile.compiler.report.report import SCHEMA_FILE as REPORT_SCHEMA
    with open(REPORT_SCHEMA) as f:
        schema = json.load(f)
    assert main([*argv, "--json"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), schema)
    assert main([*argv[:6], "--compare", "--json"]) == 0
    for report in json.loads(capsys.readouterr().out).values():
        jsonschema.validate(report, schema)
