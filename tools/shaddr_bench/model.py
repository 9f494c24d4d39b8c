# SPDX-License-Identifier: MIT
"""shaddr-model: measure the cost model that shaddr_select() answers from (libshaddr/src/plan_model.h)
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
  shaddr-model calibrate [--quick] [--force] [--path FILE]
      the same measurement into this machine's calibration, the file libshaddr reads over its
      shipped curves (`build/tools/shaddr-info --calibration-path`): `model.` lines and the
      measured times as `point.` lines, under a header naming the date, the machine, the MPI
      builds measured and the machine state met. Nothing is measured while that file still
      names this machine and these MPI builds (unless --force). --quick: one round, 120 s at
      most waiting for the fast state.
  shaddr-model fit FILE.json...  (shaddr-bench JSON; `--who NAME` per file: name=path)
      only the fallbacks' lines, from existing benchmark results (make run's raw/ files).
  shaddr-model inc FILE
      the lines of FILE as plan_model.inc (the curves libshaddr ships).

A fallback's curve is the lower envelope of up to 3 alpha-beta lines (an MPI switches algorithms
by size), fitted to the relative error; libshaddr's algorithms get one line each (shaddr-tune).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import runner
from .costs import COLLS
from .fit import fit_envelope
from .rounds import FAST_SHARE

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The collectives of libshaddr's cost model (its `model.` lines), a wider set than the
# benchmark's (costs.COLLS).
MODEL_COLLS = ["barrier", "bcast", "reduce", "allreduce", "gather", "scatter", "allgather",
               "alltoall"]
# A job ran in the fast state when the cross-core probe before it was at least this share of
# the best probe of the measurement.
# A job ran beside other work when, just before it, other processes kept more than this share
# of the machine's CPUs busy: its ranks spin on their cores, so a compiler or another job on
# them lands in its numbers; such a run counts as one in the slow state.
BUSY_MAX = 0.25
WHO_CXX = {"fifo": "kFifo", "slots": "kSlots", "heap": "kHeap", "segment": "kSegment",
           "window": "kWindow", "cma": "kCma", "shm": "kShm", "mpich": "kMpich",
           "openmpi": "kOpenmpi", "mpich-posix": "kMpichPosix", "patch": "kPatch"}


# The patched MPICH with shaddr off (its release_gather, MPIR's Allgather/Alltoall) and Open
# MPI's options, as make run's contenders run them.
MPICH_OFF = runner.env_pairs(runner.MPICH_COMMON + " " + runner.MPICH_OFF)
# ... and with every call to its shaddr algorithms (the `patch` lines: its own layers' cost).
MPICH_ON = runner.env_pairs(runner.MPICH_COMMON + " " + runner.MPICH_ON)
OMPI = runner.OMPI_OPTS


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
        if coll not in MODEL_COLLS:
            continue
        if coll == "barrier":
            out.append(f"model.{who}.barrier={pts[0][1]:.3f}/1000000.000@{ranks}")
            continue
        pts = [(s, t) for s, t in pts if t > 0]
        if len(pts) >= 2:
            out.append(model_line(who, coll, fit_envelope(pts), ranks))
    return out


# A layer's cost that was measured at nothing or less: kept just above 0, because libshaddr
# interpolates points in log-log space.
LAYER_FLOOR_US = 0.001


def layer_diffs(docs, base_docs):
    """{coll: [(bytes, us)]}: how much longer @docs took than @base_docs (the same path measured
    without the layer) at each size both measured, never below LAYER_FLOOR_US."""
    out = {}
    base = bench_points(base_docs)
    for coll, pts in sorted(bench_points(docs).items()):
        if coll not in MODEL_COLLS or coll == "barrier":
            continue
        ref = dict(base.get(coll, []))
        diffs = [(s, max(LAYER_FLOOR_US, t - ref[s])) for s, t in pts if s in ref and s > 0]
        if diffs:
            out[coll] = diffs
    return out


def layer_point_lines(who, docs, base_docs, ranks):
    """`point.<who>.<coll>=...`: the layer's cost at each size measured (layer_diffs()), which
    the plan weighs inside that range instead of layer_lines()'s one value. Its cost is not the
    same at every size: the patched MPICH's Bcast costs more over the interposer's at a few KiB
    than at a few bytes, and one value (the median) let the plan take sizes to libshaddr that
    release_gather runs faster."""
    return [f"point.{who}.{coll}=" + " ".join(f"{s}:{d:.3f}@{ranks}" for s, d in diffs)
            for coll, diffs in layer_diffs(docs, base_docs).items() if len(diffs) >= 2]


def layer_lines(who, docs, base_docs, ranks):
    """A fixed cost per collective, for the sizes beyond those measured (layer_point_lines()):
    the median over the sizes of layer_diffs()."""
    out = []
    for coll, pts in layer_diffs(docs, base_docs).items():  # never an empty list
        diffs = sorted(d for _, d in pts)
        out.append(f"model.{who}.{coll}={diffs[len(diffs) // 2]:.3f}/1000000.000@{ranks}")
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
    bps = runner.cross_core_probe(build, 120)
    return bps / 1e9 if bps else None


def busy_share(before, after):
    """The share of the CPUs' time between two `cpu` lines of /proc/stat (lists of their
    counters) that went to work (user, nice, system, irq, softirq), not idle, iowait or steal."""
    d = [b - a for a, b in zip(before, after)]
    total = sum(d[:8])
    return sum(d[i] for i in (0, 1, 2, 5, 6) if i < len(d)) / total if total > 0 else 0.0


def others_busy(seconds=0.5):
    """How busy the machine is with other work now (0-1 of its CPUs), measured over @seconds
    while none of this tool's jobs runs; 0.0 where /proc/stat cannot be read."""
    def snap():
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    try:
        a = snap()
        time.sleep(seconds)
        return busy_share(a, snap())
    except (OSError, ValueError):
        return 0.0


