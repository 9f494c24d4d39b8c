#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""check_bench_json.py FILE VERDICT RANKS [CACHE]: FILE is shaddr-bench JSON that parses, fits
its schema (tools/shaddr_bench/schema.py), says "validation": VERDICT, ran on RANKS ranks, and
has a finite, positive time for every result. CACHE (churn runs): "cache" if the interposer
was preloaded (every result must give its registration-cache misses per call and bytes
mapped), "none" if not (both must be null)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), ".."))
from shaddr_bench.schema import bench_problems  # noqa: E402

if len(sys.argv) not in (4, 5):
    sys.exit(__doc__)
path, verdict, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = sys.argv[4] if len(sys.argv) > 4 else None
with open(path) as f:
    doc = json.load(f)
problems = bench_problems(doc, verdict, ranks, cache)
for p in problems:
    print(f"{path}: {p}")
print(f"{path}: {'OK' if not problems else 'FAILED'} ({len(doc.get('results', []))} results, "
      f"validation {doc.get('validation')})")
sys.exit(1 if problems else 0)
