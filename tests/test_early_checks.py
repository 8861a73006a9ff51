"""A model file's mistakes that need no torch are reported before torch is imported (which takes seconds): the
mesh against the topology, the file itself, and the functions the mesh needs where the file surely lacks them."""
import ast
import os
import subprocess
import sys
import textwrap

import pytest

from astra_compile.compiler.frontend.model_file import _top_level_names

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
NO_TORCH = ("import sys; from astra_compile.compiler.main import main; code = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(code)")


def refused_without_torch(*argv) -> str:
    out = subprocess.run([sys.executable, "-c", NO_TORCH, *map(str, argv)], capture_output=True, text=True)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("astra-compile: error: "), out.stderr
    return out.stderr


@pytest.mark.parametrize("name, args, message", [
    ("mlp_dp.py", ["--mesh", "dp=3"], "mesh dp=3 has 3 ranks but the topology has 64 NPUs"),
    ("mlp_dp.py", ["--mesh", "dp=8,tp=8"], "mlp_dp.py: the mesh has a tp axis but the model file has no TP_PLAN"),
    ("mlp_dp.py", ["--mesh", "dp=8,ep=8"], "mlp_dp.py: mesh axis ep has no built-in meaning"),
    ("mlp_dp.py", ["--mesh", "dp=8,fsdp=8"], "give either a dp (DDP) or an fsdp (FSDP2) axis, not both"),
    ("mlp_dp.py", ["--mesh", "pp=8,dp=8"], "the mesh has a pp axis but the model file defines neither pipeline_stage"),
    ("mlp_dp.py", ["--mesh", "dp=8,,tp=8"], "--mesh wants name=size pairs"),
    ("missing.py", [], "cannot read model file"),
])
def test_mesh_and_file_mistakes_need_no_torch(name, args, message):
    assert message in refused_without_torch(os.path.join(EXAMPLES, name), "--topology", "8x8_torus", *args)


def test_a_file_that_does_not_parse_needs_no_torch(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def build_model(:\n")
    assert "bad.py failed to import: SyntaxError: invalid syntax" in refused_without_torch(bad, "--topology", "Ring(4)")
    bad.write_bytes(b"x = '\xff\xfe'\n")
    assert "bad.py failed to import" in refused_without_torch(bad, "--topology", "Ring(4)")


def test_names_made_at_run_time_leave_the_file_to_the_capture():
    """A file that may bind names no statement shows is not judged before it runs."""
    def names(src):
        return _top_level_names(ast.parse(textwrap.dedent(src)))
    assert names("from helpers import *\n") is None
    assert names("globals()['parallelize'] = f\n") is None
    assert names("def __getattr__(name):\n    pass\n") is None
    assert {"build_model", "TP_PLAN", "np", "parallelize"} <= names("""
        import numpy as np
        try:
            from mine import parallelize
        except ImportError:
            pass
        if True:
            TP_PLAN = {}
        def build_model():
            pass
        """)


@pytest.mark.parametrize("mesh, message", [
    ({"dp": "4"}, "mesh: axis dp needs a positive integer size, got '4'"),
    ({"dp": 0}, "mesh: axis dp needs a positive integer size, got 0"),
    ({"d p": 4}, "mesh: axis name 'd p' is not a name"),
    ({}, "mesh must be a non-empty dict"),
])
def test_a_mesh_dict_from_the_api_is_checked_in_one_line(mesh, message):
    import astra_compile
    from astra_compile.network.errors import UserError
    with pytest.raises(UserError) as e:
        astra_compile.compile(os.path.join(EXAMPLES, "mlp_dp.py"), "Ring(4)", mesh=mesh)
    assert message in str(e.value) and "\n" not in str(e.value)
