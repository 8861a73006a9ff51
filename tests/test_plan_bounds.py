"""plan's lower bounds on a layout's step (compiler/plan/step_bound.py, probe.py) and the order it runs layouts in
(plan/order.py): every bound it reports is at most the step the layout ran in, and a plan that skips layouts by
them prints the fastest a plan that ran every layout prints."""
import json
import re
import textwrap
from types import SimpleNamespace

import pytest

from astra_compile.compiler.frontend.layout import layout
from astra_compile.compiler.frontend.model_file import load_model_file
from astra_compile.compiler.plan import head_probe, order, probe, step_bound
from astra_compile.compiler.plan.space import Layout
from astra_compile.network.errors import UserError

from helpers import DEEP, cli

# DEEP's blocks (Linear, GELU, Linear) split Megatron's way over tp; a pipeline on 2 nodes keeps tp=2 and the data
# axis inside a node
TENSOR_PARALLEL = """
    TP_PLAN = {"layers.*.0": "colwise", "layers.*.2": "rowwise"}


    def plan_space():
        return {"axes": ["dp", "fsdp", "tp", "pp"], "tp": [1, 2], "pp": [1, 2], "micro_batch": [2],
                "checkpointing": ["full"]}
"""


def test_every_bound_is_at_most_the_step_and_skipping_keeps_the_fastest(tmp_path, capsys):
    path = tmp_path / "tp.py"
    path.write_text(textwrap.dedent(DEEP.format(layers=12)) + textwrap.dedent(TENSOR_PARALLEL))
    args = ("plan", str(path), "--cluster", "dgx-h100:2", "--global-batch", "32", "--workers", "1", "--json")
    code, out, err = cli(capsys, *args, "--top", "100", "-o", str(tmp_path / "all.csv"))   # none skipped
    assert code == 0 and "not run" not in err, err
    every = {lay["layout"]: lay for lay in json.loads(out)["layouts"]}
    # DDP and FSDP2, with and without a pipeline (1F1B), tp 1 and 2, full checkpointing: 8 layouts, each bounded
    # by its probe (tp=1: the model unsharded; tp=2: on its group alone), trusted from the start (plan lays the file
    # out itself), the host's issuing included (this model's steps are the host's: the pipeline's first stage
    # issues while the second waits), the pipelines' last stage with its head (head_probe.py)
    assert len(every) == 8 and all(lay["status"] == "ok" for lay in every.values())
    for name, lay in every.items():
        assert 0.5 * lay["step_time_us"] < lay["step_bound_us"] <= lay["step_time_us"], (name, lay)
    probes = sorted((tmp_path / "all.layouts").glob("probe_*.py"))
    # per tp: the block probe's two depths, and the head probe (plan/head_probe.py: DEEP's head sits on the last
    # stage, its embedding on the first), a pipeline of 2 stages of 2 blocks
    assert [p.name for p in probes] == [f"probe_tp{t}_mb2_full_{d}.py" for t in (1, 2)
                                        for d in ("depth3", "depth4", "head")]
    assert "unsharded=True" in probes[0].read_text() and "unsharded" not in probes[3].read_text()
    assert "pipelined=True, depth=('LAYERS', 4)" in probes[2].read_text()

    code, out, err = cli(capsys, *args, "--top", "1", "-o", str(tmp_path / "top.csv"))
    assert code == 0, err
    top = json.loads(out)["layouts"]
    fastest = min(every.values(), key=lambda lay: lay["step_time_us"])
    assert top[0]["layout"] == fastest["layout"] and top[0]["step_time_us"] == fastest["step_time_us"]
    skipped = [lay for lay in top if lay["status"] == "skipped"]
    assert skipped and f"{len(skipped)} of the 8 layouts not run: their step is surely slower than the 1 fastest" \
        in err, err
    for lay in skipped:   # each would have run slower than the fastest, as its bound said
        assert fastest["step_time_us"] < lay["step_bound_us"] <= every[lay["layout"]]["step_time_us"]
    code, again, err = cli(capsys, *args, "--top", "1", "-o", str(tmp_path / "top.csv"))   # resumed: nothing runs
    assert code == 0 and json.loads(again) == json.loads(out), err
    assert set(re.findall(r"; ran (\d+) in", err)) == {"0"}, err


