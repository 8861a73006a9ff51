"""A Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) trained the 2-D way: FSDP2 on the dp
axis and DTensor tensor parallelism with SequenceParallel on the tp axis (the torchtitan recipe).

The mesh is dp x tp with tp = 8 (the last mesh axis takes topology dimension 0: on 8x8_torus tensor parallelism
runs along dimension 0, FSDP2 along dimension 1). Per block, in the forward pass: the norms run on this rank's
slice of the sequence; the attention and feed-forward inputs are all-gathered over tp (Shard(1) -> Replicate)
and their outputs reduce-scattered back (RowwiseParallel with Shard(1) output); the backward pass does the
mirror image. FSDP2 all-gathers each block's parameters (their TP shards) before its forward and again before
its backward, and reduce-scatters the gradients after; the norms' weights are replicated over tp, so their
gradients are all-reduced over tp. tests/test_llama_fsdp_tp.py derives every collective by hand and checks it
against a real gloo run of this file.

    astra-compile examples/llama_fsdp_tp.py --topology 8x8_torus
"""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ, BATCH = 32000, 2048, 16, 8, 5632, 4, 2048, 1
TP = 8


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, freqs):
    x1, x2 = x[..., ::2], x[..., 1::2]
    cos, sin = freqs
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = DIM // HEADS
        self.wq = nn.Linear(DIM, HEADS * self.hd, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * self.hd, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * self.hd, bias=False)
        self.wo = nn.Linear(HEADS * self.hd, DIM, bias=False)

    def forward(self, x, freqs):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, -1, self.hd)
        k = self.wk(x).view(b, t, -1, self.hd)
        v = self.wv(x).view(b, t, -1, self.hd)
        q, k = rope(q, freqs), rope(k, freqs)
        rep = q.shape[2] // k.shape[2]
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

    def forward(self, x, freqs):
        x = x + self.attention(self.attention_norm(x), freqs)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        hd = DIM // HEADS
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(SEQ).float(), inv)
        self.register_buffer("cos", ang.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", ang.sin()[None, :, None, :], persistent=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, (self.cos, self.sin))
        return self.output(self.norm(x))


def mesh_axes(world_size):
    tp = TP if world_size % TP == 0 else 1
    return {"dp": world_size // tp, "tp": tp}


def build_model():
    return Llama()


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def parallelize(model, mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    tp, dp = mesh["tp"], mesh["dp"]   # TP first: FSDP2 then shards the TP shards over dp
    parallelize_module(model, tp, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        # the loss reads the replicated logits as a DTensor (a local view returned by FSDP2's root would warn)
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate(), use_local_output=False),
    })
    for layer in model.layers:
        parallelize_module(layer, tp, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })
        fully_shard(layer, mesh=dp)
    fully_shard(model, mesh=dp)
    return model


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
