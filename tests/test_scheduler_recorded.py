"""The scheduler is a decision the module records: a module printed by --emit mlir re-runs to
the identical report whatever --scheduler defaults to, and naming --scheduler on it schedules it again."""
import json
import os

import pytest

from astra_compile.compiler.main import main

SEED000 = ["--topology", "Switch(8)_Switch(8)_Switch(8)", "--bandwidth", "50", "--latency", "1", "--chunks", "64"]


@pytest.fixture(autouse=True)
def _fd(capfd):
    global CAPFD
    CAPFD = capfd


def cli(*argv):
    CAPFD.readouterr()
    code = main([str(a) for a in argv])
    out, err = CAPFD.readouterr()
    return code, out, err


def emitted(tmp_path, *argv) -> str:
    path = os.path.join(tmp_path, "m.mlir")
    code, _, err = cli(*argv, "--emit", "mlir", "-o", path)
    assert code == 0, err
    return path


def report(*argv) -> dict:
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("scheduler,total_us", [("baseline", 35000.768), ("themis", 13587.194),
                                                ("optimal", 13347.936)])
def test_an_emitted_module_reruns_to_the_identical_report(tmp_path, scheduler, total_us):
    """The ASTRA-sim tutorial's 1GB all-reduce under each scheduler: its module re-runs to that scheduler's figure (a
    baseline module at 35000.768 us, never optimal's 13347.936 us)."""
    args = ["--collective", "all_reduce", "--size", "1GB", *SEED000, "--scheduler", scheduler]
    first = report(*args)
    assert first["total_time_us"] == pytest.approx(total_us, abs=1e-3) and first["scheduler"] == scheduler
    path = emitted(tmp_path, *args)
    with open(path) as f:
        assert f'comm.scheduler = "{scheduler}"' in f.read()
    # no flag: the recorded scheduler and its orders, run by the pipeline without a scheduling pass; the module's
    # collectives carry their 64 chunks, which the chunk pass (1 where none is given) keeps
    pipeline = "decompose-all-reduce{all-reduce=hierarchical},chunk{chunks=1},hierarchical-decompose,select-algorithm"
    again = report(path)
    assert again["pass_pipeline"] == pipeline
    assert {**again, "pass_pipeline": first["pass_pipeline"]} == first
    again = report(path, "--scheduler", scheduler)   # scheduled again the same way: the same answer
    assert again["pass_pipeline"] == pipeline + first["pass_pipeline"].split("select-algorithm")[1]
    assert {**again, "pass_pipeline": first["pass_pipeline"]} == first


def test_naming_another_scheduler_schedules_the_module_again(tmp_path):
    path = emitted(tmp_path, "--collective", "all_reduce", "--size", "1GB", *SEED000, "--scheduler", "baseline")
    again = report(path, "--scheduler", "optimal")
    fresh = report("--collective", "all_reduce", "--size", "1GB", *SEED000, "--scheduler", "optimal")
    assert again["total_time_us"] == fresh["total_time_us"] == pytest.approx(13347.936, abs=1e-3)
    assert again["scheduler"] == "optimal" and again["optimal_choice"] == "cp-sat"
    # and back: an optimal module named baseline runs every chunk ascending again, to the byte
    opt = emitted(tmp_path, "--collective", "all_reduce", "--size", "1GB", *SEED000)
    back = report(opt, "--scheduler", "baseline")
    assert back["total_time_us"] == pytest.approx(35000.768, abs=1e-3) and back["scheduler"] == "baseline"
    code, text, _ = cli(opt, "--scheduler", "baseline", "--emit", "mlir")
    assert code == 0 and 'comm.scheduler = "baseline"' in text and "comm.cp_sat_time_ns" not in text


def test_a_whole_network_module_reruns_under_its_algorithm(tmp_path):
    """A MultiTree module re-runs under MultiTree, not through the default optimal pipeline (which would report it
    as 'optimal (cp-sat kept)')."""
    args = ["--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus", "--algorithm", "multitree"]
    first = report(*args)
    path = emitted(tmp_path, *args)
    assert report(path) == first and first["scheduler"].startswith("multitree")


def test_a_module_records_only_schedulers_it_knows(tmp_path):
    path = emitted(tmp_path, "--collective", "all_reduce", "--size", "1MB", "--topology", "4x4_torus",
                   "--chunks", "4", "--scheduler", "themis")
    with open(path) as f:
        text = f.read().replace('comm.scheduler = "themis"', 'comm.scheduler = "fastest"')
    bad = os.path.join(tmp_path, "bad.mlir")
    with open(bad, "w") as f:
        f.write(text)
    code, out, err = cli(bad)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "comm.scheduler" in err and "'fastest'" in err and "baseline, themis or optimal" in err


def test_a_collective_the_recorded_schedule_does_not_cover_is_refused(tmp_path):
    """A collective added by hand to a scheduled module has no orders: running it ascending under the label
    'themis' would misreport it, so the module is refused unless --scheduler schedules it all again."""
    path = emitted(tmp_path, "--collective", "all_gather", "--size", "1MB", "--topology", "4x4_torus", "--chunks", "4",
                   "--scheduler", "themis")
    with open(path) as f:
        text = f.read()
    last = text.rstrip().rstrip("}")
    text = last + ('  %9 = "comm.reduce_scatter"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, '
                   'name = "extra"} : () -> !comm.token\n}\n')
    added = os.path.join(tmp_path, "added.mlir")
    with open(added, "w") as f:
        f.write(text)
    code, _, err = cli(added)
    assert code == 2 and err.count("\n") == 1 and "'extra'" in err and "--scheduler" in err
    assert report(added, "--scheduler", "themis")["scheduler"] == "themis"
