# SPDX-License-Identifier: MIT
"""Synthetic benchmark records for the tests: shaddr-bench results and shaddr-compare
contender records with times chosen by the test, and a copy limit; stand-ins for the programs
the tools run."""
import json
import os
import stat

# Written out, not taken from the package: the schema tests check the package's list against it.
COLLS = ["bcast", "reduce", "allreduce", "allgather", "alltoall", "barrier", "pingpong"]
SIZES = [8, 256, 4096, 65536, 1 << 20, 4 << 20]


def result(coll, size, t, **extra):
    """One shaddr-bench result: max/min/avg times around t (us)."""
    r = {"coll": coll, "bytes": 0 if coll == "barrier" else size, "iters": 10, "warmup": 2,
         "t_max_us": t, "t_min_us": t * 0.9, "t_avg_us": t * 0.95, "first_call_us": t * 3,
         "errors": 0}
    r.update(extra)
    return r


def bench_doc(times, ranks=2, label="x", validation="passed", errors=0):
    """A shaddr-bench document; times(coll, size) -> us."""
    res = []
    for coll in COLLS:
        for s in ([0] if coll == "barrier" else SIZES):
            res.append(result(coll, s, times(coll, s)))
    return {"tool": "shaddr-bench", "label": label, "mpi": "Synthetic MPI", "host": "h",
            "ranks": ranks, "mode": "plain", "validation": validation, "errors": errors,
            "results": res}


def contender(times, status="ok", ref=25e9, churn=None):
    """A shaddr-compare contender record (one round) whose main pass takes times(coll, size)."""
    rec = {"desc": "synthetic", "mpi": "mpich", "env": {}, "status": status,
           "cross_core_ref_Bps": ref, "passes": {"main": bench_doc(times)}}
    if churn is not None:
        rec["passes"]["churn"] = churn
    return rec


def copy_limit(all_core_gbs=20.0, cross_core_gbs=10.0, one_core_gbs=15.0):
    """shaddr-copy-limit's document: the same bandwidth at every size (GB/s)."""
    rows = [{"bytes": s, "one_core_Bps": one_core_gbs * 1e9, "all_core_Bps": all_core_gbs * 1e9,
             "cross_core_Bps": cross_core_gbs * 1e9} for s in [8 << i for i in range(0, 24)]]
    return {"threads": 2, "results": rows}


def script(path, text):
    """A shell script at @path (its folders made) that runs @text: a stand-in for a program."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def echo_record(rec, line="", **shell):
    """Shell lines that print @line (a program's line for people) and then @rec as the one line
    of JSON the tools read (proc.record()), each key of @shell's value being that shell
    expression (a variable the stand-in sets)."""
    text = json.dumps(dict(rec, **{k: 0 for k in shell})).replace('"', '\\"')
    for k, v in shell.items():
        text = text.replace(f'\\"{k}\\": 0', f'\\"{k}\\": {v}')
    return (f'echo "{line}"\n' if line else "") + f'echo "{text}"\n'
