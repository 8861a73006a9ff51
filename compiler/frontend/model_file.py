"""Load a model file: the convention users write (docs/workloads.md).

A model file is ordinary Python that provides:

    build_model()                  -> torch.nn.Module          (required)
    example_inputs()               -> tensor or tuple of tensors (required; one rank's local batch)
    parallelize(module, mesh)      -> module   (optional: apply DDP / FSDP2 fully_shard / DTensor TP yourself)
    mesh_axes(world_size)          -> {"dp": 8, "tp": 8}  (optional: the device mesh; --mesh overrides it)
    TP_PLAN = {"layers.*.attn.qkv": "colwise", ...}   (optional: used when the mesh has a `tp` axis and the
                                                          file has no parallelize(); values colwise | rowwise or a
                                                          torch ParallelStyle)
    FSDP_UNITS = ["layers.*"]      (optional: submodules sharded as their own FSDP2 unit for an `fsdp` axis)
    loss(output)                   -> scalar tensor (optional; default: the sum of the first output tensor)
    optimizer(parameters)          -> torch.optim.Optimizer (optional; default: AdamW)
    step_context()                 -> a context manager around forward, loss and backward (optional: what the
                                      training loop wraps them in, e.g. loss_parallel() or torch.autocast(...));
                                      it may take any of model, inputs, mesh by name (context_parallel needs them)
    ROUTING = "balanced" | [shares per expert]   (optional: tokens per expert for data-dependent MoE routing;
                                                  routing.py)
    pipeline_stage(model, stage, num_stages) -> nn.Module  (required with a `pp` mesh axis: the stage's part of
                                                            the model; pipeline.py)
    PIPELINE = {"schedule": "1F1B", "microbatches": 8, "virtual_stages": 2}   (optional, with pipeline_stage():
                                            GPipe | 1F1B | Interleaved1F1B | LoopedBFS | InterleavedZeroBubble |
                                            ZBVZeroBubble | DualPipeV; pipeline.py)
    (with a `pp` axis and no pipeline_stage(), parallelize(module, mesh) builds the rank's PipelineStage(s) and
     returns their torch.distributed.pipelining schedule: pipeline_schedule.py)
    example_target()               -> the batch's target for a pipeline schedule's loss_fn(output, target) (optional;
                                      default one zero per micro-batch)
    OFFLOAD = "params,grads,optimizer"   (optional: FSDP states kept in the remote memory pool, as --offload;
                                          offload.py, docs/memory.md)
    GRADIENT_ACCUMULATION = 4 | {"microbatches": 4, "sync": "last" | "every"}   (optional: forward and backward per
                                          micro-batch before one optimizer step; accumulation.py)
    CUDA_ALLOC_CONF = "expandable_segments:True"   (optional: the PYTORCH_CUDA_ALLOC_CONF the run is launched with;
                                          the reserved bytes of memory per rank replay it: caching_allocator.py)
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Callable

from ...network.errors import UserError
from . import accumulation


@dataclass
class ModelFile:
    path: str
    build_model: Callable
    example_inputs: Callable
    parallelize: Callable | None = None
    mesh_axes: Callable | None = None
    tp_plan: dict | None = None
    fsdp_units: list | None = None
    loss: Callable | None = None
    optimizer: Callable | None = None
    step_context: Callable | None = None
    routing: object = None                 # ROUTING: the token-routing assumption for data-dependent MoE
    pipeline_stage: Callable | None = None  # pipeline_stage(model, stage, num_stages): a pp axis's stage module
    pipeline: object = None                # PIPELINE: the schedule and micro-batches of a pp axis
    example_target: Callable | None = None  # example_target(): the target a pipeline schedule's loss_fn takes
    offload: tuple = ()                    # OFFLOAD: FSDP states kept in the remote pool (offload.STATES)
    accumulation: object = None            # GRADIENT_ACCUMULATION: accumulation.Accumulation
    expandable_segments: bool = False      # CUDA_ALLOC_CONF: the caching allocator grows one segment per pool


STEP_CONTEXT_ARGS = ("model", "inputs", "mesh")


def step_context(spec: ModelFile, **available):
    """The file's step_context() entered as a training loop would: called with those of `available` (the model
    being trained, this rank's inputs, the device mesh) its parameters name; a null context without one."""
    import contextlib
    import inspect
    if spec.step_context is None:
        return contextlib.nullcontext()
    try:
        params = inspect.signature(spec.step_context).parameters
    except (TypeError, ValueError):   # a builtin or a callable without a signature: called bare
        params = {}
    wanted = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [n for n in wanted if n not in STEP_CONTEXT_ARGS and params[n].default is params[n].empty]
    if unknown:
        raise UserError(f"{spec.path}: step_context({', '.join(wanted)}): it may take {', '.join(STEP_CONTEXT_ARGS)} "
                        f"by name, not {', '.join(unknown)}")
    return spec.step_context(**{n: available[n] for n in wanted if n in STEP_CONTEXT_ARGS})


