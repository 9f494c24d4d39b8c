# SPDX-License-Identifier: MIT
"""The benchmark's goals, judged on one run's numbers: "met" or "NOT met"."""
from .costs import COLLS, copy_bw, must_move
from .text import fmt_size, md_table

STOCK = {"mpich", "openmpi", "mpich-patched-off", "vm-mpich", "vm-openmpi"}


def is_shaddr(name):
    return name not in STOCK


# The contenders with the settings a user gets; each is also held against the same MPI with
# shaddr off.
DEFAULTS = {"interposer-mpich": "mpich", "interposer-openmpi": "openmpi",
            "mpich-patched-auto": "mpich-patched-off", "vm-interposer-mpich": "vm-mpich",
            "vm-interposer-openmpi": "vm-openmpi", "vm-mpich-patched-auto": "vm-mpich"}


def is_default(name):
    return name in DEFAULTS


def goals(res, limit, n, where, side=is_default):
    """The issue's goals, checked against this run: the best contender of `side` (the
    defaults; every shaddr configuration for the diagnostics) vs the best stock one."""
    def best(pred, coll):
        out = {}
        for k, v in res.items():
            if v.get("status") != "ok" or not pred(k):
                continue
            for r in v["passes"]["main"]["results"]:
                if r["coll"] == coll and (r["bytes"] not in out or r["t_max_us"] < out[r["bytes"]][1]):
                    out[r["bytes"]] = (k, r["t_max_us"])
        return out

    def sides(coll):  # (best shaddr, best stock) per size
        return best(side, coll), best(lambda k: not is_shaddr(k), coll)
    md = []
    if not any(side(k) and v.get("status") == "ok" for k, v in res.items()) or \
            not any(not is_shaddr(k) and v.get("status") == "ok" for k, v in res.items()):
        return [f"{where}: not judged (needs a shaddr and a stock contender that both ran).\n"]
    lines = []
    losses_all = []
    for coll in COLLS:
        sh, st = sides(coll)
        sizes = sorted(set(sh) & set(st))
        losses = [(s, st[s][1] / sh[s][1], st[s][0]) for s in sizes if sh[s][1] > st[s][1]]
        losses_all += losses
        lines.append([coll, str(len(sizes)), str(len(sizes) - len(losses)),
                      ", ".join(f"{fmt_size(s) if coll != 'barrier' else '—'}: {r:.2f} vs {c}"
                                for s, r, c in losses) or "—"])
    md += [f"**At least as fast as the best stock contender at every size** ({where}): "
           f"{'met' if not losses_all else 'NOT met'}. Best shaddr contender against best stock "
           "one per size; a loss lists stock time / shaddr time (below 1: shaddr slower) and "
           "which stock contender won.\n",
           md_table(["coll", "sizes", "as fast", "slower at"], lines), ""]
    big = []
    for coll, goal in (("bcast", None), ("allreduce", 1.5), ("allgather", 1.3), ("alltoall", 1.3)):
        sh, st = sides(coll)
        for s in sorted(x for x in set(sh) & set(st) if x >= 1 << 20):
            if goal is None:
                # The goal: within 1.25x of one cross-core copy of the message (what a
                # reader of data another core just wrote can reach); the all-core copy limit
                # is shown beside it.
                limit_us = must_move(coll, n, s) / copy_bw(limit, s, "all_core_Bps")
                text = f"{sh[s][1] / limit_us:.2f}x the copy limit"
                r, goal_text = sh[s][1] / limit_us, "<= 1.25x the copy limit"
                if "cross_core_Bps" in limit["results"][0]:
                    cross_us = s / copy_bw(limit, s, "cross_core_Bps")
                    r, goal_text = sh[s][1] / cross_us, "<= 1.25x a cross-core copy"
                    text = f"{r:.2f}x a cross-core copy of the message ({text})"
                big.append([coll, fmt_size(s), sh[s][0], text, goal_text,
                            "met" if r <= 1.25 else "NOT met"])
            else:
                r = st[s][1] / sh[s][1]
                big.append([coll, fmt_size(s), sh[s][0], f"{r:.2f}x faster than {st[s][0]}",
                            f">= {goal}x", "met" if r >= goal else "NOT met"])
    if big:
        md += [f"**At 1 MiB and above** ({where}):\n",
               md_table(["coll", "size", "best shaddr", "measured", "goal", "verdict"], big), ""]
    small = []
    for coll in ("bcast", "allreduce"):
        sh, st = sides(coll)
        for s in sorted(x for x in set(sh) & set(st) if x <= 256):
            small.append([coll, fmt_size(s), f"{sh[s][1]:.2f} ({sh[s][0]})",
                          f"{st[s][1]:.2f} ({st[s][0]})",
                          "met" if sh[s][1] <= st[s][1] else "NOT met"])
    if small:
        md += [f"**Latency up to 256 B** ({where}), us:\n",
               md_table(["coll", "size", "best shaddr", "best stock", "verdict"], small), ""]
    return md


def against_shaddr_off(res, where):
    """Each default contender against the same MPI library with shaddr off, size by size."""
    def times(k):
        v = res.get(k, {})
        if v.get("status") != "ok":
            return {}
        return {(r["coll"], r["bytes"]): r["t_max_us"] for r in v["passes"]["main"]["results"]}
    rows = []
    for d, off in DEFAULTS.items():
        mine, base = times(d), times(off)
        keys = sorted((k for k in set(mine) & set(base) if k[0] in COLLS),  # not pingpong
                      key=lambda k: (COLLS.index(k[0]), k[1]))
        if not keys:
            continue
        losses = [(c, s, base[(c, s)] / mine[(c, s)]) for c, s in keys if mine[(c, s)] > base[(c, s)]]
        # The same point-to-point code on both sides: how far two runs of it differ here
        pp = sorted(base[k] / mine[k] for k in set(mine) & set(base) if k[0] == "pingpong")
        noise = (f"{pp[len(pp) // 2]:.2f} ({pp[0]:.2f}-{pp[-1]:.2f})" if pp else "—")
        rows.append([d, off, str(len(keys)), str(len(keys) - len(losses)),
                     ", ".join(f"{c} {fmt_size(s) if c != 'barrier' else ''}: {r:.2f}"
                               for c, s, r in losses[:12]) + (" ..." if len(losses) > 12 else "")
                     or "—", noise])
    if not rows:
        return []
    return [f"**Never slower than the same MPI with shaddr off** ({where}): "
            f"{'met' if all(r[2] == r[3] for r in rows) else 'NOT met'}. A loss lists "
            "shaddr-off time / default time (below 1: the default is slower). The last column "
            "is this run's noise between the two: the same ratio for point-to-point ping-pong, "
            "whose code neither default changes (median, and range over its sizes).\n",
            md_table(["default contender", "same MPI, shaddr off", "points", "as fast",
                      "slower at", "ping-pong, same code"], rows), ""]

