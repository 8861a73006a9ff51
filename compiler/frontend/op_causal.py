"""Whether an attention op masks causally: the one rule every frontend applies (the capture's recorder.py, the
execution-trace importer et_import.py, the Kineto-alone conversion through it, and the profile reader
profile_ops.py); the --gpu compute model runs such an op's blocks on and below the diagonal
(network/compute_model.attention_factor).

torch.utils.flop_counter counts scaled-dot-product attention as if unmasked, but flash and memory-efficient
kernels called with is_causal=True skip the blocks the mask removes. An op of an attention class
(network/op_classes.py) is causal where its schema argument `is_causal` is true, or, for the memory-efficient
kernels' own ops (_efficient_attention_forward / _backward, which take no is_causal), where `custom_mask_type`
is 1 or 2 (causal from the top left or the bottom right). Where the value is not known (an argument the trace
did not record) the op is not causal: its time stays the unmasked one, an upper bound.
"""
from __future__ import annotations

from ...network.op_classes import ATTENTION_CLASSES, classify, op_name

CAUSAL_FLAG = "is_causal"
MASK_TYPE = "custom_mask_type"   # the memory-efficient kernels': 0 none, 1 causal top-left, 2 causal bottom-right
CAUSAL_MASK_TYPES = (1, 2)


def is_attention(name: str) -> bool:
    return classify(name) in ATTENTION_CLASSES


def causal(name: str, schema, values: list, kwargs: dict | None = None) -> bool:
    """Whether the attention op `name` ran causally. `schema`: its torch FunctionSchema (None: the ATen op's of that
    name); `values`: the values passed in schema order (a recorded trace's: True, "True", 1, ...); `kwargs`: those
    passed by name. False for any op not of an attention class."""
    if not is_attention(name):
        return False
    arguments = aten_arguments(name) if schema is None else [a.name for a in schema.arguments]
    kwargs = kwargs or {}
    for i, arg in enumerate(arguments):
        if arg not in (CAUSAL_FLAG, MASK_TYPE):
            continue
        value = values[i] if i < len(values) else kwargs.get(arg)
        return _true(value) if arg == CAUSAL_FLAG else _integer(value) in CAUSAL_MASK_TYPES
    return False


def aten_arguments(name: str) -> list[str]:
    """The argument names of the ATen op `name` ("aten::_flash_attention_forward", "aten._x.default"): the overload
    the name gives, else "default", else the only one; [] where torch has no such op."""
    import torch
    packet = getattr(torch.ops.aten, op_name(name), None)
    if packet is None:
        return []
    parts = name.replace("::", ".").split(".")
    overloads = packet.overloads()
    chosen = parts[2] if len(parts) > 2 and parts[2] in overloads else "default" if "default" in overloads else \
        overloads[0] if len(overloads) == 1 else None
    return [] if chosen is None else [a.name for a in getattr(packet, chosen)._schema.arguments]


def _true(value) -> bool:
    """A recorded bool: True, or the text a profiler writes for it ("True", "true", "1")."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return value is True or (isinstance(value, int) and value == 1)


def _integer(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) < 19:
        return int(value.strip())
    return None
