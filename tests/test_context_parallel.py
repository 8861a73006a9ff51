"""Context parallelism written as torchtitan writes it: step_context(inputs, mesh) returns torch's
context_parallel over the mesh's cp axis, sharding the batch's sequence in place (frontend/model_file.step_context
passes what the context names: model, inputs, mesh). Each rank then computes its share of the sequence, and ring
attention gathers keys and values over cp in the forward and exchanges their gradients in the backward."""
import collections
import textwrap

from astra_compile.compiler.frontend.capture import capture
from astra_compile.compiler.frontend.model_file import load_model_file

from helpers import refused

D, H, S, B, V, CP = 256, 4, 1024, 2, 1000, 4


def model(tmp_path, context: str) -> str:
    path = tmp_path / "cp.py"
    path.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn.functional as F
        from torch import nn
        from torch.distributed.tensor.experimental import context_parallel


        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv, self.o = nn.Linear({D}, {3 * D}), nn.Linear({D}, {D})

            def forward(self, x):
                b, t, _ = x.shape
                q, k, v = self.qkv(x).view(b, t, 3, {H}, {D // H}).permute(2, 0, 3, 1, 4)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return x + self.o(y.transpose(1, 2).reshape(b, t, {D}))


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding({V}, {D})
                self.layers = nn.ModuleList(Attention() for _ in range(2))
                self.head = nn.Linear({D}, {V})

            def forward(self, tokens):
                x = self.embed(tokens)
                for layer in self.layers:
                    x = layer(x)
                return self.head(x)


        def build_model():
            return Net()


        def example_inputs():
            return torch.randint(0, {V}, ({B}, {S}))


        def mesh_axes(world_size):
            return {{"dp": world_size // {CP}, "cp": {CP}}}


        def parallelize(model, mesh):
            from torch.distributed.fsdp import fully_shard
            fully_shard(model, mesh=mesh["dp", "cp"]._flatten("dp_cp"))
            return model
    """) + "\n" + context)
    return str(path)


CONTEXT = """
def step_context(inputs, mesh):
    return context_parallel(mesh["cp"], buffers=[inputs[0]], buffer_seq_dims=[1])
"""


def test_context_parallel_shards_the_sequence_and_runs_ring_attention(tmp_path):
    def run(context):
        ops = capture(load_model_file(model(tmp_path, context)), 2 * CP).programs[0]
        calls = collections.Counter((op.collective, op.group_name, op.phase) for op in ops if op.kind == "collective")
        head = [op.flops for op in ops if op.phase == "forward" and op.name == "aten.addmm.default"][-1]
        return calls, head
    calls, head = run(CONTEXT)
    whole_calls, whole_head = run("")
    assert head * CP == whole_head                      # the output layer sees a quarter of the sequence
    assert calls[("all_gather", "cp", "forward")] == 2   # keys and values of each layer, gathered over cp
    assert sum(n for (kind, group, _), n in calls.items() if group == "cp") > 2
    assert not any(group == "cp" for (_, group, _) in whole_calls)


def test_step_context_names_what_it_may_take(tmp_path, capsys):
    path = model(tmp_path, "def step_context(batch):\n    return None\n")
    refused(capsys, path, "--topology", "Ring(8)", match="it may take model, inputs, mesh by name, not batch")
