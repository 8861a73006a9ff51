"""A layout's memory per rank bounded from below before it runs, so `astra-compile plan` skips the layouts that
clearly cannot fit a GPU (a capture of a 70B-parameter model takes minutes; this takes microseconds per layout).

The bound counts only what the rank surely holds at the start of its backward, each term at its smallest:
- the parameters and their gradients of the repeated blocks the rank's stage holds (at least floor(blocks / pp),
  each counted as the smallest), the tensors TP_PLAN names divided by tp, all of them by fsdp; the rest of the
  model (embeddings, head) only without a pipeline (a stage may hold none of it), divided by fsdp; with the
  file's own parallelize(), whose axes mean what it makes of them, all of them divided by every axis but pp;
- the default optimizer's (AdamW) two states per parameter, in the parameter's dtype, sharded as the parameters;
  none for a file's own optimizer;
- each of the stage's blocks' input for one micro-batch (the smallest block's), which the backward needs whatever
  the checkpointing (divided by tp where the TP_PLAN holds a style object, which may shard the sequence);
- the CUDA context and NCCL's buffers of one communicator per mesh axis (compiler/report/memory_report.py).
What it leaves out (activations inside a block, all-gathered FSDP units, more micro-batches in flight on a
pipeline, the caching allocator's slack) only adds to the measured figure, which stays what a plan ranks by; the
margin is in docs/plan.md ("Limits").

Once the block probes have run (plan/probe.py), `in_flight_bound` adds what they measured: a block's activations
for one micro-batch (`probe.activations`), held for every micro-batch in flight when a rank's first backward
begins. A 70B model's pipeline of 16 stages holds 16 micro-batches of 5 blocks on its first stage, 150 GiB and
more without checkpointing: such layouts are skipped instead of run whole.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..report.memory_report import CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_GROUP


@dataclass(frozen=True)
class Sizes:
    """What the bound needs of a model, measured once on fake tensors."""
    params: int                  # every parameter of the model
    param_bytes: int
    seq: int                     # tokens per sample (the second dimension of an integer 2-D first input, else 1)
    blocks: int                  # the repeated blocks (frontend/layout.repeated_blocks)
    block_bytes: int             # parameter bytes of a block that TP_PLAN does not shard (the fewest of any block)
    block_tp_bytes: int          # ... and that it shards (the fewest)
    other_bytes: int             # parameter bytes outside the blocks
    other_tp_bytes: int
    input_bytes_per_sample: int  # one block's input for one sample
    adam_states: bool            # the default optimizer: two states per parameter
    tp_may_shard_inputs: bool    # a TP_PLAN style other than the colwise/rowwise names (sequence parallelism)
    own_parallelize: bool        # the file's parallelize() gives the axes their meaning (torchtitan's FSDP on "dp")


def sizes_of(spec) -> Sizes:
    """The model file's Sizes, its model built and its forward run on fake tensors. Each block figure is the fewest
    bytes of any block (blocks of one class may differ in size), so the bound stays a bound."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from ...network.errors import UserError
    from ..frontend.fake_params import fake_build
    from ..frontend.layout import repeated_blocks
    from ..frontend.model_file import one_line
    from ..frontend.parallelize import matching
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), fake_build():
            model = spec.build_model()
            inputs = spec.example_inputs()
            blocks = repeated_blocks(model) if isinstance(model, torch.nn.Module) else []
            block_input = _smallest_block_input(model, blocks, inputs)
    except Exception as e:  # the user's code: one line
        raise UserError(f"{spec.path}: build_model() or example_inputs() failed: {one_line(e)}") from None
    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    tp_ids = {id(p) for m in matching(model, list(spec.tp_plan or {})) for p in m.parameters()} \
        if params else set()
    in_block = {id(p) for b in blocks for p in b.parameters()}

    def nbytes(ps, sharded: bool) -> int:
        return sum(p.numel() * p.element_size() for p in ps if (id(p) in tp_ids) == sharded)
    per_block = [list(b.parameters()) for b in blocks]
    others = [p for p in params if id(p) not in in_block]
    first = inputs[0] if isinstance(inputs, tuple) and inputs else inputs
    seq, batch = 1, 1
    if isinstance(first, torch.Tensor) and first.dim() >= 1:
        batch = max(int(first.shape[0]), 1)
        if first.dim() == 2 and not first.is_floating_point():
            seq = int(first.shape[1])
    return Sizes(params=sum(p.numel() for p in params), param_bytes=sum(p.numel() * p.element_size() for p in params),
                 seq=seq, blocks=len(blocks),
                 block_bytes=min((nbytes(ps, False) for ps in per_block), default=0),
                 block_tp_bytes=min((nbytes(ps, True) for ps in per_block), default=0),
                 other_bytes=nbytes(others, False), other_tp_bytes=nbytes(others, True),
                 input_bytes_per_sample=block_input // batch, adam_states=spec.optimizer is None,
                 tp_may_shard_inputs=any(not isinstance(s, str) for s in (spec.tp_plan or {}).values()),
                 own_parallelize=spec.parallelize is not None)


