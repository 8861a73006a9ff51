"""A ResNet-style CNN (basic residual blocks with BatchNorm) trained with DistributedDataParallel.

The built-in dp axis applies DDP with its defaults: before every forward rank 0 broadcasts the batch-norm
statistics (running means and variances in one broadcast, the int64 batch counters in another).

    astra-compile examples/resnet_dp.py --topology 8x8_torus
"""
import torch
from torch import nn

BATCH, IMAGE, CLASSES = 32, 224, 1000


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


def build_model():
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):   # ResNet-18's stages, two blocks each
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, CLASSES)]
    return nn.Sequential(*layers)


def example_inputs():
    return torch.randn(BATCH, 3, IMAGE, IMAGE)


def loss(logits):
    return logits.logsumexp(dim=-1).mean()
