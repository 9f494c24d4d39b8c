# SPDX-License-Identifier: MIT
"""The benchmarks' driver, fits and reports: shaddr-compare (`make run`), shaddr-model (the
selection's cost model), shaddr-bench-multihost, and the schemas of the benchmarks' JSON. The
command-line tools in tools/ are thin wrappers around these modules; tests/unit/py tests them."""
