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
"""
import argparse
import datetime
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

from .costs import COLLS, MUST_MOVE_DOC, copy_bw, lg, must_move, two_copy_model  # noqa: F401
from .fit import fit_alpha_beta
from . import alloccost, commcost, confirm, fortran
from .goals import (DEFAULTS, STOCK, against_shaddr_off, goals, is_default, is_shaddr,  # noqa: F401
                    losses_beyond_noise, losses_vs_best_stock)
from .rounds import FAST_SHARE, merge_rounds
from .text import fmt_size, fmt_us, md_table

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# How the patched MPICH is switched (NAME=VALUE lines; the environment can override them with
# SHADDR_COMPARE_MPICH_OFF / SHADDR_COMPARE_MPICH_ON). The ch4:ofi build needs a libfabric
# provider; intra-node traffic goes through ch4's posix shm layer, not the netmod.
MPICH_COMMON = "FI_PROVIDER=tcp"
MPICH_OFF = ("MPIR_CVAR_CH4_POSIX_SHADDR_ENABLE=0 "
             "MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM=release_gather "
             "MPIR_CVAR_REDUCE_POSIX_INTRA_ALGORITHM=release_gather "
             "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=release_gather "
             "MPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM=release_gather "
             "MPIR_CVAR_ALLGATHER_POSIX_INTRA_ALGORITHM=mpir "
             "MPIR_CVAR_ALLTOALL_POSIX_INTRA_ALGORITHM=mpir")
MPICH_ON = ("MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM=shaddr "
            "MPIR_CVAR_REDUCE_POSIX_INTRA_ALGORITHM=shaddr "
            "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=shaddr "
            "MPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM=shaddr "
            "MPIR_CVAR_ALLGATHER_POSIX_INTRA_ALGORITHM=shaddr "
            "MPIR_CVAR_ALLTOALL_POSIX_INTRA_ALGORITHM=shaddr")
OMPI_OPTS = ["--allow-run-as-root", "--oversubscribe"]


def say(msg):
    print(f"shaddr-compare: {msg}", flush=True)


def env_pairs(text):
    return dict(kv.split("=", 1) for kv in text.split())


# --- contenders ---------------------------------------------------------------------------
class Contender:
    def __init__(self, name, desc, mpi, env=None, wrap=None, where="host", skip=None):
        self.name, self.desc, self.mpi = name, desc, mpi
        self.env = env or {}
        self.wrap = wrap or []   # command put between mpiexec and the benchmark
        self.where, self.skip = where, skip


def contenders(build, ranks):
    tools = os.path.join(build, "tools")
    bench = {m: os.path.join(tools, f"shaddr-bench-{m}") for m in ("mpich", "openmpi")}
    run = os.path.join(tools, "shaddr-run")
    mpich_lib = os.path.join(build, "mpich", "lib")
    patched = glob.glob(os.path.join(mpich_lib, "libmpich.so*"))
    out = []
    for m in ("mpich", "openmpi"):
        skip = None if os.access(bench[m], os.X_OK) else f"{bench[m]} not built"
        desc = ("Debian MPICH 4.0.2, ch4:ucx (mpiexec.mpich)" if m == "mpich"
                else "Debian Open MPI (mpiexec.openmpi)")
        out.append(Contender(m, desc, m, skip=skip))
    pskip = (None if patched else
             f"patched MPICH absent ({mpich_lib}/libmpich.so*; `make mpich` builds it)")
    if not pskip and not os.access(bench["mpich"], os.X_OK):
        pskip = f"{bench['mpich']} not built"
    common = env_pairs(os.environ.get("SHADDR_COMPARE_MPICH_COMMON", MPICH_COMMON))
    lib_env = {"LD_LIBRARY_PATH": mpich_lib + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    off = dict(common, **lib_env, **env_pairs(os.environ.get("SHADDR_COMPARE_MPICH_OFF", MPICH_OFF)))
    on = dict(common, **lib_env, **env_pairs(os.environ.get("SHADDR_COMPARE_MPICH_ON", MPICH_ON)))
    out.append(Contender("mpich-patched-off", "patched MPICH (build/mpich), shaddr off", "mpich",
                         env=off, skip=pskip))
    # What a user gets: the patched MPICH's own selection (json trees, libshaddr's default
    # backend), and the interposer with no settings. The Goals judge these.
    out.append(Contender("mpich-patched-auto", "patched MPICH, defaults (auto selection, "
                         "default backend)", "mpich", env=dict(common, **lib_env), skip=pskip))
    out.append(Contender("mpich-patched-cma", "patched MPICH, shaddr on, cma backend", "mpich",
                         env=dict(on, SHADDR_BACKEND="cma"), skip=pskip))
    # The shared heap under the patched MPICH: libshaddr-heap.so preloaded in the
    # ranks only, not in mpiexec (the patched MPICH dlopens libshaddr, which finds the heap by
    # dlsym), with the patched MPICH's defaults (its own selection, the backend auto: heap+cma
    # here): what a user who adds the preload gets, judged against shaddr off as the defaults
    # are (goals.AGAINST_OFF).
    heap_so = os.path.join(build, "libshaddr", "heap", "libshaddr-heap.so")
    hskip = pskip or (None if os.path.exists(heap_so) else f"{heap_so} not built")
    out.append(Contender("mpich-patched-heap", "patched MPICH, defaults, shared heap "
                         "(libshaddr-heap.so preloaded in the ranks; heap+cma)", "mpich",
                         env=dict(common, **lib_env, SHADDR_HEAP="auto"),
                         wrap=["env", f"LD_PRELOAD={heap_so}"], skip=hskip))
    iskip = None if os.access(run, os.X_OK) else f"interposer absent ({run})"
    for m in ("mpich", "openmpi"):
        # The defaults include the shared heap (shaddr-run preloads libshaddr-heap.so).
        out.append(Contender(f"interposer-{m}", f"LD_PRELOAD interposer on {m}, defaults "
                             "(shared heap on)", m, wrap=[run], skip=iskip))
        out.append(Contender(f"interposer-heap-{m}", f"LD_PRELOAD interposer on {m}, shared "
                             "heap (SHADDR_HEAP=auto; heap+cma)", m, env={"SHADDR_HEAP": "auto"},
                             wrap=[run], skip=iskip))
        # Forced backends without the heap, so that they stay what their names say.
        for b in ("cma", "shm"):
            out.append(Contender(f"interposer-{b}-{m}", f"LD_PRELOAD interposer on {m}, "
                                 f"SHADDR_BACKEND={b}, SHADDR_HEAP=off", m,
                                 env={"SHADDR_BACKEND": b, "SHADDR_HEAP": "off"},
                                 wrap=[run], skip=iskip))
    # The module's backends: in the guest, with baselines measured in the same guest run.
    for m in ("mpich", "openmpi"):
        out.append(Contender(f"vm-{m}", f"{m}, in the guest (baseline)", m, where="vm",
                             skip=None if os.access(bench[m], os.X_OK) else "not built"))
    for m in ("mpich", "openmpi"):
        out.append(Contender(f"vm-interposer-{m}", f"interposer on {m}, defaults (guest)", m,
                             wrap=[run], where="vm", skip=iskip))
    out.append(Contender("vm-mpich-patched-auto", "patched MPICH, defaults (guest)", "mpich",
                         env=dict(common, **lib_env), where="vm", skip=pskip))
    for b in ("segment", "window"):
        for m in ("mpich", "openmpi"):
            out.append(Contender(f"vm-interposer-{b}-{m}", f"interposer on {m}, "
                                 f"SHADDR_BACKEND={b}, SHADDR_HEAP=off (guest)", m,
                                 env={"SHADDR_BACKEND": b, "SHADDR_HEAP": "off"},
                                 wrap=[run], where="vm", skip=iskip))
        out.append(Contender(f"vm-mpich-patched-{b}", f"patched MPICH, shaddr on, {b} backend "
                             "(guest)", "mpich", env=dict(on, SHADDR_BACKEND=b), where="vm",
                             skip=pskip))
    return out, bench


def launcher(mpi, ranks):
    if mpi == "mpich":
        return ["mpiexec.mpich", "-n", str(ranks)]
    return ["mpiexec.openmpi", *OMPI_OPTS, "-n", str(ranks)]


def run_streaming(cmd, env, prefix, timeout):
    """Runs cmd, echoing its output with a prefix (progress); returns (rc, seconds)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace")
    try:
        for line in p.stdout:
            line = line.rstrip()
            if line:
                print(f"  {prefix}| {line}", flush=True)
            if time.time() - t0 > timeout:
                p.kill()
                print(f"  {prefix}| killed after {timeout} s", flush=True)
                break
        rc = p.wait()
    except KeyboardInterrupt:
        p.kill()
        raise
    return rc, time.time() - t0