def _row(point: int, status: str = "ok", start: float = 0.0, end: float = 0.0, compute: float = 0.0,
         flops: dict | None = None) -> dict:
    phases = [{"phase": "forward", "start_us": start, "end_us": start + 1, "compute_us": compute / 2},
              {"phase": "backward", "start_us": start + 1, "end_us": end, "compute_us": compute / 2}]
    return {"point": str(point), "status": status, "phases": json.dumps(phases),
            "flops_by_dtype": json.dumps(flops or {"bf16": 0})}


def test_a_probe_measures_a_blocks_span_and_compute_and_one_that_failed_nothing():
    made = [probe.Probe(2, 1, "none"), probe.Probe(4, 1, "none")]
    n = 10   # layouts in the plan: the probes' points follow their 3 x 10
    rows = [_row(30, end=100.0, compute=60.0, flops={"bf16": 300}), _row(31, end=130.0, compute=80.0,
                                                                        flops={"bf16": 400}),
            _row(32), _row(33, "error")]
    got = probe.measured(rows, made, n)
    # depth.DEPTHS = (3, 4): one block more
    # the rest of the model: the span at 3 blocks less theirs (100 - 3 x 30), its compute 60 - 3 x 20
    assert got == {(2, 1, "none"): probe.Serial(30.0, 20.0, {"bf16": 100.0}, 10.0, 0.0)}


def test_a_head_probe_measures_what_the_model_computes_after_its_blocks():
    made = [probe.Probe(2, 1, "none"), probe.Probe(4, 1, "none")]
    serial = {(2, 1, "none"): probe.Serial(30.0, 20.0, {"bf16": 1.0}, 10.0, 50.0),
              (4, 1, "none"): probe.Serial(15.0, 10.0, {"bf16": 1.0}, 5.0, 25.0)}
    # after the 3 x 10 layouts' points and the 2 block probes' 4: the first stage of 2 blocks, 2 micro-batches:
    # 2 x (E + 2 x 20) = 2 x (15 + 40); H = 50 - 15
    rows = [_row(34, compute=110.0), _row(35, "error")]
    assert head_probe.measured(rows, made, 2, 10, serial) == {(2, 1, "none"): 35.0}
    # a first stage that computes more than the whole model's rest (extra ops of the pipeline's): no head
    assert head_probe.measured([_row(34, compute=200.0)], made, 2, 10, serial) == {}


def _layout(mesh: dict, microbatches: int, schedule: str | None = "1F1B"):
    return Layout(tuple(mesh.items()), 1, microbatches, "none", schedule if "pp" in mesh else None)


def test_each_pipeline_rank_bounds_the_step_and_the_last_stage_adds_its_head():
    s = probe.Serial(us=10.0, gpu_us=8.0, flops={}, rest_us=7.0, rest_gpu_us=5.0)
    # without a pipeline: every block and the rest of the model, for each of 4 micro-batches
    flat = _layout({"dp": 2}, 4)
    assert step_bound.rank_paths(flat, [6]) == [(24, 0, True)]
    assert step_bound.serial_bound_us(flat, [6], s) == 4 * (6 * 10.0 + 7.0)
    # 1F1B over 3 stages of 2, 2 and 1 blocks (the last holds the head, 20 us a micro-batch): without the head the
    # second rank bounds the step (as many blocks as the first, and the first's before it); with it, the last
    pipe = _layout({"pp": 3}, 4)
    assert step_bound.rank_paths(pipe, [2, 2, 1]) == [(8, 0, False), (8, 2, False), (4, 4, True)]
    assert step_bound.serial_bound_us(pipe, [2, 2, 1], s) == 8 * 10.0 + 2 * 8.0
    assert step_bound.serial_bound_us(pipe, [2, 2, 1], s, 20.0) == 4 * 10.0 + 4 * 8.0 + 4 * 20.0
    # Interleaved1F1B, 2 ranks, 4 stages (0 and 2 on rank 0, 1 and 3 on rank 1): each rank all its stages' blocks
    looped = _layout({"pp": 2}, 4, "Interleaved1F1B")
    assert step_bound.rank_paths(looped, [1, 2, 3, 1]) == [(16, 0, False), (12, 0, True)]
    # the V schedules put stages 0 and 3 on rank 0: the head is the first rank's
    v = _layout({"pp": 2}, 4, "ZBVZeroBubble")
    assert step_bound.rank_paths(v, [1, 2, 3, 1]) == [(8, 0, True), (20, 0, False)]


