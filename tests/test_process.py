"""The process around a run: Ctrl-C at any moment ends it with one line and status 130, a model file's
own KeyboardInterrupt is its error, a thread a model file leaves running does not keep the process alive, and a
model file's os.chdir does not move the user's relative paths."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import cli, refused

RING4 = ["--collective", "all_reduce", "--size", "1MB", "--topology", "4_ring"]
MODEL = """
import torch
def build_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
def example_inputs():
    return torch.randn(8, 64)
"""
INTERRUPTED = "astra-compile: interrupted\n"


def _command(*argv):
    return [sys.executable, "-m", "astra_compile", *map(str, argv)]


def _sigint_after(delay: float, argv, cwd) -> tuple[int, str]:
    proc = subprocess.Popen(_command(*argv), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _whole_tables(out) -> bool:
    """A table directory with every NPU's table, or a step directory (a model file's) with every program and every
    collective's table directory."""
    meta = json.loads((out / "meta.json").read_text())
    if meta["format"] == "astra-compile-step":
        names = [f"program_{i}.csv" for i in range(len(meta["programs"]))]
        names += [f"collective_{i}" for i in range(len(meta["collectives"]))]
        return sorted(os.listdir(out)) == sorted(["meta.json"] + names) and \
            all(_whole_tables(out / f"collective_{i}") for i in range(len(meta["collectives"])))
    return sorted(os.listdir(out)) == sorted(["meta.json"] + [f"npu_{i}.csv" for i in range(meta["npus"])])


# ---- Ctrl-C -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["collective", "model file"])
def test_ctrl_c_at_any_moment_ends_in_one_line_with_status_130(tmp_path, kind):
    """SIGINT at several moments of a run (loading Python's modules and MLIR's or torch's, compiling, writing the
    output): each run ends with status 130 and the one line, or had already finished (0) or was past its report
    (killed by the signal in the interpreter's teardown: what a shell shows as 130); never a traceback, and the
    output is whole or absent, with no temporary left."""
    if kind == "collective":
        argv = ["--collective", "all_reduce", "--size", "64MB", "--chunks", "4", "--topology", "16x16_torus",
                "--scheduler", "baseline", "--emit", "tables", "-o", "out"]
        delays = (0.25, 0.5, 1.0, 1.5, 2.5)
    else:
        (tmp_path / "model.py").write_text(MODEL)
        argv = ["model.py", "--topology", "4_ring", "--emit", "tables", "-o", "out"]
        delays = (0.5, 1.5, 3.0)
    interrupted = 0
    for delay in delays:
        code, err = _sigint_after(delay, argv, tmp_path)
        out = tmp_path / "out"
        assert code in (0, 130, -signal.SIGINT), (delay, code, err)
        if code == 130:
            interrupted += 1
            assert err == INTERRUPTED, (delay, err)
        else:
            assert err == "" and _whole_tables(out), (delay, code, err)
        assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []   # no temporary left
        if out.exists():
            assert _whole_tables(out)
            subprocess.run(["rm", "-r", str(out)], check=True)
    assert interrupted >= 2, "the signals came too late to interrupt anything: slow the runs down"


def test_ctrl_c_inside_a_native_extensions_initialisation_waits_until_it_is_loaded(monkeypatch):
    """Raised inside the Python code a native extension runs while it loads, a KeyboardInterrupt made MLIR's
    bindings abort the process (SIGABRT); it is raised at the first line after the extension's loader returns."""
    from astra_compile.compiler.core import interrupt
    steps = []

    def native_init():   # stands for the loader's exec_module, which runs the extension's initialisation
        signal.raise_signal(signal.SIGINT)
        steps.append("initialised")
        return "module"
    monkeypatch.setattr(interrupt, "_NATIVE_INIT", {native_init.__code__})
    with interrupt.watched():
        with pytest.raises(KeyboardInterrupt):
            native_init()
            steps.append("after")
    assert steps == ["initialised"]
    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__


def test_ctrl_c_inside_torchs_package_body_waits_until_it_has_run():
    """torch's __init__ calls native code (its _C._initExtension) that calls back into Python: a KeyboardInterrupt
    raised there aborted a run started a moment before (SIGABRT, a pybind11 terminate message). It is held until
    that body has run, then raised at the importer's next line."""
    from astra_compile.compiler.core import interrupt
    steps = []
    body = compile("signal.raise_signal(signal.SIGINT)\nsteps.append('initialised')\n",
                   os.path.join("site-packages", "torch", "__init__.py"), "exec")   # a module body, as imported
    with interrupt.watched():
        with pytest.raises(KeyboardInterrupt):
            exec(body, {"signal": signal, "steps": steps})
            steps.append("after")
    assert steps == ["initialised"]
    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__


def test_an_interrupted_run_in_process_returns_130(capsys, monkeypatch):
    """main() called in a process (a test, a notebook): the interrupt is one line and status 130 there too."""
    from astra_compile.compiler.driver import driver

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(driver, "compile_schedule", interrupted)
    code, out, err = cli(capsys, *RING4)
    assert code == 130 and err == INTERRUPTED and out == ""


# ---- a model file's own KeyboardInterrupt, and a build_model() that returns nothing -----------------------------

