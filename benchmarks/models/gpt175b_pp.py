"""GPT-3 175B trained the 3-D way (Brown et al. 2020; Narayanan et al. 2021's layout): 96 layers, hidden 12288,
96 heads, sequence 2048, vocabulary 51200, on TP 8 x PP 16 x DP 8 (1024 ranks), 1F1B over 192 micro-batches of
one sequence each (a global batch of 1536 sequences). benchmarks/capture_scale.py times its capture.

    astra-compile benchmarks/models/gpt175b_pp.py --topology "Switch(8)_Switch(8)_Switch(16)"
"""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ = 51200, 12288, 96, 96, 2048
PP, TP, MICROBATCHES = 16, 8, 192
BATCH = MICROBATCHES   # per data-parallel rank: micro-batches of one sequence
PIPELINE = {"schedule": "1F1B", "microbatches": MICROBATCHES}


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = DIM // HEADS
        self.wq, self.wk, self.wv = (nn.Linear(DIM, DIM) for _ in range(3))
        self.wo = nn.Linear(DIM, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, -1, self.hd).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn, self.mlp = Attention(), MLP()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Stage(nn.Module):
    """Blocks [first, last) of the model, with the embeddings on the first stage and the head on the last."""

    def __init__(self, model, first, last):
        super().__init__()
        self.tok, self.pos = (model.tok, model.pos) if first == 0 else (None, None)
        self.layers = nn.ModuleList(model.layers[first:last])
        self.norm, self.head = (model.norm, model.head) if last == LAYERS else (None, None)

    def forward(self, x):
        if self.tok is not None:
            x = self.tok(x) + self.pos.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)) if self.head is not None else x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        return Stage(self, 0, LAYERS)(tokens)


TP_PLAN = {"layers.*.attn.wq": "colwise", "layers.*.attn.wk": "colwise", "layers.*.attn.wv": "colwise",
           "layers.*.attn.wo": "rowwise", "layers.*.mlp.fc1": "colwise", "layers.*.mlp.fc2": "rowwise"}


def mesh_axes(world_size):
    return {"pp": PP, "dp": world_size // (PP * TP), "tp": TP}


def build_model():
    return GPT()


def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages
    return Stage(model, stage * per, (stage + 1) * per)


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
