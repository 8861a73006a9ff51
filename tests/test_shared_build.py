"""A pipeline's stages take their parts from one model built for all of them (compiler/frontend/shared_build.py):
the workload is the one each stage building its own model records, op for op and byte for byte of memory, and a
part that cannot come from the shared model (tied weights, a pipeline_stage() that rearranges the model) is built
afresh for its capture."""
import textwrap

import pytest

from astra_compile.compiler.frontend import capture as capture_module
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.shared_build import SharedBuild, Taken

from helpers import DEEP

P = 4

EXTRA = """
BUILDS = []
_build, _stage = build_model, pipeline_stage


def build_model():
    BUILDS.append(1)
    model = _build()
    %s
    return model


def pipeline_stage(model, stage, num_stages):
    %s
    return _stage(model, stage, num_stages)


PIPELINE = {"schedule": "1F1B", "microbatches": 8}
TP_PLAN = {"layers.*.0": "colwise", "layers.*.2": "rowwise"}


def mesh_axes(world_size):
    return {"pp": %d, "dp": 2, "tp": world_size // %d // 2}
"""


def spec(tmp_path, tie="", rearrange=""):
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(DEEP.format(layers=8)) + EXTRA % (tie or "pass", rearrange or "pass", P, P))
    return load_model_file(str(path))


class Unshared(SharedBuild):
    """Every stage builds its own model, as before the shared build."""
    def check(self):
        raise Taken("each stage its own")


def each_builds_its_own(monkeypatch, s) -> dict:
    monkeypatch.setattr(capture_module, "SharedBuild", Unshared)
    s.build_model.__globals__["BUILDS"].clear()
    out = capture(s, P * 4).to_json()
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("tie, rearrange, builds", [
    ("", "", 1),                                              # one model for every stage
    ("model.head.weight = model.embed.weight", "", 2),        # the last stage's head is the first's embedding
    ("", "model.layers = nn.ModuleList(list(model.layers))", P),   # each stage rearranges it: no later one takes it
])
def test_stages_take_their_parts_from_one_model(tmp_path, monkeypatch, tie, rearrange, builds):
    s = spec(tmp_path, tie, rearrange)
    own = each_builds_its_own(monkeypatch, s)
    s.build_model.__globals__["BUILDS"].clear()
    shared = capture(s, P * 4).to_json()
    assert len(s.build_model.__globals__["BUILDS"]) == builds
    assert shared.pop("memory") == own.pop("memory")
    assert shared == own
