"""Passes over the comm dialect, one per file; importing this package registers them all.

Each pass is a small class with a `name`, typed `options`, a `requires` precondition, an `apply` and an `ensures`
postcondition (the torch.fx PassBase idea); `base.PassManager` runs a pipeline like mlir-opt's --pass-pipeline.
"""
from .base import REGISTRY, Pass, PassContext, PassError, PassManager, parse_pipeline  # noqa: F401
from . import decompose_all_reduce, chunk, hierarchical_decompose, select_algorithm  # noqa: F401  (register)

DEFAULT_PIPELINE = "decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm"
from . import (allocate_trees, choose_schedule, find_cycle, flat_decompose, optimal_balance,  # noqa: F401,E402
               place_ranks, themis)
