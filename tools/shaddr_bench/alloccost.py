# SPDX-License-Identifier: MIT
"""What the shared heap costs a program's allocations: build/tests/heap/shaddr_heap_alloc_bench
(malloc + a write per page + free rounds, and realloc doubling from 16 KiB, per size and
thread count) run on glibc's malloc and with libshaddr-heap.so preloaded, alternating (glibc,
heap, heap, glibc, ...). Judged: every point within GOAL x glibc, by the median over the
repetitions of each pair's ratio of the threads' CPU time per round in their fastest batch
(the host is noisy: pairs run back to back see the same state; a thread's CPU time leaves out
the time it waits for a core, most of the wall clock on a loaded host; and its fastest batch
of 2 ms leaves out the batches that other processes' cache use or the hypervisor's stolen
time inflated, which made even the median batch swing 10-40x on a busy host)."""
import os
import time
from statistics import median

from . import proc
from .text import fmt_size, md_table

GOAL = 1.2
SIDES = ("glibc", "heap")
MODES = ("malloc", "realloc")
SIZES = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
THREADS = (1, 2, 4)

# The bench's record (its JSON line), the median thread's microseconds per round: wall clock
# (us), and CPU time, the median (cpu_us) and the minimum (cpu_min_us) of its batches.
KEYS = ("mode", "size", "threads", "us", "cpu_us", "cpu_min_us")
TIMES = ("us", "cpu_us", "cpu_min_us")


def run_once(cmd, env, timeout):
    """One run: its microseconds per round ({us, cpu_us, cpu_min_us}), or {error: why}."""
    p, rec, why = proc.run_for_record(cmd, env, timeout, "alloc_bench", KEYS)
    if p is None:
        return {"error": why}
    if p.returncode:
        return {"error": f"exit {p.returncode} ({proc.tail(p)})"}
    return {k: float(rec[k]) for k in TIMES}


def key(mode, size, threads):
    return f"{mode}/{size}/{threads}"


def measure(build, reps, say, seconds=0.2, timeout=120, modes=MODES, sizes=SIZES,
            threads=THREADS):
    """Every point, both sides, @reps times, alternating the order. Returns {points: {key:
    {side: [records]}}, reps, seconds} or {skipped: why}."""
    exe = os.path.join(build, "tests", "heap", "shaddr_heap_alloc_bench")
    lib = os.path.join(build, "libshaddr", "heap", "libshaddr-heap.so")
    for f in (exe, lib):
        if not os.path.exists(f):
            return {"skipped": f"{f} not built"}
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("SHADDR_") and k not in ("LD_PRELOAD", "MALLOC_CONF")}
    envs = {"glibc": base, "heap": dict(base, LD_PRELOAD=lib)}
    points = {}
    t0 = time.time()
    for rep in range(reps):
        for mode in modes:
            for size in sizes:
                for t in threads:
                    cmd = [exe, mode, str(size), str(t), str(seconds)]
                    p = points.setdefault(key(mode, size, t), {s: [] for s in SIDES})
                    for side in proc.alternate(rep, SIDES):
                        p[side].append(run_once(cmd, envs[side], timeout))
        say(f"allocation cost: repetition {rep + 1}/{reps} done")
    return {"points": points, "reps": reps, "seconds": round(time.time() - t0, 1),
            "command": f"{exe} MODE SIZE THREADS {seconds} (heap: LD_PRELOAD={lib})"}


def summarise(p):
    """One point's runs: each side's median and minimum of the runs' CPU time per round in the
    fastest batch (side, side_min), median of their median batches (side_batch) and median wall
    time (side_wall); the median of the pairwise fastest-batch ratios; the verdict."""
    out = {}
    for side in SIDES:
        good = [r for r in p[side] if "error" not in r]
        out[side] = median(r["cpu_min_us"] for r in good) if good else None
        out[side + "_min"] = min(r["cpu_min_us"] for r in good) if good else None
        out[side + "_batch"] = median(r["cpu_us"] for r in good) if good else None
        out[side + "_wall"] = median(r["us"] for r in good) if good else None
        out[side + "_errors"] = [r["error"] for r in p[side] if "error" in r]
    pairs = [h["cpu_min_us"] / g["cpu_min_us"] for g, h in zip(p["glibc"], p["heap"])
             if "error" not in g and "error" not in h and g["cpu_min_us"] > 0]
    if out["heap_errors"]:
        out["verdict"] = "NOT met"
    if pairs:
        out["ratio"] = median(pairs)
        out.setdefault("verdict", "met" if out["ratio"] <= GOAL else "NOT met")
    else:
        out.setdefault("verdict", "not judged")
    return out


def goals_md(ac):
    """The Goals' line and table: every point judged."""
    if not ac or not ac.get("points"):
        return [f"**Allocation within {GOAL}x of glibc** (`libshaddr-heap.so`): not judged "
                f"({(ac or {}).get('skipped', 'not measured')}).\n"]
    rows, verdicts = [], []
    for k, p in ac["points"].items():
        mode, size, threads = k.split("/")
        s = summarise(p)
        verdicts.append(s["verdict"])
        def us(x):
            return f"{x:.2f}" if x is not None else "—"
        rows.append([mode, fmt_size(int(size)), threads, f"{us(s['glibc'])} / {us(s['glibc_min'])}",
                     f"{us(s['heap'])} / {us(s['heap_min'])}",
                     f"{s['ratio']:.2f}x" if "ratio" in s else "—",
                     f"{us(s['glibc_batch'])} / {us(s['heap_batch'])}",
                     f"{us(s['glibc_wall'])} / {us(s['heap_wall'])}", s["verdict"]])
    overall = proc.overall(verdicts)
    return [f"**Allocation within {GOAL}x of glibc** (`libshaddr-heap.so`, "
            "[heap.md](../../docs/heap.md)): " + overall + ". `tests/heap/heap_alloc_bench.c`: "
            "malloc + a write per page + free rounds, and realloc doubling from 16 KiB to the "
            "size (a write per new page), each thread its own rounds at once, timed in batches "
            "of 2 ms by the thread's own CPU time; us per round in the fastest batch (the "
            f"median thread's), median / minimum over {ac['reps']} runs per side, alternating; "
            "the ratio is the median of the runs' pairwise ratios; the median batch's and the "
            "wall clock's medians for reference (on a loaded host the wall clock is mostly the "
            "wait for a core; [benchmarks.md](../../docs/benchmarks.md)).\n",
            md_table(["rounds", "size", "threads", "glibc CPU us", "heap CPU us", "heap / glibc",
                      "median batch glibc / heap", "wall us glibc / heap", "verdict"], rows), ""]
