"""Point-to-point messages (send / recv): a real gloo recording, hand-computed message times, matching errors.

The recording: 4 ranks on a pp=2 x dp=2 device mesh; each stage-0 rank sends an activation to its stage-1 peer
on the pp axis's group (group-local rank 1, a global rank that differs from it), once with dist.send/recv and
once with batch_isend_irecv, and gets a gradient back. The trace records neither the group nor a global rank:
the importer has to find the peer from the other rank's trace.
"""
import json

import pytest

import astra_compile
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.workload import COMPUTE, RECV, SEND, Op, Workload
from astra_compile.network.errors import UserError
from astra_compile.network.parse import parse_topology

from helpers import gloo_worker, refused, run_gloo_job, traced

WORLD, ACT, GRAD = 4, 4096, 1024   # elements (float32)

WORKER = gloo_worker(WORLD, """
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
pp = mesh["pp"].get_group()
stage = mesh.get_local_rank("pp")
act, grad = torch.ones(%d), torch.ones(%d)
""" % (ACT, GRAD) + traced("""
    if stage == 0:
        dist.send(act, group=pp, group_dst=1)
        dist.batch_isend_irecv([dist.P2POp(dist.isend, act * 2, group=pp, group_peer=1)])[0].wait()
        dist.recv(grad, group=pp, group_src=1)
    else:
        dist.recv(act, group=pp, group_src=0)
        dist.batch_isend_irecv([dist.P2POp(dist.irecv, act, group=pp, group_peer=0)])[0].wait()
        dist.send(grad * 3, group=pp, group_dst=0)
""", "out"), ddp="torch.nn.Linear(4, 4)", inputs="torch.randn(2, 4)", destroy=True)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("p2p")
    run_gloo_job(d, WORKER, WORLD, lambda r: [d / f"trace_rank{r}.json"], timeout=180)
    return [str(d / f"trace_rank{r}.json") for r in range(WORLD)]


def messages(workload, rank):
    return [(op.kind, op.peer, op.bytes) for op in workload.programs[rank] if op.kind in (SEND, RECV)]


def test_the_peer_is_found_on_the_pp_group(traces):
    w = load_traces(traces)
    # mesh (pp=2, dp=2): the pp group of rank r is [r % 2, r % 2 + 2]; stage 0 is ranks 0 and 1
    for rank in range(WORLD):
        peer = rank + 2 if rank < 2 else rank - 2
        if rank < 2:
            want = [(SEND, peer, 4 * ACT), (SEND, peer, 4 * ACT), (RECV, peer, 4 * GRAD)]
        else:
            want = [(RECV, peer, 4 * ACT), (RECV, peer, 4 * ACT), (SEND, peer, 4 * GRAD)]
        assert messages(w, rank) == want, rank


def test_recorded_messages_time_as_routed_on_the_topology(traces):
    report = astra_compile.compile(traces, "Ring(2)_Ring(2)", bandwidth="100,100", latency="500,500")
    sends = [c for c in report.collectives if c["kind"] == "send"]
    # rank 0 -> rank 2: one hop along dimension 1 (a Ring(2): its link is half the NPU's 100 GB/s)
    link = 50 * 2 ** 30 / 1e9   # bytes per ns
    assert [c["peer"] for c in sends] == [2, 2]
    assert sends[0]["dims"] == [1] and sends[0]["algorithm"] == "routed 1 hop"
    assert sends[0]["time_us"] == pytest.approx((500 + 4 * ACT / link) / 1e3, rel=1e-12)


def stage_program(first: bool, peer: int, micro: int, flops: int, nbytes: int) -> list:
    """One stage of a forward-only pipeline: receive (not on the first stage), compute, send (not on the last)."""
    ops = []
    for _ in range(micro):
        if not first:
            ops.append(Op("recv", RECV, [], bytes=nbytes, peer=peer))
        ops.append(Op("fwd", COMPUTE, [len(ops) - 1] if not first else [], flops=flops))
        if first:
            ops.append(Op("send", SEND, [len(ops) - 1], bytes=nbytes, peer=peer))
    return ops


