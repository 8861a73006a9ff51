"""A mixture-of-experts layer stack with expert parallelism: tokens travel to their expert's rank and back with
all_to_all, as GShard/Switch Transformer do with a fixed capacity per expert.

Mesh dp x ep with ep = 8 (topology dimension 0 on 8x8_torus). Each rank holds one expert per layer. Expert
weights differ across the ep axis, so their gradients are all-reduced over dp only; the shared weights
(router, attention-free mixing layer) are all-reduced over every rank: two DDP instances, one per group.

    astra-compile examples/moe_ep.py --topology 8x8_torus
"""
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import _functional_collectives as funcol
from torch.nn.parallel import DistributedDataParallel

D_MODEL, D_FF, LAYERS, TOKENS, EP = 1024, 4096, 4, 4096, 8


class MoELayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D_MODEL, EP, bias=False)
        self.expert = nn.Sequential(nn.Linear(D_MODEL, D_FF), nn.GELU(), nn.Linear(D_FF, D_MODEL))
        self.ep_group = None   # set by parallelize(): the ranks holding this layer's experts

    def forward(self, x):
        tokens, d = x.shape
        gate = self.router(x).softmax(dim=-1)              # (tokens, experts)
        capacity = tokens // EP                              # tokens each expert takes from this rank
        weight, index = gate.topk(capacity, dim=0)           # expert-choice routing: fixed capacity per expert
        picked = x[index.t().reshape(-1)]                    # (EP * capacity, d), grouped by expert
        routed = funcol.all_to_all_single_autograd(picked, None, None, self.ep_group)   # to the experts' ranks
        out = self.expert(routed)
        back = funcol.all_to_all_single_autograd(out, None, None, self.ep_group)        # and back
        back = back.view(EP, capacity, d) * weight.t().unsqueeze(-1)
        return x + torch.zeros_like(x).index_add(0, index.t().reshape(-1), back.reshape(-1, d))


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(D_MODEL, D_MODEL)
        self.layers = nn.ModuleList(MoELayer() for _ in range(LAYERS))

    def forward(self, x):
        x = self.mix(x)
        for layer in self.layers:
            x = layer(x)
        return x


def mesh_axes(world_size):
    return {"dp": world_size // EP, "ep": EP}


def parallelize(model, mesh):
    ep_group, dp_group = mesh["ep"].get_group(), mesh["dp"].get_group()
    for layer in model.layers:
        layer.ep_group = ep_group
        layer.expert = DistributedDataParallel(layer.expert, process_group=dp_group)
    model.mix = DistributedDataParallel(model.mix, process_group=dist.group.WORLD)
    for layer in model.layers:  # routers are shared by all ranks, like mix
        layer.router = DistributedDataParallel(layer.router, process_group=dist.group.WORLD)
    return model


def build_model():
    return MoE()


def example_inputs():
    return torch.randn(TOKENS, D_MODEL)
