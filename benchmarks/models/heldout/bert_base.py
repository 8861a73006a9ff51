"""BERT-base (Devlin et al. 2019) as plain PyTorch writes it: a held-out model for the compute model.

Not a bundled example and not fitted on (benchmarks/models/heldout/vit_b16.py says how it is checked). Word,
position and token-type embeddings summed and normalised, 12 post-norm encoder layers of 12 heads over 768
channels with the attention written out: a padding mask [B, 1, 1, S] filled into the scores out of place (a
broadcast operand, and on a GPU a copy and a fill), softmax, GELU MLP of 3072; the masked-LM head (a dense layer,
GELU, layer norm, the decoder over the 30522-token vocabulary) on every position; batch 16 of 512 tokens.
"""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, HEADS, LAYERS, MLP, SEQ, BATCH = 30522, 768, 12, 12, 3072, 512, 16


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, MLP), nn.Linear(MLP, DIM)

    def forward(self, x, pad):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (DIM // HEADS) ** 0.5
        probs = scores.masked_fill(pad, float("-inf")).softmax(dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(b, t, DIM)
        x = self.ln1(x + self.out(y))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.words, self.positions, self.types = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM), nn.Embedding(2, DIM)
        self.ln = nn.LayerNorm(DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.dense, self.ln_head = nn.Linear(DIM, DIM), nn.LayerNorm(DIM)
        self.decoder = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.words(tokens) + self.positions(positions) + self.types(torch.zeros_like(tokens))
        x = self.ln(x)
        pad = (tokens == 0).view(tokens.shape[0], 1, 1, t)   # padding positions: none here, masked all the same
        for layer in self.layers:
            x = layer(x, pad)
        return self.decoder(self.ln_head(F.gelu(self.dense(x))))


def build_model():
    return Bert()


def example_inputs():
    return torch.randint(1, VOCAB, (BATCH, SEQ))


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()
