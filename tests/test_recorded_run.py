"""What a run writes records the run options that shaped its figure (else a silent wrong step): a collective's
table directory (meta.json `run`), a step directory (its meta.json `run`) and a workload module (`wl.run`) run again
without those options print the figure the writing run printed, to the last digit; an option named again wins and
the run says so; a damaged record ends in one line; an artefact written without such options is as before."""
import json
import os

import pytest

import astra_compile
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, LOAD, Op, Workload
from astra_compile.runtime import meta as meta_module
from astra_compile.runtime import step_tables
from helpers import cli, refused

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")

# 32 NPUs, chunks queueing on three dimensions: each of these options moves the figure (checked below)
COLLECTIVE_RUN = ["--collective", "all_reduce", "--size", "64MB", "--topology", "Ring(4)_FC(2)_Switch(4)", "--chunks",
                  "8", "--scheduler", "themis", "--algorithm", "ring,direct,halving_doubling"]
TABLE_OPTIONS = [["--intra", "fifo"], ["--active-chunks", "2"], ["--local-mem-bw", "1600"],
                 ["--switching", "store-and-forward"],
                 ["--intra", "fifo", "--active-chunks", "2", "--local-mem-bw", "1600"]]
BACKENDS = [[], ["--backend", "congestion"]]


def figure(capsys, *argv) -> float:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)["total_time_us"]


def written(capsys, *argv) -> str:
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    return err


@pytest.mark.parametrize("options, backend", [(o, b) for o in TABLE_OPTIONS for b in BACKENDS
                                               if b or "--switching" not in o])   # it goes with congestion
def test_a_table_directory_runs_again_with_the_options_it_was_written_with(capsys, tmp_path, options, backend):
    run = options + backend
    want = figure(capsys, *COLLECTIVE_RUN, *run)
    assert want != figure(capsys, *COLLECTIVE_RUN, *backend)   # the option shapes the figure
    out = tmp_path / "t"
    written(capsys, *COLLECTIVE_RUN, *run, "--emit", "tables", "-o", out)
    assert figure(capsys, out) == want
    assert json.loads((out / "meta.json").read_text())["run"] == recorded(run)


def recorded(options: list) -> dict:
    """The meta.json `run` that command-line options other than the defaults make."""
    keys = {"--intra": ("intra", str), "--active-chunks": ("active_chunks", int), "--backend": ("backend", str),
            "--local-mem-bw": ("local_mem_gbps", float), "--switching": ("switching", str)}
    return {keys[o][0]: keys[o][1](v) for o, v in zip(options[::2], options[1::2])}


def test_the_backend_alone_is_recorded_and_execution_too(capsys, tmp_path):
    direct = ["--collective", "all_reduce", "--size", "16MB", "--topology", "Switch(8)", "--algorithm", "direct",
              "--chunks", "4"]
    want = figure(capsys, *direct, "--backend", "congestion")
    assert want == 554.875 and figure(capsys, *direct) == 86.125   # congestion-aware: the switch's links shared
    written(capsys, *direct, "--backend", "congestion", "--execution", "full", "--emit", "tables", "-o",
            tmp_path / "t")
    assert json.loads((tmp_path / "t" / "meta.json").read_text())["run"] == {"backend": "congestion",
                                                                             "execution": "full"}
    code, out, err = cli(capsys, tmp_path / "t", "--json")
    assert (json.loads(out)["total_time_us"], json.loads(out)["execution"]) == (want, "full")


def test_the_brief_s_collective_runs_again_at_its_figure(capsys, tmp_path):
    run = ["--collective", "all_reduce", "--size", "64MB", "--topology", "8_ring", "--local-mem-bw", "1600",
           "--chunks", "4"]
    assert figure(capsys, *run) == pytest.approx(2325.600)
    written(capsys, *run, "--emit", "tables", "-o", tmp_path / "t")
    assert figure(capsys, tmp_path / "t") == pytest.approx(2325.600)   # 2215.500 if local-mem-bw were dropped


