"""An MLP trained with data parallelism: DistributedDataParallel over every NPU (the default mesh, dp=N).

    astra-compile examples/mlp_dp.py --topology 8x8_torus
"""
import torch
from torch import nn

WIDTH, DEPTH, BATCH = 4096, 8, 64     # 8 layers of 4096x4096: 134M parameters, 512 MB of fp32 gradients


def build_model():
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return nn.Sequential(*layers)


def example_inputs():
    return torch.randn(BATCH, WIDTH)   # one rank's micro-batch
