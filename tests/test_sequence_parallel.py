"""Sequence parallelism written as torchtitan writes it (SequenceParallel on the norm, ColwiseParallel taking
sequence shards, RowwiseParallel handing sequence shards on) runs in the capture as DTensor runs it: per block an
all-gather of the sequence before the column-parallel matmul and a reduce-scatter after the row-parallel one, in
both passes, where plain tensor parallelism all-reduces."""
import collections
import textwrap

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

D, S, B, TP, BLOCKS = 256, 128, 2, 4, 2


def model(tmp_path, sequence_parallel: bool) -> str:
    plan = ('{"norm": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)), '
            '"down": RowwiseParallel(output_layouts=Shard(1))}') if sequence_parallel else \
        '{"up": ColwiseParallel(), "down": RowwiseParallel()}'
    path = tmp_path / f"sp_{sequence_parallel}.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch import nn
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                       parallelize_module)


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.LayerNorm({D}, elementwise_affine=False)   # plain TP: no replicated parameters
                self.up, self.down = nn.Linear({D}, {4 * D}), nn.Linear({4 * D}, {D})

            def forward(self, x):
                return x + self.down(torch.relu(self.up(self.norm(x))))


        def build_model():
            return nn.Sequential(*(Block() for _ in range({BLOCKS})))


        def example_inputs():
            return torch.randn({B}, {S}, {D})   # with sequence parallelism: this rank's share of the sequence


        def mesh_axes(world_size):
            return {{"tp": world_size}}


        def parallelize(model, mesh):
            for block in model:
                parallelize_module(block, mesh["tp"], {plan})
            return model
    """))
    return str(path)


def calls(path):
    ops = capture(load_model_file(path), TP).programs[0]
    return collections.Counter((op.collective, op.phase, op.bytes) for op in ops
                               if op.kind == "collective" and op.phase != "optimizer")


def test_sequence_parallel_gathers_and_scatters_the_sequence(tmp_path):
    full = TP * B * S * D * 4        # the whole sequence's activations, fp32
    # backward: the row-parallel output's gradient is gathered in every block; the column-parallel input's
    # gradient is reduce-scattered where something before it needs one (not the first block: its input, the
    # model's, needs no gradient and its norm has no parameters)
    assert calls(model(tmp_path, True)) == {("all_gather", "forward", full): BLOCKS,
                                            ("reduce_scatter", "forward", full): BLOCKS,
                                            ("all_gather", "backward", full): BLOCKS,
                                            ("reduce_scatter", "backward", full): BLOCKS - 1}


def test_plain_tensor_parallel_all_reduces(tmp_path):
    assert calls(model(tmp_path, False)) == {("all_reduce", "forward", B * S * D * 4): BLOCKS,
                                             ("all_reduce", "backward", B * S * D * 4): BLOCKS - 1}   # as above