def cross_core_probe(build, timeout):
    """The machine's state right now: cross-core copy rate of 256 KiB (bytes/s), or None.
    On a shared VM host the same benchmark runs up to 4x slower when the vCPUs' cross-core
    copies are slow; contenders are comparable only when measured in the same state."""
    exe = os.path.join(build, "tools", "shaddr-copy-limit")
    with tempfile.TemporaryDirectory(prefix="shaddr-probe-") as tmp:
        jpath = os.path.join(tmp, "probe.json")
        try:
            subprocess.run([exe, "--sizes", "256K:256K", "--threads", "2", "--json", jpath],
                           capture_output=True, timeout=timeout)
            with open(jpath) as f:
                rows = json.load(f)["results"]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            return None
    return next((r["cross_core_Bps"] for r in rows if r.get("bytes") == 262144), None)


def rerun_in_fast_state(cs, runs, bench, args, out_dir):
    """Runs again, whenever a probe finds the fast cross-core state, each contender none of
    whose rounds met it, until each has or --state-wait seconds have passed (each size's best
    is taken over all its runs). Returns the names still measured only in the slow state."""
    def refs():
        return [r.get("cross_core_ref_Bps") or 0 for v in runs.values() for r in v]

    def missing():
        best = max(refs() or [0])
        return [c for c in cs if runs[c.name] and runs[c.name][0]["status"] == "ok" and
                not any((r.get("cross_core_ref_Bps") or 0) >= FAST_SHARE * best
                        for r in runs[c.name])]

    build = os.path.dirname(os.path.dirname(next(iter(bench.values()))))
    deadline = time.time() + args.state_wait
    extra = 0
    while missing() and time.time() < deadline:
        todo = missing()
        now = cross_core_probe(build, args.timeout) or 0
        if now < FAST_SHARE * max(refs()):
            say(f"slow cross-core state ({now / 1e9:.1f} GB/s); waiting to run again: "
                f"{', '.join(c.name for c in todo)}")
            time.sleep(20)
            continue
        extra += 1
        runs[todo[0].name].append(run_contender(todo[0], bench, args, out_dir, 1, len(todo),
                                                args.rounds + extra - 1))
    left = [c.name for c in missing()]
    if left:
        say(f"warning: measured only in the slow cross-core state: {', '.join(left)}")
    return left


