# SPDX-License-Identifier: MIT
"""shaddr-compare's report: report.md (the Goals, a section per part, the model), its plots
and the short summary printed at the end, rendered from results.json's document."""
import os
import platform

from . import alloccost, calibration, commcost, fortran, topomodel
from .costs import COLLS, MUST_MOVE_DOC, copy_bw, must_move
from .goals import against_shaddr_off, goals as judge_goals, is_shaddr, predicted_vs_published
from .runner import say
from .text import fmt_size, fmt_us, md_table


def goals_md(results):
    """The Goals section's text of goal results (goals.Goal): a verdict line and the table of
    its points, or one line where nothing could be judged."""
    md = []
    for g in results:
        if g.met is None and not g.rows:
            md.append(f"{g.where}: {g.verdict} ({g.how}).\n")
            continue
        head = f"**{g.name}** ({g.where})" + (f", {g.unit}" if g.unit else "")
        md += [head + (f": {g.verdict}. {g.how}\n" if g.verdict else ":\n"),
               md_table(g.columns, g.rows), ""]
    return md


def goals_text(*args, **kwargs):
    """goals.goals() rendered."""
    return goals_md(judge_goals(*args, **kwargs))


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


def topology_model_md(tm):
    """The section of topomodel.predict_all()'s table: per machine, flat vs hierarchical per
    collective, size and rank count, labelled as a model; the published figures beside it; the
    inputs and their sources."""
    head = ["", "## Flat vs hierarchical on bigger machines — **model, not measured**\n"]
    if not tm:
        return head + ["Not computed in this run.\n"]
    if tm.get("error"):
        return head + [f"Not computed: {tm['error']}.\n"]
    md = head + [
        "No machine here has more than one NUMA node, so this part is **predicted, not "
        "measured** ([topology.md](../../docs/topology.md), \"Predicted\"; "
        "`tools/shaddr_bench/topomodel.py`): the synthetic hwloc machines of "
        "`tests/unit/topology/`, grouped as libshaddr groups them (`shaddr-info --topology "
        "FILE --cpus 0-N --json`, one rank per core), every algorithm as the single copies it "
        "makes, its time the busiest resource (each reader's core, the package link, a NUMA "
        "node's path, an L3 domain's link, memory beyond the shared cache) plus one "
        "synchronisation per pipelined stage. The bandwidths are vendors' theoretical peaks "
        "or labelled assumptions (below): the times are optimistic, and the flat times ignore "
        "cache-to-cache forwarding across the link (an upper bound on flat's link load). Root "
        "0; cells: **flat** / **hierarchical** us, the model's pick in bold; Allgather: S per "
        "rank. The published measurements after the tables are its check: where they "
        "disagree, the model is wrong.\n"]
    for m in tm["machines"]:
        ns = [r["n"] for r in m["ranks"]]
        md.append(f"**{m['name']}** (model): " + "; ".join(
            f"{r['n']} ranks: {r['grouping']}" for r in m["ranks"]) + "\n")
        rows = []
        for coll in topomodel.COLLS:
            for s in topomodel.SIZES:
                cells = [topomodel.lookup(tm, m["key"], n, coll, s) for n in ns]
                rows.append([coll, fmt_size(s)] + [model_cell(c) if c else "" for c in cells])
        md += [md_table(["coll", "size"] + [f"{n} ranks" for n in ns], rows), ""]
    md += goals_md(predicted_vs_published(tm))
    src = []
    for m in tm["machines"]:
        for k, v in m["sources"].items():
            if v and v.get("value") is not None:
                src.append([m["key"], k, str(v["value"]), v["source"]])
    for k, v in tm["common"].items():
        src.append(["all", k, json_value(v["value"]), v["source"]])
    md += ["Inputs (`tools/shaddr_bench/topology_links.json`; GB/s per direction):\n",
           md_table(["machine", "input", "value", "source"], src), ""]
    return md


def model_cell(row):
    """flat / hierarchical us, the model's pick in bold."""
    f = fmt_us(row["flat_us"])
    if row["hier_us"] is None:
        return f"{f} / — (flat)"
    h = fmt_us(row["hier_us"])
    return f"**{f}** / {h}" if row["pick"] == "flat" else f"{f} / **{h}**"


def json_value(v):
    return ", ".join(f"{k} {x}" for k, x in v.items()) if isinstance(v, dict) else str(v)


def report(doc, out_dir):
    n, limit, res = doc["ranks"], doc["copy_limit"], doc["contenders"]
    pick = {8, 4096, 65536, 1 << 20, 16 << 20, 64 << 20}
    md = ["# shaddr comparison report\n",
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
    md += calibration.report_md(doc.get("calibration"), doc.get("calibration_read"))
    md += ["## Goals\n",
          "Each goal checked against this run's numbers (2 ranks), for what a user gets: "
          "\"shaddr\" is the fastest **default** contender at that size (the interposer with "
          "no settings, `interposer-<mpi>`, and the patched MPICH's own selection, "
          "`mpich-patched-auto`), \"stock\" the fastest of Debian's MPICH, Debian's Open MPI "
          "and the patched MPICH with shaddr off. The forced configurations (a backend or an "
          "algorithm chosen by setting) follow as diagnostics. Buffer churn: see the churn "
          "tables below (cost per call, and what stayed mapped against the caps).\n"]
    md += goals_text(res, limit, n, "host", confirmation=doc.get("confirmation"))
    md += goals_md(against_shaddr_off(res, "host", doc.get("confirmation")))
    md += commcost.goals_md(doc.get("comm_cost"))
    md += alloccost.goals_md(doc.get("alloc_cost"))
    md += ["Diagnostics, the best of every shaddr configuration, forced ones included:\n"]
    md += goals_text(res, limit, n, "host, any shaddr configuration", side=is_shaddr)
    md += ["**The shared heap** (`heap`, [heap.md](../../docs/heap.md); the defaults include it, "
           "`interposer-heap-<mpi>` sets it explicitly, `mpich-patched-heap` is the patched "
           "MPICH's defaults with `libshaddr-heap.so` preloaded in the ranks): with "
           "`libshaddr-heap.so` preloaded, malloc'd buffers of `SHADDR_HEAP_MIN` (16 KiB) and "
           "more, and `MPI_Alloc_mem`, live in a per-process memfd that every node peer maps "
           "once, read-only (received over a unix socket: no ptrace rights, no module). A "
           "peer's heap address then translates by an offset into that mapping, so the "
           "single-copy algorithms read it by pointer, with no system call and no "
           "registration: this is the **native speed of the mapped single-copy algorithms** "
           "(the module's `segment`/`window` run the same algorithms, but here only under "
           "emulation). The benchmark's buffers are malloc'd, so they are in the heap from "
           "16 KiB; smaller messages go through the inner backend (`heap+cma`: `cma`) or the "
           "control block's slots.\n"]
    md += goals_text(res, limit, n, "host, shared heap",
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
        md += goals_text(vm["contenders"], vm["copy_limit"], n, where)
        md += goals_md(against_shaddr_off(vm["contenders"], where, vm.get("confirmation")))
        md += goals_text(vm["contenders"], vm["copy_limit"], n,
                         where + ", any shaddr configuration", side=is_shaddr)
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
    md += topology_model_md(doc.get("topology_model"))
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
