"""GPU presets and device files (network/devices.py, --gpu; docs/compute.md) and the roofline's per-dtype peaks."""
import json

import jsonschema
import numpy as np
import pytest

from astra_compile.network import devices
from astra_compile.network.dtypes import CODE, DTYPES, NO_DTYPE
from astra_compile.network.errors import UserError
from astra_compile.runtime.workload_engine import Roofline

SCHEMA = json.load(open(devices.os.path.join(devices.os.path.dirname(devices.PRESETS_FILE), "device.schema.json")))
NAMES = ("v100", "a100-40gb", "a100-80gb", "h100", "h100-96gb", "h100-pcie", "h200", "b200", "gb200", "mi300x", "mi325x", "mi355x")


def test_every_preset_loads_positive_with_a_source_for_every_number():
    table = devices.presets()
    assert tuple(table) == NAMES
    for name, device in table.items():
        assert device.name == name and device.origin == "preset"
        assert len(device.peak_tflops) == len(DTYPES) and all(p > 0 for p in device.peak_tflops)
        assert device.mem_bw_tb_s > 0 and device.memory_gb > 0
        # a source for every number it has (multiprocessors and efficiency are optional: the h200's are measured)
        has = {k for k in devices.NUMBERS if k not in ("multiprocessors", "efficiency")} \
            | ({"multiprocessors"} if device.multiprocessors else set()) | ({"efficiency"} if device.efficiency else set())
        assert set(dict(device.sources)) == has, name
        assert device.multiprocessors > 0, name
        jsonschema.validate(device.to_dict(), SCHEMA)
        assert devices.parse(device.to_dict(), name, "preset") == device   # the writer's output reads back


def test_known_datasheet_figures():
    h200, h100, a100 = (devices.resolve(n) for n in ("h200", "H100", "a100-80gb"))
    assert h200.peak_tflops == (67, 67, 494.5, 989.5, 989.5, 1979) and h200.mem_bw_tb_s == 4.8
    assert h200.memory_gb == 141
    assert h100.peak_tflops == h200.peak_tflops and h100.mem_bw_tb_s == 3.35 and h100.memory_gb == 80
    assert a100.peak("bf16") == 312 and a100.peak("tf32") == 156 and a100.peak("fp32") == 19.5
    assert a100.mem_gbps == pytest.approx(2.039e12 / 2**30)
    assert devices.resolve("a100-40gb").mem_bw_tb_s == 1.555
    # torchtitan's Grand Teton GPU: an H100 SXM5's peaks, 96 GB of HBM2e (six stacks at the PCIe card's 0.4 TB/s)
    h100_96 = devices.resolve("h100-96gb")
    assert h100_96.peak_tflops == h100.peak_tflops and (h100_96.mem_bw_tb_s, h100_96.memory_gb) == (2.4, 96)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(UserError, match="--gpu 'h300': unknown GPU; known: v100, a100-40gb, .*mi355x"):
        devices.resolve("h300")


GOOD = {"name": "mine", "peak_tflops": {"fp64": 1, "fp32": 2, "tf32": 3, "bf16": 4, "fp16": 4, "fp8": 8},
        "mem_bw_tb_s": 1.5, "memory_gb": 24}