def bench_env(c):
    env = dict(os.environ, **c.env)
    if c.mpi == "openmpi":
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_bench(c, bench, args, jpath, opts, env, what):
    """One run of contender @c's benchmark with options @opts, results into @jpath: (exit
    code, seconds)."""
    cmd = launcher(c.mpi, args.ranks) + c.wrap + [bench[c.mpi], "--label", c.name,
                                                  "--json", jpath] + opts
    say(f"{what}: {' '.join(f'{k}={v}' for k, v in c.env.items())} {shlex.join(cmd)}")
    try:
        os.unlink(jpath)
    except FileNotFoundError:
        pass
    return run_streaming(cmd, env, c.name, args.timeout)


def run_contender(c, bench, args, out_dir, idx, total, rnd=0):
    if c.skip:
        say(f"[{idx}/{total}] {c.name}: skipped: {c.skip}")
        return {"desc": c.desc, "status": "skipped", "reason": c.skip}
    rec = {"desc": c.desc, "mpi": c.mpi, "env": c.env, "status": "ok", "passes": {}}
    env = bench_env(c)
    passes = [("main", ["--coll", "all,pingpong", "--sizes", args.sizes, "--validate",
                        "--first-call"]),
              ("churn", ["--coll", "bcast,allreduce", "--sizes", args.churn_sizes, "--churn",
                         "--validate"])]
    if args.iters:
        for p in passes:
            p[1].extend(["--iters", str(args.iters)])
    for pname, opts in passes:
        suffix = f".r{rnd + 1}" if args.rounds > 1 else ""
        jpath = os.path.join(out_dir, "raw", f"{c.name}.{pname}{suffix}.json")
        if pname == "main":
            rec["cross_core_ref_Bps"] = cross_core_probe(os.path.dirname(os.path.dirname(bench[c.mpi])),
                                                         args.timeout)
        rc, secs = run_bench(c, bench, args, jpath, opts, env,
                             f"[{idx}/{total}] {c.name} ({pname})")
        if pname == "main" and rec["cross_core_ref_Bps"] is not None:
            after = cross_core_probe(os.path.dirname(os.path.dirname(bench[c.mpi])), args.timeout)
            rec["cross_core_probes_Bps"] = [rec["cross_core_ref_Bps"], after]
            rec["cross_core_ref_Bps"] = min(rec["cross_core_ref_Bps"], after or 0)
        try:
            with open(jpath) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            rec["status"] = "failed"
            rec["reason"] = f"{pname} pass: exit {rc}, no results ({e.__class__.__name__})"
            say(f"[{idx}/{total}] {c.name}: FAILED: {rec['reason']}")
            return rec
        doc["exit"], doc["seconds"] = rc, round(secs, 1)
        rec["passes"][pname] = doc
        rec["mpi_version"] = doc.get("mpi")
        if doc.get("validation") == "failed":
            rec["status"] = "wrong results"
            rec["reason"] = f"{pname} pass: {doc.get('errors')} wrong words"
        say(f"[{idx}/{total}] {c.name} ({pname}): {len(doc['results'])} results, "
            f"validation {doc.get('validation')}, {secs:.0f} s")
    return rec


def confirm_losses(cs, res, bench, args, out_dir):
    """The confirmation pass (confirm.py): each point that a judged contender lost beyond the
    noise to the same MPI with shaddr off, and each where the best default lost to the best
    stock contender, measured again with the same benchmark binary and settings, alternating
    the two; the record that the Goals judge by."""
    if args.confirm_reps <= 0:
        return {"skipped": "--confirm-reps 0"}
    by_name = {c.name: c for c in cs}
    targets = [t for t in dict.fromkeys(losses_beyond_noise(res) + losses_vs_best_stock(res))
               if t[0] in by_name and t[1] in by_name]
    if not targets:
        return {"points": []}
    say(f"confirmation: {len(targets)} points lost (beyond the noise to the same MPI with shaddr "
        "off, or to the best stock contender), measured again "
        f"({args.confirm_reps} times each side, alternating, up to {confirm.MAX_REPS} while "
        f"still lost, at most {args.confirm_budget} s)")
    runs = [0]
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)

    def measure(name, coll, sizes):
        c = by_name[name]
        runs[0] += 1
        jpath = os.path.join(out_dir, "raw", f"{name}.confirm{runs[0]}.json")
        opts = ["--coll", coll, "--sizes", sizes, "--validate"]
        if args.iters:
            opts += ["--iters", str(args.iters)]
        rc, _ = run_bench(c, bench, args, jpath, opts, bench_env(c), f"confirmation: {name}")
        try:
            with open(jpath) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            return None, f"exit {rc}, no results ({e.__class__.__name__})"
        if doc.get("validation") == "failed":
            return None, f"{doc.get('errors')} wrong words"
        return {r["bytes"]: r["t_max_us"] for r in doc["results"] if r["coll"] == coll}, None
    out = confirm.run(targets, measure, args.confirm_reps, args.confirm_budget)
    if out.get("gave_up"):
        say(f"confirmation: {out['gave_up']}")
    return out


def run_copy_limit(build, args, out_dir):
    exe = os.path.join(build, "tools", "shaddr-copy-limit")
    jpath = os.path.join(out_dir, "raw", "copy-limit.json")
    threads = min(args.ranks, os.cpu_count() or 1)
    cmd = [exe, "--sizes", args.limit_sizes, "--threads", str(threads), "--json", jpath]
    say(f"copy limit: {shlex.join(cmd)}")
    rc, _ = run_streaming(cmd, os.environ, "copy-limit", args.timeout)
    if rc != 0:
        sys.exit(f"shaddr-compare: {exe} failed ({rc})")
    with open(jpath) as f:
        return json.load(f)