def test_a_two_stage_pipeline_overlaps_messages_with_compute():
    """Stage 0 computes m micro-batches back to back (its sends run on their own stream). Stage 1 posts the receive
    of micro-batch k+1 after issuing its compute of k, and (as ProcessGroupNCCL orders the communication stream
    after the compute issued before) that receive starts when the compute ends: each micro-batch costs it one
    message and one compute."""
    m, flops, nbytes = 4, int(234e12 * 100e-6), 1 << 20          # 100 us per micro-batch at 234 TFLOPS
    w = Workload(2, {0: stage_program(True, 1, m, flops, nbytes), 1: stage_program(False, 0, m, flops, nbytes)},
                 source="hand")
    for op in w.programs[0]:   # the next micro-batch's compute does not wait for the previous send
        if op.kind == COMPUTE:
            op.deps = []
    report = astra_compile.compile(w, "Ring(2)", bandwidth="100", latency="500")
    msg = [c for c in report.collectives if c["kind"] == "send"][0]["time_us"] * 1e3
    assert msg == pytest.approx(500 + nbytes / (50 * 2 ** 30 / 1e9), rel=1e-12)   # a Ring's link: half the NPU's
    # message 0 leaves at 100 us; then stage 1 alternates message and compute (stage 0 is always ahead)
    assert report.total_time_us == pytest.approx((100e3 + m * (msg + 100e3)) / 1e3, rel=1e-12)


def test_a_send_without_its_receive_is_refused(tmp_path, capsys):
    w = Workload(2, {0: stage_program(True, 1, 3, 1000, 4096), 1: stage_program(False, 0, 2, 1000, 4096)},
                 source="hand")
    report = astra_compile.compile(Workload(2, {0: stage_program(True, 1, 2, 1000, 4096),
                                                1: stage_program(False, 0, 2, 1000, 4096)}, source="hand"), "Ring(2)")
    with pytest.raises(UserError, match="the 3rd send to rank 1, which receives only 2: a p2p with no "
                                                      "matching peer"):
        astra_compile.compile(w, "Ring(2)")
    # the same fault in a module given as input: one line, exit 2
    first_recv = '"comm.recv"() {bytes = 4096 : i64, dst = 1 : i64, name = "recv", src = 0 : i64}'
    assert first_recv in report.mlir
    bad = tmp_path / "bad.mlir"
    bad.write_text(report.mlir.replace(first_recv, '"wl.compute"() {bytes = 4096 : i64, flops = 0 : i64, '
                                                    'name = "recv"}', 1))
    refused(capsys, str(bad), match="receives only 1: a p2p with no matching peer")
    bad.write_text(report.mlir.replace(first_recv, first_recv.replace("dst = 1", "dst = 0"), 1))
    refused(capsys, str(bad), match="src and dst are the same NPU 0")
    bad.write_text(report.mlir.replace("dst = 1 : i64, name = \"send\", src = 0", "dst = 0 : i64, name = \"send\", src = 1",
                                       1))
    refused(capsys, str(bad), match="src must be the program's own rank 0, got 1")


def test_messages_round_trip_through_step_tables_and_the_module(tmp_path, capsys):
    """Step tables and the module keep the messages and give the identical step time."""
    w = Workload(2, {0: stage_program(True, 1, 3, 10 ** 9, 1 << 16), 1: stage_program(False, 0, 3, 10 ** 9, 1 << 16)},
                 source="hand")
    report = astra_compile.compile(w, "Ring(2)", keep_tables=True)
    from astra_compile.runtime import step_tables
    step_tables.write(str(tmp_path / "step"), report.step_tables("csv"))
    again = astra_compile.compile(str(tmp_path / "step"), None)
    assert again.total_time_us == report.total_time_us
    (tmp_path / "step.mlir").write_text(report.mlir)
    assert astra_compile.compile(str(tmp_path / "step.mlir"), None).total_time_us == report.total_time_us
    rows = (tmp_path / "step" / "program_1.csv").read_text().splitlines()
    peer = rows[0].split(",").index("peer")
    assert rows[1].startswith("0,recv,recv,") and rows[1].split(",")[peer] == "0"
    # a damaged directory: rank 1's last receive (and the compute that uses it) gone
    lines = (tmp_path / "step" / "program_1.csv").read_text().splitlines()
    (tmp_path / "step" / "program_1.csv").write_text("\n".join(lines[:-2]) + "\n")
    refused(capsys, str(tmp_path / "step"), match="is the 3rd send to rank 1, which receives only 2: a p2p with no "
                                                  "matching peer")
    trace = report.timeline()
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"} >= {"send to rank 1",
                                                                                              "recv from rank 0"}


