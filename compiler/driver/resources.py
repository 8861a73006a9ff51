"""How much memory a run will take, estimated before the work that takes it, so a request that cannot fit is
refused in one line instead of the process being killed for memory (or swapping for an hour).

Three checkpoints, each before the structures it sizes are built:
- `planning`: before the passes, the whole-network searches (MultiTree's n trees over n NPUs, find-cycle,
  place-ranks) hold about n^2 entries;
- `templates`: before the lowering, each phase's transfer template (algorithms/, counted by its `footprint`
  without building it);
- `tables`: before the runtime, the rows of every table it executes (NPU 0's only when the schedule is symmetric),
  the shard layouts, and the verifier's symbolic cells (`verification` before the tables are read, `verified_cells`
  once they are).

The per-item costs below are measured peaks of this implementation (Python objects and numpy arrays together,
benchmarks/resources.py prints estimate against measured peak); the estimate is meant to be within a factor of
two, and errs on the high side.
"""
from __future__ import annotations

import os

from ... import algorithms
from ...network.kinds import ALL_REDUCE, ALL_REDUCE_HALVES, COLLECTIVES
from ...network.topology import Topology
from ...network.blocks import Symmetry
from ..core.estimate import Estimate
from ..lowering.lower import phase_symmetry

BASE = 160 * 2**20           # interpreter, numpy, the MLIR bindings, OR-Tools and a small run (resident)
PER_TEMPLATE_TRANSFER = 300  # a template transfer: built from a Python tuple, sorted, kept as 11 int64 columns
# an executed table row: the analytical engine keeps its columns and a Python record per message; the congestion
# runtime reads the tables in batches (runtime/congestion_plan.py) and keeps int32 arrays per message and per step
# for itself and its compiled core, plus the batch being read
PER_ROW = {"analytical": 600, "congestion": 24}
PER_BATCH_ROW = 250          # congestion: a row of the batch being turned into messages (columns, sort keys)
PER_TIMELINE_ROW = 150       # congestion with a timeline: the link transfers a row's message makes, as records
PER_VERIFIED_ROW = 600       # every NPU's table row while the verifier executes it


def _rows_bytes(rows: int, backend: str, timeline: bool = False) -> int:
    """Memory of executing `rows` table rows on a backend."""
    if backend != "congestion":
        return rows * PER_ROW.get(backend, max(PER_ROW.values()))
    from ...runtime.phases import ROWS_PER_BATCH
    return rows * (PER_ROW["congestion"] + (PER_TIMELINE_ROW if timeline else 0)) + \
        min(rows, ROWS_PER_BATCH) * PER_BATCH_ROW


PER_PLAN_ENTRY = 2500        # a whole-network search's (tree, node) entry: parent, step, link, candidates
PER_SHARD = 16               # an NPU's reduce-scatter shard of one chunk: offset and length
PER_NPU = 200                # per NPU of the network: coordinates, ranks, link numbering
# the symbolic verifier once its rows are read (runtime/verify_symbolic.py; benchmarks/verify_symbolic.py measures):
PER_KEPT_ROW = 48            # a row's message as it keeps it: step, peers, first interval, count, shift
PER_CELL = 4                 # a cell (an NPU's piece of a buffer): its value's id
PER_CHECKED_CELL = 20        # a cell (an NPU's piece of a buffer): its value id, and the checks' temporaries over it
PER_MOVED_CELL = 4           # a step's payload: the value each cell it reads carries until the step writes
PER_SLICE_CELL = 100         # a slice of a step (runtime.verify_symbolic.SLICE cells at most): its index arrays


