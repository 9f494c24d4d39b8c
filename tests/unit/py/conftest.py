# SPDX-License-Identifier: MIT
# The package under test is tools/shaddr_bench; synth.py (beside this file) makes its inputs.
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
sys.path.insert(0, HERE)
