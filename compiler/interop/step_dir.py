"""A compiled training step as step tables (runtime/step_tables.py) and back: `--emit tables` of a step, and
`astra-compile DIR` re-executing one.

Writing takes what the step's run already made: the lowered programs and each distinct collective's compiled
schedule. Reading rebuilds the same programs and times each collective by executing its schedule tables on the
chosen backend, so the step time is the direct run's to the last digit (tests/test_step_tables.py).
"""
from __future__ import annotations

import io
import json
import math

from ..driver import driver, resources
from ...dialects import workload as wl
from ...network.coords import rank
from ...network.errors import UserError
from ...network.topology import Topology
from ...runtime import step_tables as st
from ...runtime.errors import TableError
from ...network import astra_network
from ..driver.workload_driver import CollectiveTime, CollectiveTimes, Lowered, StepSemantics, class_busy, message_time
from ..core.estimate import Estimate
from ..core.step_keys import group_place, key_of, key_parts, key_root, member_index, p2p_stream, part_key


def build(lowered: Lowered, times: CollectiveTimes, info: dict, fmt: str) -> st.StepTables:
    """The step tables of a run: `times` must hold every collective's schedule (WorkloadOptions.keep_schedules)."""
    keys = [k for k in times if k[0] != "p2p"]   # messages have no schedule of their own: routed on the topology
    index = {k: c for c, k in enumerate(keys)}
    collectives = []
    for c, key in enumerate(keys):
        t = times[key]
        collectives.append({"dir": f"collective_{c}", "kind": key[0], "bytes": key[1], "dims": list(key[2]),
                            "root": key_root(key), "part": [[d, *p] for d, p in key_parts(key).items()],
                            "algorithm": t.algorithm, "fallback": t.fallback})
    programs, files = [], {}
    for prog in lowered.programs:
        rows, streams = [], {}
        for op in prog.ops:
            a = op.attrs
            common = dict(name=op.name, phase=a.get("wl.phase", ""), iteration=int(a.get("wl.iteration", -1)),
                          deps=tuple(op.deps))
            if op.kind in ("compute", "wait"):
                rows.append(st.ProgramRow(op.kind, flops=int(a.get("flops", 0)), bytes=int(a.get("bytes", 0)),
                                          measured_ns=float(a.get("wl.measured_ns", math.nan)), collective=-1,
                                          group="", stream=0, dtype=a.get("wl.dtype", ""),
                                          shapes=wl.shapes_of(a) if op.kind == "compute" else "",
                                          causal=op.kind == "compute" and wl.causal_of(a),
                                          views=wl.views_of(a) if op.kind == "compute" else 0, **common))
            elif op.kind in wl.MEMORY:
                rows.append(st.ProgramRow(op.kind, flops=0, bytes=int(a["bytes"]), measured_ns=math.nan,
                                          collective=-1, group="", stream=0, location=a["location"],
                                          in_switch=int(a.get("wl.in_switch", 1)), **common))
            elif op.kind in wl.P2P:
                rows.append(st.ProgramRow(op.kind, flops=0, bytes=int(a["bytes"]), measured_ns=math.nan,
                                          collective=-1, group="", peer=wl.peer(op),
                                          stream=streams.setdefault(p2p_stream(op), len(streams) + 1), **common))
            else:
                group = a["wl.group"]
                rows.append(st.ProgramRow(op.kind, flops=0, bytes=int(a["bytes"]), measured_ns=math.nan,
                                          collective=index[times.key(op)], group=group,
                                          stream=streams.setdefault(group, len(streams) + 1), **common))
        groups = {name: [int(r) for r in ranks] for name, ranks in prog.groups.items()}
        same = (json.dumps([r.__dict__ for r in rows], default=str), json.dumps(groups, sort_keys=True),
                json.dumps(prog.memory, sort_keys=True))
        if same in files and not lowered.spmd:
            files[same].ranks.append(prog.rank)
            continue
        files[same] = st.Program(f"program_{len(programs)}.csv", sorted(prog.stands_for or [prog.rank]), groups,
                                 rows, prog.memory)
        programs.append(files[same])
    meta = {"format": st.FORMAT, "version": st.VERSION, "npus": info["npus"], "topology": info["topology_dict"],
            "spmd": lowered.spmd, "source": info["source"], "mesh": info["mesh"], "scheduler": info["scheduler"],
            "table_format": fmt, "programs": [{"file": p.file, "ranks": p.ranks, "groups": p.groups,
                                               **({"memory": p.memory} if p.memory else {})} for p in programs],
            "collectives": collectives}
    if info.get("run"):   # the run options that shaped its figure, where not the defaults (recorded.of_step)
        meta["run"] = info["run"]
    return st.StepTables(meta, programs, [times.schedules[k] for k in keys])


