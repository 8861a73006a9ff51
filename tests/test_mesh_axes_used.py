"""A mesh axis that the step never communicates over: its ranks would train as unsynchronised copies, which no
step time shows. Refused where the file's parallelize() never reads the axis, warned where it does or the
built-in parallelism applied it (frontend/capture.py check_axes_used)."""
import textwrap

from astra_compile.compiler.frontend.mesh import silent_axes

from helpers import cli, refused

HEAD = """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
def build_model():
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
def example_inputs():
    return torch.randn(16, 256)
"""


def model_file(tmp_path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    return str(path)


def test_an_axis_parallelize_never_reads_is_refused(tmp_path, capsys):
    path = model_file(tmp_path, """
        def parallelize(model, mesh):
            return DistributedDataParallel(model, device_mesh=mesh["dp"])
        """)
    refused(capsys, path, "--topology", "Ring(2)_Ring(4)", "--mesh", "dp=4,tp=2",
            match="mesh axis tp=2: parallelize(module, mesh) never reads it (it reads mesh['dp']) and no collective "
                  "of the step runs over it")
    code, out, err = cli(capsys, path, "--topology", "Ring(2)_Ring(4)", "--mesh", "dp=8")   # the axis it reads
    assert code == 0 and err == "" and "all_reduce  dp " in out


def test_an_axis_the_step_communicates_over_needs_no_lookup(tmp_path, capsys):
    """DDP over the default group spans every axis: nothing is silent, though the file reads no axis."""
    path = model_file(tmp_path, """
        def parallelize(model, mesh):
            return DistributedDataParallel(model, process_group=dist.group.WORLD)
        """)
    code, out, err = cli(capsys, path, "--topology", "Ring(2)_Ring(4)", "--mesh", "dp=4,tp=2")
    assert code == 0 and err == "" and "all_reduce  world " in out


def test_a_built_in_axis_that_finds_nothing_to_shard_is_warned(tmp_path, capsys):
    path = model_file(tmp_path, 'TP_PLAN = {"blocks.*.fc": "colwise"}\n')   # matches no layer of the model
    code, out, err = cli(capsys, path, "--topology", "Ring(2)_Ring(4)", "--mesh", "dp=4,tp=2")
    assert code == 0 and "step time" in out
    warned = [line for line in err.splitlines() if line.startswith("astra-compile: warning:")]
    assert warned == ["astra-compile: warning: " + path + ": mesh axis tp=2: the built-in parallelism applied it but "
                      "no collective of the step runs over it, so its ranks train as unsynchronised copies"]


def test_silent_axes_are_those_no_group_varies_along():
    axes = {"pp": 2, "dp": 2, "tp": 4}          # rank = 8 pp + 4 dp + tp
    assert silent_axes(axes, []) == ["dp", "tp"]                    # pp is the capture's own
    assert silent_axes(axes, [(0, 1, 2, 3)]) == ["dp"]              # a tp group
    assert silent_axes(axes, [(0, 4)]) == ["tp"]                    # a dp group
    assert silent_axes(axes, [tuple(range(16))]) == []              # the world
    assert silent_axes({"dp": 4, "tp": 1}, []) == ["dp"]            # an axis of one rank is never silent
