"""Llama 3 405B trained as Meta's paper describes it (Llama Team 2024, "The Llama 3 Herd of Models", section
3.3.2, Table 4): 126 layers, hidden 16384, 128 heads with 8 key/value heads, FFN 53248, vocabulary 128256,
sequence 8192, on TP 8 x PP 16 x DP 128 = 16,384 H100 80 GB (2,048 nodes of 8), 16 sequences per data-parallel
group per step (16 micro-batches of one: a global batch of 2048 sequences, 16M tokens), the interleaved schedule,
BF16 with FP32 gradient reduction, FSDP over dp that does not reshard the weights after the forward.

Not a calibration run: nothing was fitted on it (docs/published-runs.md, "Beyond the calibration set"). The layers
(RMSNorm, torchtitan's rotary embedding, grouped-query attention, SwiGLU) are the calibration file
benchmarks/published/torchtitan_llama3_8b.py's, loaded with this model's sizes (megatron_pipeline.py); here:
- Tensor parallelism with torch's DTensor as Megatron-LM and torchtitan apply it, with sequence parallelism
  (column-parallel q, k, v, w1, w3; row-parallel wo, w2 reduce-scattering onto the sequence; the norms and the
  residual stream on each rank's 1/8 of the sequence, gathered before attention and the feed-forward; the
  embedding row-parallel onto the sequence, the output layer column-parallel, its logits left sharded; stages hand
  on their slice of the sequence), then FSDP2 over dp on each block with
  MixedPrecisionPolicy(bf16 parameters, fp32 gradient reduce-scatter) and reshard_after_forward=False (the paper:
  the weights are not resharded after the forward, so the backward needs no second all-gather).
- Interleaved 1F1B with two stages per rank (the paper does not give its count here): 32 stages of 4 layers,
  the first and the last one layer fewer (3), as the paper balances the embedding and the output layer.
- No activation checkpointing (the paper names none for this run).

    astra-compile benchmarks/models/llama3_405b.py --cluster dgx-h100:2048 --json
"""

import torch

import megatron_pipeline as blocks   # beside this file (docs/workloads.md: a model file's own modules)

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ = 128256, 16384, 128, 8, 53248, 126, 8192
PP, TP, VIRTUAL, MICROBATCHES = 16, 8, 2, 16
PIPELINE = {"schedule": "Interleaved1F1B", "microbatches": MICROBATCHES, "virtual_stages": VIRTUAL}


tt = blocks.published("torchtitan_llama3_8b.py", "_torchtitan_llama3_405b", VOCAB=VOCAB, DIM=DIM, HEADS=HEADS,
                      KV_HEADS=KV_HEADS, FFN=FFN, LAYERS=LAYERS, SEQ=SEQ)


class Stage(torch.nn.Module):
    """Layers [first, last); the embedding on the first stage, the final norm and the output layer on the last."""

    def __init__(self, first, last):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(VOCAB, DIM) if first == 0 else None
        self.layers = torch.nn.ModuleList(tt.Block() for _ in range(first, last))
        self.norm, self.output = ((tt.RMSNorm(DIM), torch.nn.Linear(DIM, VOCAB, bias=False)) if last == LAYERS
                                  else (None, None))
        hd = DIM // HEADS   # torchtitan's rotations, as the calibration file's Llama makes them
        angles = torch.outer(torch.arange(SEQ).float(),
                             1.0 / (tt.ROPE_THETA ** (torch.arange(0, hd, 2).float() / hd)))
        self.register_buffer("rotations", torch.polar(torch.ones_like(angles), angles)[None, :, None, :],
                             persistent=False)

    def forward(self, x):
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers:
            x = layer(x, self.rotations)
        return self.output(self.norm(x)) if self.output is not None else x


class Model(torch.nn.Module):
    """The whole model is never built: each stage builds its own layers."""


def mesh_axes(world_size):
    return {"pp": PP, "dp": world_size // (PP * TP), "tp": TP}


def build_model():
    return Model()


def pipeline_stage(model, stage, num_stages):
    per = (LAYERS + 2) // num_stages   # 4; the first and the last stage one fewer
    return Stage(max(stage * per - 1, 0), min((stage + 1) * per - 1, LAYERS))


def example_inputs():
    return (torch.randint(0, VOCAB, (MICROBATCHES, SEQ)),)


def parallelize(stage, mesh):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    tp = mesh["tp"]
    for block in stage.layers:   # torchtitan's plan: the norms on the sequence's slices, gathered for the matmuls
        parallelize_module(block, tp, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1))})
    ends = {}
    if stage.tok_embeddings is not None:   # every rank has the tokens; each keeps its slice of the sequence
        ends["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if stage.output is not None:
        ends["norm"] = SequenceParallel()
        ends["output"] = ColwiseParallel(input_layouts=Shard(1))   # this rank's slice of the vocabulary's logits
    if ends:
        parallelize_module(stage, tp, ends)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in stage.layers:
        fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
    fully_shard(stage, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
    return stage


def loss(logits):
    return logits.float().logsumexp(dim=-1).mean()


def optimizer(parameters):
    # AdamW without torchtitan's norm clipping: torch's clip_grad_norm_ refuses to stack the norms of DTensors on
    # two meshes (the tensor-parallel weights' dp x tp, the norms' dp), which a real run would hit too
    return torch.optim.AdamW(parameters, lr=8e-5, weight_decay=0.1, foreach=True)