def one_line(e: BaseException) -> str:
    """`Type: first line` of an exception; where that line ends in a colon and the error it announces is chained
    (torch's PipelineStage: "[Stage 0] failed to run forward:", its arguments on the lines below, `from` the model's
    own error), the chained error's line follows it."""
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    if line.endswith(":") and e.__cause__ is not None:
        line = f"{line} {one_line(e.__cause__)}"
    return line


def read_source(path: str) -> str:
    """The model file's text: it exists, is readable and decodes as Python source."""
    if not os.path.isfile(path):
        raise UserError(f"cannot read model file {path}: no such file")
    try:
        with open(path, "rb") as f:
            return importlib.util.decode_source(f.read())
    except OSError as e:
        raise UserError(f"cannot read model file {path}: {e.strerror}") from None
    except (UnicodeDecodeError, SyntaxError) as e:
        raise UserError(f"model file {path} failed to import: {one_line(e)}") from None


def check_before_torch(path: str, world_size: int, mesh: dict[str, int] | None) -> None:
    """What can be told of a model file and its mesh before torch is imported (seconds): the file reads and
    parses, the mesh has as many ranks as the topology has NPUs, and where the file surely lacks them, the
    names the mesh needs (parallelize() or TP_PLAN for the built-in axes, pipeline_stage() or parallelize() for
    pp). The capture checks all of it again with the file loaded; this only makes a mistake cost no torch
    import."""
    from .mesh import builtin_refusal, check_mesh
    from .pipeline import no_stage_function
    source = read_source(path)
    try:
        tree = ast.parse(source, path)
    except (SyntaxError, ValueError) as e:
        raise UserError(f"model file {path} failed to import: {one_line(e)}") from None
    if mesh is not None:
        check_mesh(mesh, world_size)
    names = _top_level_names(tree)
    if names is None or mesh is None:   # names made at run time: nothing is surely missing
        return
    if "parallelize" not in names:
        problem = builtin_refusal(mesh, "TP_PLAN" in names)
        if problem:
            raise UserError(f"{path}: {problem}")
    if mesh.get("pp", 1) > 1 and "pipeline_stage" not in names and "parallelize" not in names:
        raise no_stage_function(path)


def _top_level_names(tree: ast.Module) -> set[str] | None:
    """Every name the file may bind (a superset: any name it assigns, defines or imports anywhere), or None where
    it can bind names no statement shows (a star import, globals(), exec, setattr, a module __getattr__)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_NAMES:
            return None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return None if "__getattr__" in names else names


DYNAMIC_NAMES = ("globals", "vars", "exec", "setattr")


def module_name(path: str) -> str:
    """The name a loaded model file's module has in sys.modules."""
    return "astra_model_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")