def write(tmp_path, data, name="gpu.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps(data))   # JSON is YAML too
    return str(path)


def test_device_file_reads_yaml_and_json(tmp_path):
    for name in ("gpu.yaml", "gpu.json"):
        path = write(tmp_path, {**GOOD, "efficiency": {"matmul": 0.7}, "sources": {"memory_gb": "my sheet"}}, name)
        device = devices.resolve(path)
        assert device.peak_tflops == (1, 2, 3, 4, 4, 8) and device.memory_gb == 24 and device.origin == path
        assert dict(device.efficiency) == {"matmul": 0.7}
        assert device.describe()["source"] == f"device file {path}"


@pytest.mark.parametrize("change, message", [
    ({"mem_bw_tb_s": None}, "field 'mem_bw_tb_s' is missing"),
    ({"peak_tflops": {**GOOD["peak_tflops"], "fp8": None}}, "field 'peak_tflops.fp8' is missing"),
    ({"peak_tflops": {**GOOD["peak_tflops"], "bf16": -4}}, "field 'peak_tflops.bf16' is -4; expected TFLOP/s"),
    ({"peak_tflops": {**GOOD["peak_tflops"], "int4": 9}}, "unknown field 'peak_tflops.int4'"),
    ({"memory_gb": -1}, "field 'memory_gb' is -1; expected decimal GB"),
    ({"mem_bw_tb_s": "fast"}, "field 'mem_bw_tb_s' is 'fast'"),
    ({"clock": 2}, "unknown field 'clock'"),
    ({"version": 2}, "field 'version' is 2; this reader knows version 1"),
    ({"efficiency": {"matmul": 1.5}}, "field 'efficiency.matmul' is 1.5; expected fraction of peak a large matmul op reaches"),
    ({"efficiency": {"matmul.int4": 0.5}}, "unknown field 'efficiency.matmul.int4'"),
    ({"efficiency": {"host_us": -1}}, "field 'efficiency.host_us' is -1; expected microseconds"),
    ({"efficiency": {"view_us": 2000}}, "field 'efficiency.view_us' is 2000; expected microseconds of host time to "
                                        "dispatch one view"),
    ({"multiprocessors": 1.5}, "field 'multiprocessors' is 1.5; expected a whole number"),
    ({"sources": {"clock": "x"}}, "unknown field 'sources.clock'"),
])
def test_bad_device_file_is_one_line_naming_file_field_value(tmp_path, change, message):
    data = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    data["peak_tflops"] = {k: v for k, v in data["peak_tflops"].items() if v is not None} \
        if isinstance(data["peak_tflops"], dict) else data["peak_tflops"]
    path = write(tmp_path, data)
    with pytest.raises(UserError) as e:
        devices.resolve(path)
    assert str(e.value).startswith(f"device file {path}: ") and message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(jsonschema.ValidationError):   # the schema says the same
        jsonschema.validate(data, SCHEMA)


def test_roofline_per_dtype_peak():
    flops, nbytes = np.array([1e6, 1e6, 1e6, 1e6]), np.array([0.0, 0.0, 0.0, 1e9])
    dtype = np.array([CODE["bf16"], CODE["fp32"], NO_DTYPE, CODE["bf16"]])
    one = Roofline(peak_tflops=10.0, mem_gbps=100.0)
    # without a device every dtype runs at the one peak: today's figures exactly, with or without a dtype column
    assert list(one.time_ns(flops, nbytes, dtype)) == list(one.time_ns(flops, nbytes))
    assert one.time_ns(flops, nbytes)[0] == 1e6 / 10e3
    h200 = devices.resolve("h200")
    roof = Roofline(peak_tflops=h200.peak("fp32"), mem_gbps=h200.mem_gbps, dtype_tflops=h200.peak_tflops)
    got = roof.time_ns(flops, nbytes, dtype)
    assert got[0] == pytest.approx(1e6 / 989.5e3) and got[1] == got[2] == pytest.approx(1e6 / 67e3)
    assert got[3] == pytest.approx(1e9 / (4.8e12 / 1e9))   # memory-bound: bytes at 4.8 decimal TB/s


# --gpu on the command line and in the API: tests/ir/step_two_ranks.mlir, whose rank 0 computes an mm of 2^30 FLOPs
# and 1 MiB, then an add of 2^20 FLOPs and 1 MiB
import os   # noqa: E402

import astra_compile   # noqa: E402
from helpers import cli, refused   # noqa: E402

STEP = os.path.join(os.path.dirname(__file__), "ir", "step_two_ranks.mlir")
MIB = 2 ** 20


def step_json(capsys, *extra):
    code, out, err = cli(capsys, STEP, "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_gpu_h200_compute_time_by_hand(capsys):
    report = step_json(capsys, "--gpu", "h200")
    peak, bw = 67e12, 4.8e12   # H200 SXM: fp32 67 TFLOP/s (ops have no dtype: fp32), 4.8 decimal TB/s
    model = devices.presets()["h200"].compute_model()   # its efficiency: a fraction of each, and a launch time
    matmul, elementwise, launch = model.value("matmul.fp32"), model.value("elementwise"), model.value("launch_us")
    mm = max(2 ** 30 / (peak * matmul), MIB / (bw * elementwise)) + launch * 1e-6   # no shapes: no tile penalty
    add = max(MIB / peak, MIB / (bw * elementwise)) + launch * 1e-6
    assert report["compute_time_us"] == pytest.approx((mm + add) * 1e6, rel=1e-12)
    assert report["peak_tflops"] == 67 and report["mem_bw_gbps"] == pytest.approx(4.8e12 / 2 ** 30)
    assert report["gpu"] == {"name": "h200", "description": "NVIDIA H200 SXM 141GB",
                             "source": "preset h200 (vendor datasheets, docs/compute.md)"}
    code, out, _ = cli(capsys, STEP, "--gpu", "h200")
    assert "gpu             h200 (NVIDIA H200 SXM 141GB)" in out and "compute model of the gpu below 67 TFLOPS" in out


def test_without_gpu_the_report_is_unchanged(capsys):
    report = step_json(capsys)
    assert "gpu" not in report and report["peak_tflops"] == 234.0 and report["mem_bw_gbps"] == 1896.0
    assert report["compute_time_us"] == pytest.approx(
        (max(2 ** 30 / 234e12, MIB / (1896 * 2 ** 30)) + max(MIB / 234e12, MIB / (1896 * 2 ** 30))) * 1e6)


def test_peak_tflops_and_mem_bw_beside_gpu_override_its_fp32_peak_and_bandwidth(capsys):
    report = step_json(capsys, "--gpu", "h200", "--peak-tflops", "100")
    assert report["peak_tflops"] == 100 and report["mem_bw_gbps"] == pytest.approx(4.8e12 / 2 ** 30)
    report = step_json(capsys, "--gpu", "h200", "--mem-bw", "1000")
    assert report["peak_tflops"] == 67 and report["mem_bw_gbps"] == 1000
    assert report["gpu"]["name"] == "h200"


def test_api_gpu_override():
    report = astra_compile.compile(STEP, None, gpu="a100-80gb").to_dict()
    assert report["peak_tflops"] == 19.5 and report["gpu"]["name"] == "a100-80gb"
    model = devices.presets()["a100-80gb"].compute_model()
    launch, elementwise = model.value("launch_us") * 1e-6, model.value("elementwise")
    assert report["compute_time_us"] == pytest.approx(
        (2 ** 30 / (19.5e12 * model.value("matmul.fp32")) + launch + MIB / (2.039e12 * elementwise) + launch) * 1e6)
    assert astra_compile.compile(STEP, None, gpu="h200", peak_tflops=10.0).to_dict()["peak_tflops"] == 10.0


def test_gpu_refusals(capsys, tmp_path):
    refused(capsys, STEP, "--gpu", "h300", match="--gpu 'h300': unknown GPU; known: v100, a100-40gb, a100-80gb, "
                                                 "h100, h100-96gb, h100-pcie, h200, b200, gb200, mi300x, mi325x, mi355x")
    path = write(tmp_path, {**GOOD, "memory_gb": -3})
    refused(capsys, STEP, "--gpu", path, match=f"device file {path}: field 'memory_gb' is -3")
    refused(capsys, STEP, "--gpu", str(tmp_path / "none.yaml"), match="none.yaml")
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", "--topology", "Ring(4)", "--gpu", "h200",
            match="--gpu does not apply to a collective run")


def test_docs_table_is_the_presets():
    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "compute.md")).read()
    rows = {cells[0].strip("` "): cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("| `"))}
    table = devices.presets()
    assert set(rows) == set(table)
    for name, device in table.items():
        assert [float(c) for c in rows[name][2:]] == [*device.peak_tflops, device.mem_bw_tb_s, device.memory_gb]
        assert rows[name][1] == device.description