def load(path: str, run: driver.RunOptions, semantics: StepSemantics = StepSemantics()
         ) -> tuple[Lowered, Topology, dict, CollectiveTimes, st.StepTables]:
    """Read a step directory: (the programs, the topology, its source/mesh/scheduler, each collective timed by
    executing its tables on `run`'s backend, the tables themselves). `run` and `semantics` are the caller's: the
    options the directory records (meta.json's `run`) are applied before (api.compile, cli.py); under the
    astra-sim semantics a collective of a group smaller than the world was compiled as ASTRA-sim runs it, one ring
    over its members (workload_driver._astra_group_time)."""
    step = st.read(path)
    meta = step.meta
    # estimated before anything is built for its NPUs (each collective's tables too, below, before they run)
    Estimate(resources.BASE + meta["npus"] * resources.PER_NPU,
             what=f"a step of {meta['npus']} NPUs in {path}").check(run.max_memory)
    try:
        topology = Topology.from_dict(meta["topology"])
    except UserError as e:
        raise TableError(f"{path}/meta.json: topology: {e}") from None
    if topology.npus != meta["npus"]:
        raise TableError(f"{path}/meta.json: npus {meta['npus']} but the topology has {topology.npus} NPUs")
    colls, keys, members = meta["collectives"], [], []   # members: the ranks of each collective's groups
    rings = []   # per collective: the dimension its ASTRA-sim group ring runs in, None where it has none
    for c, e in enumerate(colls):
        if max(e["dims"]) >= topology.ndims:
            raise TableError(f"{path}/meta.json: collectives[{c}].dims: {e['dims']} but {topology.name} has "
                             f"{topology.ndims} dimensions")
        parts = _parts(e)
        if not set(parts) <= set(e["dims"]):
            raise TableError(f"{path}/meta.json: collectives[{c}].part: {e['part']} names a dimension outside dims "
                             f"{e['dims']}")
        try:
            seen, on = _network(topology, e, semantics), list(e["dims"])
        except UserError as e2:
            raise TableError(f"{path}/meta.json: collectives[{c}].part: {e2}") from None
        if seen[1] is not None:   # ASTRA-sim's ring over the group: its one dimension
            on = [0]
        rings.append(seen[1])
        seen = seen[0]
        have = step.collectives[c].meta
        if have.run:   # one record for the whole step: its collectives execute as the step's meta.json says
            raise TableError(f"{path}/{e['dir']}/meta.json: run: a step directory's collective executes with the "
                             f"step's run options ({path}/meta.json), it records none of its own")
        if have.topology != seen.to_dict() or have.npus != seen.npus:
            raise TableError(f"{path}/{e['dir']}: its schedule is for {have.topology.get('name')}, the step's "
                             f"group sees {seen.name}")
        members.append(math.prod(seen.dims[d].size for d in on))
        keys.append(key_of(e["kind"], e["bytes"], e["dims"], e["root"], part_key(e["dims"], parts)))
        kinds = {m.buffer_kind for m in have.collectives}
        spans = sorted({d for m in have.collectives for d in m.group_dims})   # per-dimension all-reduce: a pair each
        if kinds != {e["kind"]} or spans != sorted(on):
            raise TableError(f"{path}/{e['dir']}: its schedule is {', '.join(sorted(kinds))} over dims {spans}, "
                             f"meta.json says {e['kind']} over {on}")
    for prog in step.programs:
        for i, r in enumerate(prog.rows):
            if r.collective >= 0 and len(prog.groups[r.group]) != members[r.collective]:
                e = colls[r.collective]
                raise TableError(f"{path}/{prog.file}: row {i}: group {r.group} lists {len(prog.groups[r.group])} "
                                 f"ranks but collective {r.collective} ({e['kind']} over dims {e['dims']}) runs on "
                                 f"groups of {members[r.collective]}")
    programs = []
    several = meta["spmd"] and len(step.programs) > 1
    for prog in step.programs:
        if meta["spmd"]:   # the program of its first rank, standing for all of them
            ops = [_program_op(r, colls, prog.ranks[0]) for r in prog.rows]
            programs.append(wl.Program(prog.ranks[0], prog.groups, ops, prog.ranks if several else None, prog.memory))
        elif any(r.kind in st.MESSAGES for r in prog.rows):   # a message's key holds its rank
            programs += [wl.Program(rank, prog.groups, [_program_op(r, colls, rank) for r in prog.rows],
                                    memory=prog.memory) for rank in prog.ranks]
        else:
            ops = [_program_op(r, colls) for r in prog.rows]
            programs += [wl.Program(rank, prog.groups, ops, memory=prog.memory) for rank in prog.ranks]
    programs.sort(key=lambda p: p.rank)
    times = CollectiveTimes(topology)
    for c, e in enumerate(colls):
        schedule = step.collectives[c]
        resources.table_files(schedule.path, schedule.meta, run.execution != "full", False,
                              run.max_memory).check(run.max_memory)
        result = driver.execute(schedule, run)
        if rings[c] is not None:   # as _astra_group_time: the ring's busy time goes to the dimension it runs in
            busy = [0.0] * topology.ndims
            busy[rings[c]] = max(result.dim_busy_ns, default=0.0)
            times[keys[c]] = CollectiveTime(result.total_ns, e["algorithm"], e["fallback"], tuple(busy))
            continue
        # a group over part of a dimension ran on another network: it shares per dimension (workload_driver)
        times[keys[c]] = CollectiveTime(result.total_ns, e["algorithm"], e["fallback"], tuple(result.dim_busy_ns),
                                        class_busy_ns=() if _parts(e) else class_busy(result, topology))
    for prog in programs:   # messages are timed on the topology, as when compiled
        for op in prog.ops:
            if op.kind in wl.P2P and times.key(op) not in times:
                times[times.key(op)] = message_time(topology, times.key(op), run.backend == "congestion",
                                                    run.switching == "store-and-forward", semantics)
    info = {"source": meta["source"], "mesh": meta["mesh"], "scheduler": meta["scheduler"]}
    return Lowered(None, programs, meta["spmd"]), topology, info, times, step