def request(topology: Topology, module, algorithm: str | None, chunks: int | None, execution: str = "auto",
            backend: str = "analytical", timeline: bool = False) -> Estimate:
    """Before the passes, from the module's collectives and the command line's algorithm and chunks: the planning
    search, the templates and the rows the run will need at the least (NPU 0's alone, unless the request already
    rules symmetry out: a size that does not split into equal chunks, or an algorithm whose NPUs differ)."""
    from ...dialects import comm
    from ...passes.select_algorithm import algorithm_for
    name = algorithms.canonical(algorithm or (topology.dims[0].default_algorithm if topology.graph else ""))
    whole = algorithms.REGISTRY[name] if name and algorithms.REGISTRY[name].scope != algorithms.DIMENSION else None
    per_dim = [algorithms.canonical(a) for a in algorithm.split(",")] if algorithm and not whole else None
    n = topology.npus
    planning = whole.plan_size(n) if whole else 0
    distinct, per_npu, symmetric, shards = {}, 0, True, 0
    for op in comm.ops(module):
        kind = comm.short_name(op)
        if kind not in COLLECTIVES:
            continue
        v = comm.view(op)
        nbytes, dims = int(v.bytes or 0), list(v.dims) if v.dims is not None else list(range(topology.ndims))
        c = int(v.chunks or chunks or 1)
        symmetric &= nbytes % c == 0
        shards += n * c * PER_SHARD
        groups = []
        for half in (ALL_REDUCE_HALVES if kind == ALL_REDUCE else (kind,)):
            if whole is not None:
                groups.append((whole, half, n, True))
                continue
            for d in dims:
                if per_dim:
                    word = per_dim[0] if len(per_dim) == 1 else per_dim[d] if d < len(per_dim) else None
                else:
                    word = algorithm_for(d, topology.dims, None, half)
                alg = algorithms.REGISTRY.get(algorithms.canonical(word) or "") if word else None
                if alg is None or alg.scope != algorithms.DIMENSION:
                    continue  # select-algorithm names what is wrong with it, or plans a whole-network one
                dim = topology.dims[d]
                groups.append((alg, half, dim.size, dim.kind.neighbour_links))
                symmetric &= phase_symmetry(topology, half, d, alg) >= Symmetry.STEPS
        for alg, half, k, bid in groups:
            distinct[alg.name, half, k, bid] = alg.footprint(half, k, bid)
            per_npu += _member_rows(alg, half, k, bid, c)
        symmetric &= whole is None and execution != "full"
    templates = sum(distinct.values())
    executed = 1 if symmetric else n
    rows = _rows_bytes(per_npu * executed, backend, timeline)
    total = (BASE + n * PER_NPU + shards + planning * PER_PLAN_ENTRY + templates * PER_TEMPLATE_TRANSFER + rows)
    parts = [(planning * PER_PLAN_ENTRY, f"{whole.planned_by if whole else ''} over {n} NPUs"),
             (templates * PER_TEMPLATE_TRANSFER, f"{templates:.3g} template transfers"),
             (rows, f"{per_npu:.3g} rows per NPU on {executed} NPU(s)"),
             (n * PER_NPU + shards, f"{n} NPUs")]
    return Estimate(total, per_npu * executed, max(parts)[1])


def _group(topology: Topology, plan, stage) -> tuple[object, int, bool]:
    """(algorithm, members, bidirectional) of a stage's template, as the lowering builds it."""
    from ..lowering.plans import FLAT
    alg = algorithms.for_phase(stage.algorithm, flat=stage.dim == FLAT)
    if stage.dim == FLAT or alg.scope != algorithms.DIMENSION:
        return alg, topology.npus, True
    dim = topology.dims[stage.dim]
    return alg, dim.size, dim.kind.neighbour_links


def templates(topology: Topology, plans) -> Estimate:
    """Before the lowering: the distinct templates it builds (cached, one per algorithm, kind and group)."""
    seen = {}
    for plan in plans:
        for stage in plan.stages:
            alg, k, bid = _group(topology, plan, stage)
            seen[alg.name, plan.kind, k, bid] = alg.footprint(plan.kind, k, bid)
    total = sum(seen.values())
    return Estimate(BASE + total * PER_TEMPLATE_TRANSFER, what=f"{total:.3g} template transfers")


