"""The bytes a compute op moves through the accelerator's memory: the one rule both frontends charge (the capture's
recorder.py and the execution-trace importer et_import.py); the roofline turns them into time.

By default an op reads every input tensor and writes every output tensor once. Exceptions:

- An op that writes no argument and whose outputs live in its inputs' storages only names existing memory anew:
  view, _unsafe_view (what reshape and flatten of a contiguous tensor give), expand, t, transpose, permute,
  squeeze, unsqueeze, slice, select, as_strided, detach, alias, ... move no bytes and take no time. A copy (clone;
  contiguous or reshape of a non-contiguous tensor, which dispatch as clone) has storage of its own and is charged.
- An allocation (empty, empty_like, ...) writes nothing.
- An embedding lookup reads the rows it gathers (as many bytes as its output) and its indices and writes the
  output, not the whole table (a 32000 x 2048 fp32 table is 250 MiB; a batch of 4096 tokens gathers 32 MiB).
  Its backward, embedding_dense_backward, reads the gathered rows' gradient (its grad_output) and the indices and
  writes the gradient table: the default rule.
- A tensor passed twice (addcmul(v, grad, grad), mul(x, x); the optimizer's `_foreach_addcmul_` gets the list of
  gradients twice) is read once: the frontends charge each distinct input tensor once.
- An op that writes an argument in place and does not return it (the optimizer's `_foreach_mul_`,
  `_foreach_addcdiv_`, ...: they return nothing) also writes that argument's bytes (`written`): reading a list of
  parameters and writing it back moves twice its bytes. An in-place op that returns its argument (mul_, copy_)
  counts it among its outputs already.
"""
from __future__ import annotations

ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
# ops whose first input is a table of which only the gathered rows (the output's bytes) are read
GATHERS = frozenset({"embedding"})


def aten_name(name: str) -> str:
    """The op's aten name without namespace and overload: "aten.embedding.default" and "aten::embedding" ->
    "embedding"; "" for another namespace."""
    for prefix in ("aten.", "aten::"):
        if name.startswith(prefix):
            return name[len(prefix):].split(".", 1)[0]
    return ""


def only_aliases(writes_an_argument: bool, out_storages: set, in_storages: set) -> bool:
    """Does the op only give existing memory a new name (a view of its inputs)? Then it moves nothing."""
    return not writes_an_argument and bool(out_storages) and out_storages <= in_storages


def moved_bytes(name: str, inputs: list[int], outputs: list[int], written: int = 0) -> int:
    """Bytes read and written by a compute op (not a view: only_aliases) with these tensor arguments' and results'
    sizes, in the op's argument order (non-tensor arguments count 0); `written`: the bytes of the arguments it
    writes in place that are not among its outputs."""
    short = aten_name(name)
    if short in ALLOCATIONS:
        return 0
    if short in GATHERS and inputs:
        return sum(inputs[1:]) + 2 * sum(outputs)
    return sum(inputs) + sum(outputs) + written
