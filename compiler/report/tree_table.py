"""The MultiTree paper's view of a schedule: one accelerator's table of Reduce / Gather commands.

Columns as in the MultiTree paper: Op, FlowID (the tree's root), Parent, Children, Step, Start Addr, Size.
Reduce: at Step the accelerator sends its partial sum of the flow's block (its own data plus what its Children
sent earlier) to Parent. Gather: at Step it sends the flow's block to Children (after receiving it from Parent,
nil at the root). Steps run 1..T for the reduce-scatter and T+1..2T for the all-gather; addresses are bytes of
chunk 0 of the buffer. This is a different rendering of the same rows `--emit tables` prints.
"""
from __future__ import annotations

from ...network.errors import UserError
from ..lowering.lower import Schedule
from ..lowering.plans import FLAT


def tree_entries(schedule: Schedule, npu: int) -> list[dict]:
    flat = [p for p in schedule.plans if p.stages and p.stages[0].dim == FLAT]
    if not flat:
        raise UserError("the tree view needs a multitree schedule (--algorithm multitree)")
    trees = schedule.trees()
    n, T = schedule.topology.npus, trees.steps
    plan = flat[0]
    chunk = plan.bytes // plan.chunks if plan.chunks else plan.bytes
    parent, step = trees.parent.tolist(), trees.step.tolist()
    entries = []
    kinds = {p.kind for p in flat}
    for r in range(n):
        children = [v for v in range(n) if parent[r][v] == npu]
        addr, size = (r * chunk) // n, ((r + 1) * chunk) // n - (r * chunk) // n
        if "reduce_scatter" in kinds and npu != r:
            entries.append({"op": "Reduce", "flow": r, "parent": parent[r][npu], "children": children,
                            "step": T - step[r][npu] + 1, "addr": addr, "size": size})
        if "all_gather" in kinds:
            offset = T if "reduce_scatter" in kinds else 0
            for t in sorted({step[r][c] for c in children}):
                entries.append({"op": "Gather", "flow": r, "parent": parent[r][npu] if npu != r else None,
                                "children": [c for c in children if step[r][c] == t], "step": offset + t,
                                "addr": addr, "size": size})
    entries.sort(key=lambda e: (e["step"], e["op"] != "Reduce", e["flow"]))
    return entries


def format_tree_table(schedule: Schedule, npu: int) -> str:
    entries = tree_entries(schedule, npu)
    width = max([len(e["children"]) for e in entries] + [1])
    head = ["Op", "FlowID", "Parent"] + ["Children"] + [""] * (width - 1) + ["Step", "Start Addr", "Size"]
    rows = [head]
    for e in entries:
        kids = [str(c) for c in e["children"]] + ["nil"] * (width - len(e["children"]))
        rows.append([e["op"], str(e["flow"]), "nil" if e["parent"] is None else str(e["parent"])] + kids
                    + [str(e["step"]), str(e["addr"]), str(e["size"])])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)