def job_env(env):
    """A job's environment: @env over ours, without any calibration, so that what is measured
    is the machine and the forced path, and a broken or stale calibration cannot stop the
    measurement that replaces it."""
    return dict(os.environ, **env, SHADDR_CALIBRATION="off")


def bench_once(mpi, launcher, env, ranks, build, sizes, colls=None, wrap=()):
    """One shaddr-bench run under an MPI (of every collective unless @colls; @wrap before the
    program, e.g. shaddr-run): its JSON document, or None."""
    exe = os.path.join(build, "tools", f"shaddr-bench-{mpi}")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = rt_prefix() + launcher + ["-n", str(ranks), *wrap, exe, "--coll",
                                    colls or ",".join(COLLS), "--sizes", sizes,
                                    "--json", path]
    say(f"{' '.join(f'{k}={v}' for k, v in env.items() if k != 'LD_LIBRARY_PATH')} "
        f"{' '.join(cmd)}")
    rc = subprocess.run(cmd, env=job_env(env), stdout=subprocess.DEVNULL,
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
    p = subprocess.run(cmd, env=job_env(env), capture_output=True, text=True,
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


def run_jobs(args, prior_best=0.0):
    """Runs every job of a measurement (see the module's doc): a dict of what they gave (docs
    per side, shaddr-tune's lines), every probe, the jobs met only in the slow state and the
    probe the fast state is judged against. @prior_best (GB/s): the best probe an earlier
    calibration of this machine saw, so that a measurement met wholly in the slow state is
    known as such and waits for the fast one."""
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
    t0 = time.time()
    total = len(jobs) * args.repeat
    done = [0]

    busy = []  # other work's share of the CPUs before each job, as the probes
    beside = {key: [] for key, *_ in jobs}  # per run kept: was other work running?

    def probe():
        """The state a job meets: the cross-core probe (GB/s), 0 when other work kept the
        CPUs busy (a run beside it counts as one in the slow state)."""
        states.append(cross_core_gbs(build) or 0)
        busy.append(others_busy())
        return states[-1] if busy[-1] <= BUSY_MAX else 0.0

    def run_job(key, fn, state, again=False):
        done[0] += not again
        say(f"[{'again' if again else f'{done[0]}/{total}'}] {key} (probe {states[-1]:.1f} "
            f"GB/s, other work {busy[-1]:.0%} of the CPUs, "
            f"{int(time.time() - t0) // 60}:{int(time.time() - t0) % 60:02d} elapsed)")
        res = fn()
        if res:
            got[key].append((state, res))
            beside[key].append(busy[-1] > BUSY_MAX)

    for r in range(args.repeat):
        say(f"round {r + 1}/{args.repeat}")
        for key, fn, _ in jobs:
            run_job(key, fn, probe())
    ref = lambda: max(states + [prior_best])  # noqa: E731
    fast = lambda g: g >= FAST_SHARE * ref()  # noqa: E731
    deadline = time.time() + args.wait
    while time.time() < deadline:
        missing = [(k, fn) for k, fn, _ in jobs if not any(fast(g) for g, _ in got[k])]
        if not missing:
            break
        g = probe()
        if not fast(g):
            why = (f"other work on {busy[-1]:.0%} of the CPUs" if busy[-1] > BUSY_MAX else
                   f"slow state ({states[-1]:.1f} GB/s, fast from {FAST_SHARE * ref():.1f})")
            say(f"{why}; waiting {int(deadline - time.time())} s more at most to measure "
                f"again: {', '.join(k for k, _ in missing)}")
            time.sleep(20)
            continue
        run_job(*missing[0], g, again=True)
    slow_only = [k for k, *_ in jobs if got[k] and not any(fast(g) for g, _ in got[k])]
    for key, _, results in jobs:
        # The fast state's runs where there are any (the best per size is taken from them).
        runs = [res for g, res in got[key] if fast(g)] or [res for _, res in got[key]]
        results.extend(runs)
    say(f"measured in {int(time.time() - t0)} s")
    return {"libs": [w for w, *_ in libs], "libdocs": libdocs, "tunes": [n for n, *_ in tunes],
            "tuned": tuned, "benches": [w for w, *_ in benches], "docs": docs,
            "states": states, "busy": busy, "slow_only": slow_only,
            "busy_only": [k for k, *_ in jobs if beside[k] and all(beside[k])], "ref_gbs": ref(),
            "failed": [k for k, *_ in jobs if not got[k]]}


def model_lines(m, ranks):
    """The `model.` lines of a measurement (run_jobs()'s result)."""
    lines = []
    libdocs = m["libdocs"]
    for who in m["libs"]:
        if who == "patch":
            if libdocs[who] and libdocs.get("slots"):
                lines += layer_lines(who, libdocs[who], libdocs["slots"], ranks)
        elif libdocs[who]:
            lines += bench_lines(who, libdocs[who], ranks)
    for name in m["tunes"]:
        merged = {}
        for run_lines in m["tuned"][name]:
            for key, v in run_lines.items():
                _, who, coll = key.split(".")
                if coll in ("gather", "scatter") and who in (name, "slots") and \
                        (name == "cma" or who == name):
                    merged.setdefault(key, []).append(v)
        # The run with the best time at 64 KiB (as bench_points: the fast state's).
        lines += [f"{k}=" + "{:.3f}/{:.3f}@{}".format(*min(v, key=lambda x: x[0] + 65.536 / x[1]))
                  for k, v in merged.items()]
    for who in m["benches"]:
        if m["docs"][who]:
            lines += bench_lines(who, m["docs"][who], ranks)
    return lines


def point_lines(who, docs, ranks):
    """`point.<who>.<coll>=<bytes>:<us>@<ranks> ...`: the measured times themselves (each
    size's best, as the fits use), which libshaddr interpolates between inside the measured
    range: two sizes at least, so not the Barrier (its `model.` line is its time)."""
    out = []
    for coll, pts in sorted(bench_points(docs).items()):
        if coll not in MODEL_COLLS or coll == "barrier":
            continue
        pts = [(s, t) for s, t in pts if t > 0 and s > 0]
        if len(pts) >= 2:
            out.append(f"point.{who}.{coll}=" + " ".join(f"{s}:{t:.3f}@{ranks}" for s, t in pts))
    return out


def all_point_lines(m, ranks):
    """Every side measured with shaddr-bench: libshaddr's paths, the `patch` layer's cost over
    the slots at each size, and the fallbacks."""
    out = []
    for who in m["libs"]:
        if who == "patch":
            if m["libdocs"][who] and m["libdocs"].get("slots"):
                out += layer_point_lines(who, m["libdocs"][who], m["libdocs"]["slots"], ranks)
        elif m["libdocs"][who]:
            out += point_lines(who, m["libdocs"][who], ranks)
    for who in m["benches"]:
        if m["docs"][who]:
            out += point_lines(who, m["docs"][who], ranks)
    return out


def utc_now():
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def measure(args):
    m = run_jobs(args)
    state = ", ".join(f"{g:.1f}" if g else "?" for g in m["states"])
    lines = [f"# shaddr cost model: shaddr-model measure -n {args.ranks} --repeat {args.repeat}, "
             f"{os.uname().nodename}, {utc_now()} UTC",
             f"# cross-core copy of 256 KiB before each job (GB/s): {state}",
             f"# measured only in the slow state or beside other work: "
             f"{', '.join(m['slow_only']) or 'none'}",
             "# other work's share of the CPUs before each job: "
             + (" ".join(f"{b:.2f}" for b in m.get("busy", [])) or "?"),
             f"# load average at the end: {os.getloadavg()[0]:.1f}"]
    lines += model_lines(m, args.ranks)
    text = "\n".join(lines) + "\n"
    if args.o:
        with open(args.o, "w") as f:
            f.write(text)
        say(f"wrote {args.o} (SHADDR_TUNING_FILE={args.o})")
    sys.stdout.write(text)


# --- calibration: the measurement kept per machine, where libshaddr reads it ----------------
# The header's fields, `# <field>: <value>`; `mpi-builds` and `machine` decide whether a file
# still describes this machine (cached() below).
CAL_TITLE = "# shaddr calibration (tools/shaddr-model calibrate)"


def info_calibration_path(build, env=None):
    """The calibration's path as libshaddr forms it: `shaddr-info --calibration-path` (the
    machine key is libshaddr's; this tool never derives it). None when calibration is off;
    exits when shaddr-info cannot say."""
    exe = os.path.join(build, "tools", "shaddr-info")
    try:
        p = subprocess.run([exe, "--calibration-path"], capture_output=True, text=True,
                           env=env, timeout=60)
    except OSError as e:
        sys.exit(f"shaddr-model: {exe}: {e} (build first: make userspace)")
    path = p.stdout.strip()
    if p.returncode or not path:
        sys.exit(f"shaddr-model: {exe} --calibration-path failed: {p.stderr.strip()}")
    return None if path == "off" else path


def machine_key(build):
    """The machine key: the file name libshaddr gives this machine's calibration when
    $SHADDR_CALIBRATION does not name one."""
    env = {k: v for k, v in os.environ.items() if k != "SHADDR_CALIBRATION"}
    try:
        path = info_calibration_path(build, env)
    except SystemExit:  # no default path (no $HOME): no key either
        return "unknown"
    return os.path.basename(path).removesuffix(".model") if path else "unknown"


def file_id(path):
    """A short content hash of a file, or "absent"."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return "absent"


def linked_library(exe, stem):
    """The file @exe loads for the library named @stem (e.g. libmpi.so), by ldd, or None."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for ln in out.splitlines():
        f = ln.split()
        if len(f) >= 3 and f[0].startswith(stem + ".") and f[1] == "=>":
            return os.path.realpath(f[2])
    return None


def mpi_builds(build, patched=None):
    """The MPI libraries the fallbacks' curves were measured on: name -> id (a content hash;
    for the patched MPICH its build cache key), "absent" where there is none."""
    tools = os.path.join(build, "tools")
    out = {}
    lib = linked_library(os.path.join(tools, "shaddr-bench-mpich"), "libmpich.so")
    out["mpich"] = file_id(lib) if lib else "absent"
    lib = linked_library(os.path.join(tools, "shaddr-bench-openmpi"), "libmpi.so")
    out["openmpi"] = file_id(lib) if lib else "absent"
    patched = patched or os.path.join(build, "mpich")
    try:
        with open(os.path.join(patched, ".shaddr-mpich-key")) as f:
            out["mpich-patched"] = "key:" + f.read().strip()
    except OSError:
        out["mpich-patched"] = file_id(os.path.realpath(os.path.join(patched, "lib",
                                                                     "libmpich.so")))
    return out


def builds_text(builds):
    return " ".join(f"{k}={v}" for k, v in sorted(builds.items()))


def read_header(path):
    """{field: value} of a calibration file's `# field: value` lines; None when it cannot be
    read or is not a calibration."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    lines = text.splitlines()
    if not lines or lines[0] != CAL_TITLE:
        return None
    out = {"lines": sum(1 for ln in lines if ln.startswith(("model.", "point.")))}
    for ln in lines[1:]:
        if ln.startswith("# ") and ": " in ln:
            k, v = ln[2:].split(": ", 1)
            out.setdefault(k, v)
    return out


def stale_reason(head, key, builds):
    """Why the calibration with header @head does not describe this machine and these MPI
    builds, or None when it does."""
    if head is None:
        return "none there (or not one shaddr-model calibrate wrote)"
    if not head["lines"]:
        return "it holds no curves"
    if head.get("machine") != key:
        return f"measured on machine {head.get('machine')}, this is {key}"
    if head.get("mpi-builds") != builds_text(builds):
        return f"MPI builds changed ({head.get('mpi-builds')} -> {builds_text(builds)})"
    if head.get("state", "").startswith("busy"):
        return "measured beside other work (its state: busy)"
    return None


def judge_state(m, prior_best):
    """The machine state the measurement met, in words, and the best probe seen on this
    machine so far (GB/s). "fast": every job's kept runs within FAST_SHARE of the best probe
    (this measurement's or an earlier calibration's); "slow": the whole measurement below
    that share of an earlier calibration's best; "mixed": the jobs measured only slow (or
    beside other work) named; "busy": jobs every run of which had other work beside it named
    (a calibration in that state is measured again at the next calibrate)."""
    best = max(m["states"] or [0])
    seen = max(best, prior_best)
    if m.get("busy_only"):
        return (f"busy (other work kept more than {BUSY_MAX:.0%} of the CPUs busy during every "
                f"run of: {', '.join(m['busy_only'])})", seen)
    if seen <= 0:
        return "unknown (no cross-core probe)", seen
    if best < FAST_SHARE * seen:
        return (f"slow (best probe {best:.1f} GB/s, this machine has shown {seen:.1f})", seen)
    if m["slow_only"]:
        return (f"mixed (fast from {FAST_SHARE * seen:.1f} GB/s; measured only in the slow "
                f"state or beside other work: {', '.join(m['slow_only'])})", seen)
    basis = "" if prior_best else "; the first calibration here: judged against its own probes"
    return (f"fast (every job at >= {FAST_SHARE * seen:.1f} GB/s, other work on at most "
            f"{BUSY_MAX:.0%} of the CPUs{basis})", seen)


def calibration_text(m, ranks, key, builds, prior_best, command):
    """The calibration file: the header, then `model.` and `point.` lines."""
    state, seen = judge_state(m, prior_best)
    probes = " ".join(f"{g:.1f}" if g else "?" for g in m["states"])
    lines = [CAL_TITLE,
             f"# date: {utc_now()} UTC",
             f"# host: {os.uname().nodename}",
             f"# machine: {key}",
             f"# mpi-builds: {builds_text(builds)}",
             f"# state: {state}",
             f"# cross-core-gbs: {probes} (256 KiB copied across cores, before each job)",
             f"# best-cross-core-gbs: {seen:.1f}",
             "# other-work: " + (" ".join(f"{b:.2f}" for b in m.get("busy", [])) or "?") +
             " (share of the CPUs other processes kept busy, before each job)",
             f"# failed: {', '.join(m.get('failed', [])) or 'none'}",
             f"# load: {os.getloadavg()[0]:.1f} (1-minute load average at the end)",
             f"# command: {command}"]
    lines += model_lines(m, ranks)
    lines += all_point_lines(m, ranks)
    return "\n".join(lines) + "\n", state


def numa_rates_line(build):
    """The copy rates between this machine's NUMA nodes, as the calibration's `level.numa=`
    line (shaddr-numa-copy --line: the plan weighs its topology levels by them,
    docs/topology.md), with a header line naming the tool's answer; "" on a machine of one node
    or where the tool cannot say (its pages not placed, no NUMA support)."""
    tool = os.path.join(build, "tools", "shaddr-numa-copy")
    try:
        out = subprocess.run([tool, "--line"], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        say(f"NUMA copy rates not measured: {e}")
        return ""
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("level.numa=")]
    if out.returncode or not line:
        if out.returncode:
            say(f"NUMA copy rates not measured: {out.stderr.strip() or out.returncode}")
        return ""
    say(f"NUMA copy rates: {line[0]}")
    return f"# numa: shaddr-numa-copy --line (one core / every core of a node, GB/s)\n{line[0]}\n"


def write_atomic(path, text):
    """Writes @path whole or not at all: a reader (libshaddr in a running job) never sees half
    a calibration."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".calib.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def calibrate(args):
    """Measures this machine into the calibration file libshaddr reads, unless the file there
    already describes this machine and these MPI builds (--force measures again)."""
    path = args.path or info_calibration_path(args.build)
    if path is None:
        say("calibration off (SHADDR_CALIBRATION=off): nothing to do")
        return 0
    key = machine_key(args.build)
    builds = mpi_builds(args.build, args.mpich)
    head = read_header(path)
    why = stale_reason(head, key, builds)
    if head is None and os.path.exists(path) and not args.force:
        say(f"{path} is not a calibration this tool wrote: left alone (--force replaces it)")
        return 1
    if why is None and not args.force:
        say(f"calibration up to date: {path} ({head.get('date')}, state {head.get('state')}); "
            "--force measures again")
        return 0
    prior = 0.0
    if head and head.get("machine") == key:
        try:
            prior = float(head.get("best-cross-core-gbs", "0"))
        except ValueError:
            pass
    say(f"calibrating {path}: {'--force' if why is None else why}; "
        f"{'--quick: one round' if args.quick else f'{args.repeat} rounds'} of every job, "
        f"then up to {args.wait} s waiting for the fast state if a job has not met it")
    m = run_jobs(args, prior)
    command = "tools/shaddr-model calibrate" + (" --quick" if args.quick else "") + \
        (" --force" if args.force else "")
    text, state = calibration_text(m, args.ranks, key, builds, prior, command)
    if not any(ln.startswith("point.") for ln in text.splitlines()):
        say("no job gave results: calibration not written")
        return 1
    text += numa_rates_line(args.build)
    write_atomic(path, text)
    say(f"wrote {path}: state {state}")
    return 0


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    c = sub.add_parser("calibrate", help="measure into this machine's calibration file "
                       "(shaddr-info --calibration-path), unless it is up to date")
    for p in (m, c):
        p.add_argument("-n", "--ranks", type=int, default=2)
        p.add_argument("--repeat", type=int, default=3)
        p.add_argument("--sizes", default="8:4M")
        p.add_argument("--wait", type=int, default=900,
                       help="seconds to wait for the fast state for jobs not yet measured in it")
        p.add_argument("--mpich", help="the patched MPICH's prefix (default BUILD/mpich)")
    m.add_argument("-o")
    c.add_argument("--quick", action="store_true",
                   help="one round of every job, 120 s at most waiting for the fast state")
    c.add_argument("--force", action="store_true", help="measure even if the file is up to date")
    c.add_argument("--path", help="write here instead (default: shaddr-info --calibration-path)")
    f = sub.add_parser("fit")
    f.add_argument("-n", "--ranks", type=int, default=2)
    f.add_argument("files", nargs="+", help="WHO=shaddr-bench.json")
    i = sub.add_parser("inc")
    i.add_argument("file")
    args = ap.parse_args(argv)
    if args.cmd == "calibrate" and args.quick:
        args.repeat, args.wait = 1, min(args.wait, 120)
    return {"measure": measure, "calibrate": calibrate, "fit": fit, "inc": inc}[args.cmd](args)