def test_a_probe_of_a_file_with_its_own_parallelize_waits_for_a_run_of_its_kind():
    lay = _layout({"dp": 2}, 1)
    serial = {step_bound.key(lay): probe.Serial(10.0, 8.0, {"bf16": 100.0}, 5.0, 4.0)}

    def bounds(parallelize):
        return step_bound.Bounds(SimpleNamespace(parallelize=parallelize), "model.py", [lay], 6, None, serial, {})
    assert bounds(None).of(0) == 6 * 10.0 + 5.0   # plan's own layout: trusted from the start
    own = bounds(lambda model, mesh: model)
    assert own.of(0) is None   # nothing of its kind has run: no FLOPs bound either
    own.kinds = {step_bound.kind(lay): {"bf16": 100.0}}   # as update() finds once one has
    assert own.of(0) == 6 * 10.0 + 5.0


def test_the_head_counts_only_where_the_last_stage_holds_what_the_first_of_two_does_not(tmp_path):
    path = tmp_path / "deep.py"
    path.write_text(textwrap.dedent(DEEP.format(layers=12)))
    spec = load_model_file(str(path))
    assert head_probe.applies(spec, str(path), "LAYERS", 4)
    moved = tmp_path / "moved.py"   # the head on stage 1 of every split: not on the last of 4
    moved.write_text(textwrap.dedent(DEEP.format(layers=12)).replace(
        "self.head = model.head if last == LAYERS else None",
        "self.head = model.head if first == LAYERS // 2 or first == LAYERS // 4 else None"))
    spec = load_model_file(str(moved))
    assert head_probe.applies(spec, str(moved), "LAYERS", 2) and not head_probe.applies(spec, str(moved), "LAYERS", 4)


def test_a_probe_is_trusted_only_where_its_kind_computed_as_much_in_every_dtype():
    fp32 = probe.Serial(10.0, 8.0, {"fp32": 100.0})
    assert probe.trusted(fp32, {"fp32": 100.0}) and probe.trusted(fp32, {"fp32": 120.0, "bf16": 5.0})
    # FSDP2's MixedPrecisionPolicy made the layouts' matmuls bf16: the probe's fp32 ones are slower than theirs
    assert not probe.trusted(fp32, {"bf16": 100.0}) and not probe.trusted(fp32, {"fp32": 50.0, "bf16": 50.0})
    assert not probe.trusted(fp32, None) and not probe.trusted(fp32, {})   # no layout of its kind has run
    assert not probe.trusted(probe.Serial(10.0, 8.0, {}), {"fp32": 100.0})


def test_an_unsharded_layout_of_a_file_with_its_own_parallelize_is_refused(tmp_path):
    path = tmp_path / "own.py"
    path.write_text(textwrap.dedent(DEEP.format(layers=4)) + "\n\ndef parallelize(model, mesh):\n    return model\n")
    with pytest.raises(UserError, match=r"unsharded: the file has a parallelize\(\) of its own"):
        layout(str(path), unsharded=True)


def test_layouts_none_of_which_can_be_bounded_run_in_one_round():
    flat = [_layout({"dp": 2}, m) for m in (1, 2, 4)]   # micro-batch counts differ; the keys (tp, size, ...) agree
    serial = {}
    depths = {0: None, 1: None}
    bounds = step_bound.Bounds(SimpleNamespace(parallelize=None), "model.py", flat, 6, None, serial, depths)
    # 0 and 1 are timed at reduced depth: each may take the other's FLOPs; 2 runs whole, and may take theirs
    assert [bounds.may_bound(i) for i in range(3)] == [True, True, True]
    alone = step_bound.Bounds(SimpleNamespace(parallelize=None), "model.py", flat, 6, None, serial, {0: None})
    assert [alone.may_bound(i) for i in range(3)] == [False, True, True]

    rounds = []

    def run(some):
        rounds.append(list(some))
        return []
    lone = SimpleNamespace(update=lambda rows: None, of=lambda i: None, estimate=lambda i: float(i),
                           may_bound=lambda i: False)
    order.run_in_order(list(range(40)), [], run, lone, lambda rows: None, False, lambda i: None, 5)
    assert rounds == [list(range(40))]
    rounds.clear()
    lone.may_bound = lambda i: True   # bounds may come: a first round of 5, then rounds of order.ROUND
    order.run_in_order(list(range(40)), [], run, lone, lambda rows: None, False, lambda i: None, 5)
    assert [len(r) for r in rounds] == [5, 16, 16, 3]


