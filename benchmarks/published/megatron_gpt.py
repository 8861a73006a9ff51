"""Megatron-LM's GPT of September 2020 (NVIDIA/Megatron-LM README, weak scaling 1B to 8B), written in plain PyTorch
the way that code trained it: the calibration runs A1a-d and B1a-d (../shared/published-runs/README.md).

Model: V = 51,200, s = 1024, F = 4h, GELU, learned positions, pre-LayerNorm blocks, attention and hidden dropout
0.1, the word embedding tied to the output layer. Sizes (MEGATRON_SIZE, default 8b):

    1b: L24 h1920 a15 (TP 1)   2b: L30 h2304 a18 (TP 2)   4b: L36 h3072 a24 (TP 4)   8b: L42 h4096 a32 (TP 8)

Training as Megatron 2020 ran it:
- fp16 mixed precision: parameters, activations and gradients in fp16; the optimizer keeps fp32 master weights,
  unscales the fp16 gradients into them (dynamic loss scaling: the loss is multiplied by the scale before
  backward, the gradients checked for inf/nan), clips the gradient norm at 1.0 (the norm all-reduced over the
  tensor-parallel group) and copies the updated masters back into the fp16 parameters (FP16_Optimizer around
  Adam with weight decay: apex's FusedAdam, here PyTorch's fused AdamW). The logits go to the cross-entropy in
  fp32 (the default, no --fp16-lm-cross-entropy).
- Full activation checkpointing: every transformer layer runs under torch.utils.checkpoint, so its forward,
  tensor-parallel all-reduces included, runs again in the backward.
- Tensor parallelism as Megatron writes it: column-parallel QKV and first MLP layer, row-parallel attention
  output and second MLP layer, each row-parallel output all-reduced in the forward and each column-parallel input's
  gradient all-reduced in the backward (the f and g operators), a vocab-parallel embedding (all-reduced) and the
  vocab-parallel cross-entropy (its max, sum of exponentials and target logit all-reduced; its fp32 copy of the
  logits shifted, exponentiated and normalised in place and kept as the softmax, as Megatron's).
- Data parallelism: torch DistributedDataParallel over the dp group (Megatron's --DDP-impl torch), gradients
  all-reduced in fp16 in 25 MB buckets during the backward.
- Attention as Megatron 2020 computes it: the scaling inside the Q K^T GEMM, then the causal mask and softmax in
  Megatron's one fused kernel each way (`scaled_upper_triang_masked_softmax`: it reads the scores and writes the
  probabilities, masking above the diagonal as it goes; here a custom op of that name, whose host implementation
  is the plain mask and softmax), dropout, then times V (batched matmuls; no flash attention in 2020). Plain
  PyTorch would run a copy, a masked fill at a third of the bandwidth and a softmax forward, and a multiply, a
  masked fill and a softmax backward (compiler/frontend/gpu_composites.py): A1a 20 % longer.

Mesh: `tp` and `dp` (by default the size's published TP; any tp that divides the heads, as Megatron allows, so
`astra-compile plan` can weigh others). A1a-c ran on 1, 2 or 4 of a DGX-A100's 8 GPUs, part of a node
(docs/clusters.md):

    MEGATRON_SIZE=2b astra-compile benchmarks/published/megatron_gpt.py --cluster dgx-a100:1x2 --mesh tp=2
    MEGATRON_SIZE=8b astra-compile benchmarks/published/megatron_gpt.py --cluster dgx-a100:128 --mesh dp=128,tp=8
"""
import math
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

SIZES = {  # layers, hidden, heads, tensor-parallel size (the published runs')
    "1b": (24, 1920, 15, 1), "2b": (30, 2304, 18, 2), "4b": (36, 3072, 24, 4), "8b": (42, 4096, 32, 8)}
SIZE = os.environ.get("MEGATRON_SIZE", "8b").lower()
if SIZE not in SIZES:
    raise ValueError(f"MEGATRON_SIZE={SIZE!r}: expected one of {', '.join(SIZES)}")
