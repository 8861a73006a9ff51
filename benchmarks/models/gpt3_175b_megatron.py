"""GPT-3 175B trained as Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM") describe it: 96 layers, hidden 12288, 96 heads, sequence 2048, vocabulary 51200, on
TP 8 x PP 16 x DP 8 = 1024 A100 80 GB (128 DGX-A100 nodes), global batch 1536 of micro-batch 1 (192 micro-batches
per pipeline), the interleaved 1F1B schedule, fp16 with fp32 master weights and full activation checkpointing.

Not a calibration run: nothing was fitted on it (docs/published-runs.md, "Beyond the calibration set"). The layers,
Megatron's tensor parallelism (f and g operators, vocab-parallel embedding and cross-entropy), the fp16 optimizer
and the loss scaling are benchmarks/published/megatron_gpt.py's, loaded with this model's sizes
(megatron_pipeline.py); what the pipeline adds is here:
- Interleaved 1F1B (torch's ScheduleInterleaved1F1B) with two model chunks per rank (3 layers each; Megatron's
  --num-layers-per-virtual-pipeline-stage 3): stage k of 32 holds layers 3k to 3k + 2, rank r the stages r and
  r + 16. The paper does not give the chunk count of this run; 2 is the smallest that interleaves.
- The first stage holds the word and position embeddings, the last the final layer norm, its own copy of the word
  embedding as the output layer (Megatron ties them by all-reducing the two copies' gradients between the first
  and last stage: not written here, see Limits) and the vocab-parallel cross-entropy.
- Megatron's scatter/gather of the activations and gradients between stages (megatron_pipeline.py): each tp rank
  sends its 1/8 across nodes, the next stage all-gathers them over NVLink.
- torch DDP over dp per stage; the pipeline runs every micro-batch but the last under no_sync, so the fp16
  gradients are all-reduced once, after the last backward (Megatron 2021's --DDP-impl local does the same).

    astra-compile benchmarks/models/gpt3_175b_megatron.py --cluster dgx-a100:128 --json
"""

import torch

import megatron_pipeline as blocks   # beside this file (docs/workloads.md: a model file's own modules)

LAYERS, HIDDEN, HEADS, VOCAB, SEQ = 96, 12288, 96, 51200, 2048
PP, TP, VIRTUAL, MICROBATCHES = 16, 8, 2, 192
PIPELINE = {"schedule": "Interleaved1F1B", "microbatches": MICROBATCHES, "virtual_stages": VIRTUAL}
_TP_GROUP = []


mg = blocks.megatron_gpt("_megatron_gpt3_175b", LAYERS=LAYERS, HIDDEN=HIDDEN, HEADS=HEADS, TP=TP, VOCAB=VOCAB,
                         SEQ=SEQ)


class Stage(torch.nn.Module):
    """Layers [first, last) of the model, built at their tensor-parallel sizes; the embeddings on the first stage,
    the final norm, the output layer and the loss on the last."""
    words, embed, cross_entropy = mg.GPT.words, mg.GPT.embed, mg.GPT.cross_entropy

    def __init__(self, first, last):
        super().__init__()
        self.tp_group, self.tp, self.tp_rank = None, TP, 0
        self.first, self.last = first == 0, last == LAYERS
        if self.first or self.last:   # the output layer is its own copy of the word embedding on the last stage
            self.word = torch.nn.Embedding(VOCAB // TP, HIDDEN, dtype=mg.DTYPE)
        if self.first:
            self.position = torch.nn.Embedding(SEQ, HIDDEN, dtype=mg.DTYPE)
        self.blocks = torch.nn.ModuleList(mg.Block(TP) for _ in range(first, last))
        if self.last:
            self.ln = torch.nn.LayerNorm(HIDDEN, dtype=mg.DTYPE)

    def forward(self, x):
        if self.first:
            x = self.embed(x)
        else:   # the previous stage sent each tp rank its slice
            x = blocks.gather_from_tp(x, self.tp_group, TP, self.tp_rank, (x.numel() * TP // (SEQ * HIDDEN), SEQ,
                                                                           HIDDEN))
        for block in self.blocks:   # full activation checkpointing: one checkpoint per layer
            x = mg.checkpoint(block, x, use_reentrant=False)
        if not self.last:
            return blocks.scatter_to_tp(x, self.tp_group, TP, self.tp_rank)
        logits = mg.F.linear(mg.copy_to_tp(self.ln(x), self.tp_group), self.word.weight)
        return self.cross_entropy(logits, torch.zeros(x.shape[:2], dtype=torch.long, device=x.device))


class Model(torch.nn.Module):
    """The whole model is never built: each stage builds its own layers (175B parameters are 350 GB in fp16)."""


def mesh_axes(world_size):
    return {"pp": PP, "dp": world_size // (PP * TP), "tp": TP}


def build_model():
    return Model()


def pipeline_stage(model, stage, num_stages):
    per = LAYERS // num_stages
    return Stage(stage * per, (stage + 1) * per)


def example_inputs():
    return (torch.randint(0, VOCAB, (MICROBATCHES, SEQ)),)


def parallelize(stage, mesh):
    group = mesh["tp"].get_group()
    stage.tp_group, stage.tp_rank = group, mesh["tp"].get_local_rank()
    for block in stage.blocks:
        block.tp_group = group
    _TP_GROUP[:] = [group]
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(stage, process_group=mesh["dp"].get_group())


def loss(per_token_loss):
    return per_token_loss.mean() * mg.LOSS_SCALE


def optimizer(parameters):
    return mg.FP16Optimizer(parameters, tp_group=_TP_GROUP[0] if _TP_GROUP else None)