def test_failed_probes_are_summed_up_in_one_line(capsys):
    from astra_compile.compiler.plan.command import _say_probes_failed
    rows = [{"point": "3", "status": "error", "error": "a layout's own failure"},   # layout 3 of 10: not a probe
            {"point": "30", "status": "ok"}, {"point": "31", "status": "error", "error": "x.py: tp alone refused\n"},
            {"point": "32", "status": "error", "error": "again"}]
    _say_probes_failed(rows, 10)
    err = capsys.readouterr().err
    assert err.startswith("astra-compile plan: 2 probe runs failed (the first: x.py: tp alone refused): their "
                          "layouts are bounded by their FLOPs alone") and err.count("\n") == 1, err
    _say_probes_failed(rows[:2], 10)
    assert capsys.readouterr().err == ""


def test_a_blocks_activations_are_their_growth_at_the_peak_or_the_forwards_over_the_weights():
    # probe 0 peaks at the backward's start (its activations all saved): their growth per block; probe 1 peaks in
    # the optimizer step (none left): the forward's peak less the weights' growth, gradients counted at most
    def memory(peak_phase, activations, forward, weights):
        at = {"parameters": weights, "gradients": 0, "optimizer_states": 2 * weights, "communication": 0,
              "activations": activations, "other": 0}
        return json.dumps({"peak_phase": peak_phase, "at_peak_bytes": at, "phase_peak_bytes": {"forward": forward}})
    made = [probe.Probe(2, 1, "none"), probe.Probe(1, 1, "none"), probe.Probe(4, 1, "full")]
    gib = 2**30
    rows = [{"point": str(probe.point_index(j, k, 10)), "status": "ok", "memory": m} for j, pair in enumerate((
        (memory("backward", 3 * gib, 7 * gib, 3 * gib), memory("backward", 5 * gib, 11 * gib, 4 * gib)),
        (memory("optimizer", 0, 12 * gib, 6 * gib), memory("optimizer", 0, 16 * gib, 7 * gib)),
    )) for k, m in enumerate(pair)] + [{"point": str(probe.point_index(2, 0, 10)), "status": "failed"}]
    act = probe.activations(rows, made, 10)
    # (the second's gradients are not at its peak: 11 - 7 less 3 x (4 - 3) GiB is 1, below the activations' 2)
    assert act == {(2, 1, "none"): 2 * gib, (1, 1, "none"): gib}


def test_a_rank_holds_a_blocks_activations_for_every_micro_batch_in_flight():
    from astra_compile.compiler.plan.memory import Sizes, in_flight_bound
    from astra_compile.compiler.report.memory_report import CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_GROUP
    gib = 2**30
    sizes = Sizes(params=0, param_bytes=0, seq=1, blocks=80, block_bytes=0, block_tp_bytes=gib, other_bytes=gib,
                  other_tp_bytes=0, input_bytes_per_sample=0, adam_states=True, tp_may_shard_inputs=False,
                  own_parallelize=False)
    fixed = CUDA_CONTEXT_BYTES + 3 * NCCL_BYTES_PER_GROUP
    # 1F1B's first of 16 stages has run 16 forwards of 5 blocks before its first backward; its weights and AdamW's
    # states (not the gradients) sharded over tp and fsdp
    lay = _layout({"pp": 16, "fsdp": 8, "tp": 2}, 32)
    assert in_flight_bound(sizes, lay, [5] * 16, gib) == 16 * 5 * gib + 3 * 5 * gib // 2 // 8 + fixed
    assert in_flight_bound(sizes, _layout({"pp": 16, "fsdp": 8, "tp": 2}, 8), [5] * 16, gib) == \
        8 * 5 * gib + 3 * 5 * gib // 16 + fixed   # fewer micro-batches than stages: all of them
    assert in_flight_bound(sizes, _layout({"pp": 16, "fsdp": 8, "tp": 2}, 32, "GPipe"), [5] * 16, gib) == \
        32 * 5 * gib + 3 * 5 * gib // 16 + fixed   # GPipe: every forward first
    # Interleaved1F1B: each rank's 2 stages hold at least the first micro-batch
    assert in_flight_bound(sizes, _layout({"pp": 8, "fsdp": 8, "tp": 2}, 32, "Interleaved1F1B"), [5] * 16, gib) == \
        10 * gib + 3 * 10 * gib // 16 + fixed
    # no pipeline: every block's for one micro-batch, the rest of the model's weights too
    assert in_flight_bound(sizes, _layout({"fsdp": 128, "tp": 2}, 2), [80], gib) == \
        80 * gib + 3 * (80 * gib // 2 + gib) // 128 + 2 * NCCL_BYTES_PER_GROUP + CUDA_CONTEXT_BYTES
