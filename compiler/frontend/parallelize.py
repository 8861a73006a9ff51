"""The device mesh and the parallelism PyTorch users apply, for model files without their own parallelize().

Mesh axes follow torch's init_device_mesh: ranks are laid out row-major, so the LAST axis varies fastest.
Topology dimension 0 is the innermost (its NPUs have consecutive ids), so the last mesh axis takes the first
topology dimensions: `--mesh dp=8,tp=8` on 8x8_torus puts tp on dimension 0 and dp on dimension 1
(docs/workloads.md). The axes' built-in meanings (dp, fsdp, tp, pp) and the checks that need no torch: mesh.py.
"""
from __future__ import annotations

import re

import torch.distributed as dist

from ...network.errors import UserError
from .mesh import builtin_refusal


def build_mesh(axes: dict[str, int]):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", tuple(axes.values()), mesh_dim_names=tuple(axes))


def axis(mesh, name: str):
    """The 1-D mesh of one axis (a 1-D mesh is its own axis; slicing it again makes a second, clashing mesh)."""
    return mesh if mesh.ndim == 1 else mesh[name]


def matching(module, patterns) -> list:
    """Submodules whose dotted name matches a pattern; `*` stands for one name segment (blocks.* is each block,
    not every module inside one)."""
    regexes = [re.compile(re.escape(p).replace(r"\*", r"[^.]+") + "$") for p in patterns]
    names = [n for n, _ in module.named_modules() if n]
    return [module.get_submodule(n) for n in names if any(r.match(n) for r in regexes)]


def _tp_styles(plan: dict) -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    out = {}
    for pattern, style in plan.items():
        if isinstance(style, str):
            if style.lower() not in styles:
                raise UserError(f"TP_PLAN['{pattern}'] = '{style}': expected colwise or rowwise")
            style = styles[style.lower()]()
        out[pattern] = style
    return out


def apply_builtin(module, mesh, axes: dict[str, int], tp_plan: dict | None, fsdp_units: list | None):
    """Apply tp, then fsdp or dp, as a user's training script would; returns the module to train."""
    problem = builtin_refusal(axes, bool(tp_plan))
    if problem:
        raise UserError(problem)
    if axes.get("tp", 1) > 1:
        from torch.distributed.tensor.parallel import parallelize_module
        try:
            parallelize_module(module, axis(mesh, "tp"), _tp_styles(tp_plan))
        except (RuntimeError, ValueError, AttributeError) as e:
            raise UserError(f"TP_PLAN does not fit the model: {e}") from None
    if axes.get("fsdp", 1) > 1:
        from torch.distributed.fsdp import fully_shard
        fsdp_mesh = axis(mesh, "fsdp")
        for sub in matching(module, fsdp_units or []):
            fully_shard(sub, mesh=fsdp_mesh)
        fully_shard(module, mesh=fsdp_mesh)
    if axes.get("dp", 1) > 1:
        from torch.nn.parallel import DistributedDataParallel
        # DDP's defaults, as a training script writes it: a module with buffers (BatchNorm's running statistics)
        # broadcasts them from rank 0 before every forward
        module = DistributedDataParallel(module, device_mesh=axis(mesh, "dp"))
    return module


def ddp_modules(module) -> list:
    from torch.nn.parallel import DistributedDataParallel
    return [m for m in module.modules() if isinstance(m, DistributedDataParallel)]


def rebuild_ddp_buckets(module) -> None:
    """DDP re-buckets gradients in the order they became ready at the first forward after a synchronised
    backward; its index exchange reads real data, so it runs outside the fake mode (after the warm-up step, and
    between micro-batches of a step that synchronises each one)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        for ddp in ddp_modules(module):
            ddp.reducer._rebuild_buckets()


def record_bucket_hook(state, bucket):
    """DDP comm hook: all-reduce the bucket through c10d (so the recorder sees it) and hand the bucket back.

    Under the fake process group nothing moves; DDP's own default hook does the same all-reduce on real ones."""
    buffer = bucket.buffer()
    work = dist.all_reduce(buffer, group=state, async_op=True)
    return work.get_future().then(lambda _: buffer)


def prepare_ddp(module) -> None:
    """Every DDP instance gets the recording hook; cross-process checks that read tensor data are skipped."""
    for ddp in ddp_modules(module):
        ddp.register_comm_hook(ddp.process_group, record_bucket_hook)


class meshes_outside_fake:
    """A DeviceMesh that PyTorch builds during parallelize (FSDP2 over a TP-sharded parameter joins the dp and tp
    meshes; HSDP slices and flattens) finds this rank's coordinates with `nonzero` on its rank tensor, which a
    fake tensor cannot answer. Mesh tensors are small and real (rank numbers), so they are built outside fake
    mode, as the mesh built before the capture is."""

    def __enter__(self):
        from torch.distributed.device_mesh import DeviceMesh
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        self._cls, self._saved = DeviceMesh, DeviceMesh.__init__
        saved = self._saved

        def init(mesh, *args, **kwargs):
            with unset_fake_temporarily():
                saved(mesh, *args, **kwargs)
        DeviceMesh.__init__ = init
        return self

    def __exit__(self, *exc):
        self._cls.__init__ = self._saved
        return False


class skip_cross_rank_checks:
    """DDP's constructor compares parameter shapes across ranks by reading tensor data, which fake tensors do
    not have; with one process standing for all ranks the check has nothing to compare."""

    def __enter__(self):
        import torch.nn.parallel.distributed as ddp_impl
        self._impl, self._saved = ddp_impl, ddp_impl._verify_param_shape_across_processes
        ddp_impl._verify_param_shape_across_processes = lambda *a, **k: None
        return self

    def __exit__(self, *exc):
        self._impl._verify_param_shape_across_processes = self._saved
        return False


class mesh_reads:
    """The mesh axes a model file's parallelize(module, mesh) looks up, by name or index, on the mesh it is given
    or any mesh sliced from it: `mesh["dp"]`, `mesh["dp", "tp"]`, `mesh.get_group("tp")`, and what torch's APIs
    look up inside the call (DDP(device_mesh=mesh["dp"]) asks the 1-D mesh for its group). `names` after the call.
    """

    def __enter__(self):
        from torch.distributed.device_mesh import DeviceMesh
        self.names: set[str] = set()
        self._cls = DeviceMesh
        self._saved = {m: getattr(DeviceMesh, m) for m in ("__getitem__", "get_group", "get_all_groups")}
        names, saved = self.names, self._saved

        def getitem(mesh, dims):
            names.update([dims] if isinstance(dims, str) else dims)
            return saved["__getitem__"](mesh, dims)

        def get_group(mesh, mesh_dim=None):
            dims = mesh.mesh_dim_names or ()
            if isinstance(mesh_dim, str):
                names.add(mesh_dim)
            elif mesh_dim is None and len(dims) == 1 or isinstance(mesh_dim, int) and 0 <= mesh_dim < len(dims):
                names.add(dims[mesh_dim or 0])
            return saved["get_group"](mesh, mesh_dim)

        def get_all_groups(mesh):
            names.update(mesh.mesh_dim_names or ())
            return saved["get_all_groups"](mesh)
        DeviceMesh.__getitem__, DeviceMesh.get_group, DeviceMesh.get_all_groups = getitem, get_group, get_all_groups
        return self

    def __exit__(self, *exc):
        for m, f in self._saved.items():
            setattr(self._cls, m, f)
        return False