def _program_op(r: st.ProgramRow, colls: list, rank: int = -1) -> wl.ProgramOp:
    attrs = {"name": r.name}
    if r.kind in st.MESSAGES:
        attrs |= {"bytes": r.bytes, "src": rank if r.kind == "send" else r.peer,
                  "dst": r.peer if r.kind == "send" else rank}
    elif r.kind in st.MEMORY:
        attrs |= {"bytes": r.bytes, "location": r.location, **({"wl.in_switch": r.in_switch} if r.in_switch > 1
                                                                  else {})}
    elif r.kind in ("compute", "wait"):
        if r.kind == "compute":
            attrs |= {"flops": r.flops, "bytes": r.bytes, **({"wl.dtype": r.dtype} if r.dtype else {}),
                      **({"wl.shapes": r.shapes} if r.shapes else {}), **({"wl.causal": True} if r.causal else {}),
                      **({"wl.views": r.views} if r.views else {})}
        if not math.isnan(r.measured_ns):
            attrs["wl.measured_ns"] = r.measured_ns
    else:
        e = colls[r.collective]
        attrs |= {"bytes": e["bytes"], "dims": list(e["dims"]), "wl.group": r.group,
                  **wl.part_attrs(e["dims"], _parts(e))}
        if e["kind"] in wl.comm.ROOTED:
            attrs["root"] = e["root"]
    if r.phase:
        attrs["wl.phase"] = r.phase
    if r.iteration >= 0:
        attrs["wl.iteration"] = r.iteration
    return wl.ProgramOp(r.kind, r.name, attrs, list(r.deps), rank)


