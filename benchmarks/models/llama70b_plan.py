"""A Llama-3-70B-shaped model for `astra-compile plan` (benchmarks/plan_speed.py): 80 layers, hidden 8192, 64 heads
with 8 key-value heads, FFN 28672, vocabulary 128256, sequence 8192, parameters in bf16 (about 70.6B). It shows
everything a plan's layouts need: a TP_PLAN (tensor parallelism), FSDP_UNITS (each block its own FSDP2 unit) and
pipeline_stage() (blocks split evenly; the embedding on the first stage, the norm and output on the last), and
no mesh of its own: `plan` gives each layout's mesh.

    astra-compile plan benchmarks/models/llama70b_plan.py --cluster dgx-h100:32 --global-batch 512
"""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ = 128256, 8192, 64, 8, 28672, 80, 8192
BATCH = 1   # one rank's batch (plan resizes it to each layout's micro-batches)


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
        q = self.wq(x).view(b, t, -1, self.hd)   # colwise: this rank's heads only
        k = self.wk(x).view(b, t, -1, self.hd)
        v = self.wv(x).view(b, t, -1, self.hd)
        q, k = rope(q, freqs), rope(k, freqs)
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))   # rowwise: all-reduce


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


class Stage(nn.Module):
    """Blocks [first, last) of the model, with the embedding on the first stage and the head on the last."""

    def __init__(self, model, first, last):
        super().__init__()
        self.tok_embeddings = model.tok_embeddings if first == 0 else None
        self.layers = nn.ModuleList(model.layers[first:last])
        self.norm, self.output = (model.norm, model.output) if last == LAYERS else (None, None)
        self.register_buffer("cos", model.cos, persistent=False)
        self.register_buffer("sin", model.sin, persistent=False)

    def forward(self, x):
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers:
            x = layer(x, (self.cos, self.sin))
        return self.output(self.norm(x)) if self.output is not None else x


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        hd = DIM // HEADS
        inv = 1.0 / (500000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(SEQ).float(), inv)
        self.register_buffer("cos", ang.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", ang.sin()[None, :, None, :], persistent=False)

    def forward(self, tokens):
        return Stage(self, 0, LAYERS)(tokens)


TP_PLAN = {"layers.*.attention.wq": "colwise", "layers.*.attention.wk": "colwise",
           "layers.*.attention.wv": "colwise", "layers.*.attention.wo": "rowwise",
           "layers.*.feed_forward.w1": "colwise", "layers.*.feed_forward.w3": "colwise",
           "layers.*.feed_forward.w2": "rowwise"}


FSDP_UNITS = ["layers.*"]


def build_model():
    return Llama().to(torch.bfloat16)


def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages   # plan tries powers of two up to 16 stages: 80 blocks divide evenly
    return Stage(model, stage * per, LAYERS if stage == num_stages - 1 else (stage + 1) * per)


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
