"""torchtitan's Llama 3.1 8B as its December 2024 H100 benchmark trained it
(pytorch/torchtitan/benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3): the calibration runs T1 and T2
(../shared/published-runs/README.md), written in plain PyTorch the way torchtitan's llama3 model and
parallelize_llama apply it.

Model: L32 h4096, 32 heads with 8 key/value heads (grouped-query attention), SwiGLU feed-forward of 14336,
V = 128,256, RMSNorm, rotary position embeddings (torchtitan's: q and k widened to fp32, viewed as complex
numbers and multiplied by the complex rotations, then cast back), causal scaled-dot-product attention
(flash attention on an H100), untied output layer, cross-entropy on the logits cast to fp32. Local batch 2 x 8192
tokens per GPU.

Training as torchtitan runs it (train_configs/llama3_8b.toml of that time; no torch.compile, no float8):
- FSDP2 over every GPU: each transformer block its own `fully_shard` unit, the last one not resharded after the
  forward, then the root (embeddings, final norm, output layer); MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32): parameters all-gathered in bf16, gradients reduce-scattered in fp32, fp32 master shards.
- Selective activation checkpointing, torchtitan's "op" policy (`selective_ac_option = 'op'`): each block under
  checkpoint_wrapper with a selective-checkpoint context that saves the outputs of matmuls (but every second
  one), of the attention kernel and of reduce-scatters, and recomputes every other op in the backward.
- AdamW (foreach), gradient norm clipped at 1.0 (its all-reduce over the FSDP group).
- Launched as torchtitan's run_llama_train.sh launched it then: PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"
  (CUDA_ALLOC_CONF below: the reserved bytes the published memory column quotes replay that allocator).

    astra-compile benchmarks/published/torchtitan_llama3_8b.py --cluster grand-teton:1     # T1: FSDP over 8
    astra-compile benchmarks/published/torchtitan_llama3_8b.py --cluster grand-teton:16    # T2: FSDP over 128
"""
from collections import defaultdict

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ, BATCH = 128256, 4096, 32, 8, 14336, 32, 8192, 2
ROPE_THETA, NORM_EPS, MAX_NORM = 500000.0, 1e-5, 1.0
CUDA_ALLOC_CONF = "expandable_segments:True"


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return normed.type_as(x) * self.weight


def rope(x, rotations):
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rotations).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = DIM // HEADS
        self.wq = nn.Linear(DIM, HEADS * self.hd, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * self.hd, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * self.hd, bias=False)
        self.wo = nn.Linear(HEADS * self.hd, DIM, bias=False)

    def forward(self, x, rotations):
        b, t, _ = x.shape
        # -1 heads, as torchtitan writes it: under tensor parallelism a rank holds some of the heads
        # (benchmarks/models/llama3_405b.py)
        q = rope(self.wq(x).view(b, t, -1, self.hd), rotations)
        k = rope(self.wk(x).view(b, t, -1, self.hd), rotations)
        v = self.wv(x).view(b, t, -1, self.hd)
        rep = q.shape[2] // k.shape[2]   # torchtitan's repeat_kv
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w3 = nn.Linear(DIM, FFN, bias=False), nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.attention, self.feed_forward = Attention(), FeedForward()

    def forward(self, x, rotations):
        x = x + self.attention(self.attention_norm(x), rotations)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        hd = DIM // HEADS
        angles = torch.outer(torch.arange(SEQ).float(), 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2).float() / hd)))
        self.register_buffer("rotations", torch.polar(torch.ones_like(angles), angles)[None, :, None, :],
                             persistent=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.rotations)
        return self.output(self.norm(x))


def _op_sac_policy():
    """torchtitan's "op" selective-checkpoint policy: save matmuls (but every second), attention, reduce-scatters."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default}
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def mesh_axes(world_size):
    return {"dp": world_size}


def build_model():
    return Llama()


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def parallelize(model, mesh):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    for i, layer in enumerate(model.layers):
        model.layers[i] = checkpoint_wrapper(layer, context_fn=_op_sac_policy, preserve_rng_state=False)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    dp = mesh["dp"]
    for i, layer in enumerate(model.layers):
        fully_shard(layer, mesh=dp, mp_policy=policy, reshard_after_forward=i < LAYERS - 1)
    fully_shard(model, mesh=dp, mp_policy=policy)
    return model


def loss(logits):
    labels = torch.zeros(logits.shape[:2], dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


class ClippedAdamW(torch.optim.AdamW):
    """AdamW after clipping the gradient norm at MAX_NORM, as torchtitan's train step does."""

    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, MAX_NORM, foreach=True)
        return super().step(closure)


def optimizer(parameters):
    return ClippedAdamW(parameters, lr=3e-4, weight_decay=0.1, foreach=True)
