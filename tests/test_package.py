"""The installed layout: one import package, installed (not the source folders), no generic top-level names."""
import importlib.metadata
import os

import astra_compile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def test_imported_from_the_installed_package_not_the_checkout():
    assert not os.path.abspath(astra_compile.__file__).startswith(REPO + os.sep)


def test_installed_files_live_under_one_package():
    # look in the site-packages the package was imported from (a source checkout may hold a stale egg-info)
    site = os.path.dirname(os.path.dirname(os.path.abspath(astra_compile.__file__)))
    dist = next(d for d in importlib.metadata.distributions(path=[site]) if d.metadata["Name"] == "astra-compile")
    files = [str(f) for f in dist.files]
    code = [f for f in files if f.endswith((".py", ".mlir"))]
    assert code and all(f.startswith("astra_compile/") for f in code)
    for sub in ("dialects/comm.py", "dialects/comm.irdl.mlir", "passes/base.py", "runtime/analytical.py", "cli.py"):
        assert f"astra_compile/{sub}" in files


def test_runtime_imports_nothing_from_the_compiler():
    import astra_compile.runtime as runtime
    folder = os.path.dirname(runtime.__file__)
    for name in os.listdir(folder):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                text = f.read()
            for forbidden in ("from ..", "import astra_compile", "from astra_compile"):
                assert forbidden not in text, f"runtime/{name} imports from the compiler ({forbidden})"


def test_dialects_and_passes_do_not_import_the_driver():
    import astra_compile.dialects as dialects
    import astra_compile.passes as passes
    for pkg, allowed in ((dialects, ()), (passes, ("from ..dialects",))):
        folder = os.path.dirname(pkg.__file__)
        for name in os.listdir(folder):
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    for line in f:
                        if line.startswith(("from ..", "import astra_compile", "from astra_compile")):
                            assert line.startswith(allowed), f"{pkg.__name__}/{name}: {line.strip()}"
