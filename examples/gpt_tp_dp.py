"""A GPT-style decoder stack with Megatron tensor parallelism inside a node and data parallelism across nodes.

The mesh is dp x tp with tp = 8 (the last mesh axis takes topology dimension 0, so on 8x8_torus tensor
parallelism runs along dimension 0 and DDP along dimension 1). TP_PLAN applies PyTorch's DTensor
ColwiseParallel / RowwiseParallel to each block: two all-reduces in the forward pass and two in the backward pass
per block. DDP then all-reduces the (tensor-parallel shards of the) gradients across dp.

    astra-compile examples/gpt_tp_dp.py --topology 8x8_torus
"""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, D_MODEL, HEADS, LAYERS, SEQ, BATCH = 32000, 2048, 16, 8, 1024, 4
TP = 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.fc1 = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.fc2 = nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x):
        b, t, _ = x.shape
        head_dim = D_MODEL // HEADS
        qkv = self.qkv(self.ln1(x))            # colwise: this rank's heads only
        heads = qkv.shape[-1] // (3 * head_dim)
        q, k, v = qkv.view(b, t, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / head_dim ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()   # on the activations' device
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, heads * head_dim)
        x = x + self.proj(y)                   # rowwise: all-reduce
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))   # colwise then rowwise: all-reduce


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


TP_PLAN = {"blocks.*.qkv": "colwise", "blocks.*.proj": "rowwise",
           "blocks.*.fc1": "colwise", "blocks.*.fc2": "rowwise"}


def mesh_axes(world_size):
    tp = TP if world_size % TP == 0 else 1
    return {"dp": world_size // tp, "tp": tp}


def build_model():
    return GPT()


def example_inputs():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
