"""A captured step's rank programs are made without building its MLIR module (workload_driver.to_programs): they
must be, op for op and attribute for attribute, what wl.programs reads from the module (to_module), which --emit mlir
still builds when asked."""
import os

import numpy as np

import pytest

from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.driver import workload_driver
from astra_compile.compiler.frontend.workload import COLLECTIVE, COMPUTE, LOAD, RECV, SEND, STORE, WAIT, Op, Workload
from astra_compile.dialects import comm
from astra_compile.dialects import workload as wl
from astra_compile.network.parse import parse_topology

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def both(workload, topology):
    ctx = wl.new_context()
    direct = workload_driver.to_programs(ctx, workload, topology)
    read = wl.programs(workload_driver.to_module(ctx, workload, topology))
    return direct, read


def same(direct, read):
    assert len(direct) == len(read)
    for d, r in zip(direct, read):
        assert (d.rank, d.groups, d.stands_for, d.memory) == (r.rank, r.groups, r.stands_for, r.memory)
        assert len(d.ops) == len(r.ops)
        for a, b in zip(d.ops, r.ops):
            assert (a.kind, a.name, a.deps, a.rank) == (b.kind, b.name, b.deps, b.rank)
            assert list(a.attrs.items()) == list(b.attrs.items())   # values, types and order
            assert [type(v) for v in a.attrs.values()] == [type(v) for v in b.attrs.values()]


def every_kind() -> Workload:
    """One op of every kind and every optional attribute, on two ranks (per-rank programs)."""
    def program(rank):
        peer = 1 - rank
        return [Op("aten.mm.default", COMPUTE, flops=2 ** 40, bytes=2 ** 20, phase="forward", measured_ns=1234.5,
                   dtype="bf16", shapes="4x8,8x16", views=3, iteration=2),
                Op("aten._scaled_dot_product_flash_attention.default", COMPUTE, [0], flops=7, bytes=9, causal=True),
                Op("c10d.broadcast_", COLLECTIVE, [1], bytes=2 ** 16, collective="broadcast", group=(0, 1),
                   group_name="0", root=1, phase="forward"),
                Op("c10d.allreduce_", COLLECTIVE, [2], bytes=2 ** 20, collective="all_reduce", group=(rank,),
                   group_name="self", phase="backward"),
                Op("wait", WAIT, [3]),
                Op("send", SEND if rank == 0 else RECV, [4], bytes=512, peer=peer, phase="backward"),
                Op("offload", STORE, [5], bytes=4096, location="remote", in_switch=2),
                Op("reload", LOAD, [6], bytes=4096, location="local"),
                Op("aten.add.default", COMPUTE, [0, 7], flops=0, bytes=8, phase="optimizer")]
    return Workload(2, {1: program(1), 0: program(0)}, source="every kind",
                    memory={0: {"peak_bytes": 10, "held": {"b": 1, "a": 2}}})


def test_every_kind_of_op_and_attribute_reads_as_from_the_module():
    direct, read = both(every_kind(), parse_topology("Ring(2)"))
    same(direct, read)
    assert read[0].ops[0].attrs["wl.measured_ns"] == 1234.5 and read[0].ops[1].attrs["wl.causal"] is True
    assert read[0].ops[2].attrs["root"] == 1 and read[0].ops[3].kind == "wait"
    assert [op.kind for op in read[1].ops][5:8] == ["recv", "store", "load"]


@pytest.mark.parametrize("example, topology", [("gpt_tp_dp.py", "8x8_torus"), ("llama_pp_tp_dp.py", "8x8_torus"),
                                               ("moe_ep.py", "8x8_torus")])
def test_a_captured_example_reads_as_from_its_module(example, topology):
    topo = parse_topology(topology)
    workload = load_workload(os.path.join(EXAMPLES, example), topo.npus, topology=topo)
    direct, read = both(workload, topo)
    same(direct, read)
    assert sum(len(p.ops) for p in read) > 100


def test_an_int_the_ir_cannot_hold_is_refused_in_the_same_line():
    big = Workload(2, {0: [Op("aten.mm.default", COMPUTE, flops=2 ** 63, bytes=1)]}, source="big", spmd=True)
    with pytest.raises(comm.IRError) as direct:
        workload_driver.to_programs(wl.new_context(), big, parse_topology("Ring(2)"))
    with pytest.raises(comm.IRError) as module:
        workload_driver.to_module(wl.new_context(), big, parse_topology("Ring(2)"))
    assert str(direct.value) == str(module.value) == f"{2 ** 63} does not fit in the IR's 64-bit integers"


def test_the_module_is_made_only_when_asked_for():
    lowered = workload_driver.lower(every_kind(), parse_topology("Ring(2)"))
    assert lowered._module is None and lowered.context is not None
    module = lowered.module
    assert module is lowered.module and module.context is lowered.context
    same(lowered.programs, wl.programs(module))


def test_ops_equal_in_every_attribute_share_one_dict_and_their_table_rows_are_as_read_from_the_module():
    """A pipeline's copied micro-batches repeat their template's compute ops: to_programs gives equal ones one
    attributes dict (made and read back once, as program_tables then reads them once), never one that differs in
    any attribute (here the phase and the shapes); the engine's tables are those of the module's programs."""
    def mm(deps, phase="forward", shapes="4x8,8x16"):
        return Op("aten.mm.default", COMPUTE, deps, flops=1024, bytes=96, phase=phase, shapes=shapes)
    ops = [mm([]), mm([0]), mm([1], phase="backward"), mm([2], shapes="8x8,8x16"), mm([3]), Op("wait", WAIT, [4])]
    workload = Workload(2, {0: ops}, source="repeats", spmd=True)
    direct, read = both(workload, parse_topology("Ring(2)"))
    same(direct, read)
    a = [op.attrs for op in direct[0].ops]
    assert a[0] is a[1] is a[4] and a[2] is not a[0] and a[3] is not a[0] and a[2] is not a[3]
    times = workload_driver.CollectiveTimes(parse_topology("Ring(2)"))
    mine, theirs = (workload_driver.program_tables(p, times, spmd=True)[0] for p in (direct, read))
    for column in ("kind", "flops", "nbytes", "duration_ns", "dtype", "op_class", "gemm"):
        assert np.array_equal(getattr(mine, column), getattr(theirs, column)), column
    assert np.array_equal(mine.measured_ns, theirs.measured_ns, equal_nan=True)
    assert mine.gemm[:, 1:].tolist() == [[4, 16, 8]] * 3 + [[8, 16, 8], [4, 16, 8], [0, 0, 0]]
