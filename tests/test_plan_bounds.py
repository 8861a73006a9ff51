"""plan's lower bounds on a layout's step (compiler/plan/step_bound.py, probe.py) and the order it runs layouts in
(plan/order.py): every bound it reports is at most the step the layout ran in, and a plan that skips layouts by
them prints the fastest a plan that ran every layout prints."""
import json
import re
import textwrap

import pytest

from astra_compile.compiler.frontend.layout import layout
from astra_compile.compiler.plan import probe
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
    # by its probe (tp=1: the model unsharded; tp=2: on its group alone) once a layout of its kind ran, the host's
    # issuing included (this model's steps are the host's: the pipeline's first stage issues while the second
    # waits)
    assert len(every) == 8 and all(lay["status"] == "ok" for lay in every.values())
    for name, lay in every.items():
        assert 0.5 * lay["step_time_us"] < lay["step_bound_us"] <= lay["step_time_us"], (name, lay)
    probes = sorted((tmp_path / "all.layouts").glob("probe_*.py"))
    assert [p.name for p in probes] == [f"probe_tp{t}_mb2_full_depth{d}.py" for t in (1, 2) for d in (3, 4)]
    assert "unsharded=True" in probes[0].read_text() and "unsharded" not in probes[2].read_text()

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
    assert got == {(2, 1, "none"): probe.Serial(30.0, 20.0, {"bf16": 100.0})}


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
