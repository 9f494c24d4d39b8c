# SPDX-License-Identifier: MIT
"""shaddr-bench-multihost: stock MPI against shaddr's hierarchy across test hosts, with a model.

On tools/shaddr-hosts' test hosts (network namespaces on a bridge, links shaped with tc's
token bucket to --rate in both directions), per MPI (Debian's MPICH and Open MPI):

  stock    shaddr-bench on HOSTS x PER ranks, MPI's own collectives
  shaddr   the same under build/tools/shaddr-run (SHADDR_MIN=0: every call through
           the node/leader hierarchy, so that it is measured at every size)

and the parameters of the model, measured in the same run: the network's alpha/beta (stock
ping-pong between two hosts, one rank each), the stock intra-host alpha/beta (ping-pong of two
ranks on one host), the memory-copy bandwidth (build/tools/shaddr-copy-limit) and the node's
synchronisation cost (the interposer's Barrier on one host). The model (written out in the
report) predicts both contenders' times; the report gives the measured gain (stock / shaddr)
per collective and size next to the predicted one. Writes build/report/multihost.{md,json}
(and multihost-gain.png), and puts the section into build/report/report.md when that exists.
"""
import argparse
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from . import costs, proc
from .costs import COLLS
from .fit import fit_alpha_beta
from .text import fmt_size, fmt_us

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS_TOOL = os.path.join(TOP, "tools", "shaddr-hosts")
RSH = os.path.join(TOP, "tools", "shaddr-hosts-rsh")
NET = "10.77.0.0/24"

def say(msg):
    print(f"shaddr-bench-multihost: {msg}", flush=True)


# --- running -------------------------------------------------------------------------------
def launcher(mpi, hosts, per, names):
    n = hosts * per
    if mpi == "mpich":
        hl = ",".join(f"shaddr-h{i}:{per}" for i in range(1, hosts + 1))
        return ["mpiexec.mpich", "-hosts", hl, "-launcher", "rsh", "-launcher-exec", RSH,
                "-n", str(n)]
    hl = ",".join(f"shaddr-h{i}:{per}" for i in range(1, hosts + 1))
    cmd = ["mpiexec.openmpi", "--host", hl, "-n", str(n), "--mca", "plm_rsh_agent", RSH,
           "--mca", "oob_tcp_if_include", NET, "--mca", "btl", "tcp,self,vader",
           "--mca", "btl_tcp_if_include", NET, "--mca", "pml", "ob1"]
    for v in names:
        cmd += ["-x", v]
    return cmd


def run(args, mpi, hosts, per, label, bench_args, interposer, out_dir):
    """One shaddr-bench job on shaddr-h1; returns its JSON (or None) and notes."""
    jpath = os.path.join(out_dir, "raw", f"{label}.json")
    try:
        os.unlink(jpath)
    except FileNotFoundError:
        pass
    env = proc.mpi_env()
    env.pop("SHADDR_NODES", None)
    extra = {"UCX_TLS": "tcp,self,sm", "UCX_NET_DEVICES": "veth0"} if mpi == "mpich" else {}
    if interposer:
        extra["SHADDR_MIN"] = "0"
    env.update(extra)
    bench = os.path.join(args.build, "tools", f"shaddr-bench-{mpi}")
    prog = ([os.path.join(args.build, "tools", "shaddr-run")] if interposer else []) + \
        [bench, "--label", label, "--json", jpath] + bench_args
    cmd = [HOSTS_TOOL, "exec", "1"] + ["env"] + [f"{k}={v}" for k, v in extra.items()] + \
        launcher(mpi, hosts, per, list(extra)) + prog
    say(f"{label}: {shlex.join(cmd[3:])}")
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    os.set_blocking(p.stdout.fileno(), False)
    note, done_at, log = "", None, []
    while p.poll() is None:
        time.sleep(0.5)
        try:
            chunk = p.stdout.read()
        except (OSError, TypeError):
            chunk = None
        if chunk:
            log.append(chunk)
        if done_at is None and complete(jpath):
            done_at = time.time()
        if done_at and time.time() - done_at > 15:
            # The results are written; the MPI library hangs in its own MPI_Finalize (Debian's
            # MPICH over UCX tcp: docs/multihost.md). End the job: it is ours.
            note = "job ended by us 15 s after its results were written (hung in MPI_Finalize)"
            os.killpg(p.pid, signal.SIGTERM)
        elif time.time() - t0 > args.timeout:
            note = f"killed after {args.timeout} s"
            os.killpg(p.pid, signal.SIGKILL)
    rest = p.stdout.read()
    if rest:
        log.append(rest)
    secs = time.time() - t0
    if not complete(jpath):
        say(f"{label}: FAILED (exit {p.returncode}, {secs:.0f} s) {note}")
        sys.stdout.write("".join(log)[-3000:])
        return None, note or f"exit {p.returncode}"
    with open(jpath) as f:
        doc = json.load(f)
    say(f"{label}: {len(doc['results'])} results, validation {doc.get('validation')}, "
        f"{secs:.0f} s{'; ' + note if note else ''}")
    doc["note"] = note
    return doc, note


