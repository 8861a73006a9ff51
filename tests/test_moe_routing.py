"""MoE with data-dependent routing: token counts from torch.bincount, read with .tolist(), exchanged with
all_to_all and used as all_to_all_single split sizes (frontend/routing.py).

The collectives are derived here by hand under each ROUTING assumption, and a routing whose counts are known
without data (expert = token index mod experts) is checked against a real 4-rank gloo run of the same file.
"""
import textwrap

import pytest

from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.frontend.et_import import load_traces
from astra_compile.compiler.frontend.workload import COLLECTIVE
from astra_compile.network.errors import UserError

from helpers import gloo_worker, run_gloo_job

D, TOKENS, EP = 64, 256, 4
F32, I64 = 4, 8

MODEL = f"""
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import _functional_collectives as funcol

D, FF, TOKENS, EP = {D}, 128, {TOKENS}, {EP}

class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, EP, bias=False)
        self.expert = nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D))
        self.group = None

    def route(self, x):
        return self.router(x).argmax(dim=-1)                       # token-choice top-1: depends on data

    def forward(self, x):
        expert = self.route(x)
        order = expert.argsort()
        counts = torch.bincount(expert, minlength=EP)              # tokens this rank sends each expert
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)
        send, recv = counts.tolist(), recv_counts.tolist()
        routed = funcol.all_to_all_single_autograd(x[order], recv, send, self.group)
        out = self.expert(routed)
        back = funcol.all_to_all_single_autograd(out, send, recv, self.group)
        return x + torch.zeros_like(x).index_copy(0, order, back)

def mesh_axes(world):
    return {{"ep": world}}

def parallelize(model, mesh):
    model.group = mesh.get_group()
    return model

def build_model():
    return MoE()

def example_inputs():
    return torch.randn(TOKENS, D)
"""

BY_INDEX = """
def _by_index(self, x):
    return torch.arange(x.shape[0]) % EP                      # known without data: the same in a real run
MoE.route = _by_index
"""


def model_file(tmp_path, extra="", name="moe.py") -> str:
    path = tmp_path / name
    path.write_text(MODEL + textwrap.dedent(extra))
    return str(path)


def sequence(ops) -> list[tuple]:
    return [(op.collective, op.bytes, op.phase) for op in ops if op.kind == COLLECTIVE]


def expected(received: int) -> list[tuple]:
    """Forward: the counts (EP int64), the tokens out (all of this rank's), the expert outputs back (the tokens
    this rank's expert received); backward: the gradient of what came back (this rank's tokens) returns to the
    experts. The dispatch needs no gradient: the inputs do not require one."""
    return [("all_to_all", EP * I64, "forward"), ("all_to_all", TOKENS * D * F32, "forward"),
            ("all_to_all", received * D * F32, "forward"), ("all_to_all", TOKENS * D * F32, "backward")]


def test_balanced_routing_by_default(tmp_path):
    w = load_workload(model_file(tmp_path), EP)
    # balanced: TOKENS / EP to each expert from each of EP ranks (every rank routes as this one)
    assert sequence(w.programs[0]) == expected(TOKENS // EP * EP)


def test_a_given_distribution_of_tokens_over_experts(tmp_path):
    path = model_file(tmp_path, "ROUTING = [0.4, 0.2, 0.2, 0.2]\n")
    # 0.4 * 256 = 102.4 -> 103 (the largest remainder takes the one token left), 51 for the others; rank 0's
    # expert receives its 103 from each of the 4 ranks
    assert sequence(load_workload(path, EP).programs[0]) == expected(103 * EP)


@pytest.mark.parametrize("routing, message", [
    ('"skewed"', "ROUTING must be"), ("[0.5, 0.5]", "ROUTING gives 2 shares but the step counts tokens over 4"),
    ("[1, -1, 0, 0]", "ROUTING must be")])
def test_bad_routing_is_one_line(tmp_path, routing, message):
    with pytest.raises(UserError, match=message):
        load_workload(model_file(tmp_path, f"ROUTING = {routing}\n"), EP)


def test_a_read_the_assumption_does_not_cover_is_named(tmp_path):
    path = model_file(tmp_path, """
        def _reads_the_router(self, x):
            top = self.router(x).max().item()          # a value of the data itself: no assumption gives it
            return self.router(x).argmax(dim=-1)
        MoE.route = _reads_the_router
    """)
    with pytest.raises(UserError, match="reads a value the capture does not have"):
        load_workload(path, EP)


# each rank seeds with its own rank: different tokens per rank (test_ddp_buffers.py runs this worker too)
WORKER = gloo_worker(EP, args=("out", "path"), mesh={"ep": EP}, seed="rank")


def test_known_routing_matches_a_real_gloo_run(tmp_path):
    path = model_file(tmp_path, BY_INDEX)
    captured = sequence(load_workload(path, EP).programs[0])
    assert captured == expected(TOKENS // EP * EP)
    run_gloo_job(tmp_path, WORKER, EP, lambda r: [tmp_path / f"trace_rank{r}.json", path])
    real = load_traces([str(tmp_path / f"trace_rank{r}.json") for r in range(EP)])
    for r in range(EP):
        assert sequence(real.programs[r]) == captured, f"rank {r}"


def test_the_routing_mode_finds_an_ops_tensors_as_pytree_does():
    """Every op passes the routing mode, which walks its arguments itself (pytree's walk took most of its time):
    the same tensors in the same order as tree_leaves, through tuples, lists, dicts, named tuples, sizes, dtypes."""
    import collections
    import torch
    from torch.utils._pytree import tree_leaves
    from astra_compile.compiler.frontend.routing import _tensors_in
    a, b = torch.ones(2), torch.zeros(3)
    pair = collections.namedtuple("pair", "x y")
    cases = [((a, 1, [b, None, (a,)]), {"k": b, "z": [a]}), ((), {}),
             ((torch.Size([2]), pair(b, a), torch.float32), {"d": {"q": a}, "p": collections.OrderedDict(r=b)}),
             (([[a, b], [b]], "x", 1.5, torch.device("cpu")), {})]
    for case in cases:
        want = [t for t in tree_leaves(case) if isinstance(t, torch.Tensor)]
        got = _tensors_in(case, [])
        assert [id(t) for t in got] == [id(t) for t in want] and len(got) == len(want)
    assert [id(t) for t in _tensors_in(cases[2], [])] == [id(b), id(a), id(a), id(b)]
