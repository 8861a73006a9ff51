"""The rows of a schedule table (tables.py): the op codes and the columns, in CSV order, each with its dtype and
meaning (docs/tables.md). The table checks (table_checks.py) read them here, below the tables they check."""
from __future__ import annotations

import numpy as np

SEND, RECV_REDUCE, RECV_COPY = 0, 1, 2
# `peer` of a transfer with the switch of the row's dimension group (in-network reduction, algorithms/in_switch.py):
# a SEND to it adds to the switch's sum for its (collective, chunk, phase, step), a RECV_COPY takes that sum
SWITCH = -1
OP_NAMES = {SEND: "SEND", RECV_REDUCE: "RECV_REDUCE", RECV_COPY: "RECV_COPY"}
OP_CODES = {v: k for k, v in OP_NAMES.items()}

# (name, dtype, meaning); the order is the CSV column order
COLUMNS = (
    ("npu", np.int32, "accelerator that executes the row"),
    ("coll", np.int16, "collective index (meta.collectives)"),
    ("flow", np.int32, "chunk of the collective"),
    ("stage", np.int16, "phase of the chunk's chain (meta.collectives[coll].stages)"),
    ("step", np.int32, "step inside the phase; step s+1 starts when every row of step s is done on this NPU"),
    ("op", np.int8, "SEND, RECV_REDUCE (add into the buffer) or RECV_COPY (overwrite)"),
    ("peer", np.int32, "the other NPU of the transfer; -1: the switch of this NPU's group in `dim` (in-network "
                       "reduction)"),
    ("dim", np.int8, "topology dimension the transfer travels in"),
    ("lane", np.int8, "which of the parallel links to that peer (Ring: 0 = forward, 1 = backward)"),
    ("hops", np.int16, "links traversed"),
    ("gbps", np.float64, "bandwidth of the link used, GB/s (2^30 B/s)"),
    ("offset", np.int64, "byte offset in the collective's buffer (read for SEND, written for RECV)"),
    ("bytes", np.int64, "bytes of this row"),
    ("dep", np.int64, "row (in this NPU's table) of the receive whose data this send forwards; -1: own data"),
)
COLUMN_NAMES = tuple(c[0] for c in COLUMNS)
DTYPES = {c[0]: c[1] for c in COLUMNS}