LAYERS, HIDDEN, HEADS, TP = SIZES[SIZE]
VOCAB, SEQ, MICRO_BATCH = 51200, 1024, 16     # global batch 16 per model replica: A1's 16, B1's 2048 over dp 128
DROPOUT, LOSS_SCALE, CLIP = 0.1, 2.0 ** 16, 1.0
DTYPE = torch.float16
_TP_GROUP = []   # the tensor-parallel group parallelize() made, for the optimizer's gradient-norm all-reduce


class _CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient over tp in the backward."""
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce over tp in the forward, identity in the backward."""
    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x, group):
    return x if group is None else _CopyToTP.apply(x, group)


def reduce_from_tp(x, group):
    return x if group is None else _ReduceFromTP.apply(x, group)


def _fused_softmax_op():
    """Megatron's fused causal softmax (megatron/fused_kernels, scaled_upper_triang_masked_softmax) as a custom op:
    one kernel each way, so the capture records one op that reads the scores and writes the probabilities, and one
    that reads the gradient and the probabilities and writes the scores' gradient. Defined once per process."""
    try:
        return torch.ops.megatron.scaled_upper_triang_masked_softmax.default
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("megatron::scaled_upper_triang_masked_softmax", mutates_args=())
    def forward(scores: torch.Tensor) -> torch.Tensor:
        t = scores.shape[-1]
        above = torch.ones(t, t, dtype=torch.bool, device=scores.device).triu(1)
        return scores.masked_fill(above, float("-inf")).softmax(dim=-1)

    @torch.library.custom_op("megatron::scaled_upper_triang_masked_softmax_backward", mutates_args=())
    def backward(grad: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        return probs * (grad - (grad * probs).sum(dim=-1, keepdim=True))

    forward.register_fake(lambda scores: torch.empty_like(scores))
    backward.register_fake(lambda grad, probs: torch.empty_like(probs))
    forward.register_autograd(lambda ctx, grad: backward(grad, ctx.saved_tensors[0]),
                              setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))
    return torch.ops.megatron.scaled_upper_triang_masked_softmax.default


FUSED_SOFTMAX = _fused_softmax_op()


