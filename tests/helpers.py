"""Shared test helpers: compile a single collective to a schedule through the real pipeline; run the CLI in
process and check a refusal's contract (exit 2, one line)."""
from astra_compile import driver
from astra_compile.cli import main
from astra_compile.dialects import comm
from astra_compile.network.parse import parse_topology


def compile_collective(topology: str, kind: str, size: int, chunks: int = 1, algorithm: str | None = None,
                       bandwidth=None, latency=None, dims=None):
    topo = parse_topology(topology, bandwidth, latency)
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
