# SPDX-License-Identifier: MIT
"""shaddr-model: measure the cost model that shaddr_select() answers from (libshaddr/src/select.h)
and write it as `model.` lines of a tuning file (SHADDR_TUNING_FILE).

  shaddr-model measure [-n RANKS] [--repeat K] [-o FILE]
      libshaddr's side: build/tools/shaddr-tune --model on each backend the host has (cma, shm,
      and the shared heap over cma when libshaddr-heap.so is built); the fallbacks' side:
      build/tools/shaddr-bench-<mpi> under Debian's MPICH and Open MPI and, when it is built,
      the patched MPICH with shaddr off (its release_gather: `mpich-posix`). K rounds of every
      job (so that each samples the machine's drift alike), the best per size kept, from the
      runs made in the fast cross-core state; a job that never met it runs again when the
      state returns (--wait seconds at most), else the file's header names it. As root, the
      ranks run under SCHED_FIFO (chrt -f 10); still, measure on an idle machine.
  shaddr-model fit FILE.json...  (shaddr-bench JSON; `--who NAME` per file: name=path)
      only the fallbacks' lines, from existing benchmark results (make run's raw/ files).
  shaddr-model inc FILE
      the lines of FILE as select_model.inc (the curves libshaddr ships).

A fallback's curve is the lower envelope of up to 3 alpha-beta lines (an MPI switches algorithms
by size), fitted to the relative error; libshaddr's algorithms get one line each (shaddr-tune).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import compare as COMPARE
from .fit import fit_envelope

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLS = ["barrier", "bcast", "reduce", "allreduce", "gather", "scatter", "allgather",
         "alltoall"]
BENCH_COLLS = ["bcast", "reduce", "allreduce", "allgather", "alltoall", "barrier"]
# A job ran in the fast state when the cross-core probe before it was at least this share of
# the best probe of the measurement.
FAST_SHARE = 0.7
WHO_CXX = {"fifo": "kFifo", "slots": "kSlots", "heap": "kHeap", "segment": "kSegment",
           "window": "kWindow", "cma": "kCma", "shm": "kShm", "mpich": "kMpich",
           "openmpi": "kOpenmpi", "mpich-posix": "kMpichPosix", "patch": "kPatch"}


# The patched MPICH with shaddr off (its release_gather, MPIR's Allgather/Alltoall) and Open
# MPI's options, as make run's contenders run them.
MPICH_OFF = COMPARE.env_pairs(COMPARE.MPICH_COMMON + " " + COMPARE.MPICH_OFF)
# ... and with every call to its shaddr algorithms (the `patch` lines: its own layers' cost).
MPICH_ON = COMPARE.env_pairs(COMPARE.MPICH_COMMON + " " + COMPARE.MPICH_ON)
OMPI = COMPARE.OMPI_OPTS


def say(msg):
    print(f"shaddr-model: {msg}", file=sys.stderr, flush=True)


def model_line(who, coll, lines, ranks):
    return f"model.{who}.{coll}=" + " ".join(f"{a:.3f}/{1e-3 / b:.3f}@{ranks}" for a, b in lines)


def bench_points(docs):
    """{coll: [(bytes, best over runs of t_max_us)]} from shaddr-bench JSON documents. The best,
    not the median: this VM's vCPUs drift between a fast and a slow state (cross-core copies
    25 vs 9 GB/s) for minutes at a time, so a median sides with whichever state a job happened
    to meet most; the best is each job in the fast state, if it met it once (the header lists
    the states met), and noise only ever adds time."""
    per = {}
    for doc in docs:
        for r in doc["results"]:
            per.setdefault(r["coll"], {}).setdefault(r["bytes"], []).append(r["t_max_us"])
    return {c: sorted((s, min(ts)) for s, ts in v.items() if ts) for c, v in per.items()}


def bench_lines(who, docs, ranks):
    """The model. lines of one side (a fallback, or a libshaddr path) from its shaddr-bench
    documents: each collective's envelope, the barrier's alpha."""
    out = []
    for coll, pts in sorted(bench_points(docs).items()):
        if coll not in COLLS:
            continue
        if coll == "barrier":
            out.append(f"model.{who}.barrier={pts[0][1]:.3f}/1000000.000@{ranks}")
            continue
        pts = [(s, t) for s, t in pts if t > 0]
        if len(pts) >= 2:
            out.append(model_line(who, coll, fit_envelope(pts), ranks))
    return out


def layer_lines(who, docs, base_docs, ranks):
    """A fixed cost per collective: the median over sizes of how much longer @docs took than
    @base_docs (the same path measured without the layer), never below 0."""
    out = []
    base = bench_points(base_docs)
    for coll, pts in sorted(bench_points(docs).items()):
        if coll not in COLLS or coll == "barrier":
            continue
        ref = dict(base.get(coll, []))
        diffs = sorted(t - ref[s] for s, t in pts if s in ref)
        if diffs:
            alpha = max(0.0, diffs[len(diffs) // 2])
            out.append(f"model.{who}.{coll}={alpha:.3f}/1000000.000@{ranks}")
    return out


def rt_prefix():
    """The measured ranks under SCHED_FIFO where we may (root), so that other work on the
    machine does not land in the numbers (the kernel's RT throttling keeps 5% of each second for
    everything else)."""
    if os.geteuid() == 0 and shutil.which("chrt"):
        return ["chrt", "-f", "10"]
    return []


def cross_core_gbs(build):
    """The machine's state now: cross-core copy rate of 256 KiB in GB/s (shaddr-compare's
    probe). A shared VM's vCPUs drift between states up to 3x apart; the header records it."""
    bps = COMPARE.cross_core_probe(build, 120)
    return bps / 1e9 if bps else None


