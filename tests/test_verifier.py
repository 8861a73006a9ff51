"""Every algorithm and collective of the foundation, executed on data on a topology of each block
and a mixed one."""
import pytest

from astra_compile.runtime.verifier import verify
from helpers import compile_collective

TOPOLOGIES = ["Ring(8)", "FC(8)", "Switch(8)", "4x4x4_torus", "Ring(4)_FC(2)_Switch(8)"]
CASES = [(k, a) for k in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
         for a in ("ring", "direct", "halving_doubling", "double_binary_tree")
         if not (k == "all_to_all" and a == "double_binary_tree")]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("kind,algorithm", CASES)
def test_schedule_implements_its_collective(topology, kind, algorithm):
    npus = {"Ring(8)": 8, "FC(8)": 8, "Switch(8)": 8, "4x4x4_torus": 64, "Ring(4)_FC(2)_Switch(8)": 64}[topology]
    # 3 chunks and a size that is not a power of two: exercises uneven floor splits (all-to-all needs whole slots)
    size = npus * 3 * 24 if kind == "all_to_all" else npus * 3 * 24 + 5
    sched = compile_collective(topology, kind, size, chunks=3, algorithm=algorithm)
    summary = verify(sched)
    assert summary["rows"] > 0


def test_sub_group_collective_over_some_dimensions():
    # an all-reduce over dimension 1 only: 4 independent groups of 4 on a 4x4 torus
    sched = compile_collective("4x4_torus", "all_reduce", 4096, chunks=2, dims=[1])
    assert verify(sched)["buffers"] == 1
    assert {s.dim for p in sched.plans for s in p.stages} == {1}