def hier_segment(build, mpi):
    """The pieces of the leaders' pipelined Bcast: the limit `hier_segment` of the plan the
    interposer gets against @mpi's own collectives here (`shaddr-info --plan`, which the
    environment's SHADDR_INTERPOSE_SEGMENT sets as it sets the interposer's)."""
    out = subprocess.run([os.path.join(build, "tools", "shaddr-info"), f"--plan={mpi}"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["limits"]["hier_segment"]


def complete(path):
    try:
        with open(path) as f:
            json.load(f)
        return True
    except (OSError, ValueError):
        return False


def rows(doc, coll):
    return {r["bytes"]: r["t_max_us"] for r in doc["results"] if r["coll"] == coll} if doc else {}


# --- model ---------------------------------------------------------------------------------
MODEL_DOC = """\
**The model.** H hosts of P ranks (n = H·P, ranks in blocks per host), S as shaddr-bench
defines it (the message; Allgather: each rank's block; Alltoall: the block per peer).
`TG(coll, k, s, α, β)` is shaddr-compare's Thakur-Gropp cost of the usual message-passing
algorithms (the best of them) on k ranks; γ (us per byte reduced) is one core's copy time.
Measured in this run: the network's α_net, β_net (stock ping-pong between two hosts), the stock
intra-host α_mem, β_mem (ping-pong of two ranks of one host), the copy bandwidth B (all cores,
`shaddr-copy-limit`) and the node's synchronisation t_sync (the interposer's Barrier on one
host).

- *Stock* (MPI's flat algorithms, block placement): an inter-host part on H ranks over the
  network plus an intra-host part on P ranks through memory:
  `TG(coll, H, c·S, α_net, β_net) + TG(coll, P, S, α_mem, β_mem)`, with c = P for the
  recursive-doubling Allreduce (all P ranks of a host send S across at once; the
  reduce-scatter/allgather form and the other collectives cross with the host's share only:
  c = 1), and the per-host blocks P·S (Allgather) and P·P·S (Alltoall) as the inter-host
  message.
- *shaddr's hierarchy*: the node phases are single copies, `t_sync + bytes/B` per phase (Bcast:
  (P-1)·S; Reduce: (P-1)·S; Allreduce: 2(P-1)·S; Allgather: (P-1)·S gathered + (P-1)·n·S
  broadcast; Alltoall: 2(P-1)·n·S), the leaders' phase is `TG(coll, H, S_lead, α_net, β_net)`
  with S_lead = S, S, S, P·S, P·P·S; Bcast and Allreduce pipeline the leaders' pieces (the
  plan's `hier_segment`, in each MPI's parameters below) into the node's Bcast:
  `max(node, leaders) + min(node, leaders)/pieces`; the others add the phases.
- Predicted gain = stock / shaddr, both from the model; measured gain = stock / shaddr, both
  measured (the max over ranks of each rank's mean time per call).
"""


def tg(coll, k, s, a, b, g):
    return costs.two_copy_model(coll, k, s, a, b, g) if k > 1 else 0.0


def model(coll, s, H, P, net, mem, bw, sync, g, segment):
    n = H * P
    an, bn = net["alpha_us"], net["beta_us_per_byte"]
    am, bm = mem["alpha_us"], mem["beta_us_per_byte"]
    lead_s = {"allgather": P * s, "alltoall": P * P * s}.get(coll, s)
    if coll == "allreduce":
        inter = min(costs.lg(H) * (an + P * s * bn + s * g),
                    2 * costs.lg(H) * an + 2 * (H - 1) / H * s * bn + (H - 1) / H * s * g)
    else:
        inter = tg(coll, H, lead_s, an, bn, g)
    stock = inter + tg(coll, P, s, am, bm, g)
    node_bytes = {"bcast": (P - 1) * s, "reduce": (P - 1) * s, "allreduce": 2 * (P - 1) * s,
                  "allgather": (P - 1) * s + (P - 1) * n * s, "alltoall": 2 * (P - 1) * n * s,
                  "barrier": 0}[coll]
    phases = {"bcast": 1, "reduce": 1, "allreduce": 2, "allgather": 2, "alltoall": 2,
              "barrier": 2}[coll]
    node = phases * sync + node_bytes / bw
    lead = tg(coll, H, lead_s, an, bn, g)
    if coll in ("bcast", "allreduce"):
        pieces = max(1, math.ceil(s / segment))
        hier = max(node, lead) + min(node, lead) / pieces
    else:
        hier = node + lead
    return stock, hier


# --- report --------------------------------------------------------------------------------
def report(res, args, out_dir):
    lines = ["## Multi-host: stock MPI against shaddr's hierarchy across test hosts", ""]
    lines.append(
        f"{args.hosts} test hosts x {args.per} ranks (`tools/shaddr-hosts`: network namespaces "
        f"with their own hostnames, veth pairs on a bridge; node detection by MPI). Links shaped "
        f"with tc's token bucket (`tbf`) to **{args.rate}** in each direction of every host's "
        f"link; **no delay added**: this kernel has no `netem` (not built in, modules cannot be "
        f"loaded), so the one-way latency is the veth's and TCP's own (the network α below). "
        f"`shaddr-bench --iters {args.iters}`, sizes {args.sizes}; `shaddr` = "
        f"`build/tools/shaddr-run` with `SHADDR_MIN=0` (the hierarchy at every size). "
        f"Measured {res['date']} on {res['machine']} (other jobs ran at the same time: "
        f"load average {res['load']} at the start).")
    lines.append("")
    if res["load_max"] > res["cpus"]:
        lines.append(
            f"**Warning: the machine was busy** (load average up to {res['load_max']:.1f} on "
            f"{res['cpus']} CPUs during the run): ranks that poll lose their CPU for whole time "
            f"slices, so the times below are dominated by scheduling stalls of milliseconds, not by "
            f"the network or the copies, and neither the measured gains nor the fitted α/β mean "
            f"much. Run `make bench-multihost` again on a quiet machine.")
        lines.append("")
    lines.append(MODEL_DOC)
    for mpi, r in res["mpis"].items():
        lines.append(f"### {mpi}")
        lines.append("")
        if r.get("skip"):
            lines.append(f"Not measured: {r['skip']}.")
            lines.append("")
            continue
        p = r["params"]
        lines.append(
            f"Model parameters: α_net {p['net']['alpha_us']:.1f} us, network "
            f"{1 / p['net']['beta_us_per_byte']:.0f} MB/s (fit error {p['net']['max_rel_err']:.0%}); "
            f"α_mem {p['mem']['alpha_us']:.1f} us, {1 / p['mem']['beta_us_per_byte']:.0f} MB/s "
            f"(stock, one host); copy bandwidth B {p['bw']:.0f} MB/s (all cores), one core "
            f"{1 / p['g']:.0f} MB/s; t_sync {p['sync']:.1f} us; the hierarchy's pieces "
            f"{fmt_size(p['segment'])}. Network : memory bandwidth = "
            f"1 : {p['bw'] * p['net']['beta_us_per_byte']:.0f}.")
        for n in r.get("notes", []):
            lines.append(f"Note: {n}")
        lines.append("")
        lines.append("| collective | size | stock us | shaddr us | measured gain | predicted gain "
                     "| model stock us | model shaddr us |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for row in r["table"]:
            lines.append(
                f"| {row['coll']} | {fmt_size(row['bytes'])} | {fmt_us(row['stock_us'])} "
                f"| {fmt_us(row['shaddr_us'])} | {row['gain']:.2f} | {row['pred_gain']:.2f} "
                f"| {fmt_us(row['pred_stock_us'])} | {fmt_us(row['pred_shaddr_us'])} |")
        lines.append("")
        agree = [row for row in r["table"] if row["bytes"] >= 65536 or row["coll"] == "barrier"]
        if agree:
            within = sum(1 for row in agree
                         if 0.5 <= row["gain"] / row["pred_gain"] <= 2) if agree else 0
            lines.append(f"From 64 KiB (and Barrier): the measured gain is within a factor of 2 "
                         f"of the predicted one in {within} of {len(agree)} cases.")
            lines.append("")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "multihost.md"), "w") as f:
        f.write(text)
    main_report = os.path.join(out_dir, "report.md")
    if os.path.exists(main_report):
        with open(main_report) as f:
            old = f.read()
        begin, end = "<!-- multihost: begin -->", "<!-- multihost: end -->"
        block = f"{begin}\n{text}{end}\n"
        if begin in old and end in old:
            new = re.sub(re.escape(begin) + ".*?" + re.escape(end) + "\n?",
                         lambda _: block, old, flags=re.S)
        else:
            new = old.rstrip("\n") + "\n\n" + block
        with open(main_report, "w") as f:
            f.write(new)
        say(f"section written into {main_report}")
    plot(res, out_dir)


def plot(res, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    mpis = [m for m, r in res["mpis"].items() if r.get("table")]
    if not mpis:
        return
    colls = [c for c in COLLS if c != "barrier"]
    fig, axes = plt.subplots(len(mpis), len(colls), figsize=(4 * len(colls), 3.2 * len(mpis)),
                             squeeze=False)
    for i, m in enumerate(mpis):
        for j, c in enumerate(colls):
            ax = axes[i][j]
            t = [r for r in res["mpis"][m]["table"] if r["coll"] == c]
            ax.semilogx([r["bytes"] for r in t], [r["gain"] for r in t], "o-", label="measured")
            ax.semilogx([r["bytes"] for r in t], [r["pred_gain"] for r in t], "s--",
                        label="model")
            ax.axhline(1, color="grey", lw=0.8)
            ax.set_title(f"{m} {c}")
            ax.set_xlabel("bytes")
            ax.set_ylabel("stock / shaddr")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "multihost-gain.png"), dpi=90)
    plt.close(fig)


