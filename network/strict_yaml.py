"""YAML as this project's readers take it: safe, and a key written twice in one mapping is an error (PyYAML keeps
the last one without a word, so a typo'd duplicate would silently change a value)."""
from __future__ import annotations

from .errors import UserError


def loader(what: str):
    """A SafeLoader class that refuses a repeated key, naming `what` (e.g. "topology file 'net.yml'") and the
    line."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in keys:
                raise UserError(f"{what} line {key_node.start_mark.line + 1}: key '{key}' is given twice")
            keys.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return StrictLoader
