"""astra-compile: PyTorch programs and collectives -> per-accelerator collective schedules.

The checkout is the import tree: the repository folder is the package `astra_compile` (its __init__.py is the
public API), and each top-level folder the subpackage of the same name:

    compiler/   -> astra_compile.compiler   (frontends, lowering, driver, reports, CLI, API, sweeps)
    network/    -> astra_compile.network    (the one network model: topology, blocks, links, parsers; numpy only)
    algorithms/ -> astra_compile.algorithms (one file per collective algorithm, a registry; imports only network/)
    dialects/   -> astra_compile.dialects   (the comm and workload dialects, IRDL)
    passes/     -> astra_compile.passes     (one pass per file)
    runtime/    -> astra_compile.runtime    (table formats, cost models, verifier; imports only network/)
"""
import hashlib
import re

from setuptools import Extension, setup

# The version is written once, in compiler/__init__.py (astra_compile.__version__, printed by --version).
with open("compiler/__init__.py", encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)

# The congestion runtime's event core in C. optional: without a C compiler the install still succeeds and the
# runtime falls back to its Python engine (same results, about 10x slower).
# The core carries the digest of the source it was built from: an editable checkout whose _linkcore.c changed since
# (a pull without reinstalling) runs the Python engine instead of a core that reads its plan differently.
with open("runtime/_linkcore.c", "rb") as f:
    LINKCORE_DIGEST = hashlib.sha256(f.read()).hexdigest()[:16]
LINKCORE = Extension("astra_compile.runtime._linkcore", ["runtime/_linkcore.c"], optional=True,
                     extra_compile_args=["-O2", "-std=c99"],
                     define_macros=[("LINKCORE_SOURCE_DIGEST", f'"{LINKCORE_DIGEST}"')])

setup(
    name="astra-compile",
    version=VERSION,
    description="MLIR compiler from collectives to per-accelerator schedule tables, with cost-model runtimes",
    python_requires=">=3.10",
    packages=[
        "astra_compile",
        "astra_compile.algorithms",
        "astra_compile.compiler",
        "astra_compile.compiler.api",
        "astra_compile.compiler.cli",
        "astra_compile.compiler.core",
        "astra_compile.compiler.driver",
        "astra_compile.compiler.frontend",
        "astra_compile.compiler.frontend.readers",
        "astra_compile.compiler.interop",
        "astra_compile.compiler.lowering",
        "astra_compile.compiler.report",
        "astra_compile.compiler.sweep",
        "astra_compile.compiler.plan",
        "astra_compile.dialects",
        "astra_compile.network",
        "astra_compile.network.blocks",
        "astra_compile.passes",
        "astra_compile.runtime",
    ],
    # the root package is the repository folder; every subpackage is the folder of its name below it
    package_dir={"astra_compile": "."},
    package_data={"astra_compile.compiler.report": ["*.json"], "astra_compile.dialects": ["*.mlir"],
                  "astra_compile.runtime": ["*.json"], "astra_compile.network": ["*.json"]},
    ext_modules=[LINKCORE],
    install_requires=[
        # The MLIR Python bindings (upstream MLIR, IRDL, pass manager) ship in this wheel; it needs no torch.
        "torch-mlir==20261001",
        # the PyTorch frontend: fake process group, FakeTensorMode capture, DDP/FSDP2/DTensor, flop_counter
        "torch==2.15.0",
        "ortools==9.15.6755",  # CP-SAT for the optimal chunk-to-dimension-order balance
        "numpy>=1.26,<3",
        "pyyaml>=6",
        "tqdm>=4.60",  # the sweep's progress bar
        "scipy==1.16.3",  # calibrate-compute: the robust least-squares fit of the compute model (optimize)
        "protobuf>=5,<8",  # Chakra execution traces (frontend/chakra.py builds the schema with its descriptor API)
    ],
    extras_require={
        # the tests start a real local Ray instance (tests/test_sweep.py) and open results with pandas; the passes'
        # FileCheck tests (tests/filecheck/) run the Python FileCheck that xDSL uses; torchao's float8 training is
        # captured as users write it (tests/test_fp8_training.py)
        "test": ["pytest>=8", "hypothesis>=6.100", "matplotlib>=3.8", "jsonschema>=4", "ray==2.60.0",
                 "pandas>=2", "filecheck==1.0.6", "torchao==0.18.0"],
        "plot": ["matplotlib>=3.8"],
        "ray": ["ray==2.60.0"],
    },
    entry_points={"console_scripts": ["astra-compile=astra_compile.compiler.main:main"]},
)
