"""Chakra execution traces (`<prefix>.<rank>.et`, the protobuf traces ASTRA-sim 2.x runs, with comm_group.json
beside them): frontend/chakra.py."""
from __future__ import annotations

from ....network.errors import UserError
from .base import Reader


class ChakraTraces(Reader):
    name = "Chakra execution traces"
    order = 30
    expects = "Chakra .et files"
    suffix = ".et"
    label = "Chakra .et"

    def sniff(self, paths: list[str]) -> bool:
        return all(p.endswith(".et") for p in paths)

    def load(self, paths, world_size, mesh, capture_limit, topology=None, max_memory=None):
        if mesh:
            raise UserError("--mesh applies to model files; a trace already records its process groups")
        from ..chakra import load
        return load(paths, world_size, topology, max_memory)
