# SPDX-License-Identifier: MIT
"""shaddr-compare: every MPI contender on this machine in one run, against the memory-copy limit.

Runs build/tools/shaddr-bench-{mpich,openmpi} under each contender that exists here (and says
why the others are skipped), measures the copy limit (build/tools/shaddr-copy-limit) in the
same run, fits the cost model, and writes build/report/{results.json,report.md,*.png}.

Contenders (host):   mpich (Debian, ch4:ucx), openmpi (Debian), mpich-patched-off,
                     mpich-patched-on (build/mpich/, `make mpich`), interposer-{cma,shm} on
                     each MPI (build/tools/shaddr-run, heap off), interposer-heap-<mpi> and
                     mpich-patched-heap (the patched MPICH's defaults, libshaddr-heap.so
                     preloaded)
Contenders (guest):  the same with the module's backends (segment, window) and baselines, in one
                     tools/shaddr-vm guest (Debian 6.1 kernel): only ratios inside it mean anything

This module is the options and the order of the steps; runner.py runs the processes, judge.py
and goals.py judge, report.py writes the report.
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time

from . import calibration, confirm, topomodel
from .judge import confirm_losses, cost_model
from .report import report, summary
from .rounds import merge_rounds
from .runner import (TOP, contenders, cpu_model, module_params, rerun_in_fast_state,
                     run_alloc_cost, run_comm_cost, run_contender, run_copy_limit, run_fortran,
                     run_vm, say)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Writes build/report/{results.json,report.md,*.png}.")
    ap.add_argument("--short", action="store_true", help="a few minutes (`make run`'s version)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--sizes", help="MIN:MAX bytes (default 8:64M; --short 8:4M)")
    ap.add_argument("--churn-sizes", help="sizes of the churn pass (default 4K:16M; --short 64K:1M)")
    ap.add_argument("--limit-sizes", default="8:64M", help="copy-limit sizes (default 8:64M)")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per size (default: by size)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="run every contender this many times, in rounds that rotate the order, "
                         "and report each size's best (default 3; the host's speed drifts by up "
                         "to 4x over minutes, so contenders run one after another are not "
                         "comparable)")
    ap.add_argument("--state-wait", type=int, default=900,
                    help="seconds to wait for the fast cross-core state to run again the "
                         "contenders none of whose rounds met it (default 900)")
    ap.add_argument("--vm-rounds", type=int, default=1,
                    help="rounds in the guest (default 1: under emulation a round takes about "
                         "17 minutes, and the guest's numbers are not the Goals')")
    ap.add_argument("--confirm-reps", type=int, default=confirm.REPS,
                    help="reruns per side of each point that a judged contender lost beyond the "
                         "noise to the same MPI with shaddr off, alternating the two; the Goals "
                         "judge by the median pairwise ratio of the two sides' reruns (default "
                         f"{confirm.REPS}, and up to {confirm.MAX_REPS} for a point still lost; "
                         "0: none)")
    ap.add_argument("--confirm-budget", type=int, default=confirm.BUDGET_S,
                    help=f"seconds for those reruns (default {confirm.BUDGET_S})")
    ap.add_argument("--comm-cost-reps", type=int,
                    help="runs of tests/interpose/comm_cost per MPI and side (stock, shaddr-run), "
                         "alternating, within about 40 s (default 5; --short 3; 0: none); with "
                         "--only, on the MPIs whose interposer-<mpi> it names")
    ap.add_argument("--fortran-reps", type=int,
                    help="runs of shaddr-fortran-bench per MPI, binding and side (stock, "
                         "shaddr-run) (default 3; --short 1; 0: none)")
    ap.add_argument("--alloc-cost-reps", type=int,
                    help="runs of tests/heap/heap_alloc_bench per point and side (glibc, "
                         "libshaddr-heap.so), alternating (default 5; --short 3; 0: none)")
    ap.add_argument("--only", help="comma-separated contender names (default: all)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="do not measure this machine's calibration first when it is missing or "
                         "stale (also SHADDR_CALIBRATE=0); the report still says which one the "
                         "contenders read")
    ap.add_argument("--build", default=os.path.join(TOP, "build"), help="build directory")
    ap.add_argument("--out", help="report directory (default BUILD/report)")
    ap.add_argument("--no-vm", action="store_true", help="skip the guest part")
    ap.add_argument("--kernel", default="6.1", help="guest kernel series (default 6.1)")
    ap.add_argument("--node-copy-gbs", default="16=40,64=100,128=150",
                    help="assumed node copy bandwidth for the model's projection")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per benchmark run")
    ap.add_argument("--vm-timeout", type=int, default=3600, help="seconds for the guest")
    ap.add_argument("--host-module", action="store_true",
                    default=os.path.exists("/proc/modules") and os.geteuid() == 0,
                    help="module part on the host with insmod (default where this kernel "
                         "loads modules and we are root), not in a guest")
    ap.add_argument("--inner-vm", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.sizes = args.sizes or ("8:4M" if args.short else "8:64M")
    args.churn_sizes = args.churn_sizes or ("64K:1M" if args.short else "4K:16M")
    if args.short and args.limit_sizes == "8:64M":
        args.limit_sizes = "8:16M"
    build = os.path.abspath(args.build)
    if args.inner_vm:
        out_dir = os.path.join(os.environ.get("SHADDR_VM_RESULTS", "/tmp"), "compare")
    else:
        out_dir = os.path.abspath(args.out or os.path.join(build, "report"))
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)
    t0 = time.time()

    cs, bench = contenders(build, args.ranks)
    if args.inner_vm:
        cs = [c for c in cs if c.where == "vm"]
    else:
        host = [c for c in cs if c.where == "host"]
        vm_cs = cs
        cs = host
    if args.only:
        keep = set(args.only.split(","))
        cs = [c for c in cs if c.name in keep]
    if not any(os.access(b, os.X_OK) for b in bench.values()):
        sys.exit(f"shaddr-compare: no {build}/tools/shaddr-bench-* (build first: make userspace)")
    say(f"{len(cs)} contenders, {args.ranks} ranks, sizes {args.sizes}, results in {out_dir}")
    cal, cal_read = {}, {}
    if not args.inner_vm:
        # The curves the contenders decide by: this machine's calibration, measured first
        # when missing or stale, then asked of each contender that reads it.
        cal = calibration.ensure(build, calibration.skip_reason(args), args.timeout)
        cal_read = calibration.check_read(cs, build, 300)
    limit = run_copy_limit(build, args, out_dir)
    # Rounds: every contender once per round, the order rotated each round, so that every
    # contender samples the same drift of the machine; each size's best over the rounds.
    runs = {c.name: [] for c in cs}
    for rnd in range(max(1, args.rounds)):
        say(f"round {rnd + 1}/{args.rounds}")
        order = cs[rnd % len(cs):] + cs[:rnd % len(cs)] if cs else cs
        for i, c in enumerate(order, 1):
            if rnd and (runs[c.name][0]["status"] == "skipped"):
                continue
            runs[c.name].append(run_contender(c, bench, args, out_dir, i, len(cs), rnd))
    slow_only = rerun_in_fast_state(cs, runs, bench, args, out_dir)
    res = {c.name: merge_rounds(runs[c.name]) for c in cs}
    confirmation = ({"skipped": "not run in the module part"} if args.inner_vm else
                    confirm_losses(cs, res, bench, args, out_dir))
    comm_cost = fortran_res = alloc_cost = None
    if not args.inner_vm:
        comm_cost = run_comm_cost(build, args)
        fortran_res = run_fortran(build, args)
        alloc_cost = run_alloc_cost(build, args)
    refs = [r["cross_core_ref_Bps"] for v in runs.values() for r in v
            if r.get("cross_core_ref_Bps")]
    if refs and max(refs) > 1.5 * min(refs):
        say(f"warning: the machine's cross-core copy rate (256 KiB) drifted from "
            f"{min(refs) / 1e9:.1f} to {max(refs) / 1e9:.1f} GB/s during the runs: single "
            f"runs are not comparable; the report shows each size's best over "
            f"{args.rounds} rounds")
    node_bw = dict((int(k), float(v)) for k, v in
                   (kv.split("=") for kv in args.node_copy_gbs.split(",")))
    doc = {"tool": "shaddr-compare", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count(),
           "ranks": args.ranks, "sizes": args.sizes, "short": args.short,
           "kernel": args.kernel, "copy_limit": limit, "contenders": res, "node_bw": node_bw,
           "module_params": module_params(), "rounds": max(1, args.rounds),
           "slow_state_only": slow_only, "calibration": cal, "calibration_read": cal_read,
           "confirmation": confirmation, "comm_cost": comm_cost, "fortran": fortran_res,
           "alloc_cost": alloc_cost}
    if not args.inner_vm:
        doc["vm"] = run_vm(vm_cs if not args.only else
                           [c for c in vm_cs if c.name in set(args.only.split(","))],
                           build, args, out_dir)
    doc["model"] = cost_model(res, limit, args.ranks, node_bw)
    if not args.inner_vm:  # the machines this one is not: a model (docs/topology.md)
        doc["topology_model"] = topomodel.predict_all(build)
    doc["seconds"] = time.time() - t0
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    if args.inner_vm:
        return 0
    report(doc, out_dir)
    print()
    print(summary(doc))
    bad = [k for k, v in res.items() if v["status"] not in ("ok", "skipped")]
    print(f"\nreport: {os.path.join(out_dir, 'report.md')}  (results.json, *.png beside it)")
    if bad:
        print(f"shaddr-compare: {len(bad)} contender(s) failed or gave wrong results: "
              f"{', '.join(bad)}")
        return 1
    return 0
