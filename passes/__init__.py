"""Passes over the comm dialect, one per file: the module decompose_all_reduce.py holds the pass
decompose-all-reduce, imported when a pipeline first names it (base.lookup; base.all_passes imports them all).

Each pass is a frozen dataclass with a `name`, typed option fields, a declared order (`after`, `before`), a
`requires` precondition, an `apply` and an `ensures` postcondition (the torch.fx PassBase idea); `base.PassManager`
runs a pipeline in MLIR's PassManager, as mlir-opt's --pass-pipeline.
"""
from .base import (REGISTRY, Pass, PassContext, PassError, PassManager, all_passes, lookup,  # noqa: F401
                   parse_pipeline, pipeline_spec)

DEFAULT_PIPELINE = "decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm"
# how decompose-all-reduce splits an all_reduce over several dimensions (its option, the CLI's --all-reduce)
ALL_REDUCE_SPLITS = ("hierarchical", "per-dimension")