@pytest.mark.parametrize("where", ["import", "build_model"])
def test_a_model_that_raises_keyboard_interrupt_is_its_error(capsys, tmp_path, where):
    path = tmp_path / "stops.py"
    body = "    raise KeyboardInterrupt\n" if where == "build_model" else "    return torch.nn.Linear(4, 4)\n"
    top = "raise KeyboardInterrupt('from the model')\n" if where == "import" else ""
    path.write_text(f"import torch\n{top}def build_model():\n{body}"
                    "def example_inputs():\n    return torch.randn(2, 4)\n")
    refused(capsys, path, "--topology", "4_ring", match=f"model file {path} raised KeyboardInterrupt itself")


def test_build_model_returning_none_is_refused(capsys, tmp_path):
    """Refused, not passed on to a parallelize() that ignores it and makes its own module (the step then timed)."""
    path = tmp_path / "none.py"
    path.write_text("import torch\ndef build_model():\n    return None\ndef example_inputs():\n"
                    "    return torch.randn(2, 4)\ndef parallelize(module, mesh):\n    return torch.nn.Linear(4, 4)\n")
    refused(capsys, path, "--topology", "4_ring", match="build_model() returned NoneType, not a torch.nn.Module")


def test_a_sweep_point_whose_model_raises_keyboard_interrupt_fails_alone(capsys, tmp_path):
    """It fails its point alone, never reaching the sweep as an interrupt (exit 130, the other points never run)."""
    (tmp_path / "stops.py").write_text("import torch\ndef build_model():\n    raise KeyboardInterrupt\n"
                                       "def example_inputs():\n    return torch.randn(2, 4)\n")
    (tmp_path / "fine.py").write_text(MODEL)
    sweep = tmp_path / "sweep.yml"
    sweep.write_text(json.dumps({"base": {"topology": "4_ring"}, "axes": {"input": ["stops.py", "fine.py"]}}))
    code, _, err = cli(capsys, "sweep", sweep, "-o", tmp_path / "r.csv", "--workers", "1")
    assert code == 1, err
    rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    status = {r.split(",")[1]: r.split(",")[2] for r in rows}
    assert status == {"stops.py": "error", "fine.py": "ok"}
    assert "raised KeyboardInterrupt itself" in err


# ---- threads a model file leaves running --------------------------------------------------------------------------

STRAY = "import threading\nthreading.Thread(target=threading.Event().wait, name='never ends').start()\n"


@pytest.mark.parametrize("broken", [False, True])
def test_a_thread_the_model_leaves_running_does_not_keep_the_process_alive(tmp_path, broken):
    (tmp_path / "model.py").write_text(STRAY + (MODEL if not broken else "def build_model():\n    return 1\n"))
    done = subprocess.run(_command("model.py", "--topology", "4_ring"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    if broken:
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "example_inputs" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert "step time" in done.stdout


def test_a_thread_the_model_leaves_running_does_not_hold_a_sweep(tmp_path):
    """Neither the sweep's worker waits for the thread when it ends, nor the sweep for the worker: no hang."""
    (tmp_path / "model.py").write_text(STRAY + MODEL)
    (tmp_path / "sweep.yml").write_text(json.dumps({"base": {"topology": "4_ring", "input": "model.py"},
                                                    "axes": {"peak-tflops": [100, 200]}}))
    done = subprocess.run(_command("sweep", "sweep.yml", "-o", "r.csv", "--workers", "1"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 3


# ---- a model file that changes the working directory ----------------------------------------------------------

def test_a_model_that_changes_directory_does_not_move_the_users_paths(capsys, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "model.py").write_text(f"import os\nos.chdir({str(elsewhere)!r})\n" + MODEL.replace(
        "def build_model():\n", f"def build_model():\n    os.chdir({str(elsewhere)!r})\n"))
    (work / "pool.json").write_text(json.dumps({"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 100,
                                                "remote-mem-bw": 50}))   # read after the capture
    monkeypatch.chdir(work)
    code, out, err = cli(capsys, "model.py", "--topology", "4_ring", "--pool", "pool.json", "--timeline", "tl.json",
                         "--emit", "report")
    assert code == 0, err
    assert os.getcwd() == str(work)
    assert (work / "tl.json").exists() and os.listdir(elsewhere) == []
    code, out, err = cli(capsys, "model.py", "--topology", "4_ring", "--emit", "mlir", "-o", "step.mlir")
    assert code == 0, err
    assert (work / "step.mlir").read_text().startswith("module") and os.listdir(elsewhere) == []


def test_a_ctrl_c_after_cp_sat_reaches_our_handler():
    """CP-SAT installs its own SIGINT handler for a solve and puts the default one back after it, not the one it
    found: every Ctrl-C after the optimal scheduler (or multitree_optimal) had run killed the process outright,
    status -2, no message, an output half-renamed. Its solves now leave SIGINT alone."""
    code = textwrap.dedent("""
        import os, signal, sys, time
        from astra_compile.compiler.driver import driver
        from astra_compile.dialects import comm
        from astra_compile.network.parse import parse_topology
        seen = []
        signal.signal(signal.SIGINT, lambda *a: seen.append(1))
        topology = parse_topology("4x4_torus")
        ctx = comm.new_context()
        source = str(driver.build_module(ctx, topology, "all_reduce", 2 ** 26, None))
        # the optimal-balance pass's solve, then multitree_optimal's
        for defaults in ({"chunks": 8}, {"chunks": 8, "algorithm": "multitree_optimal"}):
            driver.compile_schedule(source, ctx, topology, None, defaults)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        sys.stdout.write(f"handled {len(seen)}\\n")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.endswith("handled 2\n"), (done.returncode, done.stderr[-500:])