def vocab_slice(ids, first, part):
    """Megatron's split of the vocabulary over tp (its VocabUtility): (each id as a row of this rank's slice, ids
    first to first + part, the others as row 0; the mask of those others), for the embedding and the loss."""
    outside = (ids < first) | (ids >= first + part)
    return (ids - first).masked_fill(outside, 0), outside


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's _VocabParallelCrossEntropy (megatron/mpu/cross_entropy.py): the fp32 copy of the logits is shifted,
    exponentiated and normalised in place and kept as the softmax for the backward, which turns it into the
    gradient in place. Written out of place, the shifted logits, their exponentials and the softmax's gradient
    would each be another [b, s, V/tp] fp32 tensor (3.4 GB a micro-batch at 1B), live together at the loss."""

    @staticmethod
    def forward(ctx, logits, labels, group, first):
        ctx.dtype = logits.dtype
        logits = logits.float()   # the default (no --fp16-lm-cross-entropy): this copy is the one worked on
        top = logits.max(dim=-1).values
        if group is not None:
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        logits.sub_(top.unsqueeze(-1))
        index, outside = vocab_slice(labels, first, logits.shape[-1])
        index = index.unsqueeze(-1)
        target = logits.gather(-1, index).squeeze(-1).masked_fill(outside, 0.0)
        torch.exp(logits, out=logits)
        total = logits.sum(dim=-1)
        if group is not None:
            dist.all_reduce(target, group=group)
            dist.all_reduce(total, group=group)
        logits.div_(total.unsqueeze(-1))
        ctx.save_for_backward(logits, index, outside)
        return total.log() - target

    @staticmethod
    def backward(ctx, grad):
        softmax, index, outside = ctx.saved_tensors
        # d loss / d logit = softmax - 1 at the target (on the rank that holds it), times the loss's gradient
        softmax.scatter_add_(-1, index, (outside.to(softmax.dtype) - 1.0).unsqueeze(-1))
        softmax.mul_(grad.unsqueeze(-1))
        return softmax.to(ctx.dtype), None, None, None


def linear(features_in, features_out, bias=True):
    return nn.Linear(features_in, features_out, bias=bias, dtype=DTYPE)


class Block(nn.Module):
    def __init__(self, tp=1):
        super().__init__()
        self.tp_group = None
        self.heads = HEADS // tp
        self.head_dim = HIDDEN // HEADS
        self.ln1, self.ln2 = nn.LayerNorm(HIDDEN, dtype=DTYPE), nn.LayerNorm(HIDDEN, dtype=DTYPE)
        self.qkv = linear(HIDDEN, 3 * HIDDEN // tp)            # column-parallel
        self.proj = linear(HIDDEN // tp, HIDDEN, bias=False)   # row-parallel; its bias added after the all-reduce
        self.proj_bias = nn.Parameter(torch.zeros(HIDDEN, dtype=DTYPE))
        self.fc1 = linear(HIDDEN, 4 * HIDDEN // tp)            # column-parallel
        self.fc2 = linear(4 * HIDDEN // tp, HIDDEN, bias=False)
        self.fc2_bias = nn.Parameter(torch.zeros(HIDDEN, dtype=DTYPE))

    def attention(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(copy_to_tp(x, self.tp_group))
        q, k, v = qkv.view(b, t, self.heads, 3 * self.head_dim).split(self.head_dim, dim=-1)
        q, k, v = (z.permute(0, 2, 1, 3).reshape(b * self.heads, t, self.head_dim) for z in (q, k, v))
        # Megatron scales inside the GEMM (baddbmm's alpha); scaling q is the same one pass over q, not a second
        # pass over the s x s scores
        scores = torch.bmm(q * (1.0 / math.sqrt(self.head_dim)), k.transpose(1, 2))
        probs = F.dropout(FUSED_SOFTMAX(scores), DROPOUT, self.training)
        y = torch.bmm(probs, v).view(b, self.heads, t, self.head_dim).permute(0, 2, 1, 3).reshape(b, t, -1)
        return reduce_from_tp(self.proj(y), self.tp_group) + self.proj_bias

    def mlp(self, x):
        h = F.gelu(self.fc1(copy_to_tp(x, self.tp_group)))
        return reduce_from_tp(self.fc2(h), self.tp_group) + self.fc2_bias

    def forward(self, x):
        x = x + F.dropout(self.attention(self.ln1(x)), DROPOUT, self.training)
        return x + F.dropout(self.mlp(self.ln2(x)), DROPOUT, self.training)


class GPT(nn.Module):
    def __init__(self, tp=1):
        super().__init__()
        self.tp_group, self.tp, self.tp_rank = None, tp, 0
        self.word = nn.Embedding(VOCAB // tp, HIDDEN, dtype=DTYPE)   # vocab-parallel, tied to the output layer
        self.position = nn.Embedding(SEQ, HIDDEN, dtype=DTYPE)
        self.blocks = nn.ModuleList(Block(tp) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(HIDDEN, dtype=DTYPE)

    def words(self, tokens):
        """The vocab-parallel word embedding (benchmarks/models/ reuses it for other models)."""
        if self.tp_group is None:
            return self.word(tokens)
        # this rank's vocabulary slice: other tokens look up row 0 and are zeroed, then all-reduced
        rows, outside = vocab_slice(tokens, self.tp_rank * (VOCAB // self.tp), VOCAB // self.tp)
        words = self.word(rows).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(words, self.tp_group)

    def embed(self, tokens):
        words = self.words(tokens)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return F.dropout(words + self.position(positions), DROPOUT, self.training)

    def cross_entropy(self, logits, labels):
        """Megatron's vocab-parallel cross-entropy on this rank's slice of the vocabulary, in fp32."""
        return _VocabParallelCrossEntropy.apply(logits, labels, self.tp_group, self.tp_rank * (VOCAB // self.tp))

    def forward(self, tokens, labels):
        x = self.embed(tokens)
        for block in self.blocks:   # full activation checkpointing: one checkpoint per layer
            x = checkpoint(block, x, use_reentrant=False)
        logits = F.linear(copy_to_tp(self.ln(x), self.tp_group), self.word.weight)
        return self.cross_entropy(logits, labels)


class FP16Optimizer(torch.optim.Optimizer):
    """Megatron's FP16_Optimizer around Adam: fp32 master weights, dynamic loss scaling, gradient clipping."""

    def __init__(self, params, tp_group=None, lr=1.5e-4, weight_decay=0.01):
        params = list(params)
        super().__init__(params, {})
        self.tp_group = tp_group
        self.masters = [p.detach().float() for p in params]
        # apex's FusedAdam (Megatron 2020's) is one multi-tensor kernel per step: PyTorch's fused AdamW
        self.adam = torch.optim.AdamW(self.masters, lr=lr, weight_decay=weight_decay, fused=True)

    @torch.no_grad()
    def step(self):
        params = [p for p in self.param_groups[0]["params"] if p.grad is not None]
        masters = [m for p, m in zip(self.param_groups[0]["params"], self.masters) if p.grad is not None]
        for p, m in zip(params, masters):    # fp16 gradients into the fp32 masters
            m.grad = p.grad.float()
        grads = [m.grad for m in masters]
        found_inf = torch.zeros(1, device=grads[0].device)
        inv_scale = torch.full((1,), 1.0 / LOSS_SCALE, device=grads[0].device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))) ** 2
        if self.tp_group is not None:
            dist.all_reduce(norm, group=self.tp_group)
        torch._foreach_mul_(grads, (CLIP / (norm.sqrt() + 1e-6)).clamp(max=1.0))
        self.adam.step()
        torch._foreach_copy_(params, masters)