# --- the VM part --------------------------------------------------------------------------
def guest_release(kernel):
    """The release of the kernel `tools/shaddr-vm --kernel @kernel` boots, or None."""
    p = subprocess.run([os.path.join(TOP, "tools", "shaddr-vm"), "--kernel", kernel,
                        "--print-kernel"], capture_output=True, text=True)
    for ln in p.stdout.splitlines():
        if ln.startswith("version="):
            return ln.split("=", 1)[1].strip()
    return None


def run_vm(cs, build, args, out_dir):
    vm = [c for c in cs if c.where == "vm"]
    # A kernel that loads modules runs the module part on the host (tools/shaddr-vm --host);
    # otherwise one guest boots Debian's kernel of --kernel.
    on_host = args.host_module
    # The module built for the very kernel that runs it: a series such as 6.1 also matches
    # the debug kernel's build (6.1.<n>-shaddr-debug), whose module the guest refuses.
    release = platform.release() if on_host else guest_release(args.kernel)
    kos = [p for p in (os.path.join(d, "kmod", release or "?", "shaddr.ko")
                       for d in (build, os.path.join(TOP, "build"))) if os.path.exists(p)][:1]
    reason = None
    if args.no_vm:
        reason = "--no-vm"
    elif not [c for c in vm if not c.skip and c.name not in ("vm-mpich", "vm-openmpi")]:
        reason = "no contender uses the module yet (interposer and patched MPICH absent)"
    elif not kos:
        reason = (f"no build/kmod/{release or args.kernel + ' (no such kernel)'}/shaddr.ko "
                  "(`make kmod`)")
    if reason:
        say(f"VM part skipped: {reason}")
        return {"status": "skipped", "reason": reason}
    results_dir = os.path.join(build, "vm", "compare")
    inner = [os.path.join(TOP, "tools", "shaddr-compare"), "--inner-vm", "--build", build,
             "--ranks", str(args.ranks), "--sizes", args.sizes, "--churn-sizes",
             args.churn_sizes, "--limit-sizes", args.limit_sizes, "--timeout", str(args.timeout),
             "--rounds", str(args.vm_rounds)]
    if args.iters:
        inner += ["--iters", str(args.iters)]
    if args.only:
        inner += ["--only", args.only]
    # Not quiet: the guest console streams the benchmarks' progress.
    where = ["--host"] if on_host else ["--kernel", args.kernel]
    cmd = ["flock", "/tmp/shaddr-vm.lock", os.path.join(TOP, "tools", "shaddr-vm"), *where,
           "--module", kos[-1], "--results", results_dir,
           "--timeout", str(args.vm_timeout), "--"] + inner
    say(f"module part ({'host, insmod' if on_host else 'guest'}): {shlex.join(cmd)}")
    rc, secs = run_streaming(cmd, os.environ, "vm", args.vm_timeout + 120)
    path = os.path.join(results_dir, "compare", "results.json")
    if rc != 0 or not os.path.exists(path):
        return {"status": "failed", "reason": f"shaddr-vm exit {rc} (see {results_dir})"}
    with open(path) as f:
        doc = json.load(f)
    doc["status"], doc["seconds"] = "ok", round(secs)
    doc["on_host"] = on_host
    return doc


# --- cost model ---------------------------------------------------------------------------
def cost_model(res, limit, n, node_bw):
    """Per contender: alpha/beta from its ping-pong; predicted vs measured at n ranks; and a
    projection to bigger nodes (a MODEL: see the report for its assumptions)."""
    out = {}
    big = limit["results"][-1]
    b1_mem = big["one_core_Bps"] / 1e6  # bytes/us, one core, out of cache
    for name, rec in res.items():
        main = rec.get("passes", {}).get("main")
        if not main:
            continue
        pp = [(r["bytes"], r["t_max_us"]) for r in main["results"] if r["coll"] == "pingpong"]
        fit = fit_alpha_beta(pp)
        if not fit:
            continue
        single_copy = "interposer" in name or "patched" in name and "off" not in name
        barrier = [r["t_max_us"] for r in main["results"] if r["coll"] == "barrier"]
        sync = barrier[0] if barrier else fit["alpha_us"]
        pred = []
        for r in main["results"]:
            if r["coll"] == "pingpong":
                continue
            s = r["bytes"]
            g = 1.0 / copy_bw(limit, s, "one_core_Bps")
            if single_copy:  # a synchronisation, then the bytes that must move, on all cores
                mm = must_move(r["coll"], n, s)
                t = sync + (mm / copy_bw(limit, s, "all_core_Bps") if mm else 0)
            else:
                t = two_copy_model(r["coll"], n, s, fit["alpha_us"], fit["beta_us_per_byte"], g)
            pred.append({"coll": r["coll"], "bytes": s, "predicted_us": t,
                         "measured_us": r["t_max_us"]})
        proj = {}
        for cores, bw_gbs in node_bw.items():
            bw = bw_gbs * 1e3  # bytes/us
            rows = {}
            for coll in COLLS:
                for s in (8, 65536, 1 << 20, 16 << 20):
                    if coll == "barrier" and s != 8:
                        continue
                    mm = must_move(coll, cores, s)
                    g = 1.0 / b1_mem
                    if single_copy:
                        lat = lg(cores) * sync / max(lg(n), 1)
                        floor = mm / min(cores * b1_mem, bw) if mm else 0
                        t = lat + floor
                    else:
                        t = max(two_copy_model(coll, cores, s, fit["alpha_us"],
                                               fit["beta_us_per_byte"], g),
                                2 * mm / bw if mm else 0)
                    rows[f"{coll}:{s}"] = t
            proj[str(cores)] = rows
        out[name] = {"fit": fit, "single_copy": single_copy, "sync_us": sync,
                     "predicted": pred, "projection": proj}
    return out


