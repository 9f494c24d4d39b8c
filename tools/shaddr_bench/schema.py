# SPDX-License-Identifier: MIT
"""JSON schemas of what the benchmarks write (shaddr-bench, shaddr-microbench), checked with
jsonschema (Debian's python3-jsonschema). A schema says what must be there and of which type;
the checks beside it say what a schema cannot (min <= avg <= max, the verdict's agreement
with the error count). Structure only: timing is never asserted."""
import math

import jsonschema

from .costs import COLLS

POSITIVE = {"type": "number", "exclusiveMinimum": 0}
COUNT = {"type": "integer", "minimum": 0}
# A churn pass's counters: a number when measured, null when that side was not there.
COUNTER_OR_NULL = {"type": ["number", "null"], "minimum": 0}

BENCH_RESULT = {
    "type": "object",
    "required": ["coll", "bytes", "iters", "warmup", "t_max_us", "t_min_us", "t_avg_us",
                 "first_call_us", "errors"],
    "properties": {
        "coll": {"enum": [*COLLS, "pingpong"]},
        "bytes": COUNT, "iters": COUNT, "warmup": COUNT,
        "t_max_us": POSITIVE, "t_min_us": POSITIVE, "t_avg_us": POSITIVE,
        "first_call_us": {"type": ["number", "null"]},
        "errors": COUNT,
        "misses_per_call": COUNTER_OR_NULL, "bytes_mapped_max": COUNTER_OR_NULL,
        "open_files_max": COUNTER_OR_NULL, "windows_max": COUNTER_OR_NULL,
        "attachments_max": COUNTER_OR_NULL, "pages_pinned_max": COUNTER_OR_NULL,
    },
}

BENCH = {
    "type": "object",
    "required": ["tool", "label", "mpi", "host", "ranks", "mode", "validation", "errors",
                 "results"],
    "properties": {
        "tool": {"const": "shaddr-bench"},
        "label": {"type": "string"}, "mpi": {"type": "string"}, "host": {"type": "string"},
        "ranks": {"type": "integer", "minimum": 1},
        "mode": {"type": "string"},
        "validation": {"enum": ["passed", "failed", "off"]},
        "errors": COUNT,
        "results": {"type": "array", "minItems": 1, "items": BENCH_RESULT},
    },
}

# Every shaddr-bench document has each collective and the ping-pong.
BENCH_COLLS = (*COLLS, "pingpong")


def schema_errors(doc, schema):
    """Every place @doc breaks @schema, as 'path: message' lines."""
    v = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def bench_problems(doc, verdict, ranks, cache=None):
    """What is wrong with a shaddr-bench document that should say "validation": @verdict, on
    @ranks ranks, with every collective. @cache (churn runs): "cache" if the interposer was
    preloaded (each result gives its registration-cache misses and bytes mapped), "none" if
    not (both null)."""
    problems = schema_errors(doc, BENCH)
    if problems:
        return problems
    if doc["validation"] != verdict:
        problems.append(f"validation is {doc['validation']!r}, expected {verdict!r}")
    if (doc["errors"] > 0) != (verdict == "failed"):
        problems.append(f"errors = {doc['errors']} does not match {verdict!r}")
    if doc["ranks"] != ranks:
        problems.append(f"ranks = {doc['ranks']}, expected {ranks}")
    results = doc["results"]
    colls = {r["coll"] for r in results}
    problems += [f"no {c} result" for c in BENCH_COLLS if c not in colls]
    for r in results:
        if not all(math.isfinite(r[k]) for k in ("t_max_us", "t_min_us", "t_avg_us")):
            problems.append(f"{r['coll']} {r['bytes']} B: a time is not finite")
        elif not r["t_min_us"] <= r["t_avg_us"] * (1 + 1e-6) <= r["t_max_us"] * (1 + 2e-6):
            problems.append(f"{r['coll']} {r['bytes']} B: min/avg/max out of order")
        for k in ("misses_per_call", "bytes_mapped_max") if cache else ():
            v = r.get(k, "absent")
            ok = isinstance(v, (int, float)) if cache == "cache" else v is None
            if not ok:
                problems.append(f"{r['coll']} {r['bytes']} B: {k} = {v!r} ({cache} expected)")
    return problems