def bench_once(mpi, launcher, env, ranks, build, sizes, colls=None, wrap=()):
    """One shaddr-bench run under an MPI (of every collective unless @colls; @wrap before the
    program, e.g. shaddr-run): its JSON document, or None."""
    exe = os.path.join(build, "tools", f"shaddr-bench-{mpi}")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = rt_prefix() + launcher + ["-n", str(ranks), *wrap, exe, "--coll",
                                    colls or ",".join(BENCH_COLLS), "--sizes", sizes,
                                    "--json", path]
    say(f"{' '.join(f'{k}={v}' for k, v in env.items() if k != 'LD_LIBRARY_PATH')} "
        f"{' '.join(cmd)}")
    rc = subprocess.run(cmd, env=dict(os.environ, **env), stdout=subprocess.DEVNULL,
                        timeout=900).returncode
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        say(f"  no results (exit {rc})")
        return None
    finally:
        if os.path.exists(path):
            os.unlink(path)


def tune_once(env, ranks, build, wrap=()):
    """One shaddr-tune --model run: {key: (alpha, GB/s, "@ranks")}."""
    exe = os.path.join(build, "tools", "shaddr-tune")
    cmd = rt_prefix() + list(wrap) + [exe, "-n", str(ranks), "--model"]
    say(f"{' '.join(f'{k}={v}' for k, v in env.items())} {' '.join(cmd)}")
    p = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True,
                       timeout=900)
    if p.returncode:
        say(f"  failed: {p.stderr.strip()[-300:]}")
        return {}
    out = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("model."):
            key, val = ln.split("=", 1)
            a, rest = val.split("/", 1)
            bw, at = rest.split("@", 1)
            out[key] = (float(a), float(bw), at)
    return out