def test_without_run_options_the_directory_is_as_before(capsys, tmp_path):
    written(capsys, *COLLECTIVE_RUN, "--emit", "tables", "-o", tmp_path / "t")
    assert "run" not in json.loads((tmp_path / "t" / "meta.json").read_text())


def test_an_option_named_again_wins_and_the_run_says_so(capsys, tmp_path):
    out = tmp_path / "t"
    written(capsys, *COLLECTIVE_RUN, "--intra", "fifo", "--local-mem-bw", "1600", "--emit", "tables", "-o", out)
    # --intra scf is the default, typed: it wins over the recorded fifo
    code, text, err = cli(capsys, out, "--intra", "scf", "--json")
    assert json.loads(text)["total_time_us"] == figure(capsys, *COLLECTIVE_RUN, "--local-mem-bw", "1600")
    assert err == f"astra-compile: note: {out}/meta.json: run records --intra fifo; this run takes scf\n"
    code, text, err = cli(capsys, out, "--local-mem-bw", "100", "--json")
    assert json.loads(text)["total_time_us"] == figure(capsys, *COLLECTIVE_RUN, "--intra", "fifo", "--local-mem-bw",
                                                        "100")
    assert "records --local-mem-bw 1600; this run takes 100" in err
    # a recorded congestion backend lets --switching through (it goes with --backend congestion)
    written(capsys, *COLLECTIVE_RUN, "--backend", "congestion", "--emit", "tables", "-o", tmp_path / "c")
    assert figure(capsys, tmp_path / "c", "--switching", "store-and-forward") == \
        figure(capsys, *COLLECTIVE_RUN, "--backend", "congestion", "--switching", "store-and-forward")


@pytest.mark.parametrize("run, match", [
    ({"intra": "lifo"}, "meta.json: run.intra must be one of fifo, scf, got 'lifo'"),
    ({"speed": 2}, "meta.json: run: unknown key 'speed'"),
    ({"active_chunks": 0}, "meta.json: run.active_chunks must be a whole number from 1"),
    ({"active_chunks": True}, "run.active_chunks must be a whole number"),
    ({"local_mem_gbps": -1}, "run.local_mem_gbps: local memory bandwidth must be"),
    ({"peak_tflops": 100}, "unknown key 'peak_tflops'"),   # a collective's tables have no roofline
    ([1], "meta.json: run must be an object of run options"),
])
def test_a_damaged_table_record_is_refused_in_one_line(capsys, tmp_path, run, match):
    out = tmp_path / "t"
    written(capsys, *COLLECTIVE_RUN, "--emit", "tables", "-o", out)
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps(meta | {"run": run}))
    refused(capsys, out, match=match)