MACHINE = {
    "type": "object",
    "required": ["cpu", "kernel", "cpus", "default_chunk", "l1d", "l2", "l3"],
    "properties": {"cpu": {"type": "string"}, "kernel": {"type": "string"},
                   "cpus": POSITIVE, "default_chunk": POSITIVE,
                   "l1d": COUNT, "l2": COUNT, "l3": COUNT},
}

_BACKEND_NAMES = {"enum": ["segment", "window", "cma", "shm"]}
MICRO_BACKEND = {
    "type": "object",
    "required": ["name", "available"],
    "properties": {"name": _BACKEND_NAMES, "available": {"type": "boolean"}},
    # Skipped backends say why; measured ones have no complaint and their numbers.
    "if": {"properties": {"available": {"const": False}}},
    "then": {"required": ["reason"], "properties": {"reason": {"type": "string",
                                                                "minLength": 1}}},
    "else": {
        "required": ["reason", "read_call_ns", "copy"],
        "properties": {
            "reason": {"const": ""},
            "read_call_ns": POSITIVE,
            "copy": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "required": ["bytes", "gb_per_s", "memcpy_gb_per_s", "ratio"],
                "properties": {k: POSITIVE for k in ("bytes", "gb_per_s", "memcpy_gb_per_s",
                                                     "ratio")}}},
        },
        "if": {"properties": {"cached": {"const": True}}, "required": ["cached"]},
        "then": {"required": ["hit_ns", "miss_ns", "miss_fraction", "granularity"],
                 "properties": {"hit_ns": POSITIVE, "miss_ns": POSITIVE,
                                "miss_fraction": {"type": "number", "exclusiveMinimum": 0,
                                                  "maximum": 1},
                                "granularity": POSITIVE}},
    },
}

MICRO = {
    "type": "object",
    "required": ["mode", "error", "machine", "backends", "fifo", "fifo_error"],
    "properties": {
        "mode": {"const": "micro"}, "error": {"const": ""}, "machine": MACHINE,
        "backends": {"type": "array", "minItems": 4, "maxItems": 4, "items": MICRO_BACKEND,
                     "contains": {"properties": {"available": {"const": True}}}},
        "fifo_error": {"const": ""},
        "fifo": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["ranks", "bytes", "messages", "msgs_per_s", "gb_per_s", "backend"],
            "properties": dict({k: POSITIVE for k in ("ranks", "bytes", "messages",
                                                      "msgs_per_s", "gb_per_s")},
                               backend={"type": "string", "minLength": 1})}},
    },
}

SEED001_TABLE = {
    "type": "object",
    "required": ["mode", "ranks", "backend", "columns", "rows"],
    "properties": {
        "mode": {"enum": ["chunk", "loop"]}, "ranks": POSITIVE,
        "backend": {"type": "string", "minLength": 1},
        "columns": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["label"],
            "properties": {"label": {"type": "string"}, "segment": COUNT}}},
        "rows": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["message", "us"],
            "properties": {"message": COUNT,
                           "us": {"type": "array", "items": {"type": ["number", "null"]}}}}},
    },
}

SEED001 = {
    "type": "object",
    "required": ["error", "machine", "seed001"],
    "properties": {"error": {"const": ""}, "machine": MACHINE,
                   "seed001": {"type": "array", "minItems": 2, "maxItems": 2,
                               "items": SEED001_TABLE}},
}


def seed001_problems(doc):
    """The segmentation tables: a chunk and a loop table, one default-chunk column and a
    libshaddr-default column each, a cell per column, * (null) where the segment exceeds the
    message and a positive time elsewhere."""
    problems = schema_errors(doc, SEED001)
    if problems:
        return problems
    tables = doc["seed001"]
    if [t["mode"] for t in tables] != ["chunk", "loop"]:
        problems.append("seed001: expected a chunk and a loop table")
    for t in tables:
        mode, cols = t["mode"], t["columns"]
        if sum(1 for c in cols if c.get("default_chunk")) != 1:
            problems.append(f"{mode}: exactly one default-chunk column")
        if not any(c.get("defaults") for c in cols):
            problems.append(f"{mode}: no libshaddr-default column")
        for r in t["rows"]:
            if len(r["us"]) != len(cols):
                problems.append(f"{mode}: row {r['message']}: cell count")
            for c, v in zip(cols, r["us"]):
                if c.get("segment", 0) > r["message"]:
                    if v is not None:
                        problems.append(f"{mode}: {r['message']}/{c['label']}: should be *")
                elif not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                    problems.append(f"{mode}: {r['message']}/{c['label']}: {v!r}")
    return problems