def measure(args):
    build = args.build
    heap = os.path.join(build, "libshaddr", "heap", "libshaddr-heap.so")
    patched = args.mpich or os.path.join(build, "mpich")
    run = os.path.join(build, "tools", "shaddr-run")
    mpiexec = {"mpich": ["mpiexec.mpich"], "openmpi": ["mpiexec.openmpi", *OMPI]}
    # libshaddr's side, measured as the fallbacks are (shaddr-bench, its start line between
    # calls), through the interposer on Debian's MPICH with every size taken
    # (SHADDR_MIN=0) and one path forced at a time, at the sizes that path serves:
    # who, environment, sizes, collectives.
    five = "bcast,reduce,allreduce,allgather,alltoall"
    cma = {"SHADDR_BACKEND": "cma", "SHADDR_HEAP": "off"}
    direct = {"SHADDR_SLOT_MAX": "0", "SHADDR_BCAST_FIFO_MAX": "0"}
    # The slots up to 8 KiB per rank: an Alltoall's 2 blocks of 8 KiB fill the 16 KiB slot.
    libs = [("slots", dict(cma, SHADDR_SLOT_MAX="16384", SHADDR_BCAST_FIFO_MAX="1G"), "8:8K", five),
            ("fifo", dict(cma, SHADDR_SLOT_MAX="0", SHADDR_BCAST_FIFO_MAX="1G"), "1K:256K",
             "bcast"),
            ("cma", dict(cma, **direct), "16K:4M", five + ",barrier"),
            ("shm", dict(cma, SHADDR_BACKEND="shm", **direct), "16K:4M", five + ",barrier")]
    # Gather and Scatter, which shaddr-bench lacks: shaddr-tune --model's lines.
    tunes = [("cma", cma, ()), ("shm", dict(cma, SHADDR_BACKEND="shm"), ())]
    if os.path.exists(heap):
        libs.append(("heap", dict(direct, SHADDR_BACKEND="cma", SHADDR_HEAP="auto"), "16K:4M",
                     five))
        tunes.append(("heap", {"SHADDR_BACKEND": "cma", "SHADDR_HEAP": "auto"},
                      ("env", f"LD_PRELOAD={heap}")))
    benches = [(m, mpiexec[m], {}) for m in ("mpich", "openmpi")]
    have_patched = os.path.exists(os.path.join(patched, "lib", "libmpich.so"))
    if have_patched:
        lib_path = os.path.join(patched, "lib") + ":" + os.environ.get("LD_LIBRARY_PATH", "")
        benches.append(("mpich-posix", mpiexec["mpich"], dict(MPICH_OFF, LD_LIBRARY_PATH=lib_path)))
        # The slots' sizes once more, through the patched MPICH with every call to libshaddr:
        # against the "slots" job, what MPICH's own layers add to a libshaddr call.
        libs.append(("patch", dict(MPICH_ON, LD_LIBRARY_PATH=lib_path, **libs[0][1]), "8:8K",
                     five))
    else:
        say(f"no patched MPICH in {patched}: no mpich-posix lines")
    # Rounds: every job once per round, so that each samples the machine's drift alike; the
    # machine's state probed before each job. Then every job that never ran in the fast state
    # (within FAST_SHARE of the best probe) runs again whenever a probe finds the fast state,
    # until each has or --wait seconds have passed: a job met only in the slow state is named.
    jobs = []  # (key, run() -> result or None, results list)
    tuned = {name: [] for name, *_ in tunes}
    libdocs = {who: [] for who, *_ in libs}
    docs = {who: [] for who, *_ in benches}
    for who, env, sizes, colls in libs:
        wrap = [] if who == "patch" else [run]  # the patched MPICH calls libshaddr itself
        jobs.append((f"lib:{who}", lambda env=env, sizes=sizes, colls=colls, wrap=wrap: bench_once(
            "mpich", mpiexec["mpich"], dict(env, SHADDR_MIN="0"), args.ranks, build,
            sizes, colls, wrap=wrap), libdocs[who]))
    for name, env, wrap in tunes:
        jobs.append((f"tune:{name}", lambda env=env, wrap=wrap: tune_once(
            env, args.ranks, build, wrap) or None, tuned[name]))
    for who, launcher, env in benches:
        jobs.append((f"bench:{who}", lambda who=who, launcher=launcher, env=env: bench_once(
            "mpich" if who != "openmpi" else "openmpi", launcher, env, args.ranks, build,
            args.sizes), docs[who]))
    states = []  # every probe
    got = {key: [] for key, *_ in jobs}  # key -> [(state, result)]

    def run_job(key, fn, state):
        res = fn()
        if res:
            got[key].append((state, res))

    for r in range(args.repeat):
        say(f"round {r + 1}/{args.repeat}")
        for key, fn, _ in jobs:
            states.append(cross_core_gbs(build) or 0)
            run_job(key, fn, states[-1])
    fast = lambda g: g >= FAST_SHARE * max(states)  # noqa: E731
    deadline = time.time() + args.wait
    while time.time() < deadline:
        missing = [(k, fn) for k, fn, _ in jobs if not any(fast(g) for g, _ in got[k])]
        if not missing:
            break
        states.append(cross_core_gbs(build) or 0)
        if not fast(states[-1]):
            say(f"slow state ({states[-1]:.1f} GB/s); waiting to measure again: "
                f"{', '.join(k for k, _ in missing)}")
            time.sleep(20)
            continue
        run_job(*missing[0], states[-1])
    slow_only = [k for k, *_ in jobs if got[k] and not any(fast(g) for g, _ in got[k])]
    for key, _, results in jobs:
        # The fast state's runs where there are any (the best per size is taken from them).
        runs = [res for g, res in got[key] if fast(g)] or [res for _, res in got[key]]
        results.extend(runs)
    date = subprocess.run(["date", "-u", "+%F %T"], capture_output=True, text=True).stdout.strip()
    state = ", ".join(f"{g:.1f}" if g else "?" for g in states)
    lines = [f"# shaddr cost model: shaddr-model measure -n {args.ranks} --repeat {args.repeat}, "
             f"{os.uname().nodename}, {date} UTC",
             f"# cross-core copy of 256 KiB before each job (GB/s): {state}",
             f"# measured only in the slow state: {', '.join(slow_only) or 'none'}",
             f"# load average at the end: {os.getloadavg()[0]:.1f}"]
    for who, *_ in libs:
        if who == "patch":
            if libdocs[who] and libdocs["slots"]:
                lines += layer_lines(who, libdocs[who], libdocs["slots"], args.ranks)
        elif libdocs[who]:
            lines += bench_lines(who, libdocs[who], args.ranks)
    for name, *_ in tunes:
        merged = {}
        for run_lines in tuned[name]:
            for key, v in run_lines.items():
                _, who, coll = key.split(".")
                if coll in ("gather", "scatter") and who in (name, "slots") and \
                        (name == "cma" or who == name):
                    merged.setdefault(key, []).append(v)
        # The run with the best time at 64 KiB (as bench_points: the fast state's).
        lines += [f"{k}=" + "{:.3f}/{:.3f}@{}".format(*min(v, key=lambda x: x[0] + 65.536 / x[1]))
                  for k, v in merged.items()]
    for who, _, _ in benches:
        if docs[who]:
            lines += bench_lines(who, docs[who], args.ranks)
    text = "\n".join(lines) + "\n"
    if args.o:
        with open(args.o, "w") as f:
            f.write(text)
        say(f"wrote {args.o} (SHADDR_TUNING_FILE={args.o})")
    sys.stdout.write(text)