def test_a_message_time_is_the_routed_formula():
    from astra_compile.network.message import message
    t = parse_topology("Switch(8)_Ring(4)", "100,40", "700,300")
    m = message(t, 0, 9 + 8, 1 << 20)   # switch hop on dim 0 (up + down), then two ring hops on dim 1
    assert m.hops == 4
    slowest = min(100, 40 / 2) * 2 ** 30 / 1e9
    assert m.time_ns == pytest.approx(2 * 700 + 2 * 300 + (1 << 20) / slowest, rel=1e-12)
    assert m.dim_busy_ns[0] == m.dim_busy_ns[1] == pytest.approx((1 << 20) / slowest)
    assert json.dumps(m.route)


GATHER_SCATTER = """
import torch, torch.distributed as dist
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(256, 256)
    def forward(self, x):
        y = self.l(x)
        world = dist.get_world_size()
        out = [torch.empty_like(y) for _ in range(world)] if dist.get_rank() == 0 else None
        dist.gather(y, out, dst=0)
        z = torch.empty_like(y)
        dist.scatter(z, [y] * world if dist.get_rank() == 0 else None, src=0)
        dist.barrier()
        return z + y + out[1]
def build_model():
    return M()
def example_inputs():
    return torch.randn(64, 256)
"""


def test_gather_and_scatter_are_messages_between_the_root_and_each_member(tmp_path):
    """As NCCL runs them (grouped send/recv): the root receives (sends) one chunk from (to) every other member."""
    from astra_compile.compiler.frontend.capture import capture
    from astra_compile.compiler.frontend.model_file import load_model_file
    from astra_compile.compiler.frontend.workload import WAIT
    path = tmp_path / "gs.py"
    path.write_text(GATHER_SCATTER)
    ops = capture(load_model_file(str(path)), 4).programs[0]
    chunk = 64 * 256 * 4
    got = [(op.kind, op.peer, op.bytes) for op in ops if op.name in ("c10d.gather_", "c10d.scatter_")]
    assert got == [(RECV, 1, chunk), (RECV, 2, chunk), (RECV, 3, chunk), (WAIT, -1, 0),
                   (SEND, 1, chunk), (SEND, 2, chunk), (SEND, 3, chunk), (WAIT, -1, 0)]
    gather_end = [i for i, op in enumerate(ops) if op.kind == WAIT][0]
    assert ops[gather_end].deps == [gather_end - 3, gather_end - 2, gather_end - 1]
    # what reads the gathered output waits for the gather (the add reads out[1])
    add = [i for i, op in enumerate(ops) if op.name.startswith("aten.add.Tensor")][0]
    assert gather_end in ops[add].deps or any(ops[d].kind == WAIT for d in ops[add].deps)
    barrier = [op for op in ops if op.name == "c10d.barrier"]
    assert [(op.collective, op.bytes, op.group) for op in barrier] == [("all_reduce", 1, (0, 1, 2, 3))]
    report = astra_compile.compile(str(path), "Switch(4)", bandwidth="100", latency="1")
    recvs = [c for c in report.collectives if c["kind"] == "recv"]
    alone = 2 * 1 + chunk / (100 * 2 ** 30 / 1e9)   # up to the switch and down: two links
    assert all(c["time_us"] == pytest.approx(alone / 1e3, rel=1e-12) for c in recvs)
    # the three run together through the root's one switch link and share it (docs/cost-model.md): 3x as long
    assert all(c["end_us"] - c["start_us"] == pytest.approx(3 * c["time_us"], rel=0.01) for c in recvs)
