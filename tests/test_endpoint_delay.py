"""--endpoint-delay (ASTRA-sim's endpoint-delay): every message spends that many ns at its endpoints
besides its links' latency, once per message however many hops it takes, in every engine and execution mode,
in the scheduler's cost model, in a step's point-to-point messages, and through table directories."""
import json
import os

import pytest

from astra_compile.network.parse import parse_topology
from astra_compile.runtime import analytical, congestion

from helpers import cli, compile_collective, refused

HERE = os.path.dirname(__file__)
RUNS = [(analytical, "full"), (analytical, "symmetric"), (congestion, "full"), (congestion, "symmetric")]


def total(engine, mode, spec, delay=None, latency="500", **kw):
    sched = compile_collective(spec, "all_reduce", 3 * 2**20, latency=latency, endpoint_delay=delay, **kw)
    return engine.run(sched, mode=mode).total_ns


@pytest.mark.parametrize("engine, mode", RUNS)
@pytest.mark.parametrize("spec, algorithm", [("Ring(8)", "ring"), ("FC(4)", "direct"), ("4x4_torus", "ring"),
                                             ("Ring(4)_FC(4)", "ring,direct")])
def test_one_hop_messages_pay_it_as_more_latency(engine, mode, spec, algorithm):
    # every message of these schedules takes one link: the delay is exactly that much more latency per message
    with_delay = total(engine, mode, spec, 37, chunks=2, algorithm=algorithm)
    assert with_delay == pytest.approx(total(engine, mode, spec, None, "537", chunks=2, algorithm=algorithm),
                                       rel=1e-12)
    assert with_delay > total(engine, mode, spec, None, chunks=2, algorithm=algorithm)


@pytest.mark.parametrize("engine, mode", RUNS)
def test_a_message_over_several_links_pays_it_once(engine, mode):
    # direct all-reduce on Ring(8): one reduce-scatter step and one all-gather step whose farthest message takes 4
    # hops; the delay adds once per step (the last message delivered is the last still), where as much more
    # latency per hop adds up to 4 times per step (analytical: the farthest message; congestion: the one the
    # links' queues make last)
    base = total(engine, mode, "Ring(8)", algorithm="direct")
    assert total(engine, mode, "Ring(8)", 100, algorithm="direct") == pytest.approx(base + 2 * 100, rel=1e-12)
    more_latency = total(engine, mode, "Ring(8)", None, "600", algorithm="direct")
    assert more_latency >= base + 2 * 100
    if engine is analytical:
        assert more_latency == pytest.approx(base + 2 * 4 * 100, rel=1e-12)


def test_the_network_carries_it_everywhere_it_is_written():
    topo = parse_topology("Ring(4)", endpoint_delay="10")
    assert topo.endpoint_delay_ns == 10.0 and topo.to_dict()["endpoint_delay_ns"] == 10.0
    assert "endpoint_delay_ns" not in parse_topology("Ring(4)").to_dict()   # unset: serialised as it always was
    sched = compile_collective("Ring(4)", "all_reduce", 2**20, endpoint_delay="10")
    assert sched.meta.topology["endpoint_delay_ns"] == 10.0


def test_table_directories_and_ir_keep_it(capsys, tmp_path):
    args = ["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)_Switch(4)", "--endpoint-delay", "25"]
    code, out, err = cli(capsys, *args, "--json")
    assert code == 0, err
    direct = json.loads(out)["total_time_us"]
    code, _, err = cli(capsys, *args, "--emit", "tables", "-o", tmp_path / "t")
    assert code == 0, err
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["topology"]["endpoint_delay_ns"] == 25.0
    code, out, err = cli(capsys, tmp_path / "t", "--json")
    assert code == 0, err
    assert json.loads(out)["total_time_us"] == direct
    code, _, err = cli(capsys, *args, "--emit", "mlir", "-o", tmp_path / "c.mlir")
    assert code == 0, err
    assert "endpoint_delay_ns" in (tmp_path / "c.mlir").read_text()
    code, out, err = cli(capsys, tmp_path / "c.mlir", "--json")
    assert code == 0, err
    assert json.loads(out)["total_time_us"] == direct
    code, out, _ = cli(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)_Switch(4)",
                       "--json")
    assert json.loads(out)["total_time_us"] < direct and "endpoint_delay_ns" not in json.loads(out)


def test_reports_say_it(capsys):
    import jsonschema
    import astra_compile.compiler.report
    here = os.path.dirname(astra_compile.compiler.report.__file__)
    args = ["--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--endpoint-delay", "25"]
    code, out, _ = cli(capsys, *args, "--json")
    report = json.loads(out)
    assert report["endpoint_delay_ns"] == 25.0
    jsonschema.validate(report, json.load(open(os.path.join(here, "report.schema.json"))))
    code, out, _ = cli(capsys, *args)
    assert "topology        Ring(4) (4 NPUs), endpoint delay 25 ns per message" in out
    step = os.path.join(HERE, "ir", "step_two_ranks.mlir")
    code, out, _ = cli(capsys, step, "--endpoint-delay", "25", "--json")
    report = json.loads(out)
    assert report["endpoint_delay_ns"] == 25.0
    jsonschema.validate(report, json.load(open(os.path.join(here, "workload_report.schema.json"))))
    code, out, _ = cli(capsys, step, "--endpoint-delay", "25")
    assert "endpoint delay 25 ns per message" in out


def test_a_steps_collectives_and_messages_pay_it(capsys):
    step = os.path.join(HERE, "ir", "step_two_ranks.mlir")
    code, out, err = cli(capsys, step, "--json")
    assert code == 0, err
    plain = json.loads(out)
    code, out, err = cli(capsys, step, "--endpoint-delay", "1000", "--json")
    assert code == 0, err
    delayed = json.loads(out)
    assert delayed["total_time_us"] > plain["total_time_us"] and delayed["comm_time_us"] > plain["comm_time_us"]
    assert delayed["compute_time_us"] == plain["compute_time_us"]
    # a point-to-point message (a pipeline's send/recv) over 3 links: its latency thrice, the delay once
    from astra_compile.network.message import message
    far, near = (message(parse_topology("Ring(8)", endpoint_delay=d), 0, 3, 4096) for d in ("40", None))
    assert far.hops == 3 and far.time_ns == pytest.approx(near.time_ns + 40, rel=1e-12)


def test_the_scheduler_weighs_it_per_step():
    from astra_compile.passes.phase_cost import phase_steps
    plain = phase_steps("reduce_scatter", "ring", "Ring", 8, 50.0, 500.0, 2**20)
    delayed = phase_steps("reduce_scatter", "ring", "Ring", 8, 50.0, 500.0, 2**20, endpoint_ns=10.0)
    assert [(lat + 10.0, t) for lat, t in plain] == delayed


@pytest.mark.parametrize("value, match", [("-1", "endpoint delay must be a number of ns between 0"),
                                          ("ten", "endpoint delay: 'ten' is not a number"),
                                          ("1,2", "endpoint delay"), ("inf", "endpoint delay")])
def test_a_bad_value_is_refused_in_one_line(capsys, value, match):
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--endpoint-delay",
            value, match=match)
