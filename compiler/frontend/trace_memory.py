"""The memory of a training step read from traces, estimated before it is read and before it is lowered
(core/estimate.py): the Chakra reader (chakra.py) checks each file's nodes before building them, and the programs
it will run before the step is lowered; a captured step's programs are checked the same way (api.py)."""
from __future__ import annotations

from ..core.estimate import Estimate

# A training step read from traces (Chakra ETs), sized on 2-rank chains of 50k and 200k nodes (a compute chain
# with an all-reduce every 100 nodes) and on 1024 and 4096 per-rank programs of one world all-reduce:
# benchmarks/resources.py prints the estimates of those runs against their measured peaks.
STEP_BASE = 240 * 2**20      # a step's run with tiny programs (the 4096-rank microbenchmark, read as one program)
PER_TRACE_NODE = 2200        # a node of the trace being read: its protobuf message, dependency lists, its op
PER_KEPT_OP = 600            # an op read and kept (frontend/workload.Op), for the whole run
PER_STEP_OP = 3000           # an op of a program through the workload module, its lowering and the engine
PER_GROUP_MEMBER = 64        # a rank of a process group a program names (each program's group attributes)
TRACE_ADVICE = "give fewer ranks or a shorter trace (a slice of its iterations)"
STEP_ADVICE = "capture a smaller step (fewer micro-batches, layers or pipeline stages)"


def trace_nodes(reading: int, kept: int, where: str) -> Estimate:
    """Before a trace file's nodes are built: the `reading` nodes of that file, and the ops already kept."""
    return Estimate(STEP_BASE + reading * PER_TRACE_NODE + kept * PER_KEPT_OP,
                    what=f"reading {reading:.3g} nodes of {where}, {kept:.3g} ops kept", advice=TRACE_ADVICE)


def step_programs(ops: int, members: int, programs: int, advice: str = TRACE_ADVICE) -> Estimate:
    """Before a step read from traces (or captured: `advice` STEP_ADVICE) is lowered: the ops of the programs it
    will run (one per rank, or one standing for every rank) and the ranks of the groups each program names."""
    return Estimate(STEP_BASE + ops * (PER_KEPT_OP + PER_STEP_OP) + members * PER_GROUP_MEMBER,
                    what=f"{ops:.3g} ops in {programs} program(s)", advice=advice)


def captured_step(workload) -> Estimate:
    """Before a captured step (frontend/workload.Workload) is lowered: its programs' ops and the ranks of the
    distinct groups each names (as step_programs counts a trace's)."""
    members = sum(len(g) for ops in workload.programs.values() for g in {op.group for op in ops})
    return step_programs(sum(map(len, workload.programs.values())), members, len(workload.programs), STEP_ADVICE)
