# SPDX-License-Identifier: MIT
"""shaddr-compare's processes: the contenders and how each runs (mpiexec, shaddr-run, the
patched MPICH's switches), the benchmark runs and their rounds, the probe of the machine's
cross-core state and the reruns in its fast state, the module part (a guest or the host with
insmod), the copy limit, and the stock-against-shaddr-run measurements (communicators, Fortran,
allocations). tools/shaddr-model and the calibration step run their jobs with it too."""
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

from . import alloccost, commcost, fortran
from .rounds import FAST_SHARE

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


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


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
