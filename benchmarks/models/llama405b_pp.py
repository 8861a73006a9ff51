"""Llama 3 405B trained as its paper describes (Llama Team 2024, section 3.3): 126 layers, hidden 16384, 128 heads
with 8 key-value heads, FFN 53248, vocabulary 128256, sequence 8192, on TP 8 x PP 16 x DP 128 (16,384 ranks). The
first and the last stage hold one layer fewer (7 of the 126; the others 8), as the paper balances the embedding
and the output layer. 1F1B over 16 micro-batches of one sequence per pipeline (a global batch of 2048 sequences,
16M tokens, as the paper's). benchmarks/capture_scale.py times its capture.

    astra-compile benchmarks/models/llama405b_pp.py --topology "Switch(8)_Switch(128)_Switch(16)"
"""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ = 128256, 16384, 128, 8, 53248, 126, 8192
PP, TP, MICROBATCHES = 16, 8, 16
BATCH = MICROBATCHES   # per data-parallel rank: micro-batches of one sequence
PIPELINE = {"schedule": "1F1B", "microbatches": MICROBATCHES}


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


def mesh_axes(world_size):
    return {"pp": PP, "dp": world_size // (PP * TP), "tp": TP}


def build_model():
    return Llama()


def pipeline_stage(model, stage, num_stages):
    per = -(-LAYERS // num_stages)   # 8; the first and last stages one fewer
    first = 0 if stage == 0 else stage * per - 1
    last = LAYERS if stage == num_stages - 1 else (stage + 1) * per - 1
    return Stage(model, first, last)


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