def _network(topology: Topology, entry: dict, semantics: StepSemantics) -> tuple[Topology, int | None]:
    """(the network a meta.json collective's schedule runs on, the dimension of its ASTRA-sim group ring or None):
    the topology, the part of it a group covering part of a dimension sees (Topology.within), or under the
    astra-sim semantics, for a group smaller than the world, the ring ASTRA-sim runs its collective on."""
    parts = _parts(entry)
    group = math.prod(parts.get(d, (topology.shape[d], 1))[0] for d in entry["dims"])
    if semantics.astra and topology.graph is None and entry["kind"] not in wl.comm.ROOTED and group < topology.npus:
        return astra_network.group_ring(topology, list(entry["dims"]), parts,
                                        astra_network.link_gbps(topology, semantics.link_gbps))
    return (topology.within(parts) if parts else topology), None


def _in_group(topology: Topology, entry: dict, npu: int, semantics: StepSemantics) -> int:
    """NPU `npu` in the network its collective's schedule runs on: itself, or where the group covers part of a
    dimension, its place in the smaller network the group sees (Topology.within), or on an ASTRA-sim group ring
    its place in the group (its coordinates on the group's dimensions, the lowest fastest)."""
    parts = _parts(entry)
    if _network(topology, entry, semantics)[1] is not None:
        dims, at = sorted(entry["dims"]), topology.coords(npu)
        return int(rank([member_index(at[d], parts.get(d)) for d in dims],
                        [parts.get(d, (topology.shape[d], 1))[0] for d in dims]))
    return group_place(topology, parts, npu) if parts else npu


def _parts(entry: dict) -> dict[int, tuple[int, int]]:
    """{dim: (members, stride)} of a meta.json collective entry's `part` ([dim, members, stride] lists)."""
    return {p[0]: (p[1], p[2]) for p in entry["part"]}


def format_npu(step: st.StepTables, npu: int, as_json: bool) -> str:
    """`--emit tables --npu K` of a step: accelerator K's program rows, then its rows of each collective it runs."""
    meta = step.meta
    run = meta.get("run", {})
    semantics = StepSemantics(run.get("step_semantics", StepSemantics().name),
                              tuple(run["astra_link_gbps"]) if run.get("astra_link_gbps") else None)
    if not 0 <= npu < meta["npus"]:
        raise UserError(f"--npu {npu} outside 0..{meta['npus'] - 1}")
    prog = step.programs[0] if len(step.programs) == 1 else next(p for p in step.programs if npu in p.ranks)
    used = sorted({r.collective for r in prog.rows if r.collective >= 0})
    if as_json:
        return json.dumps({"npu": npu, "program": prog.file,
                           "rows": [{**{k: v for k, v in r.__dict__.items()
                                        if k not in ("dtype", "shapes", "causal", "views") or v},
                                     "deps": list(r.deps),
                                     "measured_ns": None if math.isnan(r.measured_ns) else r.measured_ns}
                                    for r in prog.rows],
                           "collectives": {str(c): {k: v.tolist() for k, v in step.collectives[c].table(
                                               _in_group(Topology.from_dict(meta["topology"]), meta["collectives"][c],
                                                         npu, semantics)).cols.items()}
                                           for c in used}})
    who = "every rank" if len(step.programs) == 1 else "its ranks"
    whose = f" (SPMD: rank {prog.ranks[0]}'s program, which {who} runs on its own groups)" if meta["spmd"] else ""
    text = io.StringIO()
    st.write_program(prog.rows, text)   # as in its program file
    lines = [f"# accelerator {npu} of {meta['npus']}: {prog.file}{whose}, {len(prog.rows)} rows",
             text.getvalue().rstrip("\n")]
    topology = Topology.from_dict(meta["topology"])
    for c in used:
        e, schedule = meta["collectives"][c], step.collectives[c]
        local = _in_group(topology, e, npu, semantics)
        table = schedule.table(local)
        also = f" (NPU {local} of the {schedule.meta.npus}-NPU network its group sees)" if local != npu else ""
        lines += ["", f"# collective {c}: {e['kind']} of {e['bytes']} B over dims {e['dims']} ({e['algorithm']}): "
                      f"{len(table)} rows on accelerator {npu}{also}", table.to_text(schedule.meta)]
    return "\n".join(lines)
