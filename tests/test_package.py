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
                            "cli", "sweep", "plan")}}


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


# The compiler's stages, bottom to top (docs/architecture.md): each may import only its own stage, those below it and
# the layers below the compiler. main.py, the entry point, is the top; the sweep is above the CLI because a sweep
# point runs the CLI's own code path.
STAGES = ("core", "frontend", "lowering", "report", "driver", "interop", "api", "cli", "sweep", "plan", "main")


def _modules() -> dict[str, str]:
    """Every module of the installed package: dotted name -> file (the checkout's tests/, docs/... are no package)."""
    import astra_compile
    root = os.path.dirname(os.path.abspath(astra_compile.__file__))
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if os.path.exists(os.path.join(folder, d, "__init__.py")))
        rel = os.path.relpath(folder, root)
        parts = ["astra_compile"] + ([] if rel == "." else rel.split(os.sep))
        for name in names:
            if name.endswith(".py") and not (rel == "." and name == "setup.py"):
                out[".".join(parts + ([] if name == "__init__.py" else [name[:-3]]))] = os.path.join(folder, name)
    return out


def _imported(module: str, path: str, modules) -> set[str]:
    """The modules of `modules` that `module` (file `path`) imports, nested imports included: for `from X import a`,
    X.a where that is a module, else X."""
    import ast
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    with open(path) as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names} & set(modules)
            out |= subs
            if base in modules and len(subs) < len(node.names):   # names the package itself defines
                out.add(base)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names} & set(modules)
    out.discard(module)
    return out


def _stage(module: str) -> str | None:
    """The compiler stage of a module: its folder under compiler/ (or main); None outside the compiler's stages."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["astra_compile", "compiler"] and len(parts) > 2 and parts[2] in STAGES else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a compiler module from a stage above its own."""
    out = []
    for module, targets in sorted(graph.items()):
        mine = _stage(module)
        for target in sorted(targets):
            theirs = _stage(target)
            if mine and theirs and STAGES.index(theirs) > STAGES.index(mine):
                out.append(f"{module} ({mine}) imports {target} ({theirs})")
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of the import graph: each strongly connected set of two or more modules, sorted (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while not members or members[-1] != v:
                members.append(stack.pop())
                on.discard(members[-1])
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imported(m, path, modules) for m, path in modules.items()}


def test_every_compiler_file_is_in_a_stage():
    """The stage of any file is its folder: compiler/ holds the stages' folders, main.py and its __init__.py."""
    compiler = [m for m in _modules() if m.startswith("astra_compile.compiler.")]
    assert compiler and all(_stage(m) for m in compiler), [m for m in compiler if not _stage(m)]
    assert {_stage(m) for m in compiler} == set(STAGES)


def test_no_stage_imports_one_above_it():
    assert upward_imports(_graph()) == []


def test_the_stage_check_finds_an_upward_import():
    graph = {"astra_compile.compiler.frontend.chakra": {"astra_compile.compiler.driver.resources",
                                                        "astra_compile.compiler.core.estimate"},
             "astra_compile.compiler.sweep.point": {"astra_compile.compiler.cli.cli"},
             "astra_compile.compiler.cli.cli": {"astra_compile.compiler.main", "astra_compile.network.errors"}}
    assert upward_imports(graph) == [
        "astra_compile.compiler.cli.cli (cli) imports astra_compile.compiler.main (main)",
        "astra_compile.compiler.frontend.chakra (frontend) imports astra_compile.compiler.driver.resources (driver)"]


def test_no_module_imports_itself_round_a_cycle():
    """No cycle anywhere in astra_compile, an import inside a function included: each module can be read (and
    imported) after the modules it names."""
    graph = _graph()
    assert len(graph) > 100 and "astra_compile.compiler.main" in graph
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_through_a_nested_import(tmp_path):
    # a copy of two modules where one imports the other inside a function, as cli.py and calibrate.py did
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import g\n")
    modules = {"pkg.a": str(tmp_path / "a.py"), "pkg.b": str(tmp_path / "b.py")}
    graph = {m: _imported(m, path, modules) for m, path in modules.items()}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert import_cycles({"x": {"y"}, "y": set()}) == []
