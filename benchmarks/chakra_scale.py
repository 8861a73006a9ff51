"""Wall time and peak memory of running Chakra trace directories as steps.

Chakra's microbenchmark shape over 4096 ranks (a 1 MiB all-reduce on a 16x16x16 torus; docs/workloads.md compares
ASTRA-sim's wall time on the same traces) and ASTRA-sim's own et/ar_512_1G on
its network file, with its system file's settings as options (halvingDoubling, 64 splits, FIFO, baseline,
localBWAware, endpoint-delay 10; the file's local-mem-bw of 1e9 GB/s is left out: it is no local-memory term).

Every case runs several times as a fresh process (the CLI, start-up included); the median wall time and the peak
resident memory are printed. The 4096-rank directory is generated once (benchmarks/chakra_traces.py).

    python benchmarks/chakra_scale.py [--runs 3] [--exe PATH ...] [--workdir DIR]
"""
from __future__ import annotations

import os
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chakra_traces import microbenchmark  # noqa: E402
from cli_scale import arguments, table  # noqa: E402

# ASTRA-sim's reference runs: their network files, and their ETs as one archive (tests/test_astra_reference.py)
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "astrasim_reference")


def cases(workdir: str) -> list:
    ar4096 = os.path.join(workdir, "ar_4096_1M")
    if not os.path.isdir(ar4096):
        microbenchmark(ar4096, 4096, 1 << 20)
    out = [("Chakra microbenchmark: 1 MiB all-reduce, 4096 ranks, 16x16x16_torus",
            [ar4096, "--topology", "16x16x16_torus"])]
    ref = os.path.abspath(REFERENCE)
    ar512 = os.path.join(workdir, "et", "ar_512_1G")
    if not os.path.isdir(ar512):
        with tarfile.open(os.path.join(ref, "et.tar.gz")) as tar:
            tar.extractall(workdir, filter="data")
    out.append(("ASTRA-sim's et/ar_512_1G, 3D switch 8x8x8, halvingDoubling, 64 chunks, baseline",
                [ar512, "--topology", os.path.join(ref, "net_3dswitch_8x8x8.yml"),
                 "--algorithm", "halving_doubling", "--chunks", "64", "--scheduler", "baseline", "--intra", "fifo",
                 "--all-reduce", "hierarchical", "--endpoint-delay", "10"]))
    return out


def main() -> None:
    import argparse
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--workdir")
    known, rest = pre.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    args = arguments(__doc__.splitlines()[0] + " (--workdir DIR keeps the generated traces)", 3)
    if known.workdir:
        table(cases(known.workdir), args.runs, args.exe, args.timeout)
        return
    with tempfile.TemporaryDirectory() as workdir:
        table(cases(workdir), args.runs, args.exe, args.timeout)


if __name__ == "__main__":
    main()
