"""`--version` names this package's version and the pinned libraries' that shape its answers, exit 0."""
import re
import subprocess
import sys
from importlib import metadata

import astra_compile


def test_version_names_the_package_and_its_pinned_libraries():
    done = subprocess.run([sys.executable, "-m", "astra_compile", "--version"], capture_output=True, text=True,
                          timeout=60)
    code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 0 and err == ""
    assert out.startswith(f"astra-compile {astra_compile.__version__} (")
    assert f"torch {metadata.version('torch')}" in out and f"ortools {metadata.version('ortools')}" in out
    assert re.search(r"torch-mlir \S+", out) and out.count("\n") == 1


def test_the_installed_version_is_the_packages_one():
    assert metadata.version("astra-compile") == astra_compile.__version__
