import os
import sys

# tests import helpers.py beside them; the code under test comes from the installed astra_compile package
sys.path.insert(0, os.path.dirname(__file__))
