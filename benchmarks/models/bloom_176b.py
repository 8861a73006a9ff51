"""BLOOM 176B trained as BigScience describes it (BigScience Workshop 2022, "BLOOM: A 176B-Parameter Open-Access
Multilingual Language Model", section 3.4; Megatron-DeepSpeed): 70 layers, hidden 14336, 112 heads, sequence 2048,
vocabulary 250880, ALiBi instead of position embeddings, a layer norm after the word embedding, GELU, the word
embedding tied to the output layer; TP 4 x PP 12 x DP 8 on 384 A100 80 GB (48 nodes of 8), global batch 2048 of
micro-batch 2 (128 micro-batches per pipeline), 1F1B, bf16 with fp32 master weights, ZeRO stage 1, full activation
checkpointing, no dropout.

Not a calibration run: nothing was fitted on it (docs/published-runs.md, "Beyond the calibration set"). Megatron's
layers and tensor parallelism are benchmarks/published/megatron_gpt.py's, loaded with BLOOM's sizes and bf16
(megatron_pipeline.py); here:
- ALiBi: each head's linear bias added to the scores inside the Q K^T GEMM (baddbmm, as Megatron-DeepSpeed's
  BLOOM does), then the causal mask and softmax in Megatron's fused kernel (megatron_gpt.py's FUSED_SOFTMAX).
- The pipeline split Megatron-DeepSpeed's `--pp-partition-method type:transformer|embedding` makes: the embedding
  and the output layer count as layers, so 72 over 12 stages: the first stage the embedding and 5 blocks, the last
  5 blocks and the output layer, the others 6 blocks each.
- The activations and gradients between stages partitioned over the tp ranks (DeepSpeed's pipeline engine does,
  as Megatron's scatter/gather: megatron_pipeline.py).
- ZeRO stage 1 as PyTorch writes it: torch DDP all-reduces the gradients over dp (once, after the last
  micro-batch), then ZeroRedundancyOptimizer steps this rank's 1/8 of the parameters (their fp32 masters and Adam
  states) and broadcasts the updated bf16 parameters from the rank that owns them.

    astra-compile benchmarks/models/bloom_176b.py --cluster dgx-a100:48 --json
"""
import math

import torch

import megatron_pipeline as blocks   # beside this file (docs/workloads.md: a model file's own modules)

LAYERS, HIDDEN, HEADS, VOCAB, SEQ = 70, 14336, 112, 250880, 2048
PP, TP, MICROBATCHES, MICRO_BATCH = 12, 4, 128, 2
PIPELINE = {"schedule": "1F1B", "microbatches": MICROBATCHES}
DTYPE = torch.bfloat16
_DP_GROUP = []   # the data-parallel group parallelize() used, for ZeRO's shards


mg = blocks.megatron_gpt("_megatron_bloom_176b", LAYERS=LAYERS, HIDDEN=HIDDEN, HEADS=HEADS, TP=TP, VOCAB=VOCAB,
                         SEQ=SEQ, DTYPE=DTYPE, DROPOUT=0.0, LOSS_SCALE=1.0)


def alibi_slopes(heads):
    """ALiBi's geometric slopes (Press et al. 2022) for a power-of-two head count, interleaved for the rest."""
    closest = 2 ** math.floor(math.log2(heads))
    base = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
    extra = [2 ** (-4 * (2 * i + 1) / closest) for i in range(heads - closest)]
    return base + extra


