"""A pipeline's middle stage takes the chunk templates of a middle stage captured before it
(compiler/frontend/chunk_lending.py): its micro-batches 1 and 2 are not dispatched, and the workload and memory are
still the ones dispatching every micro-batch records, its tensor-parallel collectives on its own ranks."""
import textwrap

import pytest

from astra_compile.compiler.frontend import capture as capture_module, chunk_replay
from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.chunk_lending import NoImage, RankShift, kept_map
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import dispatching_all, replay_from_four  # noqa: F401 (autouse fixture)

M, P, TP = 8, 4, 2

MODEL = """
import torch
from torch import nn
from torch.nn import functional as F
LAYERS, D, TOKENS = 8, 64, 32
CALLS = []
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(D), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))
class Stage(nn.Module):
    def __init__(self, layers, index):
        super().__init__()
        self.layers, self.index = nn.ModuleList(layers), index
    def forward(self, x):
        CALLS.append(self.index)
        %s
        for layer in self.layers:
            x = layer(x)
        return x
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
def build_model():
    return Net()
def example_inputs():
    return torch.randn(TOKENS, D)
def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages
    return Stage(model.layers[stage * per:(stage + 1) * per], stage)
def loss(out):
    return out.float().logsumexp(dim=-1).mean()
PIPELINE = {"schedule": "%s", "microbatches": %d}
TP_PLAN = {"layers.*.fc1": "colwise", "layers.*.fc2": "rowwise"}
def mesh_axes(world_size):
    return {"pp": %d, "dp": world_size // %d, "tp": %d}
"""


def spec(tmp_path, schedule="1F1B", odd=""):
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(MODEL % (odd or "pass", schedule, M, P, P * TP, TP)))
    return load_model_file(str(path))


def forwards_per_stage(monkeypatch, s) -> dict:
    """pp coordinate -> how often its stage's module ran in the capture, for the captures that follow (the last
    capture of each coordinate: one that is captured again replaces its count)."""
    real, runs = capture_module._capture_rank, {}

    def counted(spec_, world, axes, rank, stage=None, **kwargs):
        calls = s.build_model.__globals__["CALLS"]
        calls.clear()
        out = real(spec_, world, axes, rank, stage, **kwargs)
        runs[stage[1]] = len(calls)
        return out
    monkeypatch.setattr(capture_module, "_capture_rank", counted)
    return runs



@pytest.mark.parametrize("schedule, v", [("1F1B", 1), ("GPipe", 1), ("Interleaved1F1B", 2)])
def test_a_middle_stage_takes_the_templates_of_the_one_before(tmp_path, monkeypatch, schedule, v):
    s = spec(tmp_path, schedule)
    runs = forwards_per_stage(monkeypatch, s)
    lent = capture(s, 2 * P * TP).to_json()
    # each of a rank's v stages runs its module for: the warm-up's micro-batch M - 1 (and 0 on the last stage), the
    # recorded step's 0, 1, 2 and M - 1; once more for the probe of its output's shape. Rank 2 takes rank 1's
    # templates and so runs neither 1 nor 2. Rank 0 holds the first stage (which computes no input gradient), rank 3
    # the last (the loss)
    assert runs == {0: 1 + 5 * v, 1: 1 + 5 * v, 2: 1 + 3 * v, 3: 1 + 6 * v - (v - 1)}
    dispatching_all(monkeypatch)
    every = capture(s, 2 * P * TP).to_json()
    assert lent.pop("memory") == every.pop("memory")
    assert lent == every
    # stage 2's tensor-parallel all-reduces are on its own ranks (8 and 9), none on stage 1's
    ops = dict(every["programs"])[2 * 2 * TP]
    groups = {tuple(op["group"]) for op in ops if op["kind"] == "collective" and op["group_name"] == "tp"}
    assert groups == {(8, 9)}


def six_stages(tmp_path, monkeypatch):
    """The model on six stages of one layer, with DDP and TP: (its spec, forwards per stage, the capture's json)."""
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(MODEL % ("pass", "1F1B", M, 6, 6 * TP, TP)))
    s = load_model_file(str(path))
    runs = forwards_per_stage(monkeypatch, s)
    return s, runs, capture(s, 2 * 6 * TP).to_json()


def test_stages_after_one_that_borrowed_copy_their_micro_batch_0_too(tmp_path, monkeypatch):
    # six stages of one layer: stage 1 lends, stage 2 borrows once its micro-batch 0 matched stage 1's, and stages 3
    # and 4 copy their micro-batch 0 from stage 1's as well (their gradients made as stand-ins in the copy's place),
    # and their last one (stage 2's matched stage 1's: DDP's bucket all-reduce moved to their ranks, the bucket
    # counted): their forward runs twice, for the chain of stage shapes and the warm-up's last micro-batch. The
    # workload and memory are those of dispatching every micro-batch
    s, runs, lent = six_stages(tmp_path, monkeypatch)
    assert runs == {0: 6, 1: 6, 2: 4, 3: 2, 4: 2, 5: 7}
    dispatching_all(monkeypatch)
    every = capture(s, 2 * 6 * TP).to_json()
    assert lent.pop("memory") == every.pop("memory")
    assert lent == every


def test_stages_copy_micro_batch_0_but_run_their_last_where_the_borrower_s_last_differed(tmp_path, monkeypatch):
    # the borrowing stage's last micro-batch did not match the lender's (here: reported so): the stages after it
    # still copy micro-batch 0 but run their last micro-batch, and their warm-up's, for real
    real = chunk_replay.ChunkReplay._check_lent

    def last_differs(self, key, rec, which):
        real(self, key, rec, which)
        if which == chunk_replay.LAST:
            self.borrowed_last[key] = False
    monkeypatch.setattr(chunk_replay.ChunkReplay, "_check_lent", last_differs)
    s, runs, lent = six_stages(tmp_path, monkeypatch)
    assert runs == {0: 6, 1: 6, 2: 4, 3: 3, 4: 3, 5: 7}
    dispatching_all(monkeypatch)
    assert capture(s, 2 * 6 * TP).to_json() == lent


