"""What a compute op costs in memory traffic (frontend/op_bytes.py): views move nothing, copies move their
tensor twice (read + write), an embedding lookup touches the rows it gathers, not its whole table."""
import textwrap

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.frontend.op_bytes import moved_bytes, only_aliases

VOCAB, DIM, BATCH, SEQ = 50000, 256, 4, 128
MODEL = f"""
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding({VOCAB}, {DIM})
    def forward(self, tokens):
        x = self.embed(tokens)                          # (B, T, D): gathers B*T rows of the table
        flat = x.reshape({BATCH} * {SEQ}, {DIM})        # contiguous: a view
        across = x.transpose(1, 2).reshape({BATCH}, -1) # not contiguous: a copy (clone), then a view of it
        return flat.sum() + across.sum()
def build_model():
    return Net()
def example_inputs():
    return torch.randint(0, {VOCAB}, ({BATCH}, {SEQ}))
def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.1)
"""
ROWS = BATCH * SEQ * DIM * 4          # the gathered rows (= the lookup's output), fp32
TABLE = VOCAB * DIM * 4
INDICES = BATCH * SEQ * 8             # int64


def ops_of(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL))
    return capture(load_model_file(str(path)), 1).programs[0]


def named(ops, name):
    return [op for op in ops if op.name == name]


def test_views_move_nothing_and_copies_move_their_tensor(tmp_path):
    ops = ops_of(tmp_path)
    assert not named(ops, "aten._unsafe_view.default")            # reshape after the clone: no op, no bytes
    assert not named(ops, "aten.view.default") and not named(ops, "aten.transpose.int")
    forward = [op for op in named(ops, "aten.clone.default") if op.phase == "forward"]
    assert [op.bytes for op in forward] == [2 * ROWS]               # contiguous() of the transposed activations


def test_an_embedding_lookup_reads_the_rows_it_gathers_not_its_table(tmp_path):
    ops = ops_of(tmp_path)
    [lookup] = named(ops, "aten.embedding.default")
    assert lookup.bytes == INDICES + ROWS + ROWS                    # not TABLE + INDICES + ROWS: 51 MB for 1 MB
    [backward] = named(ops, "aten.embedding_dense_backward.default")
    assert backward.bytes == ROWS + INDICES + TABLE                 # the rows' gradient in, the table's out


def test_the_rule_both_frontends_charge():
    assert moved_bytes("aten::embedding", [TABLE, INDICES, 0, 0, 0], [ROWS]) == INDICES + 2 * ROWS   # a trace
    assert moved_bytes("aten.embedding.default", [TABLE, INDICES], [ROWS]) == INDICES + 2 * ROWS      # a capture
    assert moved_bytes("aten::empty", [], [ROWS]) == 0 and moved_bytes("aten.add.Tensor", [4, 4], [4]) == 12
    assert only_aliases(False, {1}, {1, 2}) and not only_aliases(True, {1}, {1})    # in place: work
    assert not only_aliases(False, {3}, {1}) and not only_aliases(False, set(), {1})


ADAMW = """
import torch
from torch import nn
def build_model():
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
def example_inputs():
    return (torch.randn(32, 256),)
"""
PARAMS = (256 * 512 + 512 + 512 * 256 + 256) * 4   # fp32 bytes of one list of every parameter


def test_adamw_runs_its_foreach_kernels_as_on_a_gpu_and_each_moves_what_it_reads_and_writes(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(ADAMW)
    ops = [op for op in capture(load_model_file(str(path)), 1).programs[0] if op.phase == "optimizer"]
    passes = {op.name: op.bytes for op in ops if op.bytes >= PARAMS}
    # torch.optim's default on CUDA parameters (the host would run a for-loop: 4 params x 8 ops); the 9th foreach op
    # adds to the step counters, which live on the host: host dispatches (views), no kernel
    assert len(ops) == 8 and all(op.name.startswith("aten._foreach_") for op in ops)
    assert sum(op.views for op in ops) >= 3 * 4   # each parameter's counter: its add_ and two reads
    assert passes == {"aten._foreach_mul_.Scalar": 2 * PARAMS,          # params (weight decay), then exp_avg_sq:
                      "aten._foreach_lerp_.Scalar": 3 * PARAMS,         # read and written in place, returned nothing
                      "aten._foreach_addcmul_.Scalar": 3 * PARAMS,      # the gradients passed twice, read once
                      "aten._foreach_sqrt.default": 2 * PARAMS, "aten._foreach_div_.ScalarList": 2 * PARAMS,
                      "aten._foreach_add_.Scalar": 2 * PARAMS, "aten._foreach_addcdiv_.ScalarList": 4 * PARAMS}


def test_a_file_that_asks_for_the_for_loop_gets_it(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(ADAMW + "def optimizer(parameters):\n    return torch.optim.AdamW(parameters, foreach=False)\n")
    ops = [op for op in capture(load_model_file(str(path)), 1).programs[0] if op.phase == "optimizer"]
    assert not any("_foreach_" in op.name for op in ops) and len(ops) > 9


def test_out_arguments_are_written_not_read_twice():
    # an out= op returns nothing and has its out tensors among its inputs: they are not charged again (the
    # frontends pass written=0 for them); an in-place foreach op's list is read and written
    assert moved_bytes("aten.split_with_sizes_copy.out", [64, 32, 32], []) == 128
    assert moved_bytes("aten._foreach_mul_.Scalar", [64], [], written=64) == 128