def _smallest_block_input(model, blocks: list, inputs) -> int:
    """Bytes of the first tensor each repeated block is called with (its hidden state: buffers passed along are
    shared), the smallest of them; 0 without blocks, or when the forward fails (one that needs the mesh or the
    pipeline) or does not call every block."""
    import torch
    if not blocks:
        return 0
    seen: dict = {}

    def hook(module, args, kwargs):
        first = next((t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)), None)
        seen.setdefault(id(module), first.numel() * first.element_size() if first is not None else 0)
    handles = [b.register_forward_pre_hook(hook, with_kwargs=True) for b in blocks]
    try:
        with torch.no_grad():
            model(*(inputs if isinstance(inputs, tuple) else (inputs,)))
    except Exception:   # the user's forward outside its training setup: no activation term
        return 0
    finally:
        for h in handles:
            h.remove()
    return min(seen.values()) if len(seen) == len(blocks) else 0


def lower_bound(s: Sizes, layout) -> int:
    """Bytes the rank surely needs under `layout` (a plan/space.Layout); see the module's list."""
    axes = layout.axes
    tp, pp, fsdp = axes.get("tp", 1), axes.get("pp", 1), axes.get("fsdp", 1)
    stage_blocks = s.blocks // pp
    if s.own_parallelize:   # any axis may shard anything: the parameters as if sharded over every rank of a stage
        weights = stage_blocks * (s.block_bytes + s.block_tp_bytes)
        if pp == 1:
            weights += s.other_bytes + s.other_tp_bytes
        weights //= math.prod(n for a, n in axes.items() if a != "pp")
    else:
        weights = _weights(s, tp, stage_blocks, pp == 1) // fsdp
    states = (2 + (2 if s.adam_states else 0)) * weights   # parameters, gradients, AdamW's two states
    inputs = stage_blocks * s.input_bytes_per_sample * layout.micro_batch
    if s.tp_may_shard_inputs or s.own_parallelize:
        inputs //= tp
    return states + inputs + _context_and_nccl(axes)


def _weights(s: Sizes, tp: int, blocks: int, rest: bool) -> int:
    """Parameter bytes of `blocks` repeated blocks (the smallest block's each) and, with `rest`, of the model
    outside them, the tensors TP_PLAN names divided by tp (a file plan lays out itself)."""
    return blocks * (s.block_bytes + s.block_tp_bytes // tp) + (s.other_bytes + s.other_tp_bytes // tp if rest else 0)


def _context_and_nccl(axes: dict) -> int:
    """The CUDA context and NCCL's buffers of one communicator per mesh axis of more than one rank."""
    return CUDA_CONTEXT_BYTES + sum(1 for n in axes.values() if n > 1) * NCCL_BYTES_PER_GROUP


def in_flight_bound(s: Sizes, layout, per_stage: list, activation: int) -> int:
    """Bytes some rank surely holds as its first backward begins (a file without a parallelize() of its own, whose
    layouts compute in the dtype its probes did): its stages' parameters and AdamW's states (the gradients need not
    exist yet), and `activation` bytes (a block's activations for one micro-batch at the layout's tensor-parallel
    size, micro-batch size and checkpointing: probe.activations) for each of its blocks and each micro-batch in
    flight: with one stage a rank, 1F1B's first stage has run min(pp, micro-batches) forwards before its first
    backward (stage r: pp - r), GPipe's every one; any other schedule at least the first micro-batch through every
    stage, as no backward starts before the last stage's first forward. `per_stage`: the blocks of each stage
    (plan/depth.blocks_per_stage: the file's own split)."""
    axes = layout.axes
    tp, pp, fsdp = axes.get("tp", 1), axes.get("pp", 1), axes.get("fsdp", 1)
    states = 1 + (2 if s.adam_states else 0)
    if pp == 1:
        ranks = [(sum(per_stage), sum(per_stage))]   # (blocks held, blocks x micro-batches in flight)
    else:
        from .step_bound import stages_held
        schedule, m = (layout.schedule or "1F1B").lower(), layout.microbatches
        held = stages_held(layout, len(per_stage))

        def flight(r: int) -> int:
            return min(pp - r, m) if schedule == "1f1b" else m if schedule == "gpipe" else 1
        ranks = [(sum(per_stage[k] for k in ks), sum(per_stage[k] * flight(r) for k in ks))
                 for r, ks in enumerate(held)]
    # (with a pipeline the embedding and head sit on some stage: counted on none)
    most = max(states * _weights(s, tp, n, pp == 1) // fsdp + in_flight * activation for n, in_flight in ranks)
    return most + _context_and_nccl(axes)
