#!/usr/bin/env python3
"""check_bench_json.py FILE VERDICT RANKS [CACHE]: FILE is shaddr-bench JSON that parses, says
"validation": VERDICT, ran on RANKS ranks, and has a finite, positive time for every result.
CACHE (churn runs): "cache" if the interposer was preloaded (every result must give its
registration-cache misses per call and bytes mapped), "none" if not (both must be null)."""
import json
import math
import sys

path, verdict, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = sys.argv[4] if len(sys.argv) > 4 else None
with open(path) as f:
    doc = json.load(f)
problems = []
if doc.get("validation") != verdict:
    problems.append(f"validation is {doc.get('validation')!r}, expected {verdict!r}")
if (doc.get("errors", 0) > 0) != (verdict == "failed"):
    problems.append(f"errors = {doc.get('errors')} does not match {verdict!r}")
if doc.get("ranks") != ranks:
    problems.append(f"ranks = {doc.get('ranks')}, expected {ranks}")
results = doc.get("results", [])
if not results:
    problems.append("no results")
colls = {r["coll"] for r in results}
for c in ("bcast", "reduce", "allreduce", "allgather", "alltoall", "barrier", "pingpong"):
    if c not in colls:
        problems.append(f"no {c} result")
for r in results:
    for k in ("t_max_us", "t_min_us", "t_avg_us"):
        if not (isinstance(r[k], (int, float)) and math.isfinite(r[k]) and r[k] > 0):
            problems.append(f"{r['coll']} {r['bytes']} B: {k} = {r[k]}")
    if not r["t_min_us"] <= r["t_avg_us"] * (1 + 1e-6) <= r["t_max_us"] * (1 + 2e-6):
        problems.append(f"{r['coll']} {r['bytes']} B: min/avg/max out of order")
for r in results if cache else []:
    for k in ("misses_per_call", "bytes_mapped_max"):
        v = r.get(k, "absent")
        ok = (isinstance(v, (int, float)) and v >= 0) if cache == "cache" else v is None
        if not ok:
            problems.append(f"{r['coll']} {r['bytes']} B: {k} = {v!r} ({cache} expected)")
for p in problems:
    print(f"{path}: {p}")
print(f"{path}: {'OK' if not problems else 'FAILED'} ({len(results)} results, validation {doc.get('validation')})")
sys.exit(1 if problems else 0)
