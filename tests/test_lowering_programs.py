"""A captured step's rank programs are made without building its MLIR module (workload_driver.to_programs): they
must be, op for op and attribute for attribute, what wl.programs reads from the module (to_module), which --emit mlir
still builds when asked."""
import os

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
