"""An option that would change nothing in the run is refused, never ignored (docs/reliability.md, Options): the
scheduler, --compare and the all-reduce split where the run has no dimensions to act across (a whole-network
algorithm: --algorithm's, a --system file's or the one a module's phases run; an all-reduce over one dimension),
--scheduler beside --pass-pipeline, --capture-limit beside anything but a model file. Each of these ran with exit 0
and the same figures as without the option."""
import json
import os

import pytest

from astra_compile import algorithms
from helpers import cli, refused

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
TORUS = ["--collective", "all_reduce", "--size", "64MB", "--topology", "4x4_torus"]
WHOLE_NETWORK = ["multitree", "multitree_optimal", "flat_ring", "rank_ring", "flat_direct", "flat_halving_doubling",
                 "flat_double_binary_tree", "hdrm"]
ACROSS_DIMENSIONS = [["--scheduler", "themis"], ["--scheduler", "baseline"], ["--compare"],
                     ["--all-reduce", "hierarchical"]]
MULTITREE_US = 1254.0   # 64MB all-reduce on 4x4_torus by MultiTree: what it took with or without --scheduler


def total_us(capsys, *argv) -> float:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)["total_time_us"]


def test_the_list_is_every_whole_network_algorithm():
    assert sorted(WHOLE_NETWORK) == sorted(a.name for a in algorithms.scoped(algorithms.NETWORK, algorithms.RANKS))


@pytest.mark.parametrize("name", WHOLE_NETWORK)
@pytest.mark.parametrize("extra", ACROSS_DIMENSIONS)
def test_options_across_dimensions_are_refused_with_a_whole_network_algorithm(capsys, name, extra):
    err = refused(capsys, *TORUS, "--algorithm", name, *extra,
                  match=f"{extra[0]} applies to per-dimension algorithms")
    assert f"--algorithm {name} runs one phase over the whole network" in err


def test_a_whole_network_run_without_them_is_unchanged(capsys):
    assert total_us(capsys, *TORUS, "--algorithm", "multitree") == MULTITREE_US
    # its own spelling (an alias) is the same algorithm, refused the same way
    refused(capsys, *TORUS, "--algorithm", "Multi-Tree", "--scheduler", "optimal", match="--algorithm multitree runs")


@pytest.mark.parametrize("extra", ACROSS_DIMENSIONS)
def test_a_module_whose_phases_run_a_whole_network_algorithm_refuses_them(capsys, tmp_path, extra):
    path = tmp_path / "mt.mlir"
    code, _, err = cli(capsys, *TORUS, "--algorithm", "multitree", "--emit", "mlir", "-o", path)
    assert code == 0, err
    assert total_us(capsys, path) == MULTITREE_US
    err = refused(capsys, path, *extra, match=f"{extra[0]} applies to per-dimension algorithms (it ")
    assert f"the phases of {path} run multitree, one phase over the whole network" in err


def system(tmp_path, **keys) -> str:
    path = tmp_path / "sys.json"
    path.write_text(json.dumps({"intra-dimension-scheduling": "FIFO", **keys}))
    return str(path)


def test_a_system_files_whole_network_implementation_refuses_a_scheduler_typed(capsys, tmp_path):
    sys_file = system(tmp_path, **{"all-reduce-implementation": ["oneRing"]})
    refused(capsys, *TORUS, "--system", sys_file, "--scheduler", "themis",
            match=f'{sys_file}: all-reduce-implementation ["oneRing"]: --scheduler applies to per-dimension')
    # the file's own scheduling keys are its description of the system, not a command: they are not refused
    code, out, err = cli(capsys, *TORUS, "--system", system(tmp_path, **{"all-reduce-implementation": ["oneRing"],
                                                                          "inter-dimension-scheduling": "themis"}))
    assert code == 0, err


def test_a_system_files_split_is_not_forced_on_a_whole_network_algorithm_typed(capsys, tmp_path):
    """The file's collective-optimization (baseline when absent: --all-reduce per-dimension) is not applied to
    --algorithm multitree: its run is not refused for an --all-reduce nobody typed."""
    sys_file = system(tmp_path, **{"all-reduce-implementation": ["ring", "ring"]})
    assert total_us(capsys, *TORUS, "--system", sys_file, "--algorithm", "multitree") == MULTITREE_US


def test_scheduler_beside_a_pass_pipeline_is_refused(capsys):
    pipeline = "decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm"
    refused(capsys, *TORUS, "--pass-pipeline", pipeline, "--scheduler", "themis",
            match="--scheduler applies to runs without --pass-pipeline")
    assert total_us(capsys, *TORUS, "--pass-pipeline", pipeline) == 2349.75


@pytest.mark.parametrize("split", ["hierarchical", "per-dimension"])
@pytest.mark.parametrize("where", [["--topology", "Ring(8)"], ["--topology", "4x4_torus", "--dims", "1"]])
def test_the_split_of_an_all_reduce_over_one_dimension_is_refused(capsys, split, where):
    refused(capsys, "--collective", "all_reduce", "--size", "1MB", *where, "--chunks", "4", "--all-reduce", split,
            match="--all-reduce applies to an all-reduce over several dimensions")