def load_model_file(path: str, set_names: dict | None = None) -> ModelFile:
    """The model file run as a module. `set_names` ({name: value}) runs it as if each top-level statement that
    assigns one of those names assigned the value instead (`astra-compile plan`'s shallower model, which the file's
    own constants derived from the name then follow); a name no top-level statement assigns is bad input."""
    source = read_source(path)
    name = module_name(path)
    _folder_importable(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    code = None if not set_names else _names_set(source, path, set_names)
    sys.modules[name] = module  # dataclasses and pickling inside the file look their module up here
    try:
        # run the file's code directly, not through the import machinery: the CPU limit defers while an import
        # runs (cpu_limit.inside_import), so the file's own top-level code must not count as one
        exec(code or compile(source, path, "exec"), module.__dict__)
    except SystemExit as e:  # sys.exit() at import: the file is a script, not a model file; never exit 0 with it
        sys.modules.pop(name, None)
        raise UserError(f"model file {path} called sys.exit({e.code!r}) while being imported; a model file defines "
                        f"build_model() and example_inputs() (guard script code with if __name__ == '__main__')") \
            from None
    except Exception as e:  # any error in the user's file is bad input, reported in one line
        sys.modules.pop(name, None)
        raise UserError(f"model file {path} failed to import: {one_line(e)}") from None
    return model_file_from_module(module, path)


def _folder_importable(path: str) -> None:
    """The model file's folder on sys.path, as `python model.py` puts a script's: the file may import its own
    modules beside it (`import my_layers`), at its top or inside build_model() and the rest when the capture
    calls them, so the folder stays (each model file's folder is added once, ahead of the rest)."""
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _names_set(source: str, path: str, values: dict):
    """The file's code with `name = value` run after each top-level statement that assigns `name` (alone or in a
    tuple, as `VOCAB, DIM, LAYERS = ...`), for each of `values`."""
    try:
        tree = ast.parse(source, path)
    except (SyntaxError, ValueError) as e:
        raise UserError(f"model file {path} failed to import: {one_line(e)}") from None
    body, seen = [], set()
    for stmt in tree.body:
        body.append(stmt)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
            [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
        bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        for name in sorted(bound & set(values)):
            seen.add(name)
            body.append(ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], ast.Constant(values[name])),
                                          stmt))
    missing = sorted(set(values) - seen)
    if missing:
        raise UserError(f"model file {path}: no top-level statement assigns {', '.join(missing)}")
    tree.body = body
    return compile(ast.fix_missing_locations(tree), path, "exec")


def model_file_from_module(module, path: str | None = None) -> ModelFile:
    """The convention read from an imported Python module (a model file, or a module handed to the API)."""
    path = path or getattr(module, "__file__", None) or module.__name__
    missing = [f for f in ("build_model", "example_inputs") if not callable(getattr(module, f, None))]
    if missing:
        raise UserError(f"model file {path} defines no {' and no '.join(f + '()' for f in missing)}; a model file "
                        "provides build_model() and example_inputs() (see docs/workloads.md)")
    return ModelFile(path, module.build_model, module.example_inputs,
                     parallelize=getattr(module, "parallelize", None), mesh_axes=getattr(module, "mesh_axes", None),
                     tp_plan=getattr(module, "TP_PLAN", None), fsdp_units=getattr(module, "FSDP_UNITS", None),
                     loss=getattr(module, "loss", None), optimizer=getattr(module, "optimizer", None),
                     step_context=getattr(module, "step_context", None), routing=getattr(module, "ROUTING", None),
                     pipeline_stage=getattr(module, "pipeline_stage", None), pipeline=getattr(module, "PIPELINE", None),
                     example_target=getattr(module, "example_target", None),
                     offload=_offload(getattr(module, "OFFLOAD", None), path),
                     accumulation=accumulation.parse(getattr(module, "GRADIENT_ACCUMULATION", None), path),
                     expandable_segments=_expandable_segments(getattr(module, "CUDA_ALLOC_CONF", None), path))


def _expandable_segments(value, path: str) -> bool:
    """CUDA_ALLOC_CONF, PyTorch's "key:value,key:value" allocator settings: whether expandable_segments is on. The
    other settings (max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, ...) change the
    reserved bytes in ways the replay does not follow: refused, not ignored."""
    if value is None:
        return False
    if not isinstance(value, str):
        raise UserError(f"model file {path}: CUDA_ALLOC_CONF must be a string such as \"expandable_segments:True\", "
                        f"got {type(value).__name__}")
    on = False
    for item in filter(None, (part.strip() for part in value.split(","))):
        key, _, setting = (x.strip() for x in item.partition(":"))
        if key != "expandable_segments":
            raise UserError(f"model file {path}: CUDA_ALLOC_CONF: {key!r} is not modelled (the replayed allocator "
                            "knows expandable_segments:True|False only)")
        if setting not in ("True", "False"):
            raise UserError(f"model file {path}: CUDA_ALLOC_CONF: expandable_segments must be True or False, got "
                            f"{setting!r}")
        on = setting == "True"
    return on


def _offload(value, path: str) -> tuple:
    from .offload import parse_states
    if value is not None and not isinstance(value, str):
        raise UserError(f"model file {path}: OFFLOAD must be a string such as \"params,grads,optimizer\", got "
                        f"{type(value).__name__}")
    try:
        return parse_states(value)
    except UserError as e:
        raise UserError(f"model file {path}: OFFLOAD: {str(e).split(': ', 1)[-1]}") from None