def _rows_per_npu(topology: Topology, plans) -> int:
    rows = 0
    for plan in plans:
        for stage in plan.stages:
            alg, k, bid = _group(topology, plan, stage)
            rows += _member_rows(alg, plan.kind, k, bid, plan.chunks)
    return rows


def _member_rows(alg, kind: str, k: int, bidirectional: bool, chunks: int) -> int:
    """A member's rows of a phase over `chunks` chunks: each transfer is a SEND row on one member and a RECV row on
    another, shared by the k members (rounded up)."""
    return chunks * -(-2 * alg.footprint(kind, k, bidirectional) // k)


def tables(topology: Topology, plans, symmetric: bool, backend: str = "analytical", timeline: bool = False) -> Estimate:
    """Before the runtime: the rows of the tables it executes (NPU 0's alone when symmetric) and the shard
    layouts."""
    per_npu = _rows_per_npu(topology, plans)
    executed = 1 if symmetric else topology.npus
    shards = sum(topology.npus * p.chunks * PER_SHARD for p in plans)
    return Estimate(BASE + _rows_bytes(per_npu * executed, backend, timeline) + shards, per_npu * executed,
                    f"{per_npu:.3g} rows per NPU on {executed} NPU(s)")


def verification(topology: Topology, plans) -> Estimate:
    """Before --verify reads the tables: every NPU's rows (verified_cells sizes the rest once they are read)."""
    rows = _rows_per_npu(topology, plans) * topology.npus
    return Estimate(BASE + rows * PER_VERIFIED_ROW, rows, f"verifying every table of {topology.npus} NPUs")


def verified_cells(check) -> Estimate:
    """Before --verify executes (a runtime.verify_symbolic.SymbolicRun, its rows read and its buffers cut into
    pieces): the messages it keeps, and the larger of executing the busiest step (every cell, the step's payload, a
    slice's index arrays) and checking the definitions over every cell. Measured 14-17 bytes per cell checked,
    50-90 per slice cell; what the pieces cost, not the bytes: 1 GB costs what 1 KB does."""
    from ...runtime.verify_symbolic import SLICE
    steps = check.cells * PER_CELL + check.payload * PER_MOVED_CELL + min(check.payload, SLICE) * PER_SLICE_CELL
    cells = max(steps, check.cells * PER_CHECKED_CELL)
    return Estimate(BASE + check.rows * PER_KEPT_ROW + cells, check.rows,
                    f"verifying {check.cells:.3g} pieces of buffers on {check.meta.npus} NPUs")


PER_TABLE_FILE_BYTE = 10  # a table file's row is 30-60 characters on disk, about ten times that in memory


def table_files(path: str, meta, symmetric: bool, verify: bool, limit: int | None = None) -> Estimate:
    """Before executing a table directory: its NPUs, its tables in memory (NPU 0's alone when it runs symmetric),
    and with `verify` every table (verified_cells sizes the verifier's cells once it has read them). The NPUs alone
    are checked against `limit` (as Estimate.check) before the tables' files are looked at."""
    fmt = meta.table_format or "csv"
    # per NPU of the network (the runtimes' per-NPU arrays), before a file is looked at: a meta.json declaring
    # 2^31 NPUs is refused here, not after 2^31 file lookups or a 16 GB array. The arrays alone: the whole run's
    # estimate below (which adds the process's base) names what a directory of a sane size would need
    Estimate(meta.npus * PER_NPU, what=f"{meta.npus} NPUs in {path}").check(limit)
    sizes = []
    for npu in range(meta.npus if (verify or not symmetric or not meta.symmetric) else 1):
        try:
            sizes.append(os.path.getsize(os.path.join(path, f"npu_{npu}.{fmt}")))
        except OSError:
            sizes.append(0)  # the table checks name a missing file
    total = BASE + meta.npus * PER_NPU + sum(sizes) * PER_TABLE_FILE_BYTE
    return Estimate(total, what=f"tables of {len(sizes)} NPU(s) in {path}")
