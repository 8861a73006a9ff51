"""One base for every error astra-compile raises on purpose (network/errors.AstraError): each command catches the
base, so a refusal of any layer is its one `astra-compile: error:` line, whatever its class."""
import importlib
import inspect

import pytest

from astra_compile.compiler.main import main
from astra_compile.network.errors import AstraError

ERRORS = {"astra_compile.network.errors": "UserError", "astra_compile.runtime.errors": "TableError",
          "astra_compile.runtime.atomic": "OutputError", "astra_compile.runtime.phases": "OptionError",
          "astra_compile.runtime.verify_rows": "VerificationError",
          "astra_compile.runtime.workload_engine": "WorkloadError",
          "astra_compile.dialects.comm": "IRError", "astra_compile.passes.base": "PassError"}


def test_every_error_class_is_under_the_base():
    import test_package
    found = {}
    for module in test_package._modules():
        if module.endswith("__main__"):   # runs the command line when imported
            continue
        for name, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
            if issubclass(cls, Exception) and cls.__module__ == module and not issubclass(cls, Warning):
                found[f"{module}.{name}"] = cls
    assert {f"{m}.{n}" for m, n in ERRORS.items()} <= set(found)
    assert [name for name, cls in found.items() if not issubclass(cls, AstraError)] == []


@pytest.mark.parametrize("module, name", sorted(ERRORS.items()))
@pytest.mark.parametrize("argv", [["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)"],
                                  ["sweep", "s.yml", "-o", "r.csv"]])
def test_a_refusal_of_any_layer_is_one_line(module, name, argv, capsys, monkeypatch):
    error = getattr(importlib.import_module(module), name)
    if argv[0] == "sweep":
        from astra_compile.compiler.sweep import command as target
        attr = "run"
    else:
        from astra_compile.compiler.cli import cli as target
        attr = "run_job"

    def refuse(*a, **k):
        raise error("the refusal, in its words")
    monkeypatch.setattr(target, attr, refuse)
    code = main(argv)
    err = capsys.readouterr().err
    if name == "VerificationError" and argv[0] != "sweep":   # the compiler's fault, not the input's: status 1
        assert (code, err) == (1, "astra-compile: verification failed: the refusal, in its words\n")
    else:
        assert (code, err) == (2, "astra-compile: error: the refusal, in its words\n")
