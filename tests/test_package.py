"""The installed layout: one import package (astra_compile), no generic top-level names; `pip install .` and
`pip install -e .` both work."""
import importlib.metadata
import json
import os


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# repository folder -> installed subpackage (setup.py's package_dir)
FOLDERS = {"compiler": "astra_compile", "dialects": "astra_compile.dialects", "passes": "astra_compile.passes",
           "runtime": "astra_compile.runtime"}


def _dist():
    """The distribution pip installed (it has a RECORD; a checkout's stale egg-info on sys.path has none)."""
    return next(d for d in importlib.metadata.distributions()
                if d.metadata["Name"] == "astra-compile" and d.read_text("RECORD"))


def _editable() -> bool:
    text = _dist().read_text("direct_url.json")
    return bool(text) and json.loads(text).get("dir_info", {}).get("editable", False)


def test_one_import_package_serves_every_folder():
    import importlib
    for folder, package in FOLDERS.items():
        module = importlib.import_module(package)
        where = os.path.dirname(os.path.abspath(module.__file__))
        if _editable():  # an editable install maps each subpackage onto its repository folder
            assert where == os.path.join(REPO, folder), (package, where)
        else:  # a regular install copies them into site-packages, outside the checkout
            assert not where.startswith(REPO + os.sep), (package, where)


def test_installed_files_live_under_one_package():
    if _editable():  # the files stay in the checkout; what is installed is a finder for astra_compile alone
        files = [str(f) for f in _dist().files if f.suffix == ".py" and f.parent == type(f)("")]
        assert files and all(f.startswith("__editable___astra_compile") for f in files), files
        return
    files = [str(f) for f in _dist().files]
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