class Block(mg.Block):
    def __init__(self, tp):
        super().__init__(tp)
        self.tp_rank = 0   # whose heads' slopes

    def attention(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(mg.copy_to_tp(x, self.tp_group))
        q, k, v = qkv.view(b, t, self.heads, 3 * self.head_dim).split(self.head_dim, dim=-1)
        q, k, v = (z.permute(0, 2, 1, 3).reshape(b * self.heads, t, self.head_dim) for z in (q, k, v))
        mine = alibi_slopes(HEADS)[self.tp_rank * self.heads:(self.tp_rank + 1) * self.heads]
        slopes = torch.tensor(mine, dtype=DTYPE, device=x.device)
        alibi = (slopes.view(-1, 1, 1) * torch.arange(t, device=x.device, dtype=DTYPE).view(1, 1, t)).repeat(b, 1, 1)
        scores = torch.baddbmm(alibi, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(self.head_dim))
        probs = mg.FUSED_SOFTMAX(scores)
        y = torch.bmm(probs, v).view(b, self.heads, t, self.head_dim).permute(0, 2, 1, 3).reshape(b, t, -1)
        return mg.reduce_from_tp(self.proj(y), self.tp_group) + self.proj_bias


class Stage(torch.nn.Module):
    """Blocks [first, last) at their tensor-parallel sizes; the embedding and its layer norm on the first stage,
    the final norm, the output layer (the word embedding's copy) and the loss on the last."""
    words, cross_entropy = mg.GPT.words, mg.GPT.cross_entropy

    def __init__(self, first, last):
        super().__init__()
        self.tp_group, self.tp, self.tp_rank = None, TP, 0
        self.first, self.last = first == 0, last == LAYERS
        if self.first or self.last:
            self.word = torch.nn.Embedding(VOCAB // TP, HIDDEN, dtype=DTYPE)
        if self.first:
            self.word_ln = torch.nn.LayerNorm(HIDDEN, dtype=DTYPE)
        self.blocks = torch.nn.ModuleList(Block(TP) for _ in range(first, last))
        if self.last:
            self.ln = torch.nn.LayerNorm(HIDDEN, dtype=DTYPE)

    def forward(self, x):
        if self.first:
            x = self.word_ln(self.words(x))
        else:   # the previous stage sent each tp rank its slice
            x = blocks.gather_from_tp(x, self.tp_group, TP, self.tp_rank, (MICRO_BATCH, SEQ, HIDDEN))
        for block in self.blocks:   # full activation checkpointing: one checkpoint per layer
            x = mg.checkpoint(block, x, use_reentrant=False)
        if not self.last:
            return blocks.scatter_to_tp(x, self.tp_group, TP, self.tp_rank)
        logits = mg.F.linear(mg.copy_to_tp(self.ln(x), self.tp_group), self.word.weight)
        return self.cross_entropy(logits, torch.zeros(x.shape[:2], dtype=torch.long, device=x.device))


class Model(torch.nn.Module):
    """The whole model is never built: each stage builds its own layers (176B parameters are 352 GB in bf16)."""


class MasterAdamW(torch.optim.Optimizer):
    """AdamW on fp32 masters of bf16 parameters (DeepSpeed's bf16 optimizer): gradients cast up, masters stepped
    and copied back. ZeroRedundancyOptimizer builds it on this rank's shard only."""

    def __init__(self, params, lr=6e-5, weight_decay=0.1):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        self.params = [p for group in self.param_groups for p in group["params"]]
        self.masters = [p.detach().float() for p in self.params]
        self.adam = torch.optim.AdamW(self.masters, lr=lr, weight_decay=weight_decay, fused=True)

    @torch.no_grad()
    def step(self, closure=None):
        for p, m in zip(self.params, self.masters):
            m.grad = p.grad.float()
        self.adam.step()
        torch._foreach_copy_(self.params, self.masters)


def mesh_axes(world_size):
    return {"pp": PP, "dp": world_size // (PP * TP), "tp": TP}


def build_model():
    return Model()


def pipeline_stage(model, stage, num_stages):
    """type:transformer|embedding: 72 parts (the embedding, 70 blocks, the output layer) over the stages."""
    per = (LAYERS + 2) // num_stages
    return Stage(max(stage * per - 1, 0), min((stage + 1) * per - 1, LAYERS))


def example_inputs():
    return (torch.randint(0, VOCAB, (MICROBATCHES * MICRO_BATCH, SEQ)),)


def parallelize(stage, mesh):
    group = mesh["tp"].get_group()
    stage.tp_group, stage.tp_rank = group, mesh["tp"].get_local_rank()
    for block in stage.blocks:
        block.tp_group, block.tp_rank = group, stage.tp_rank
    _DP_GROUP[:] = [mesh["dp"].get_group()]
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(stage, process_group=mesh["dp"].get_group())


def loss(per_token_loss):
    return per_token_loss.mean()


def optimizer(parameters):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(parameters, optimizer_class=MasterAdamW, process_group=_DP_GROUP[0])
