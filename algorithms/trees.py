"""MultiTree's spanning trees, one per root (multitree.py builds them, translated_trees.py on vertex-transitive
networks): a file of their own, which both read."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Trees:
    parent: np.ndarray   # (roots, nodes): parent of each node in each tree, -1 for the root
    step: np.ndarray     # (roots, nodes): time step (1-based) in which the node joined the tree
    link: np.ndarray     # (roots, nodes): link id of the edge parent -> node
    steps: int

    def heights(self) -> np.ndarray:
        return self.step.max(axis=1)
