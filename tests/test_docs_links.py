"""Every path the docs and the code's comments name exists in the repository (docs/contributing.md): a link in a
docs page, or a `docs/...`, `benchmarks/...`, `tests/...`, `examples/...` or `<package>/<file>` path in a page, a
comment or a docstring. A file that was moved or removed leaves no pointer behind to it."""
import ast
import io
import os
import re
import tokenize

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FOLDERS = ("docs", "benchmarks", "tests", "examples", "network", "algorithms", "dialects", "passes", "runtime",
           "compiler", ".ci")
SKIP = {os.path.join("tests", "snapshots"), os.path.join("tests", "data"), "astra_compile.egg-info", "build"}
# a repository path: one of the folders at a word's start (not inside another path: torch/distributed/...,
# astra-sim's own files), then file or folder names
# (a pattern, docs/<name>.md or algorithms/astra_sim_*.py, is read whole and stands for no one file)
PATH = re.compile(r"(?<![\w./-])(?:%s)/[\w./<>*{}-]*[\w/>*}]" % "|".join(re.escape(f) for f in FOLDERS))
# a relative Markdown link target
LINK = re.compile(r"\]\(([^)\s]+)\)")
# a page by its bare name (README.md, SOURCES.md): one of the repository's own
PAGE = re.compile(r"(?<![\w./-])[A-Z][A-Z_-]*\.md\b")


def _files(ext: tuple[str, ...]) -> list[str]:
    out = []
    for top in ("", *FOLDERS):
        start = os.path.join(REPO, top)
        for where, dirs, names in os.walk(start):
            rel = os.path.relpath(where, REPO)
            dirs[:] = sorted(d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in SKIP
                             and not d.startswith(("__", ".")))
            out += [os.path.join(where, n) for n in sorted(names) if n.endswith(ext)]
            if not top:
                break
    return sorted(set(out))


def _prose(path: str) -> list[tuple[int, str]]:
    """(line, text) of what a reader reads: a page whole; of a Python file its comments and docstrings."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not path.endswith(".py"):
        return list(enumerate(text.splitlines(), 1))
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                out += [(doc.lineno + i, line) for i, line in enumerate(doc.value.value.splitlines())]
    return out


def _missing(path: str) -> list[str]:
    rel = os.path.relpath(path, REPO)
    bad = []
    for line, text in _prose(path):
        named = [m.rstrip(".") for m in PATH.findall(text)]
        if path.endswith(".md"):   # a link is relative to its page
            named += [os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(path), t.split("#")[0])), REPO)
                      for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]
        for name in named:
            # a module by its name (network/memory_pool, runtime/_linkcore: a C extension by its source) or one
            # of its attributes (network/errors.show) names the module's file
            head, base = os.path.split(name)
            stem = os.path.join(REPO, head, base.split(".")[0] or base)
            if not any(c in name for c in "<*{") and not os.path.exists(os.path.join(REPO, name)) \
                    and not any(os.path.exists(stem + ext) for ext in (".py", ".c")):
                bad.append(f"{rel}:{line}: {name}")
        bad += [f"{rel}:{line}: {name}" for name in PAGE.findall(text) if name not in PAGE_NAMES]
    return sorted(bad, key=lambda b: int(b.split(":")[1]))


PAGES = _files((".md",))
PAGE_NAMES = {os.path.basename(p) for p in PAGES} | {n for _, _, names in os.walk(os.path.join(REPO, "tests", "data"))
                                                  for n in names if n.endswith(".md")}
CODE = _files((".py", ".mlir", ".yml", ".yaml", ".toml", ".cfg"))


def test_the_scan_sees_the_pages_and_the_code():
    rel = {os.path.relpath(p, REPO) for p in PAGES + CODE}
    assert {"README.md", "docs/architecture.md", "docs/contributing.md", "compiler/cli/cli.py", "setup.py",
            "tests/test_docs_links.py", "examples/gpt_tp_dp.py"} <= rel
    assert not any(p.startswith(("tests/snapshots/", "tests/data/")) for p in rel)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: os.path.relpath(p, REPO))
def test_a_page_names_only_files_that_exist(path):
    assert _missing(path) == []


def test_comments_and_docstrings_name_only_files_that_exist():
    assert [bad for path in CODE for bad in _missing(path)] == []


def test_a_missing_file_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [x](missing.md), docs/architecture.md, benchmarks/gone.py and docs/<name>.md.\n")
    code = tmp_path / "code.py"
    code.write_text('"""Runs examples/gpt_tp_dp.py and tests/nowhere.py (README.md)."""\n'
                    'X = "tests/ignored.py"  # network/no.py, DESIGN.md\n')
    assert [m.split(": ", 1)[1] for m in _missing(str(page))] == ["benchmarks/gone.py",
                                                                  os.path.relpath(str(tmp_path / "missing.md"), REPO)]
    assert [m.split(": ", 1)[1] for m in _missing(str(code))] == ["tests/nowhere.py", "network/no.py", "DESIGN.md"]
