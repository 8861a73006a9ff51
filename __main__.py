"""`python -m astra_compile ...`: the astra-compile command line (compiler/main.py)."""
import sys

from .compiler.main import main

sys.exit(main())
