"""The installed layout: one import package (astra_compile), no generic top-level names; `pip install .` and
`pip install -e .` both work."""
import importlib.metadata
import json
import os

import pytest


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# repository folder -> installed subpackage: the checkout is the import tree ("" is the repository folder itself)
FOLDERS = {"": "astra_compile", "compiler": "astra_compile.compiler", "network": "astra_compile.network",
           "algorithms": "astra_compile.algorithms", "dialects": "astra_compile.dialects",
           "passes": "astra_compile.passes", "runtime": "astra_compile.runtime",
           **{f"compiler/{stage}": f"astra_compile.compiler.{stage.replace('/', '.')}"
              for stage in ("core", "frontend", "frontend/readers", "lowering", "report", "driver", "interop", "api",
                            "cli", "sweep")}}


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
            assert where == os.path.join(REPO, folder).rstrip(os.sep), (package, where)
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
    for sub in ("__init__.py", "dialects/comm.py", "dialects/comm.irdl.mlir", "passes/base.py", "runtime/analytical.py",
                "compiler/cli/cli.py", "compiler/report/report.schema.json"):
        assert f"astra_compile/{sub}" in files


# layer -> the layers it may import (the network at the bottom; the runtime reads tables and knows the network)
LAYERS = {
    "network": set(),
    "algorithms": {"network"},
    "runtime": {"network"},
    "dialects": {"network"},
    "passes": {"dialects", "algorithms", "network"},
    "compiler": {"passes", "dialects", "algorithms", "runtime", "network"},
}


def _imports(path: str) -> list[tuple[int, str]]:
    """(level, module) of every import in a file, nested ones included (level 2: `from ..x`)."""
    import ast
    with open(path) as f:
        tree = ast.parse(f.read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):  # `from .. import x` imports the subpackage x
            out += [(node.level, node.module)] if node.module else [(node.level, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
    return out


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_the_layers_below_it(layer):
    import importlib
    package = importlib.import_module(f"astra_compile.{layer}")
    root = os.path.dirname(package.__file__)
    for folder, _, names in os.walk(root):
        depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
        for name in names:
            if not name.endswith(".py"):
                continue
            for level, module in _imports(os.path.join(folder, name)):
                where = f"{layer}/{os.path.relpath(os.path.join(folder, name), root)}"
                assert not module.startswith("astra_compile"), f"{where} imports {module}"
                if level > depth + 1:  # reaches above its own layer
                    target = module.split(".")[0]
                    assert target in LAYERS[layer], f"{where} imports ..{module} (allowed: {LAYERS[layer]})"


def test_a_relative_import_names_a_folder_beside_it():
    """The checkout is the import tree: every relative import of every package file resolves to a file or folder
    that exists in the checkout at the place its dots say (compiler/cli/cli.py's `...runtime` is runtime/
    beside compiler/), and nothing imports the root package, which is the public API above every layer."""
    for folder in [f for f in FOLDERS if f]:
        root = os.path.join(REPO, folder)
        for name in os.listdir(root):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            for level, module in _imports(path):
                if level == 0:
                    continue
                base = root
                for _ in range(level - 1):
                    base = os.path.dirname(base)
                assert base.startswith(REPO + os.sep) and base != REPO or module.split(".")[0] in LAYERS, \
                    f"{folder}/{name} imports {'.' * level}{module}: above the layers"
                target = os.path.join(base, *module.split("."))
                # a folder, a module, a C extension by its source (runtime/_linkcore) or a name its package defines
                assert os.path.isdir(target) or os.path.exists(target + ".py") or \
                    os.path.exists(os.path.join(base, module.split(".")[0] + ".py")) or \
                    os.path.exists(target + ".c") or \
                    _defines(os.path.join(base, "__init__.py"), module), \
                    f"{folder}/{name}: {'.' * level}{module} names nothing at {os.path.relpath(target, REPO)}"


def _defines(init: str, name: str) -> bool:
    """Does the package's __init__.py define `name` (`from . import __version__`)?"""
    import re
    with open(init) as f:
        return re.search(rf"^(def |class )?{re.escape(name)}\b", f.read(), re.M) is not None
