"""`python -m astra_compile ...`: the astra-compile command line (compiler/cli.py)."""
import sys

from .compiler.cli import main

sys.exit(main())
