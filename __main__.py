"""`python -m astra_compile ...`: the astra-compile command line (compiler/cli/cli.py)."""
import sys

from .compiler.cli.cli import main

sys.exit(main())
