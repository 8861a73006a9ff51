"""ViT-B/16 (Dosovitskiy et al. 2021) as plain PyTorch writes it: a held-out model for the compute model.

Not a bundled example and not fitted on: `python benchmarks/compute_fidelity.py --examples benchmarks/models/heldout
--data benchmarks/data/h200_heldout.json` compares its predicted step with one measured on an H200
(benchmarks/data/record_examples.py). 16x16 patches of 224x224 images by a strided convolution, a class token and
learned position embeddings (added over the batch: a broadcast operand), 12 pre-norm blocks of 12 heads over 768
channels with scaled_dot_product_attention (not causal) and a GELU MLP of 3072, the class token's logits over
1000 classes; batch 64.
"""
import torch
from torch import nn
from torch.nn import functional as F

IMAGE, PATCH, DIM, HEADS, LAYERS, MLP, CLASSES, BATCH = 224, 16, 768, 12, 12, 3072, 1000, 64
TOKENS = (IMAGE // PATCH) ** 2 + 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, MLP), nn.Linear(MLP, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, DIM)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patches = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos = nn.Parameter(torch.randn(1, TOKENS, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, images):
        x = self.patches(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x[:, 0]))


def build_model():
    return ViT()


def example_inputs():
    return torch.randn(BATCH, 3, IMAGE, IMAGE)


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
