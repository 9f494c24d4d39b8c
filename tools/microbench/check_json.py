#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Smoke test of shaddr-microbench: run both modes with --quick and check that the JSON is
complete and sane against its schemas (tools/shaddr_bench/schema.py: every field present,
every measurement a positive number, skipped backends say why). Checks structure only:
timing is never asserted."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), ".."))
from shaddr_bench.schema import MICRO, schema_errors, seed001_problems  # noqa: E402


def check(cond, what, errors):
    if not cond:
        errors.append(what)


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
        errors += schema_errors(doc, MICRO)
        rc, doc = run(tool, ["--seed001", "-n", "2", "--markdown", os.path.join(d, "t.md")],
                      os.path.join(d, "seed001.json"))
        check(rc == 0, f"seed001 mode exited {rc}", errors)
        errors += seed001_problems(doc)
        with open(os.path.join(d, "t.md")) as f:
            md = f.read()
        check("[default chunk]" in md and "Command: `" in md, "markdown: marks missing", errors)
    for e in errors:
        print("FAIL:", e)
    print("microbench JSON:", "FAIL" if errors else "ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