# --- report -------------------------------------------------------------------------------
def table_rows(res, limit, n, coll, sizes_pick=None):
    names = [k for k, v in res.items() if v.get("passes", {}).get("main")]
    by = {k: {r["bytes"]: r for r in res[k]["passes"]["main"]["results"] if r["coll"] == coll}
          for k in names}
    sizes = sorted({s for k in names for s in by[k]})
    if sizes_pick:
        sizes = [s for s in sizes if s in sizes_pick] or sizes
    rows = []
    for s in sizes:
        row = [fmt_size(s) if coll != "barrier" else "—"]
        for k in names:
            r = by[k].get(s)
            if not r:
                row.append("")
                continue
            mm = must_move(coll, n, s)
            cell = fmt_us(r["t_max_us"])
            if mm:
                eff = (mm / copy_bw(limit, s, "all_core_Bps")) / r["t_max_us"]
                cell += f" ({eff * 100:.0f}%)"
            row.append(cell)
        rows.append(row)
    return ["size"] + names, rows


def plots(res, limit, n, out_dir, tag=""):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("python3-matplotlib missing: no plots (tools/shaddr-deps installs it)")
        return []
    made = []
    names = [k for k, v in res.items() if v.get("passes", {}).get("main")]
    if not names:  # nothing ran here (e.g. --only chose guest contenders alone)
        return []
    for coll in COLLS + ["pingpong"]:
        if coll == "barrier":
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for k in names:
            pts = [(r["bytes"], r["t_max_us"]) for r in res[k]["passes"]["main"]["results"]
                   if r["coll"] == coll]
            if pts:
                ax.plot(*zip(*pts), marker=".", label=k)
        if coll != "pingpong":
            sizes = sorted({r["bytes"] for k in names
                            for r in res[k]["passes"]["main"]["results"] if r["coll"] == coll})
            ax.plot(sizes, [must_move(coll, n, s) / copy_bw(limit, s, "all_core_Bps")
                            for s in sizes], "k--", label="copy limit (all cores)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes" + (" per rank" if coll == "allgather" else
                                 " per peer" if coll == "alltoall" else ""))
        ax.set_ylabel("time, max over ranks (us)")
        ax.set_title(f"{coll}, {n} ranks{tag}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        f = f"latency_{coll}{tag.replace(' ', '_').replace(',', '')}.png"
        fig.savefig(os.path.join(out_dir, f), dpi=110)
        plt.close(fig)
        made.append(f)
    fig, axes = plt.subplots(2, 3, figsize=(12, 7))
    for ax, coll in zip(axes.flat, [c for c in COLLS if c != "barrier"]):
        for k in names:
            pts = [(r["bytes"], must_move(coll, n, r["bytes"]) /
                    copy_bw(limit, r["bytes"], "all_core_Bps") / r["t_max_us"] * 100)
                   for r in res[k]["passes"]["main"]["results"] if r["coll"] == coll]
            if pts:
                ax.plot(*zip(*pts), marker=".", label=k)
        ax.set_xscale("log", base=2)
        ax.set_title(coll)
        ax.set_ylabel("efficiency (%)")
        ax.grid(True, alpha=0.3)
    axes.flat[-1].axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    axes.flat[-1].legend(handles, labels, loc="center", fontsize=8)
    fig.suptitle(f"efficiency = bytes that must move / (time x all-core copy bandwidth), "
                 f"{n} ranks{tag}")
    fig.tight_layout()
    f = f"efficiency{tag.replace(' ', '_').replace(',', '')}.png"
    fig.savefig(os.path.join(out_dir, f), dpi=110)
    plt.close(fig)
    made.append(f)
    return made


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def section(res, limit, n, out_dir, tag, pick, params=None):
    md = []
    for coll in COLLS:
        head, rows = table_rows(res, limit, n, coll)
        if rows:
            md += [f"### {coll}\n", md_table(head, rows), ""]
    md.append("#### Buffer churn (fresh memory every call: registration-cache worst case), "
              "max us over ranks\n")
    names = [k for k, v in res.items() if v.get("passes", {}).get("churn")]
    churn = {k: {(r["coll"], r["bytes"]): r for r in res[k]["passes"]["churn"]["results"]}
             for k in names}
    keys = sorted({key for k in names for key in churn[k]})
    if keys:
        md.append(md_table(["coll", "size"] + names,
                           [[c, fmt_size(s)] + [fmt_us(churn[k][(c, s)]["t_max_us"])
                                                if (c, s) in churn[k] else "" for k in names]
                            for c, s in keys]))
        md.append("")
    maps = churn_mappings(res, n, params or {})
    if maps:
        md += ["What stayed mapped during the churn pass, sampled after every call (max over "
               "calls and sizes): registration-cache misses (mapping system calls) per call and "
               "bytes of peers' memory one rank held mapped, from the interposer's counters; "
               "live windows, segment attachments and pinned pages on the node, from the "
               "module's sysfs counters; and those against the module's caps, which hold per "
               "open file of `/dev/shaddr` (`max_slots` windows, `max_attachments` "
               "attachments; a process opens one per libshaddr communicator, and libxpmem "
               "one more; libshaddr's own cap on segment attachments is 256 per peer). "
               "Copy backends (`cma`, `shm`) map nothing.\n",
               md_table(["contender", "misses/call", "bytes mapped", "open files", "windows",
                         "attachments", "pinned pages", "within the caps"], maps), ""]
    md.append("#### First call at each size (before warm-up, fresh buffer), max us over ranks\n")
    first = []
    for coll in COLLS:
        for s in sorted(pick):
            row = [coll, fmt_size(s) if coll != "barrier" else "—"]
            ok = False
            for k in [k for k, v in res.items() if v.get("passes", {}).get("main")]:
                r = [r for r in res[k]["passes"]["main"]["results"]
                     if r["coll"] == coll and (r["bytes"] == s or coll == "barrier")]
                if r and r[0].get("first_call_us") is not None:
                    row.append(fmt_us(r[0]["first_call_us"])); ok = True
                else:
                    row.append("")
            if ok:
                first.append(row)
            if coll == "barrier":
                break
    if first:
        md.append(md_table(["coll", "size"] + [k for k, v in res.items()
                                               if v.get("passes", {}).get("main")], first))
    md.append("")
    pngs = plots(res, limit, n, out_dir, tag)
    md += [f"![{p}]({p})" for p in pngs]
    return md


def module_params():
    """The loaded module's parameters (its caps), or {} where it is not loaded."""
    d = "/sys/module/shaddr/parameters"
    out = {}
    for name in ("max_slots", "slot_size", "max_attachments", "max_attach_mib"):
        try:
            with open(os.path.join(d, name)) as f:
                out[name] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return out


def churn_mappings(res, n, params):
    """What stayed mapped in the churn pass, per contender that reports it, against the caps."""
    rows = []
    for k, v in res.items():
        rs = v.get("passes", {}).get("churn", {}).get("results", [])
        mp = [r for r in rs if r.get("misses_per_call") is not None]
        mod = [r for r in rs if r.get("windows_max") is not None]
        if not mp and not mod:
            continue
        top = lambda key, rr: max((r[key] for r in rr), default=None)
        misses, mapped = top("misses_per_call", mp), top("bytes_mapped_max", mp)
        win, att, pin = top("windows_max", mod), top("attachments_max", mod), top("pages_pinned_max", mod)
        files = top("open_files_max", [r for r in mod if r.get("open_files_max") is not None])
        files = files if files is not None else n  # the caps are per open file of the device
        within = ["device not opened"] if mod and files == 0 else []
        if win is not None and files and "max_slots" in params:
            cap = files * params["max_slots"]
            within.append(f"windows {win} <= {cap}" if win <= cap else f"windows {win} > {cap}!")
        if att is not None and files and "max_attachments" in params:
            cap = files * params["max_attachments"]
            within.append(f"attachments {att} <= {cap}" if att <= cap
                          else f"attachments {att} > {cap}!")
        if mapped is not None and "max_slots" in params and "slot_size" in params and "window" in k:
            cap = max(1, files // n) * params["max_slots"] * params["slot_size"]
            within.append(f"bytes {mapped} <= {cap}" if mapped <= cap else f"bytes {mapped} > {cap}!")
        cell = lambda x: "" if x is None else str(x)
        rows.append([k, "" if misses is None else f"{misses:.2f}", cell(mapped),
                     cell(files if mod else None), cell(win), cell(att), cell(pin),
                     "; ".join(within) or "—"])
    return rows


def report(doc, out_dir):
    n, limit, res = doc["ranks"], doc["copy_limit"], doc["contenders"]
    pick = {8, 4096, 65536, 1 << 20, 16 << 20, 64 << 20}
    md = [f"# shaddr comparison report\n",
          f"{doc['date']}, host `{doc['host']}` ({doc['cpu']}, {doc['cores']} cores), "
          f"**{n} ranks**, sizes {doc['sizes']}, {'short' if doc['short'] else 'full'} run, "
          f"{doc['seconds']:.0f} s.\n",
          "Method (`build/tools/shaddr-bench-*`): per size, warm-up calls, then timed calls each "
          "preceded by a dissemination barrier of empty `PMPI_Sendrecv` messages (the same "
          "start line for every contender, whose ranks leave within one message of each other: "
          "a collective barrier's exit is skewed, and differs between contenders, MPICH's "
          "running a one-byte Bcast that the patched MPICH gives to libshaddr); every rank "
          "averages its own times; the tables give the "
          "**max over ranks** (us). Send buffers get new contents and receive buffers are "
          "poisoned before every call (outside the timed region), so no result can come from "
          "an earlier call; every result is validated. Every contender ran "
          f"{doc.get('rounds', 1)} time(s), in rounds that rotate the order; each size's "
          "**best** over the rounds is shown (this VM's cross-core speed flips by up to 3x for "
          "minutes at a time: contenders are compared each in its fast state, met when the "
          "cross-core probes before and after a round's main pass both find it; a contender none "
          "of whose rounds met it runs again when a probe finds it). "
          + (f"**Measured only in the slow state** (not comparable): "
             f"{', '.join(doc['slow_state_only'])}. " if doc.get("slow_state_only") else "")
          + "Allgather: S bytes per rank; Alltoall: "
          "S bytes per peer; Reduce/Allreduce: MPI_SUM of S/4 int32.\n",
          "## Contenders\n",
          md_table(["contender", "what", "status", "MPI library"],
                   [[k, v["desc"], v["status"] + (f": {v['reason']}" if v.get("reason") else ""),
                     v.get("mpi_version", "")] for k, v in res.items()]),
          ""]
    from .calibration import report_md
    md += report_md(doc.get("calibration"), doc.get("calibration_read"))
    md += ["## Goals\n",
          "Each goal checked against this run's numbers (2 ranks), for what a user gets: "
          "\"shaddr\" is the fastest **default** contender at that size (the interposer with "
          "no settings, `interposer-<mpi>`, and the patched MPICH's own selection, "
          "`mpich-patched-auto`), \"stock\" the fastest of Debian's MPICH, Debian's Open MPI "
          "and the patched MPICH with shaddr off. The forced configurations (a backend or an "
          "algorithm chosen by setting) follow as diagnostics. Buffer churn: see the churn "
          "tables below (cost per call, and what stayed mapped against the caps).\n"]
    md += goals(res, limit, n, "host", confirmation=doc.get("confirmation"))
    md += against_shaddr_off(res, "host", doc.get("confirmation"))
    md += commcost.goals_md(doc.get("comm_cost"))
    md += alloccost.goals_md(doc.get("alloc_cost"))
    md += ["Diagnostics, the best of every shaddr configuration, forced ones included:\n"]
    md += goals(res, limit, n, "host, any shaddr configuration", side=is_shaddr)
    md += ["**The shared heap** (`heap`, [heap.md](../../docs/heap.md); the defaults include it, "
           "`interposer-heap-<mpi>` sets it explicitly, `mpich-patched-heap` is the patched "
           "MPICH's defaults with `libshaddr-heap.so` preloaded in the ranks): with "
           "`libshaddr-heap.so` preloaded, malloc'd buffers of `SHADDR_HEAP_MIN` (64 KiB) and "
           "more, and `MPI_Alloc_mem`, live in a per-process memfd that every node peer maps "
           "once, read-only (received over a unix socket: no ptrace rights, no module). A "
           "peer's heap address then translates by an offset into that mapping, so the "
           "single-copy algorithms read it by pointer, with no system call and no "
           "registration: this is the **native speed of the mapped single-copy algorithms** "
           "(the module's `segment`/`window` run the same algorithms, but here only under "
           "emulation). The benchmark's buffers are malloc'd, so they are in the heap from "
           "64 KiB; smaller messages go through the inner backend (`heap+cma`: `cma`) or the "
           "control block's slots.\n"]
    md += goals(res, limit, n, "host, shared heap",
                side=lambda k: "heap" in k and res[k].get("status") == "ok")
    md += ["Why the host part can fall short: without the heap its shaddr contenders run on "
           "the backends that need no module, `cma` (`process_vm_readv`: the kernel pins and "
           "copies page by page, one system call per transfer) and `shm` (two copies through a "
           "staging area); buffers below `SHADDR_HEAP_MIN` stay on those with the heap too; "
           "the module's mapped backends (`segment`, `window`) are measured in the module "
           "part.\n"]
    vm = doc.get("vm", {})
    if vm.get("status") == "ok":
        where = ("module, host kernel" if vm.get("on_host") else
                 "guest: ratios within the one guest run")
        md += goals(vm["contenders"], vm["copy_limit"], n, where)
        md += against_shaddr_off(vm["contenders"], where, vm.get("confirmation"))
        md += goals(vm["contenders"], vm["copy_limit"], n, where + ", any shaddr configuration",
                    side=is_shaddr)
    md += commcost.section_md(doc.get("comm_cost"))
    md += fortran.section_md(doc.get("fortran"))
    md += ["## The limit: memory copy on this machine (same run)\n",
           f"`build/tools/shaddr-copy-limit`: one core `memcpy`, and {limit['threads']} cores "
           "copying their own buffers at once, and one core copying what the other has just "
           "written (GB/s of bytes copied).\n",
           md_table(["size", "1 core GB/s", f"{limit['threads']} cores GB/s",
                     "cross-core GB/s"],
                    [[fmt_size(r["bytes"]), f"{r['one_core_Bps'] / 1e9:.1f}",
                      f"{r['all_core_Bps'] / 1e9:.1f}",
                      f"{r['cross_core_Bps'] / 1e9:.1f}" if "cross_core_Bps" in r else ""]
                     for r in limit["results"]
                     if r["bytes"] in pick or r["bytes"] in (256 << 10, 4 << 20)]),
           "",
           "The first two columns copy buffers that stay in the copying core's cache. A "
           "collective's data was just written by another core (the benchmark rewrites every "
           "send buffer before every call), so the cross-core column is what one receiver can "
           "reach. Efficiency below uses the all-core column, as the benchmark's definition "
           "asks.\n",
           "",
           "**Efficiency** (in parentheses below) = (bytes that must move) / (time x all-core "
           "copy bandwidth at that size): 100% means the collective ran as fast as the cores "
           "can copy the data that has to cross between ranks. Bytes that must move, for n "
           "ranks and size S:\n"]
    md += [f"- {c}: {d}" for c, d in MUST_MOVE_DOC.items()]
    md += ["", "## Latency, max over ranks (us), and efficiency\n"]
    md += section(res, limit, n, out_dir, "", pick)
    md += ["", "## Module backends (segment, window)\n"]
    if vm.get("status") == "ok" and vm.get("on_host"):
        md += [f"On this machine's kernel ({platform.release()}, `shaddr.ko` inserted by "
               "`tools/shaddr-vm --host`), every contender and the copy limit in the same run.\n"]
        md += section(vm["contenders"], vm["copy_limit"], n, out_dir, ", module", pick,
                      vm.get("module_params"))
    elif vm.get("status") == "ok":
        md += [f"One `tools/shaddr-vm` guest (kernel {doc['kernel']}, "
               f"{vm.get('accel', 'TCG or KVM')}), every contender and the copy limit in the "
               "same guest run. **Timing in an emulated guest is not real time: only ratios between "
               "contenders (columns) of these tables, measured in this one guest run, mean "
               "anything** — never the values themselves, nor against the host's.\n"]
        md += section(vm["contenders"], vm["copy_limit"], n, out_dir, ", guest", pick,
                      vm.get("module_params"))
    else:
        md.append(f"Not run: {vm.get('reason', 'not requested')}.\n")
    # Cost model
    cm = doc.get("model", {})
    md += ["", "## Cost model (alpha-beta-gamma)\n",
           "Point-to-point: T(m) = α + m·β, fitted per contender to its own ping-pong (one-way "
           "time, least squares weighted by 1/T). Message-passing contenders are predicted "
           "with the usual algorithms' costs (binomial / scatter-allgather Bcast, "
           "recursive-doubling / Rabenseifner (All)reduce, recursive-doubling / ring "
           "Allgather, pairwise Alltoall, the best one per size) with γ = 1 / one-core copy "
           "bandwidth for reducing; single-copy (shaddr) contenders as one synchronisation "
           "(their Barrier) plus the bytes that must move at the all-core copy bandwidth.\n"]
    if cm:
        md.append(md_table(["contender", "α (us)", "β (ns/B)", "1/β (GB/s)", "fit max rel. err"],
                           [[k, f"{v['fit']['alpha_us']:.3f}",
                             f"{v['fit']['beta_us_per_byte'] * 1e3:.4f}",
                             f"{1 / v['fit']['beta_us_per_byte'] / 1e3:.1f}",
                             f"{v['fit']['max_rel_err'] * 100:.0f}%"] for k, v in cm.items()]))
        md += ["", "Predicted vs measured (us, max over ranks) at selected sizes:\n"]
        rows = []
        for k, v in cm.items():
            for p in v["predicted"]:
                if p["bytes"] in (8, 65536, 1 << 20) or p["coll"] == "barrier":
                    rows.append([k, p["coll"], fmt_size(p["bytes"]) if p["bytes"] else "—",
                                 fmt_us(p["predicted_us"]), fmt_us(p["measured_us"]),
                                 f"{p['measured_us'] / p['predicted_us']:.2f}"
                                 if p["predicted_us"] > 0 else ""])
        md.append(md_table(["contender", "coll", "size", "model", "measured",
                            "measured/model"], rows))
        nb = doc["node_bw"]
        md += ["", "### Projection to bigger nodes — **A MODEL, NOT A MEASUREMENT**\n",
               "Assumptions: α and β stay what this machine measured; the node's copy bandwidth "
               "is " + ", ".join(f"{c} cores: {g} GB/s" for c, g in nb.items()) +
               " (assumed values, `--node-copy-gbs`); message-passing contenders cannot beat "
               "two copies of the bytes that must move at that bandwidth; single-copy "
               "contenders pay log2(cores) synchronisations plus one copy at min(cores x "
               "one-core bandwidth, node bandwidth). No contention, NUMA or cache effects beyond "
               "that. Times in us.\n"]
        for cores in nb:
            head = ["contender"] + [f"{c} {fmt_size(int(s))}" if c != "barrier" else "barrier"
                                    for c, s in (key.split(":") for key in
                                                 next(iter(cm.values()))["projection"][str(cores)])]
            rows = [[k] + [fmt_us(t) for t in v["projection"][str(cores)].values()]
                    for k, v in cm.items()]
            md += [f"**{cores} cores (model)**\n", md_table(head, rows), ""]
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def summary(doc):
    """The short table printed at the end: max us (efficiency) at a few sizes."""
    n, limit, res = doc["ranks"], doc["copy_limit"], doc["contenders"]
    pick = {8, 65536, 1 << 20, 16 << 20}
    out = []
    for coll in COLLS:
        head, rows = table_rows(res, limit, n, coll, pick)
        if not rows:
            continue
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        out.append(f"{coll}: max us over ranks (efficiency)")
        for r in [head] + rows:
            out.append("  " + "  ".join(x.rjust(w) for x, w in zip(r, widths)))
    return "\n".join(out)


def run_stock_vs_run(build, args, reps, option, measure, what):
    """@measure(build, mpis, ranks, @reps, launcher, say) for each MPI (with --only: whose
    interposer-<mpi> it names), stock against shaddr-run; @option is the setting of @reps."""
    if reps <= 0:
        return {"skipped": f"{option} 0"}
    keep = set(args.only.split(",")) if args.only else None
    mpis = [m for m in ("mpich", "openmpi") if keep is None or f"interposer-{m}" in keep]
    if not mpis:
        return {"skipped": "--only names no interposer-<mpi>"}
    say(f"{what} on {', '.join(mpis)}, stock and under shaddr-run, {reps} times each, "
        "alternating")
    return measure(build, mpis, args.ranks, reps, launcher, say)


def run_comm_cost(build, args):
    """commcost.measure(): what a communicator costs."""
    reps = args.comm_cost_reps if args.comm_cost_reps is not None else 3 if args.short else 5
    return run_stock_vs_run(build, args, reps, "--comm-cost-reps", commcost.measure,
                            "communicator cost: tests/interpose/comm_cost")


def run_fortran(build, args):
    """fortran.measure(): Fortran's bindings against C."""
    reps = args.fortran_reps if args.fortran_reps is not None else 1 if args.short else 3
    return run_stock_vs_run(build, args, reps, "--fortran-reps", fortran.measure,
                            "Fortran bindings: shaddr-fortran-bench")


def run_alloc_cost(build, args):
    """alloccost.measure(): the heap's allocation rounds against glibc's."""
    reps = args.alloc_cost_reps if args.alloc_cost_reps is not None else 3 if args.short else 5
    if reps <= 0:
        return {"skipped": "--alloc-cost-reps 0"}
    say(f"allocation cost: tests/heap/heap_alloc_bench on glibc and libshaddr-heap.so, {reps} "
        "times each, alternating")
    return alloccost.measure(build, reps, say)


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
        from . import calibration
        cal = calibration.ensure(build, calibration.skip_reason(args), args.timeout)
        cal_read = calibration.check_read(cs, bench, args.ranks, 300)
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