def mesh_axes(world_size):
    return {"dp": world_size // TP, "tp": TP}


def plan_space():
    """What `astra-compile plan` may vary: Megatron's data and tensor parallelism, tp over whole heads, micro-batches.
    Every layer is checkpointed already (the file's own full checkpointing), so plan adds none on top."""
    return {"axes": ["dp", "tp"], "tp": [tp for tp in (1, 2, 4, 8) if HEADS % tp == 0], "checkpointing": ["none"]}


def build_model():
    return GPT()


def example_inputs():
    tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ))
    return tokens, torch.randint(0, VOCAB, (MICRO_BATCH, SEQ))


def parallelize(model, mesh):
    names = mesh.mesh_dim_names
    tp = mesh["tp"].size() if "tp" in names else 1
    if HEADS % tp:   # Megatron splits whole heads (and so the hidden size, 3h and 4h) over tp
        raise ValueError(f"the {SIZE} model's {HEADS} attention heads do not split over the mesh's tp={tp}")
    _TP_GROUP[:] = []   # a process that captures several layouts (plan's workers) keeps this module
    if tp > 1:   # this rank's shards: the layers built at their tensor-parallel sizes
        group = mesh["tp"].get_group()
        model = GPT(tp)
        model.tp_group, model.tp, model.tp_rank = group, tp, mesh["tp"].get_local_rank()
        for block in model.blocks:
            block.tp_group = group
        _TP_GROUP[:] = [group]
    if "dp" in names and mesh["dp"].size() > 1:
        from torch.nn.parallel import DistributedDataParallel
        ddp = DistributedDataParallel(model, process_group=mesh["dp"].get_group())
        return ddp
    return model


def loss(per_token_loss):
    return per_token_loss.mean() * LOSS_SCALE


def optimizer(parameters):
    return FP16Optimizer(parameters, tp_group=_TP_GROUP[0] if _TP_GROUP else None)
