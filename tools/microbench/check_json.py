#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Smoke test of shaddr-microbench: run both modes with --quick and check that the JSON is
complete and sane (every field present, every measurement a positive number, skipped backends
say why). Checks structure only: timing is never asserted."""
import json
import math
import os
import subprocess
import sys
import tempfile


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def check(cond, what, errors):
    if not cond:
        errors.append(what)


def check_machine(doc, errors):
    m = doc.get("machine", {})
    for k in ("cpu", "kernel"):
        check(isinstance(m.get(k), str), f"machine.{k} missing", errors)
    for k in ("cpus", "default_chunk"):
        check(positive(m.get(k)), f"machine.{k} not positive: {m.get(k)!r}", errors)
    for k in ("l1d", "l2", "l3"):
        check(isinstance(m.get(k), int) and m[k] >= 0, f"machine.{k} missing", errors)


def check_micro(doc, errors):
    backends = doc.get("backends")
    check(isinstance(backends, list) and len(backends) == 4, "backends: not four entries", errors)
    measured = 0
    for b in backends or []:
        name = b.get("name", "?")
        check(name in ("segment", "window", "cma", "shm"), f"backend name {name!r}", errors)
        if not b.get("available"):
            check(isinstance(b.get("reason"), str) and b["reason"],
                  f"{name}: skipped without a reason", errors)
            continue
        measured += 1
        check(b.get("reason") == "", f"{name}: measured with a complaint: {b.get('reason')}",
              errors)
        check(positive(b.get("read_call_ns")), f"{name}: read_call_ns", errors)
        if b.get("cached"):
            for k in ("hit_ns", "miss_ns", "miss_fraction", "granularity"):
                check(positive(b.get(k)), f"{name}: {k} = {b.get(k)!r}", errors)
            check(b.get("miss_fraction", 0) <= 1, f"{name}: miss_fraction > 1", errors)
        copy = b.get("copy")
        check(isinstance(copy, list) and copy, f"{name}: no copy sizes", errors)
        for c in copy or []:
            for k in ("bytes", "gb_per_s", "memcpy_gb_per_s", "ratio"):
                check(positive(c.get(k)), f"{name}: copy {c.get('bytes')}: {k} = {c.get(k)!r}",
                      errors)
    check(measured >= 1, "no backend measured", errors)
    fifo = doc.get("fifo")
    check(isinstance(fifo, list) and fifo, "fifo: no results", errors)
    check(doc.get("fifo_error") == "", f"fifo_error: {doc.get('fifo_error')!r}", errors)
    for f in fifo or []:
        for k in ("ranks", "bytes", "messages", "msgs_per_s", "gb_per_s"):
            check(positive(f.get(k)), f"fifo {f.get('bytes')}: {k} = {f.get(k)!r}", errors)
        check(isinstance(f.get("backend"), str) and f["backend"], "fifo: backend", errors)


def check_seed001(doc, errors):
    tables = doc.get("seed001")
    check(isinstance(tables, list) and [t.get("mode") for t in tables] == ["chunk", "loop"],
          "seed001: expected a chunk and a loop table", errors)
    for t in tables or []:
        mode = t.get("mode")
        check(positive(t.get("ranks")) and t.get("backend"), f"{mode}: ranks/backend", errors)
        cols = t.get("columns", [])
        check(sum(1 for c in cols if c.get("default_chunk")) == 1,
              f"{mode}: exactly one default-chunk column", errors)
        check(any(c.get("defaults") for c in cols), f"{mode}: no libshaddr-default column", errors)
        for r in t.get("rows", []):
            us = r.get("us", [])
            check(len(us) == len(cols), f"{mode}: row {r.get('message')}: cell count", errors)
            for c, v in zip(cols, us):
                seg = c.get("segment", 0)
                if seg > r.get("message", 0):
                    check(v is None, f"{mode}: {r['message']}/{c['label']}: should be *", errors)
                else:
                    check(positive(v), f"{mode}: {r['message']}/{c['label']}: {v!r}", errors)
        check(t.get("rows"), f"{mode}: no rows", errors)


def run(tool, args, out):
    cmd = [tool, "--quick", "--json", out] + args
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout, end="")
    with open(out) as f:
        return p.returncode, json.load(f)


def main():
    tool = sys.argv[1]
    errors = []
    with tempfile.TemporaryDirectory() as d:
        rc, doc = run(tool, [], os.path.join(d, "micro.json"))
        check(rc == 0, f"micro mode exited {rc}", errors)
        check(doc.get("mode") == "micro" and doc.get("error") == "", "micro: mode/error", errors)
        check_machine(doc, errors)
        check_micro(doc, errors)
        rc, doc = run(tool, ["--seed001", "-n", "2", "--markdown", os.path.join(d, "t.md")],
                      os.path.join(d, "seed001.json"))
        check(rc == 0, f"seed001 mode exited {rc}", errors)
        check(doc.get("error") == "", f"seed001: error {doc.get('error')!r}", errors)
        check_seed001(doc, errors)
        with open(os.path.join(d, "t.md")) as f:
            md = f.read()
        check("[default chunk]" in md and "Command: `" in md, "markdown: marks missing", errors)
    for e in errors:
        print("FAIL:", e)
    print("microbench JSON:", "FAIL" if errors else "ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