# --- main ----------------------------------------------------------------------------------
def measure(args, mpi, out_dir, limit):
    H, P = args.hosts, args.per
    common = ["--iters", str(args.iters), "--validate"]
    r = {"notes": []}
    docs = {}
    # The ping-pongs over a doubling range (quick); the collectives at the listed sizes, one job
    # per size (shaddr-bench takes one doubling range per job).
    jobs = [(f"{mpi}-pingpong-net", "", 2, 1, "pingpong", False, args.pingpong_sizes),
            (f"{mpi}-pingpong-mem", "", 1, 2, "pingpong", False, args.pingpong_sizes),
            (f"{mpi}-node-sync", "", 1, P, "barrier", True, "8:8")]
    for size in args.sizes.split(","):
        rng = size if ":" in size else f"{size}:{size}"
        for kind, interposer in (("stock", False), ("shaddr", True)):
            jobs.append((f"{mpi}-{kind}", size, H, P, ",".join(COLLS), interposer, rng))
    for label, size, hosts, per, colls, interposer, rng in jobs:
        name = f"{label}-{size}" if size else label
        doc, note = run(args, mpi, hosts, per, name,
                        ["--coll", colls, "--sizes", rng] + common, interposer, out_dir)
        if doc is None:
            return {"skip": f"{name} failed ({note})"}
        if note:
            r["notes"].append(f"{name}: {note}.")
        if doc.get("validation") == "failed":
            r["notes"].append(f"{name}: WRONG RESULTS ({doc.get('errors')} words).")
        if label in docs:
            docs[label]["results"] += doc["results"]
        else:
            docs[label] = doc
    net = fit_alpha_beta(sorted(rows(docs[f"{mpi}-pingpong-net"], "pingpong").items()))
    mem = fit_alpha_beta(sorted(rows(docs[f"{mpi}-pingpong-mem"], "pingpong").items()))
    sync = min(rows(docs[f"{mpi}-node-sync"], "barrier").values())
    big = limit["results"][-1]
    bw = big["all_core_Bps"] / 1e6
    g = 1e6 / big["one_core_Bps"]
    segment = hier_segment(args.build, mpi)
    r["params"] = {"net": net, "mem": mem, "sync": sync, "bw": bw, "g": g, "segment": segment}
    stock, shaddr = docs[f"{mpi}-stock"], docs[f"{mpi}-shaddr"]
    table = []
    for coll in COLLS:
        st, sh = rows(stock, coll), rows(shaddr, coll)
        for s in sorted(set(st) & set(sh)):
            if coll == "barrier" and s != min(st):
                continue
            ps, ph = model(coll, s, H, P, net, mem, bw, sync, g, segment)
            table.append({"coll": coll, "bytes": s, "stock_us": st[s], "shaddr_us": sh[s],
                          "gain": st[s] / sh[s], "pred_stock_us": ps, "pred_shaddr_us": ph,
                          "pred_gain": ps / ph if ph else float("nan")})
    r["table"] = table
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Writes build/report/multihost.{md,json} "
                                        "(and the section of build/report/report.md).")
    ap.add_argument("--hosts", type=int, default=2, help="test hosts (default 2)")
    ap.add_argument("--per", type=int, default=2, help="ranks per host (default 2)")
    ap.add_argument("--rate", default="2gbit",
                    help="tc rate of every host's link, each direction (default 2gbit)")
    ap.add_argument("--sizes", default="8,4K,64K,1M,4M",
                    help="collectives' sizes, comma-separated, each a size or MIN:MAX "
                         "(doubling; default 8,4K,64K,1M,4M)")
    ap.add_argument("--pingpong-sizes", default="8:4M",
                    help="MIN:MAX of the ping-pongs the model's alpha/beta are fitted to")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    ap.add_argument("--mpi", default="mpich,openmpi", help="MPIs (default mpich,openmpi)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per job (default 900)")
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--out", default=None, help="report directory (default BUILD/report)")
    ap.add_argument("--keep", action="store_true", help="leave the test hosts up")
    args = ap.parse_args()
    out_dir = args.out or os.path.join(args.build, "report")
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)
    if os.geteuid() != 0:
        sys.exit("shaddr-bench-multihost: needs root (tools/shaddr-hosts)")

    limit_json = os.path.join(out_dir, "raw", "multihost-copy-limit.json")
    subprocess.run([os.path.join(args.build, "tools", "shaddr-copy-limit"), "--sizes", "4M:16M",
                    "--json", limit_json], check=True, stdout=subprocess.DEVNULL)
    with open(limit_json) as f:
        limit = json.load(f)
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": f"{os.uname().nodename}, {os.cpu_count()} CPUs",
           "load": open("/proc/loadavg").read().split()[0], "cpus": os.cpu_count(),
           "hosts": args.hosts, "per": args.per, "rate": args.rate, "delay": "none (no netem)",
           "iters": args.iters, "sizes": args.sizes, "mpis": {}}
    try:
        subprocess.run([HOSTS_TOOL, "up", str(max(args.hosts, 2)), "--rate", args.rate], check=True)
        for mpi in args.mpi.split(","):
            if not os.path.exists(os.path.join(args.build, "tools", f"shaddr-bench-{mpi}")):
                res["mpis"][mpi] = {"skip": f"no build/tools/shaddr-bench-{mpi}"}
                continue
            res["mpis"][mpi] = measure(args, mpi, out_dir, limit)
    finally:
        if not args.keep:
            subprocess.run([HOSTS_TOOL, "down"], check=False)
    res["load_max"] = max(float(res["load"]), float(open("/proc/loadavg").read().split()[0]))
    with open(os.path.join(out_dir, "multihost.json"), "w") as f:
        json.dump(res, f, indent=1)
    report(res, args, out_dir)
    say(f"report: {os.path.join(out_dir, 'multihost.md')}")
    return 0

