"""Shared test helpers: compile a single collective to a schedule through the real pipeline."""
from astra_compile import driver
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