def test_a_stage_unlike_the_one_before_dispatches_its_own(tmp_path, monkeypatch):
    # stage 2 runs one more op than stage 1: its micro-batch 0 is not stage 1's, so it takes its own templates
    s = spec(tmp_path, odd="x = x * 2 if self.index == 2 else x")
    runs = forwards_per_stage(monkeypatch, s)
    lent = capture(s, 2 * P * TP).to_json()
    assert runs == {0: 6, 1: 6, 2: 6, 3: 7}
    dispatching_all(monkeypatch)
    assert capture(s, 2 * P * TP).to_json() == lent


def test_a_lent_template_that_cannot_be_mapped_midway_captures_the_stage_again(tmp_path, monkeypatch):
    # the parameters could not be put on stage 2's after its micro-batch 0 matched: the stage is captured again
    # dispatching every micro-batch, and the workload is still the one that does so everywhere
    real = chunk_replay.ChunkReplay._lent_source

    def unmapped(self, key, which=chunk_replay.TEMPLATE):
        template, source = real(self, key, which)
        source.kept.clear()
        return template, source
    monkeypatch.setattr(chunk_replay.ChunkReplay, "_lent_source", unmapped)
    s = spec(tmp_path)
    runs = forwards_per_stage(monkeypatch, s)
    lent = capture(s, 2 * P * TP).to_json()
    assert runs[2] == 2 * M   # captured again, every micro-batch in both steps (its output shape known by then)
    dispatching_all(monkeypatch)
    assert capture(s, 2 * P * TP).to_json() == lent


def test_tensor_parallelism_alone_warms_up_the_accumulation_of_its_dtensor_gradients(tmp_path, monkeypatch):
    # without DDP the gradients are DTensors, whose first in-place add decides its sharding with ops of its own: a
    # warm-up with one real backward (which finds the gradients unset) left it to the recorded step's micro-batch
    # 1, unlike 2, so every stage was captured again dispatching all. The warm-up also runs micro-batch M - 2: the
    # stages copy from micro-batch 1 at their first capture, the middle ones lend and borrow, and the workload and
    # memory are those of dispatching every micro-batch
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(MODEL % ("pass", "1F1B", M, P, P * TP, TP)) +
                    "from astra_compile.compiler.frontend.layout import adamw_by_tensor_kind as optimizer\n")
    s = load_model_file(str(path))
    replays = []
    real = capture_module._capture_rank
    monkeypatch.setattr(capture_module, "_capture_rank",
                        lambda *a, **k: replays.append(k.get("replay", True)) or real(*a, **k))
    runs = forwards_per_stage(monkeypatch, s)
    lent = capture(s, P * TP).to_json()
    assert all(replays)
    # the warm-up's M - 2 and M - 1 (and 0 on the last stage), the recorded step's 0, 1, 2 and M - 1, the probe;
    # stage 2 borrows: of the recorded step's only 0 and M - 1
    assert runs == {0: 7, 1: 7, 2: 5, 3: 8}
    dispatching_all(monkeypatch)
    every = capture(s, P * TP).to_json()
    assert lent.pop("memory") == every.pop("memory")
    assert lent == every


def test_stages_training_dtensor_parameters_run_their_micro_batches_0_and_last(tmp_path, monkeypatch):
    # tensor parallelism alone, six stages: the stages after the borrower copy micro-batches 1 to M - 2 from the
    # lender but run their micro-batches 0 and M - 1 and the warm-up's M - 2 and M - 1 (their gradients are
    # DTensors: _copies_first leaves them out). The workload and memory are those of dispatching every micro-batch
    path = tmp_path / "pp.py"
    path.write_text(textwrap.dedent(MODEL % ("pass", "1F1B", M, 6, 6 * TP, TP)) +
                    "from astra_compile.compiler.frontend.layout import adamw_by_tensor_kind as optimizer\n")
    s = load_model_file(str(path))
    runs = forwards_per_stage(monkeypatch, s)
    lent = capture(s, 6 * TP).to_json()
    assert runs == {0: 7, 1: 7, 2: 5, 3: 5, 4: 5, 5: 8}
    dispatching_all(monkeypatch)
    every = capture(s, 6 * TP).to_json()
    assert lent.pop("memory") == every.pop("memory")
    assert lent == every


def test_ranks_move_along_the_pp_axis_only():
    shift = RankShift({"pp": 4, "dp": 2, "tp": 2}, 1, 3)   # pp stride 4
    assert [shift.rank(r) for r in (4, 5, 6, 7)] == [12, 13, 14, 15]
    with pytest.raises(NoImage):
        shift.rank(8)   # pp coordinate 2: no rank of the donor's stage

    class Op:
        group, root, peer = (4, 6), -1, 5
    op = Op()
    shift.apply(op)
    assert (op.group, op.root, op.peer) == ((12, 14), -1, 13)


def test_kept_storages_map_place_by_place():
    assert kept_map(["a", None, "b"], ["x", "y", "z"]) == {"a": "x", "b": "z"}
    assert kept_map(["a"], ["x", "y"]) is None                 # other modules
    assert kept_map(["a", "a"], ["x", "y"]) is None            # one storage standing for two
    assert kept_map(["a", "b"], ["x", "x"]) is None