def fit(args):
    out = []
    for spec in args.files:
        who, path = spec.split("=", 1)
        with open(path) as f:
            doc = json.load(f)
        out += bench_lines(who, [doc], args.ranks)
    sys.stdout.write("\n".join(out) + "\n")


def inc(args):
    rows = []
    notes = []  # the measurement's header: when, the probes, any job met only slow
    with open(args.file) as f:
        for ln in f:
            ln = ln.strip()
            if ln.startswith("# ") and "load average" not in ln:
                notes.append("// " + ln[2:])
            if not ln.startswith("model."):
                continue
            key, val = ln.split("=", 1)
            _, who, coll = key.split(".")
            pairs = []
            for item in val.split():
                a, rest = item.split("/")
                bw = rest.split("@")[0]
                pairs.append(f"{{{float(a):.3f}, {float(bw):.3f}}}")
            # segment and window map peers' memory as the heap layer does; they can only run
            # under emulation here, so they ship the heap's curves.
            for w in (who, "segment", "window") if who == "heap" else (who,):
                rows.append(f"    {{Who::{WHO_CXX[w]}, SHADDR_COLL_{coll.upper()}, "
                            f"{{{', '.join(pairs)}}}}},")
    print("// Generated by `tools/shaddr-model inc` from `tools/shaddr-model measure --repeat 3`"
          "\n// (docs/selection.md); do not edit. The reference machine: this project's 2-core AMD "
          "EPYC VM,\n// Debian 12, 2 ranks, nothing else running. segment and window: the "
          "heap's curves.")
    print("\n".join(notes))
    print("constexpr Shipped kShipped[] = {")
    print("\n".join(rows))
    print("};")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-n", "--ranks", type=int, default=2)
    m.add_argument("--repeat", type=int, default=3)
    m.add_argument("--sizes", default="8:4M")
    m.add_argument("--wait", type=int, default=900,
                   help="seconds to wait for the fast state for jobs not yet measured in it")
    m.add_argument("--mpich", help="the patched MPICH's prefix (default BUILD/mpich)")
    m.add_argument("-o")
    f = sub.add_parser("fit")
    f.add_argument("-n", "--ranks", type=int, default=2)
    f.add_argument("files", nargs="+", help="WHO=shaddr-bench.json")
    i = sub.add_parser("inc")
    i.add_argument("file")
    args = ap.parse_args()
    {"measure": measure, "fit": fit, "inc": inc}[args.cmd](args)

