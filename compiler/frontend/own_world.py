"""Set a training script's process groups aside while the capture runs its own fake world, then put them back.

A process holds one default process group. A script that calls the API after `init_process_group` (where a
training script would call it) still has to be captured under a fake group as large as the topology, so the
c10d module's world state is swapped for a fresh one during the capture and restored after. The names of the
script's groups are registered again afterwards: destroying the fake world unregisters every group name, and
functional collectives and DeviceMesh find groups by name.

This reaches into torch.distributed.distributed_c10d's module state (the torch version is pinned); if that state
is not what it expects, the capture refuses with one line instead of guessing.
"""
from __future__ import annotations

import collections
import contextlib

from ...network.errors import UserError

# the module globals that together are torch.distributed's world (distributed_c10d._World reads them)
_STATE = ("_world", "_pg_map", "_pg_names", "_pg_group_ranks", "_pg_backend_config", "_group_count",
          "_tags_to_pg", "_pg_to_tag")


@contextlib.contextmanager
def script_world_set_aside():
    import torch.distributed.distributed_c10d as c10d
    if any(not hasattr(c10d, name) for name in _STATE) or not hasattr(c10d, "_World"):
        raise UserError("a process group is already initialised in this process and this torch version's "
                        "distributed state cannot be set aside for the capture; call astra_compile before "
                        "init_process_group, or from another process")
    saved = {name: getattr(c10d, name) for name in _STATE}
    c10d._world = c10d._World()
    c10d._pg_map, c10d._pg_names, c10d._pg_group_ranks, c10d._pg_backend_config = {}, {}, {}, {}
    c10d._group_count = saved["_group_count"]   # the fake groups' names must not clash with the script's
    c10d._tags_to_pg, c10d._pg_to_tag = collections.defaultdict(list), {}
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(c10d, name, value)
        from torch._C._distributed_c10d import _register_process_group, _resolve_process_group
        for pg, name in c10d._pg_names.items():
            try:
                _resolve_process_group(name)
            except (RuntimeError, ValueError):
                _register_process_group(name, pg)