def test_the_split_of_a_decomposed_module_is_refused_and_a_module_to_split_takes_it(capsys, tmp_path):
    decomposed = tmp_path / "d.mlir"
    code, _, err = cli(capsys, *TORUS, "--chunks", "4", "--emit", "mlir", "-o", decomposed)
    assert code == 0, err
    refused(capsys, decomposed, "--all-reduce", "per-dimension",
            match=f"{decomposed} holds no all-reduce over several dimensions")
    whole = tmp_path / "w.mlir"
    whole.write_text('"comm.all_reduce"() {bytes = 67108864 : i64, dims = array<i64: 0, 1>, name = "g", chunks = 4 '
                     ': i64} : () -> !comm.token\n')
    hierarchical = total_us(capsys, whole, "--topology", "4x4_torus", "--scheduler", "baseline")
    per_dimension = total_us(capsys, whole, "--topology", "4x4_torus", "--scheduler", "baseline", "--all-reduce",
                             "per-dimension")
    assert per_dimension > hierarchical   # it moves the whole buffer on both dimensions


def test_the_tree_view_of_a_schedule_without_trees_prints_nothing(capsys):
    code, out, err = cli(capsys, *TORUS, "--emit", "tables", "--npu", "0", "--table-view", "trees")
    assert (code, out) == (2, "") and "the tree view needs a multitree schedule" in err


@pytest.fixture(scope="module")
def step_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))   # mlp_dp captured once for its 4-NPU runs


MLP = os.path.join(EXAMPLES, "mlp_dp.py")


def test_a_steps_split_is_refused_where_each_all_reduce_runs_over_one_dimension(capsys, tmp_path, step_cache):
    out_dir = tmp_path / "tables"
    err = refused(capsys, MLP, "--topology", "Ring(4)", "--cache", step_cache, "--all-reduce", "per-dimension",
                  "--emit", "tables", "-o", out_dir,
                  match="--all-reduce applies to an all-reduce over several dimensions")
    assert "each of the step's all-reduces runs over one dimension" in err and not out_dir.exists()
    # dp over both dimensions of 2x2_torus: the split applies and costs time
    code, out, err = cli(capsys, MLP, "--topology", "2x2_torus", "--cache", step_cache, "--json")
    code2, out2, err2 = cli(capsys, MLP, "--topology", "2x2_torus", "--cache", step_cache, "--json", "--all-reduce",
                            "per-dimension")
    assert code == code2 == 0, err + err2
    assert json.loads(out2)["total_time_us"] > json.loads(out)["total_time_us"]


def test_a_step_refuses_a_scheduler_beside_a_whole_network_algorithm(capsys, tmp_path, step_cache):
    refused(capsys, MLP, "--topology", "2x2_torus", "--cache", step_cache, "--algorithm", "flat_ring", "--scheduler",
            "baseline", match="--scheduler applies to per-dimension algorithms")
    sys_file = system(tmp_path, **{"all-reduce-implementation": ["oneRing"]})
    refused(capsys, MLP, "--topology", "2x2_torus", "--cache", step_cache, "--system", sys_file, "--scheduler",
            "themis", match='all-reduce-implementation ["oneRing"]: --scheduler applies to per-dimension')
    # the file's default split (per-dimension) is not applied to the flat algorithm typed: the step runs
    sys_file = system(tmp_path, **{"all-reduce-implementation": ["ring", "ring"]})
    code, out, err = cli(capsys, MLP, "--topology", "2x2_torus", "--cache", step_cache, "--system", sys_file,
                         "--algorithm", "flat_ring", "--json")
    assert code == 0, err
    assert {c["algorithm"] for c in json.loads(out)["collectives"]} == {"ring@all"}


def test_capture_limit_applies_to_model_files_only(capsys, tmp_path, step_cache):
    module = tmp_path / "step.mlir"
    code, _, err = cli(capsys, MLP, "--topology", "2x2_torus", "--cache", step_cache, "--emit", "mlir", "-o", module)
    assert code == 0, err
    refused(capsys, module, "--capture-limit", "100", match="--capture-limit applies to model files")
    refused(capsys, "trace_rank0.json", "trace_rank1.json", "--topology", "Ring(2)", "--capture-limit", "100",
            match="--capture-limit applies to model files")


def test_json_with_the_tree_view_is_refused(capsys):
    """The trees view printed its text and ignored --json."""
    refused(capsys, *TORUS, "--algorithm", "multitree", "--emit", "tables", "--npu", "0", "--table-view", "trees",
            "--json", match="--json applies to the rows view of a table")


@pytest.mark.parametrize("execution", ["symmetric", "full"])
@pytest.mark.parametrize("output", ["--timeline", "--plot"])
def test_execution_beside_a_congestion_timeline_is_refused(capsys, tmp_path, execution, output):
    """A congestion timeline executes every NPU: --execution symmetric ran full, as the report said, and exit 0."""
    target = tmp_path / ("t.json" if output == "--timeline" else "t.png")
    refused(capsys, *TORUS, "--backend", "congestion", "--execution", execution, output, target,
            match="--execution applies to runs without a congestion --timeline or --plot")
    assert not target.exists()
    code, out, err = cli(capsys, *TORUS, "--backend", "congestion", "--timeline", tmp_path / "t.json")
    assert code == 0 and "(full execution)" in out, err
    code, out, err = cli(capsys, *TORUS, "--execution", "symmetric", "--timeline", tmp_path / "t.json")
    assert code == 0 and "analytical (symmetric execution)" in out, err   # the analytical timeline takes it
