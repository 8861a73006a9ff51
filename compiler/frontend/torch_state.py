"""torch's per-thread dispatch state put back as it was after the user's model file ran, however it ended.

A model file stopped by its CPU limit, or one that pushed a mode or excluded a dispatch key and then failed, can
leave the thread with autograd excluded or a mode on the stack: every later capture in the process would then fail
("element 0 of tensors does not require grad") or record through the leftover mode. The capture puts grad mode
right itself; this puts back what lives below it."""
from __future__ import annotations

import contextlib


def _snapshot(torch):
    C = torch._C
    keys = list(C.DispatchKey.__members__.values())
    return {
        "grad": torch.is_grad_enabled(),
        "excluded": {k for k in keys if C._dispatch_tls_is_dispatch_key_excluded(k)},
        "included": {k for k in keys if C._dispatch_tls_is_dispatch_key_included(k)},
        "dispatch modes": C._len_torch_dispatch_stack(),
        "function modes": C._len_torch_function_stack(),
        "meta": C._meta_in_tls_dispatch_include(),
    }


def _restore(torch, was: dict) -> None:
    C = torch._C
    while C._len_torch_dispatch_stack() > was["dispatch modes"]:
        C._pop_torch_dispatch_stack(None)   # the innermost mode, whatever its key
    while C._len_torch_function_stack() > was["function modes"]:
        C._pop_torch_function_stack()
    now = _snapshot(torch)
    for key in now["excluded"] ^ was["excluded"]:
        C._dispatch_tls_set_dispatch_key_excluded(key, key in was["excluded"])
    for key in now["included"] ^ was["included"]:
        C._dispatch_tls_set_dispatch_key_included(key, key in was["included"])
    if now["meta"] != was["meta"]:
        C._set_meta_in_tls_dispatch_include(was["meta"])
    torch.set_grad_enabled(was["grad"])


@contextlib.contextmanager
def kept():
    """Run the block (a model file's loading and capture) and put torch's thread state back after it."""
    import torch
    was = _snapshot(torch)
    try:
        yield
    finally:
        _restore(torch, was)
