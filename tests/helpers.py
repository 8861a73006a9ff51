"""Shared test helpers: compile a single collective to a schedule through the real pipeline; run the CLI in
process and check a refusal's contract (exit 2, one line); build and run the worker of a real gloo job; the
pipeline captures' micro-batch copies lowered to 4 micro-batches (a module imports the fixture) or turned off."""
import textwrap

import pytest

from astra_compile.compiler.driver import driver
from astra_compile.compiler.main import main
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology


def compile_collective(topology: str, kind: str, size: int, chunks: int = 1, algorithm: str | None = None,
                       bandwidth=None, latency=None, dims=None, endpoint_delay=None):
    topo = parse_topology(topology, bandwidth, latency, endpoint_delay=endpoint_delay)
    ctx = comm.new_context()
    module = driver.build_module(ctx, topo, kind, size, dims)
    defaults = {"chunks": chunks}
    if algorithm:
        defaults["algorithm"] = algorithm
    driver.run_passes(module, topo, None, defaults)
    return driver.lower(module, topo)


def cli(capsys, *argv):
    """(exit status, stdout, stderr) of the CLI run in this process."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv, match: str = "") -> str:
    """Run the CLI and check the refusal contract: exit 2, exactly one line on stderr, containing `match`."""
    code, out, err = cli(capsys, *argv)
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("astra-compile: error: "), err
    assert match in err, err
    return err


def run_gloo_job(directory, worker: str, world: int, extra=lambda rank: [], timeout: float = 300,
                 env: dict | None = None) -> list[str]:
    """Run `worker` (Python source) as `world` processes of a real gloo job on loopback, each called with
    `rank store *extra(rank)`; returns each rank's output. A second run, with a fresh store, if gloo on a loaded
    machine loses one; a rank that still fails fails the test with its output."""
    import os
    import subprocess
    import sys
    script = directory / "worker.py"
    script.write_text(worker)
    for attempt in range(2):
        environment = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        procs = [subprocess.Popen([sys.executable, str(script), str(r), str(directory / f"store{attempt}"),
                                   *map(str, extra(r))], env=environment, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for r in range(world)]
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
        if all(p.returncode == 0 for p in procs):
            break
    for r, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {r} failed:\n{log}"
    return logs


# the worker's parts, in order (gloo_worker); test_ddp_buffers.py edits the text of test_moe_routing's worker
# (its mesh axis, a second warm-up step before "et ="): keep that shape
WORKER_HEAD = """import contextlib, importlib.util, os, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule
rank, store = int(sys.argv[1]), sys.argv[2]
[{args}] = sys.argv[3:]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size={world})
"""
WORKER_MODEL_FILE = """spec = importlib.util.spec_from_file_location("model", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
mesh = init_device_mesh("cpu", {shape}, mesh_dim_names={names})
"""
WORKER_MODEL_FILE_STEP = """model = m.parallelize(m.build_model(), mesh)
opt = torch.optim.AdamW(model.parameters())   # the capture's default optimizer
x = m.example_inputs()
def step():   # the capture's training step
    with m.step_context() if hasattr(m, "step_context") else contextlib.nullcontext():
        (m.loss(model(x)) if hasattr(m, "loss") else model(x).sum()).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
"""
WORKER_DDP_STEP = """model = DDP({module}{options})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = {inputs}
def step():
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
"""
WORKER_TAIL = """sys.stdout.flush()
os._exit(0)  # gloo's threads can abort the interpreter's teardown under load; the traces are written by now
"""


def gloo_worker(world: int, body: str | None = None, *, args=("out",), mesh: dict | None = None,
                ddp: str = "", inputs: str = "", ddp_options: str = "", seed: str = "0", warmups: int = 1,
                destroy: bool = False) -> str:
    """Source of a worker for run_gloo_job: each of `world` ranks joins the gloo job (its store from the command
    line, its further arguments named `args`), seeds torch with `seed` (source: "rank" gives each its own), defines
    a training `step()`, runs `warmups` of them, then `body` (source; by default one step recorded by traced() to
    `out`), and waits at a barrier for the others (then, with `destroy`, destroys the process group).

    mesh={axis: size}: `step()` trains the model file named by the argument `path` on that device mesh as the
    capture does (parallelize(build_model(), mesh), AdamW, example_inputs(), its step_context() and loss() if it
    has them). Otherwise it trains the module `ddp` (source) under DDP (`ddp_options`) with SGD on `inputs`."""
    parts = [WORKER_HEAD.format(args=", ".join(args), world=world)]
    if mesh:
        names = ", ".join(f'"{n}"' for n in mesh) + ("," if len(mesh) == 1 else "")
        parts.append(WORKER_MODEL_FILE.format(shape=tuple(mesh.values()), names=f"({names})"))
    parts.append(f"torch.manual_seed({seed})\n")
    parts.append(WORKER_MODEL_FILE_STEP if mesh else
                 WORKER_DDP_STEP.format(module=ddp, options=ddp_options and ", " + ddp_options, inputs=inputs))
    parts.append("step()\n" * warmups)
    parts.append(textwrap.dedent(traced("step()", "out") if body is None else body).lstrip("\n"))
    parts.append("dist.barrier()\n" + ("dist.destroy_process_group()\n" if destroy else "") + WORKER_TAIL)
    return "".join(parts)


def traced(recorded: str, et: str, kineto: str | None = None, profile: str = "") -> str:
    """Worker source (a gloo_worker body) that runs `recorded` under an ExecutionTraceObserver writing to `et` (source
    of the path) and, given `kineto`, under torch.profiler on the CPU (`profile`: its further options), which
    exports its trace to `kineto` (source) and is `prof` in `recorded`."""
    recorded = textwrap.dedent(recorded).strip("\n") + "\n"
    observer = f"et = ExecutionTraceObserver().register_callback({et})\n"
    if kineto is None:
        return observer + "et.start()\n" + recorded + "et.stop()\net.unregister_callback()\n"
    options = profile + ", " if profile else ""
    return (observer + f"with profile(activities=[ProfilerActivity.CPU], {options}execution_trace_observer=et,\n"
            f"             on_trace_ready=lambda p: p.export_chrome_trace({kineto})) as prof:\n"
            + textwrap.indent(recorded, "    "))


@pytest.fixture(autouse=True)
def replay_from_four(monkeypatch):
    """For a test module that imports it: its pipelines run 8 micro-batches, and copies start at REPLAY_FROM
    micro-batches (compiler/frontend/chunk_replay.py), lowered here to 4."""
    from astra_compile.compiler.frontend import chunk_replay
    monkeypatch.setattr(chunk_replay, "REPLAY_FROM", 4)


def dispatching_all(monkeypatch):
    """capture() from now on with every micro-batch dispatched (compiler/frontend/chunk_replay.py off): what a
    capture that copies micro-batches must record the same as."""
    from astra_compile.compiler.frontend import capture as capture_module
    real = capture_module._capture_rank
    monkeypatch.setattr(capture_module, "_capture_rank", lambda *a, replay=True, **k: real(*a, replay=False, **k))


@pytest.fixture
def calls_per_capture(monkeypatch):
    """For a model file whose stage modules append to its CALLS: CALLS counts the forwards of one stage's capture
    (emptied as each begins), as when each capture built its model afresh (a pipeline's stages share one now:
    compiler/frontend/shared_build.py)."""
    from astra_compile.compiler.frontend import capture as capture_module
    real = capture_module._capture_rank

    def emptied(spec, *args, **kwargs):
        spec.build_model.__globals__["CALLS"].clear()
        return real(spec, *args, **kwargs)
    monkeypatch.setattr(capture_module, "_capture_rank", emptied)


# a model file of LAYERS repeated blocks, its depth a top-level int, split into pipeline stages by
# pipeline_stage() (test_plan.py's reduced depth; test_shared_build.py's stages taking their parts); formatted
# with `layers`, dedented
DEEP = """
    import torch
    from torch import nn

    WIDTH, LAYERS = 256, {layers}
    HALF = LAYERS // 2     # derived from the depth: a shallower model's file must see it follow
    FSDP_UNITS = ["layers.*"]


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
            self.layers = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                                                      nn.Linear(4 * WIDTH, WIDTH)) for _ in range(LAYERS))

        def forward(self, x):
            return Stage(self, 0, LAYERS)(x)


    class Stage(nn.Module):
        def __init__(self, model, first, last):
            super().__init__()
            self.embed = model.embed if first == 0 else None
            self.layers = nn.ModuleList(model.layers[first:last])
            self.head = model.head if last == LAYERS else None

        def forward(self, x):
            x = self.embed(x) if self.embed is not None else x
            for layer in self.layers:
                x = layer(x)
            return self.head(x) if self.head is not None else x


    def build_model():
        assert len(range(HALF, LAYERS)) == LAYERS - LAYERS // 2
        return Net()


    def pipeline_stage(model, stage, num_stages):
        per = LAYERS // num_stages
        return Stage(model, stage * per, LAYERS if stage == num_stages - 1 else (stage + 1) * per)


    def example_inputs():
        return torch.randn(8, 128, WIDTH)
"""
