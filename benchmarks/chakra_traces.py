"""A directory of Chakra execution traces in the shape of Chakra's own microbenchmark generator (ASTRA-sim's
examples: one COMM_COLL_NODE per rank, its id the rank, is_cpu_op false, comm_type and comm_size as int64; the
reference directory et/ar_512_1G in tests/data/astrasim_reference/et.tar.gz is such a one), for any number of ranks.

    python benchmarks/chakra_traces.py DIR --ranks 4096 --size 1MB [--kind ALL_REDUCE]
"""
from __future__ import annotations

import argparse
import os

from astra_compile.compiler.frontend.chakra import COMM_TYPES, NODE_TYPES, add_attr, delimited, schema
from astra_compile.network.units import parse_size


def microbenchmark(directory: str, ranks: int, size: int, kind: str = "ALL_REDUCE") -> str:
    """`<kind>.<rank>.et` for ranks 0..ranks-1 in `directory` (made if missing); returns the directory."""
    GlobalMetadata, Node = schema()
    os.makedirs(directory, exist_ok=True)
    head = delimited(GlobalMetadata(version="0.0.4"))
    for rank in range(ranks):
        node = Node(id=rank, name=kind, type=7)   # COMM_COLL_NODE
        add_attr(node, "is_cpu_op", False)
        add_attr(node, "comm_type", COMM_TYPES.index(kind))
        add_attr(node, "comm_size", size)
        with open(os.path.join(directory, f"{kind}.{rank}.et"), "wb") as f:
            f.write(head + delimited(node))
    return directory


def chain(directory: str, ranks: int, nodes: int, size: int = 1 << 20) -> str:
    """`chain.<rank>.et` for ranks 0..ranks-1: each a chain of `nodes` nodes, compute (1 GFLOP, `size` bytes) with
    every 100th an all-reduce of `size` bytes over every rank; rank r's FLOPs differ by r so that no two files are
    alike and each is read as its own program. Returns the directory."""
    GlobalMetadata, Node = schema()
    os.makedirs(directory, exist_ok=True)
    head = delimited(GlobalMetadata(version="0.0.4"))
    comp, coll = NODE_TYPES.index("COMP_NODE"), NODE_TYPES.index("COMM_COLL_NODE")
    for rank in range(ranks):
        with open(os.path.join(directory, f"chain.{rank}.et"), "wb") as f:
            f.write(head)
            for i in range(nodes):
                node = Node(id=i + 1, data_deps=[i] if i else [])
                if i % 100 == 99:
                    node.name, node.type = "ar", coll
                    add_attr(node, "comm_type", COMM_TYPES.index("ALL_REDUCE"))
                    add_attr(node, "comm_size", size)
                else:
                    node.name, node.type = "mm", comp
                    add_attr(node, "num_ops", 10 ** 9 + rank)
                    add_attr(node, "tensor_size", size)
                f.write(delimited(node))
    return directory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--size", default="1MB", help="comm_size (B, KB, MB, GB: powers of two)")
    ap.add_argument("--kind", default="ALL_REDUCE", choices=[c for c in COMM_TYPES if c != "BARRIER"])
    args = ap.parse_args()
    microbenchmark(args.directory, args.ranks, parse_size(args.size), args.kind)
    print(f"wrote {args.ranks} traces to {args.directory}")


if __name__ == "__main__":
    main()
