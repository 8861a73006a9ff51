"""The collective kinds, named once: every layer imports them from here (the network is the one layer all may
import), so a set of kinds is spelled in one place and means the same everywhere.

A collective is one of COLLECTIVES; the passes split it into phases, each of a PHASE_KIND (an all-reduce into its
two halves). Every tuple keeps COLLECTIVES' order, the order the error messages that list kinds show them in."""
from __future__ import annotations

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER = "all_reduce", "reduce_scatter", "all_gather"
ALL_TO_ALL, BROADCAST, REDUCE = "all_to_all", "broadcast", "reduce"

# every collective the compiler takes (the comm dialect's collective ops, --collective, a workload's collectives)
COLLECTIVES = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, BROADCAST, REDUCE)
# an all-reduce runs as a reduce-scatter and then an all-gather of the same buffer: its two halves, in that order
ALL_REDUCE_HALVES = (REDUCE_SCATTER, ALL_GATHER)
# the kinds of a phase (one step of a collective's chain): every collective but the all-reduce, which is two
PHASE_KINDS = tuple(k for k in COLLECTIVES if k != ALL_REDUCE)
# the kinds whose NPUs end (reduce-scatter) or start (all-gather) with a shard of the buffer, not all of it: the
# same two kinds as an all-reduce's halves
SHARDED = ALL_REDUCE_HALVES
# the phases that carry the whole chunk into every dimension they visit (the sharded ones shrink or grow it)
WHOLE_CHUNK = tuple(k for k in PHASE_KINDS if k not in SHARDED)
# the kinds that name a root NPU (a broadcast's source, a reduce's destination)
ROOTED = (BROADCAST, REDUCE)
# the kinds whose receives add into the buffer rather than overwrite it
REDUCING = (ALL_REDUCE, REDUCE_SCATTER, REDUCE)
# the kinds that work in place on one buffer every rank holds whole (no shard, no slice per peer): PyTorch's c10d
# ops take them one list of tensors, and their bytes are the same whatever the group's size
IN_PLACE = (ALL_REDUCE, BROADCAST, REDUCE)
