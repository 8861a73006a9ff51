"""A Llama-style decoder pipelined the way torch's tutorials and torchtitan write it: parallelize(module, mesh)
splits the model into stages, applies tensor parallelism and FSDP2 to each, wraps them in PipelineStage over the
pp axis and returns an interleaved 1F1B schedule (torch.distributed.pipelining) with two stages per rank.

The mesh is pp x dp x tp = 4 x 2 x 8 (the last mesh axis takes topology dimension 0). The 8 blocks make 8 stages
of one block each (the first also the embedding, the last the final norm and output layer); pp rank r holds
stages r and r + 4 (torch's looped layout) and runs 8 micro-batches through both, sending activations forward
and gradients back over the pp axis's group. The capture records one rank per pp coordinate running its
schedule's step(); its bubble is about half 1F1B's for the same work (docs/workloads.md, "Pipeline parallelism").

    astra-compile examples/llama_pp_interleaved.py --topology "Switch(8)_Switch(2)_Ring(4)"
"""
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn import functional as F

VOCAB, DIM, HEADS, FFN, LAYERS, SEQ, BATCH = 32000, 2048, 16, 5632, 8, 1024, 8
PP, TP, STAGES_PER_RANK, MICROBATCHES = 4, 8, 2, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
        self.wq, self.wk, self.wv = (nn.Linear(DIM, DIM, bias=False) for _ in range(3))
        self.wo = nn.Linear(DIM, DIM, bias=False)
        self.w1, self.w3 = nn.Linear(DIM, FFN, bias=False), nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.attention_norm(x)
        q, k, v = (w(h).view(b, t, -1, DIM // HEADS) for w in (self.wq, self.wk, self.wv))   # this rank's heads
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(LAYERS)})
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        # torchtitan's convention: a stage keeps only its own layers; the rest are None (or gone)
        x = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            x = layer(x)
        return self.output(self.norm(x)) if self.output is not None else x


def build_model():
    return Llama()


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def mesh_axes(world_size):
    tp = TP if world_size % (PP * TP) == 0 else 1
    return {"pp": PP, "dp": world_size // (PP * tp), "tp": tp}


def stage_part(model, stage, stages):
    """Stage `stage` of the model: its blocks, with the embedding on the first and the head on the last (the way
    torchtitan's pipeline_module_split keeps one model class and drops what the stage does not hold)."""
    per = LAYERS // stages
    part = Llama.__new__(Llama)
    nn.Module.__init__(part)
    part.tok_embeddings = model.tok_embeddings if stage == 0 else None
    part.layers = nn.ModuleDict({str(i): model.layers[str(i)] for i in range(stage * per, (stage + 1) * per)})
    part.norm, part.output = (model.norm, model.output) if stage == stages - 1 else (None, None)
    return part


def apply_tp_fsdp(part, mesh):
    for block in part.layers.values():
        parallelize_module(block, mesh["tp"], {"wq": ColwiseParallel(), "wk": ColwiseParallel(),
                                               "wv": ColwiseParallel(), "wo": RowwiseParallel(),
                                               "w1": ColwiseParallel(), "w3": ColwiseParallel(),
                                               "w2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(part, mesh=mesh["dp"])
    return part


def loss_fn(logits, target):
    return logits.float().logsumexp(dim=-1).mean()


def parallelize(model, mesh):
    pp = mesh["pp"]
    rank, stages = pp.get_local_rank(), PP * STAGES_PER_RANK
    pipeline_stages = [PipelineStage(apply_tp_fsdp(stage_part(model, s, stages), mesh), s, stages,
                                     torch.device("cpu"), group=pp.get_group())
                       for s in range(rank, stages, PP)]   # looped: stages rank, rank + PP
    return ScheduleInterleaved1F1B(pipeline_stages, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