def test_sweep_over_gpus_keeps_the_results_columns(capsys, tmp_path):
    from astra_compile.compiler.sweep import results
    assert "gpu" not in results.report_fields("training step")   # a results file's columns are those before --gpu
    spec = tmp_path / "sweep.yml"
    spec.write_text(json.dumps({"base": {"input": STEP}, "axes": {"gpu": ["h100", "mi300x"]}}))
    code, _, err = cli(capsys, "sweep", spec, "-o", tmp_path / "out.csv")
    assert code == 0, err
    import csv
    rows = {r["gpu"]: r for r in csv.DictReader(open(tmp_path / "out.csv"))}
    assert float(rows["h100"]["peak_tflops"]) == 67 and float(rows["mi300x"]["peak_tflops"]) == 163.4
    assert float(rows["mi300x"]["mem_bw_gbps"]) == pytest.approx(5.3e12 / 2 ** 30)


def test_gpu_wins_over_a_system_files_peak_and_a_step_directorys_record(capsys, tmp_path):
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"all-reduce-implementation": ["ring"], "roofline-enabled": 1, "peak-perf": 900}))
    assert step_json(capsys, "--system", system)["peak_tflops"] == 900
    assert step_json(capsys, "--system", system, "--gpu", "h200")["peak_tflops"] == 67
    assert step_json(capsys, "--system", system, "--gpu", "h200", "--peak-tflops", "50")["peak_tflops"] == 50
    out = tmp_path / "step"
    code, _, err = cli(capsys, STEP, "--gpu", "h200", "--emit", "tables", "-o", out)
    assert code == 0, err
    code, text, err = cli(capsys, out, "--json")   # records the device, which times its compute again
    again = json.loads(text)
    assert (again["peak_tflops"], again["gpu"]["name"]) == (67, "h200") and err == ""
    code, text, err = cli(capsys, out, "--gpu", "mi300x", "--json")
    assert json.loads(text)["peak_tflops"] == 163.4 and json.loads(text)["gpu"]["name"] == "mi300x"