def test_written_records_match_the_schemas(capsys, tmp_path, step_module):
    jsonschema = pytest.importorskip("jsonschema")
    written(capsys, *COLLECTIVE_RUN, "--intra", "fifo", "--active-chunks", "2", "--local-mem-bw", "1600", "--backend",
            "congestion", "--switching", "store-and-forward", "--execution", "full", "--emit", "tables", "-o",
            tmp_path / "t")
    with open(meta_module.SCHEMA_FILE) as f:
        jsonschema.validate(json.loads((tmp_path / "t" / "meta.json").read_text()), json.load(f))
    written(capsys, step_module, *STEP_COMPILE, "--peak-tflops", "500", "--mem-latency", "5000", "--backend",
            "congestion", "--emit", "tables", "-o", tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["run"] == {"backend": "congestion", "peak_tflops": 500.0, "mem_latency_ns": 5000.0}
    with open(step_tables.SCHEMA_FILE) as f:
        jsonschema.validate(meta, json.load(f))


# --- training steps: a step directory and a workload module -------------------------------------------------------

TOPOLOGY = "Ring(4)_FC(2)_Switch(4)"
STEP_COMPILE = ["--chunks", "8", "--scheduler", "themis", "--algorithm", "ring,direct,direct"]


def recorded_step() -> Workload:
    """Compute bound by FLOPs and by bytes, a local load, an all-reduce over the world and one over dimension 2's
    groups of 4 (a group smaller than the world: ASTRA-sim's ring under --step-semantics astra-sim)."""
    ops = [Op("mm", COMPUTE, [], flops=2 ** 37, bytes=2 ** 20, phase="forward"),
           Op("add", COMPUTE, [0], flops=2 ** 20, bytes=2 ** 31, phase="forward"),
           Op("load", LOAD, [1], bytes=2 ** 20, location="local", phase="forward"),
           Op("ar", COLLECTIVE, [2], bytes=2 ** 26, collective="all_reduce", group=tuple(range(32)),
              group_name="dp", phase="backward"),
           Op("tp", COLLECTIVE, [3], bytes=2 ** 24, collective="all_reduce", group=(0, 8, 16, 24), group_name="tp",
              phase="backward")]
    return Workload(32, {0: ops}, "recorded test", spmd=True)


@pytest.fixture(scope="module")
def step_module(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("step") / "step.mlir"
    path.write_text(astra_compile.compile(recorded_step(), TOPOLOGY).mlir)
    return str(path)


STEP_OPTIONS = [["--peak-tflops", "500"], ["--mem-bw", "900"], ["--mem-latency", "500000"],
                ["--local-mem-bw", "1600"], ["--intra", "fifo"], ["--step-semantics", "astra-sim"],
                ["--backend", "congestion"], ["--backend", "congestion", "--switching", "store-and-forward"],
                ["--backend", "congestion", "--intra", "fifo", "--local-mem-bw", "1600"]]


@pytest.mark.parametrize("options", STEP_OPTIONS)
def test_a_step_directory_and_module_run_again_with_the_options_they_were_written_with(capsys, tmp_path, step_module,
                                                                                      options):
    want = figure(capsys, step_module, *STEP_COMPILE, *options)
    assert want != figure(capsys, step_module, *STEP_COMPILE)   # the option shapes the figure
    written(capsys, step_module, *STEP_COMPILE, *options, "--emit", "tables", "-o", tmp_path / "s")
    assert figure(capsys, tmp_path / "s") == want
    written(capsys, step_module, *STEP_COMPILE, *options, "--emit", "mlir", "-o", tmp_path / "m.mlir")
    assert figure(capsys, tmp_path / "m.mlir") == want
    # and from Python: the parameters left at their defaults take the recorded values
    assert astra_compile.compile(str(tmp_path / "s"), None).total_time_us == want
    assert astra_compile.compile(str(tmp_path / "m.mlir"), None).total_time_us == want


def test_the_module_records_its_compile_options(capsys, tmp_path, step_module):
    written(capsys, step_module, *STEP_COMPILE, "--emit", "mlir", "-o", tmp_path / "m.mlir")
    head = (tmp_path / "m.mlir").read_text().split("\n", 1)[0]
    assert 'wl.run = {algorithm = "ring,direct,direct", chunks = 8 : i64, scheduler = "themis"}' in head
    assert figure(capsys, tmp_path / "m.mlir") == figure(capsys, step_module, *STEP_COMPILE)
    assert figure(capsys, tmp_path / "m.mlir") != figure(capsys, step_module)
    # named again: the run takes it and says so; use_recorded=False takes every parameter as given
    code, out, err = cli(capsys, tmp_path / "m.mlir", "--chunks", "2", "--json")
    assert json.loads(out)["total_time_us"] == figure(capsys, step_module, *STEP_COMPILE[2:], "--chunks", "2")
    assert err.endswith("wl.run records --chunks 8; this run takes 2\n")
    assert astra_compile.compile(str(tmp_path / "m.mlir"), None, use_recorded=False).total_time_us == \
        figure(capsys, step_module)


def test_without_run_options_the_step_directory_and_module_are_as_before(capsys, tmp_path, step_module):
    written(capsys, step_module, "--emit", "tables", "-o", tmp_path / "s")
    assert "run" not in json.loads((tmp_path / "s" / "meta.json").read_text())
    written(capsys, step_module, "--emit", "mlir", "-o", tmp_path / "m.mlir")
    assert (tmp_path / "m.mlir").read_text() == open(step_module).read()


def test_a_step_directory_option_named_again_wins_and_says_so(capsys, tmp_path, step_module):
    written(capsys, step_module, *STEP_COMPILE, "--peak-tflops", "500", "--intra", "fifo", "--emit", "tables", "-o",
            tmp_path / "s")
    code, out, err = cli(capsys, tmp_path / "s", "--peak-tflops", "300", "--json")
    assert json.loads(out)["total_time_us"] == figure(capsys, step_module, *STEP_COMPILE, "--peak-tflops", "300",
                                                       "--intra", "fifo")
    assert err == f"astra-compile: note: {tmp_path / 's'}/meta.json: run records --peak-tflops 500; this run takes 300\n"
    # its collectives were compiled under its step semantics: others are refused
    refused(capsys, tmp_path / "s", "--step-semantics", "astra-sim",
            match="compiled under step semantics streams")


def test_a_step_directory_written_under_the_astra_sim_semantics_prints_each_npu(capsys, tmp_path, step_module):
    written(capsys, step_module, "--step-semantics", "astra-sim", "--emit", "tables", "-o", tmp_path / "s")
    code, out, err = cli(capsys, tmp_path / "s", "--emit", "tables", "--npu", "9")
    assert code == 0, err
    assert "(NPU 1 of the 4-NPU network its group sees)" in out   # NPU 9 is member 1 of its ring of 4
    refused(capsys, tmp_path / "s", "--step-semantics", "streams", match="compiled under step semantics astra-sim")


SYSTEM = {"intra-dimension-scheduling": "FIFO", "inter-dimension-scheduling": "themis",
          "preferred-dataset-splits": 4, "local-mem-bw": 1600, "roofline-enabled": 1, "peak-perf": 300,
          "all-reduce-implementation": ["ring", "direct", "halvingDoubling"]}


def test_what_a_system_file_set_is_recorded(capsys, tmp_path, step_module):
    system = tmp_path / "sys.json"
    system.write_text(json.dumps(SYSTEM))
    want = figure(capsys, step_module, "--system", system, "--backend", "congestion")
    written(capsys, step_module, "--system", system, "--backend", "congestion", "--emit", "tables", "-o",
            tmp_path / "s")
    run = json.loads((tmp_path / "s" / "meta.json").read_text())["run"]
    assert run == {"backend": "congestion", "intra": "fifo", "switching": "store-and-forward",
                   "local_mem_gbps": 1600.0, "peak_tflops": 300.0, "step_semantics": "astra-sim"}
    assert figure(capsys, tmp_path / "s") == want
    written(capsys, step_module, "--system", system, "--backend", "congestion", "--emit", "mlir", "-o",
            tmp_path / "m.mlir")
    assert figure(capsys, tmp_path / "m.mlir") == want


def test_a_recorded_pool_runs_again(capsys, tmp_path):
    from test_memory_workload import STEP_MLIR, write_pool_file
    module = tmp_path / "step.mlir"
    module.write_text(STEP_MLIR.replace("LOCATION", "local").replace("EXTRA", ""))
    pool = write_pool_file(tmp_path)
    want = figure(capsys, module, "--pool", pool, "--mem-latency", "100")
    written(capsys, module, "--pool", pool, "--mem-latency", "100", "--emit", "tables", "-o", tmp_path / "s")
    os.remove(pool)   # the pool is in the record, not the file's path
    assert figure(capsys, tmp_path / "s") == want
    pool = write_pool_file(tmp_path)
    written(capsys, module, "--pool", pool, "--mem-latency", "100", "--emit", "mlir", "-o", tmp_path / "m.mlir")
    assert figure(capsys, tmp_path / "m.mlir") == want
    faster = tmp_path / "faster.yaml"
    faster.write_text(open(pool).read().replace("remote_group_gbps: 1", "remote_group_gbps: 4"))
    code, out, err = cli(capsys, tmp_path / "s", "--pool", faster, "--json")
    assert json.loads(out)["total_time_us"] < want and "records --pool (hiermem, 2 nodes x 2 GPUs" in err
    assert err.count("\n") == 1


def test_the_brief_s_model_file_runs_again_at_its_figure(capsys, tmp_path):
    run = [os.path.join(EXAMPLES, "mlp_dp.py"), "--topology", "8_ring", "--peak-tflops", "500", "--local-mem-bw", "100",
           "--intra", "fifo"]
    err = written(capsys, *run, "--emit", "tables", "-o", tmp_path / "s")
    assert figure(capsys, tmp_path / "s") == pytest.approx(37480.788, abs=1e-3)   # 23384.486 at the defaults
    written(capsys, *run, "--chunks", "4", "--scheduler", "baseline", "--emit", "mlir", "-o", tmp_path / "m.mlir")
    assert figure(capsys, tmp_path / "m.mlir") == pytest.approx(37648.788, abs=1e-3)   # not the defaults' 23384.486
    assert err == ""


def test_a_recorded_gpu_runs_again(capsys, tmp_path):
    """--gpu's compute model times every compute op: a step module or directory written with it runs again with the
    same device (before, a re-run kept only its fp32 peak and bandwidth and timed compute by the roofline: mlp_dp
    on dgx-h100:2 7156 us against the written 8345, silently)."""
    run = [os.path.join(EXAMPLES, "mlp_dp.py"), "--topology", "Switch(8)_Switch(2)", "--mesh", "dp=16"]
    want = figure(capsys, *run, "--gpu", "h100")
    assert want != figure(capsys, *run, "--peak-tflops", "67", "--mem-bw", "3119.930624961853")
    written(capsys, *run, "--gpu", "h100", "--emit", "mlir", "-o", tmp_path / "m.mlir")
    assert 'gpu = "h100"' in (tmp_path / "m.mlir").read_text()
    assert figure(capsys, tmp_path / "m.mlir") == want
    assert astra_compile.compile(str(tmp_path / "m.mlir"), None).to_dict()["total_time_us"] == want
    written(capsys, *run, "--gpu", "h100", "--emit", "tables", "-o", tmp_path / "s")
    assert figure(capsys, tmp_path / "s") == want
    # a device file is recorded by its fields: the run needs no file
    device = tmp_path / "slow.json"
    device.write_text(json.dumps({**astra_compile.network.devices.resolve("h100").to_dict(), "name": "slow",
                                  "efficiency": {"host_us": 40}}))
    slow = figure(capsys, *run, "--gpu", device)
    assert slow > want
    written(capsys, *run, "--gpu", device, "--emit", "mlir", "-o", tmp_path / "slow.mlir")
    os.remove(device)
    code, out, err = cli(capsys, tmp_path / "slow.mlir")
    assert code == 0 and "a device file's fields, recorded with the step" in out, err
    assert figure(capsys, tmp_path / "slow.mlir") == slow
    # --gpu typed again wins, and the run says so
    code, out, err = cli(capsys, tmp_path / "m.mlir", "--gpu", "h200", "--json")
    assert json.loads(out)["total_time_us"] == figure(capsys, *run, "--gpu", "h200")
    assert err == f"astra-compile: note: {tmp_path / 'm.mlir'}: wl.run records --gpu h100; this run takes h200\n"


@pytest.mark.parametrize("run, match", [
    ({"gpu": "h1000"}, "meta.json: run.gpu must be a GPU preset (v100, "),
    ({"gpu": {"name": "x"}}, "run.gpu: field 'peak_tflops' is missing"),
    ({"peak_tflops": -1}, "meta.json: run.peak_tflops must be a number of TFLOPS"),
    ({"mem_bw_gbps": "fast"}, "meta.json: run.mem_bw_gbps must be a number of GB/s"),
    ({"mem_latency_ns": 1e300}, "run.mem_latency_ns: latency must be"),
    ({"step_semantics": "ns-3"}, "run.step_semantics must be one of streams, astra-sim"),
    ({"astra_link_gbps": [50.0]}, "run.astra_link_gbps must list 3 bandwidths"),
    ({"astra_link_gbps": [50.0, 50.0, 50.0]}, "astra_link_gbps goes with step_semantics \"astra-sim\""),
    ({"pool": {"design": "disk"}}, "run.pool: field 'design' is 'disk'"),
    ({"chunks": 4}, "unknown key 'chunks'"),   # compiled into the directory's tables
])
def test_a_damaged_step_record_is_refused_in_one_line(capsys, tmp_path, step_module, run, match):
    written(capsys, step_module, "--emit", "tables", "-o", tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta | {"run": run}))
    refused(capsys, tmp_path / "s", match=match)
    with pytest.raises(Exception, match=match.split(": ", 1)[-1][:30].replace("(", "\\(")):
        astra_compile.compile(str(tmp_path / "s"), None)


def test_a_step_directory_s_collective_records_no_run_of_its_own(capsys, tmp_path, step_module):
    written(capsys, step_module, "--emit", "tables", "-o", tmp_path / "s")
    sub = tmp_path / "s" / "collective_0" / "meta.json"
    sub.write_text(json.dumps(json.loads(sub.read_text()) | {"run": {"intra": "fifo"}}))
    refused(capsys, tmp_path / "s", match="collective_0/meta.json: run: a step directory's collective executes with")


@pytest.mark.parametrize("attr, match", [
    ('{intra = "lifo"}', "wl.run.intra must be one of fifo, scf"),
    ('{algorithm = "warp"}', "wl.run.algorithm must name algorithms"),
    ('{all_reduce = "twice"}', "wl.run.all_reduce must be one of hierarchical, per-dimension"),
    ('{chunks = 0 : i64}', "wl.run.chunks must be a whole number"),
    ('"fast"', "wl.run must be an object of run options"),
])
def test_a_damaged_module_record_is_refused_in_one_line(capsys, tmp_path, step_module, attr, match):
    first, rest = open(step_module).read().split("\n", 1)
    (tmp_path / "m.mlir").write_text(first[:-3] + f", wl.run = {attr}}} {{\n" + rest)
    refused(capsys, tmp_path / "m.mlir", match=match)


def test_a_comm_module_records_how_it_was_run(capsys, tmp_path):
    run = ["--intra", "fifo", "--local-mem-bw", "1600", "--backend", "congestion", "--switching", "store-and-forward"]
    want = figure(capsys, *COLLECTIVE_RUN, *run)
    written(capsys, *COLLECTIVE_RUN, *run, "--emit", "mlir", "-o", tmp_path / "c.mlir")
    head = (tmp_path / "c.mlir").read_text().split("\n", 1)[0]
    assert 'comm.run = {backend = "congestion", intra = "fifo", local_mem_gbps = 1.600000e+03 : f64, ' \
           'switching = "store-and-forward"}' in head
    assert figure(capsys, tmp_path / "c.mlir") == want
    written(capsys, tmp_path / "c.mlir", "--emit", "tables", "-o", tmp_path / "t")   # and on into a directory
    assert figure(capsys, tmp_path / "t") == want
    # named again: taken, said, and the module written from this run records what it took (scf: no intra)
    code, out, err = cli(capsys, tmp_path / "c.mlir", "--intra", "scf", "--emit", "mlir")
    assert "intra" not in out.split("\n", 1)[0] and err.endswith("comm.run records --intra fifo; this run takes scf\n")
    written(capsys, *COLLECTIVE_RUN, "--emit", "mlir", "-o", tmp_path / "plain.mlir")
    assert "comm.run" not in (tmp_path / "plain.mlir").read_text()
    first, rest = (tmp_path / "plain.mlir").read_text().split("\n", 1)
    (tmp_path / "bad.mlir").write_text(first.replace("module attributes {", "module attributes {comm.run = "
                                                     "{active_chunks = -2 : i64}, ") + "\n" + rest)
    refused(capsys, tmp_path / "bad.mlir", match="bad.mlir: comm.run.active_chunks must be a whole number")


@pytest.mark.parametrize("network", [["--endpoint-delay", "5000"],
                                     ["--topology", TOPOLOGY, "--bandwidth", "100", "--latency", "50"]])
def test_a_module_written_from_a_module_names_the_network_it_ran_on(capsys, tmp_path, step_module, network):
    want = figure(capsys, step_module, *network)
    assert want != figure(capsys, step_module)
    written(capsys, step_module, *network, "--emit", "mlir", "-o", tmp_path / "m.mlir")
    assert figure(capsys, tmp_path / "m.mlir") == want   # it kept the module's own network before
    written(capsys, step_module, "--emit", "mlir", "-o", tmp_path / "same.mlir")
    assert (tmp_path / "same.mlir").read_text() == open(step_module).read()


def test_an_option_typed_at_its_default_wins_over_a_system_file_too(capsys, tmp_path):
    system = tmp_path / "sys.json"
    system.write_text(json.dumps({"intra-dimension-scheduling": "FIFO", "inter-dimension-scheduling": "baseline"}))
    code, out, err = cli(capsys, *COLLECTIVE_RUN, "--system", system, "--intra", "scf", "--json")
    # (the file's collective-optimization default, baseline, runs the all-reduce per dimension)
    assert (json.loads(out)["intra"], json.loads(out)["total_time_us"]) == \
        ("scf", figure(capsys, *COLLECTIVE_RUN, "--all-reduce", "per-dimension"))
    # --scheduler optimal (the default) typed: not the file's baseline (nor ASTRA-sim's default, baseline)
    run = [a for a in COLLECTIVE_RUN if a not in ("--scheduler", "themis")]
    code, out, err = cli(capsys, *run, "--system", system, "--scheduler", "optimal", "--json")
    assert json.loads(out)["scheduler"] == "optimal"


def test_a_refusal_caused_by_a_recorded_option_names_the_record(capsys, tmp_path, step_module):
    written(capsys, step_module, "--algorithm", "ring,direct,in_switch", "--emit", "mlir", "-o", tmp_path / "m.mlir")
    refused(capsys, tmp_path / "m.mlir", "--topology", "Ring(4)_FC(2)_Ring(4)",
            match="m.mlir: wl.run records --algorithm ring,direct,in_switch: pass select-algorithm failed after "
                  "decompose-all-reduce, chunk, hierarchical-decompose: in_switch runs on Switch dimensions")


@pytest.mark.parametrize("in_switch", [False, True])
def test_offloaded_states_run_again_from_their_programs_and_the_recorded_pool(tmp_path, in_switch):
    from test_memory_workload import POOL, fsdp_step
    direct = astra_compile.compile(fsdp_step(), "Ring(4)", pool=POOL, offload="params,grads", in_switch=in_switch,
                                   mem_latency_ns=100.0, keep_tables=True)
    step_tables.write(str(tmp_path / "s"), direct.step_tables("csv"))   # what --emit tables -o writes
    (tmp_path / "m.mlir").write_text(direct.mlir)
    # the loads and stores are the programs' rows; the pool and the latency are recorded
    assert astra_compile.compile(str(tmp_path / "s"), None).total_time_us == direct.total_time_us
    assert astra_compile.compile(str(tmp_path / "m.mlir"), None).total_time_us == direct.total_time_us
    with pytest.raises(Exception, match="has no memory pool"):
        astra_compile.compile(str(tmp_path / "s"), None, use_recorded=False)
