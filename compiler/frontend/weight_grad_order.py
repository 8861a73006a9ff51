"""Zero-bubble schedules' weight gradients in one order, capture after capture.

torch's split backward (torch.distributed.pipelining._backward: ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble,
ScheduleDualPipeV) groups a stage's parameters in Python sets of autograd nodes and later computes and accumulates
each group's weight gradients in the sets' iteration order, which follows the nodes' addresses: the same model
file recorded twice gave its weight-gradient GEMMs and accumulations in different orders, and so different IR and
tables. While installed, the groups are lists instead: their parameters in the stage's parameter order, their
intermediate nodes in the order autograd created them, and the groups by their first parameter.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def weight_groups_ordered():
    from torch.distributed.pipelining import _backward
    made = _backward.get_param_groups

    def ordered(inputs, params, reverse_edges_dict):
        place = {p: i for i, p in enumerate(params)}
        groups = made(inputs, params, reverse_edges_dict)
        for g in groups:
            g["params"] = sorted(g["params"], key=place.__getitem__)
            g["intermediates"] = sorted(g["intermediates"], key=lambda node: node._sequence_nr())
        return sorted(groups, key=lambda g: place[g["params"][0]] if g["params"] else len(place))
    _backward.get_param_groups = ordered
    try:
        yield
    finally:
        _backward.get_param_groups = made
