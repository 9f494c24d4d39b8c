# SPDX-License-Identifier: MIT
"""The benchmark's goals, judged on one run's numbers: a list of Goal results (what was
measured, against what, met or not), which report.py renders."""
from dataclasses import dataclass, field
from statistics import median
from typing import Optional

from .costs import COLLS, copy_bw, must_move
from .topomodel import lookup
from .text import fmt_size


@dataclass
class Point:
    """One point a goal is judged at: @value measured against @threshold (@at_most: met when
    value <= threshold, else when value >= threshold)."""
    label: str
    value: float
    threshold: float
    met: bool
    at_most: bool = False


@dataclass
class Goal:
    """One goal's result in one part of the run (@where). @met: None when not judged;
    @verdict: the report's word for it ("" where only the points have one); @value and
    @threshold: the goal's own number where it has one (points lost, allowed); @how: how it was
    judged; @columns and @rows: the table of every point, as the report shows it; @points: the
    points judged one by one."""
    name: str
    where: str
    met: Optional[bool]
    verdict: str = ""
    value: Optional[float] = None
    threshold: Optional[float] = None
    how: str = ""
    unit: str = ""
    columns: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    points: list = field(default_factory=list)


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


# What "never slower than the same MPI with shaddr off" judges: every default, and the patched
# MPICH's defaults with the shared heap preloaded in the ranks (`mpich-patched-heap`), which a
# user gets by adding the preload. Not a default for the other goals: it needs that step.
AGAINST_OFF = dict(DEFAULTS, **{"mpich-patched-heap": "mpich-patched-off"})


def best_per_size(res, pred, coll):
    """{bytes: (contender, us)}: per size of @coll, the fastest contender that @pred accepts."""
    out = {}
    for k, v in res.items():
        if v.get("status") != "ok" or not pred(k):
            continue
        for r in v["passes"]["main"]["results"]:
            if r["coll"] == coll and (r["bytes"] not in out or r["t_max_us"] < out[r["bytes"]][1]):
                out[r["bytes"]] = (k, r["t_max_us"])
    return out


def is_stock(name):
    return not is_shaddr(name)


# Which defaults the confirmation pass measures again at a point they lost: each within this
# factor of the fastest default's time there. The goal takes the fastest default, and a rerun
# of the main pass's fastest alone would miss another that was as fast within one pass's noise.
RERUN_DEFAULTS_WITHIN = 1.25


def losses_vs_best_stock(res):
    """[(default contender, stock contender, coll, bytes)]: every point where the fastest
    default was slower than the fastest stock contender in the main passes (the goal "at least
    as fast as the best stock contender" and its latency table), for the confirmation pass to
    measure again, each default within RERUN_DEFAULTS_WITHIN of the fastest alternating with
    that stock contender."""
    out = []
    times = {d: main_times(res, d) for d in DEFAULTS}
    for coll in COLLS:
        sh, st = best_per_size(res, is_default, coll), best_per_size(res, is_stock, coll)
        for s in sorted(set(sh) & set(st)):
            if sh[s][1] <= st[s][1]:
                continue
            near = [d for d in DEFAULTS
                    if times[d].get((coll, s), float("inf")) <= sh[s][1] * RERUN_DEFAULTS_WITHIN]
            out += [(d, st[s][0], coll, s) for d in sorted(near, key=lambda d: d != sh[s][0])]
    return out


def own_noise_floor(res, d):
    """How far two runs of the same code differ in this run, as the "never slower" goal
    measures it for contender @d: the lowest ping-pong ratio against its shaddr-off partner
    (1.0, nothing excused, when it has none)."""
    off = AGAINST_OFF.get(d)
    if off is None:
        return 1.0
    mine, base = main_times(res, d), main_times(res, off)
    return judge_pair(mine, base)["floor"] if mine and base else 1.0


# The most a re-measured point may lose to the best stock contender and still count as "as
# fast": several alternating reruns take out most of a single pass's noise, so a run's
# ping-pong floor (down to 0.3 on a bad run) would excuse real losses.
REMEASURED_TOLERANCE = 0.9


def excused_down_to(res, d):
    """The lowest re-measured ratio (stock / default) that counts as as fast for default @d:
    its own noise floor, but never below REMEASURED_TOLERANCE."""
    return max(own_noise_floor(res, d), REMEASURED_TOLERANCE)


def reconfirm(res, coll, sh, st, s, confirmation):
    """A point where the best default (@sh: {bytes: (name, us)}) lost to the best stock
    contender (@st) in the main passes, measured again by the confirmation pass (every default
    it re-measured there against that stock contender): (ratio stock / default of the reruns
    (rerun_ratio()), of the default that came closest, reruns per side, still a loss: the
    ratio below excused_down_to() of that default), or None when not re-measured on both
    sides. Each default is judged by its own reruns against the stock contender's that
    alternated with them, the same number: the stock side's reruns of every default pooled
    against one default's would be more launches of another pairing (a default the pass
    measured further, because it stays slower, adds up to MAX_REPS of them)."""
    points = [p for d in DEFAULTS
              for p in [confirmation_points(confirmation, d, st[s][0]).get((coll, s))]
              if p and p.get("default_us") and p.get("off_us")]
    if not points:
        return None
    r, best = max(((rerun_ratio(p["off_us"], p["default_us"]), p) for p in points),
                  key=lambda x: x[0])
    return (r, (len(best["default_us"]), len(best["off_us"])),
            r < excused_down_to(res, best["contender"]))


def goals(res, limit, n, where, side=is_default, confirmation=None):
    """The issue's goals, checked against this run: the best contender of `side` (the
    defaults; every shaddr configuration for the diagnostics) vs the best stock one. A point
    the defaults lost in the main passes and that the confirmation pass (@confirmation)
    measured again is judged by the reruns (rerun_ratio()), within the default's own noise
    (own_noise_floor())."""
    def sides(coll):  # (best shaddr, best stock) per size
        return best_per_size(res, side, coll), best_per_size(res, is_stock, coll)

    def again(coll, sh, st, s):
        return reconfirm(res, coll, sh, st, s, confirmation) if confirmation else None
    out = []
    if not any(side(k) and v.get("status") == "ok" for k, v in res.items()) or \
            not any(is_stock(k) and v.get("status") == "ok" for k, v in res.items()):
        return [Goal("At least as fast as the best stock contender at every size", where, None,
                     "not judged", how="needs a shaddr and a stock contender that both ran")]
    lines = []
    losses_all = []
    remeasured = 0
    for coll in COLLS:
        sh, st = sides(coll)
        sizes = sorted(set(sh) & set(st))
        losses, notes = [], []
        for s in (x for x in sizes if sh[x][1] > st[x][1]):
            label = fmt_size(s) if coll != "barrier" else "—"
            a = again(coll, sh, st, s)
            if a is not None:
                remeasured += 1
                notes.append(f"{label}: {st[s][1] / sh[s][1]:.2f} → {a[0]:.2f} "
                             f"({a[1][0]}+{a[1][1]})")
            if a is None or a[2]:
                losses.append((label, a[0] if a else st[s][1] / sh[s][1], st[s][0], a is not None))
        losses_all += losses
        row = [coll, str(len(sizes)), str(len(sizes) - len(losses)),
               ", ".join(f"{label}: {r:.2f} vs {c}" + (" (confirmed)" if conf else "")
                         for label, r, c, conf in losses) or "—"]
        lines.append(row + [", ".join(notes) or "—"] if confirmation else row)
    how = ""
    if confirmation:
        how = (f" The points the defaults lost were measured again ({remeasured} re-measured), "
               "each default within "
               f"{RERUN_DEFAULTS_WITHIN}x of the best one there alternating with the best stock "
               "contender, the same benchmark binary, and are judged by the reruns (the median of "
               "every pairwise ratio of the two sides' reruns; of the default that came "
               "closest): a loss stands "
               "below the default's own noise floor (its ping-pong against the same MPI with "
               f"shaddr off), and below {REMEASURED_TOLERANCE} whatever the noise (column "
               "\"re-measured\": the first ratio → the confirmed one, and the reruns per side)."
               if remeasured else
               " No point was measured again.")
    out.append(Goal("At least as fast as the best stock contender at every size", where,
                    not losses_all, "met" if not losses_all else "NOT met",
                    value=len(losses_all), threshold=0,
                    how="Best shaddr contender against best stock one per size; a loss lists "
                    "stock time / shaddr time (below 1: shaddr slower) and which stock "
                    "contender won." + how,
                    columns=["coll", "sizes", "as fast", "slower at"]
                    + (["re-measured"] if confirmation else []), rows=lines))
    big, big_points = [], []
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
                big_points.append(Point(f"{coll} {fmt_size(s)}", r, 1.25, r <= 1.25, True))
            else:
                r = st[s][1] / sh[s][1]
                big.append([coll, fmt_size(s), sh[s][0], f"{r:.2f}x faster than {st[s][0]}",
                            f">= {goal}x", "met" if r >= goal else "NOT met"])
                big_points.append(Point(f"{coll} {fmt_size(s)}", r, goal, r >= goal))
    if big:
        out.append(Goal("At 1 MiB and above", where, all(p.met for p in big_points),
                        columns=["coll", "size", "best shaddr", "measured", "goal", "verdict"],
                        rows=big, points=big_points))
    small, small_points = [], []
    for coll in ("bcast", "allreduce"):
        sh, st = sides(coll)
        for s in sorted(x for x in set(sh) & set(st) if x <= 256):
            verdict = "met"
            if sh[s][1] > st[s][1]:
                a = again(coll, sh, st, s)
                verdict = ("NOT met" if a is None else
                           f"NOT met (confirmed: {a[0]:.2f})" if a[2] else
                           f"met (re-measured: {a[0]:.2f}, {a[1][0]}+{a[1][1]})")
            small.append([coll, fmt_size(s), f"{sh[s][1]:.2f} ({sh[s][0]})",
                          f"{st[s][1]:.2f} ({st[s][0]})", verdict])
            small_points.append(Point(f"{coll} {fmt_size(s)}", sh[s][1], st[s][1],
                                      verdict.startswith("met"), True))
    if small:
        out.append(Goal("Latency up to 256 B", where, all(p.met for p in small_points),
                        unit="us", columns=["coll", "size", "best shaddr", "best stock",
                                            "verdict"], rows=small, points=small_points))
    return out


# Below this lowest ping-pong ratio the run cannot judge "never slower": its two runs of the
# same code were more than 2x apart somewhere (a machine busy with other work).
JUDGEABLE_FLOOR = 0.5


def noise_floor(pingpong_ratios):
    """The lowest shaddr-off / default time ratio this run's noise explains: the lowest ratio of
    the ping-pong, whose code is the same on both sides (1.0 without a ping-pong, or when it
    never went below 1)."""
    return min([1.0] + list(pingpong_ratios))


def judge_pair(mine, base):
    """One contender's times against the same MPI with shaddr off ({(coll, bytes): us} each),
    within the noise of their ping-pong: {keys, ratio, floor, slower, losses, pingpong}."""
    keys = sorted((k for k in set(mine) & set(base) if k[0] in COLLS),  # not pingpong
                  key=lambda k: (COLLS.index(k[0]), k[1]))
    # The same point-to-point code on both sides: how far two runs of it differ here
    pp = sorted(base[k] / mine[k] for k in set(mine) & set(base) if k[0] == "pingpong")
    floor = noise_floor(pp)
    ratio = {k: base[k] / mine[k] for k in keys}
    slower = [k for k in keys if mine[k] > base[k]]
    return {"keys": keys, "ratio": ratio, "floor": floor, "slower": slower,
            "losses": [k for k in slower if ratio[k] < floor], "pingpong": pp}


def main_times(res, k):
    """{(coll, bytes): us} of contender @k's main pass, {} when it did not run."""
    v = res.get(k, {})
    if v.get("status") != "ok":
        return {}
    return {(r["coll"], r["bytes"]): r["t_max_us"] for r in v["passes"]["main"]["results"]}


def losses_beyond_noise(res, pairs=None):
    """[(contender, its shaddr-off partner, coll, bytes)]: every point that a judged contender
    (AGAINST_OFF) lost beyond the noise in a run not too noisy to judge, for the confirmation
    pass to measure again."""
    out = []
    for d, off in (pairs or AGAINST_OFF).items():
        mine, base = main_times(res, d), main_times(res, off)
        if not mine or not base:
            continue
        j = judge_pair(mine, base)
        if j["floor"] >= JUDGEABLE_FLOOR:
            out += [(d, off, c, s) for c, s in j["losses"]]
    return out


def rerun_ratio(partner_us, contender_us):
    """How much faster than @contender_us its partner's alternating reruns @partner_us (us,
    neither empty) say it is: the median of every pairwise ratio partner / contender (the
    Hodges-Lehmann estimate), below 1 when the contender is slower. Neither a rare fast
    launch of one side, as the best of each side would be, nor launches split between two
    per-launch states, as the medians of each side would be, moves it (measured in
    confirm.py's docstring)."""
    return median([o / c for o in partner_us for c in contender_us])


def apply_confirmation(mine, base, points):
    """The times to judge by: @mine and @base ({(coll, bytes): us}) with each point of
    @points ({(coll, bytes): {"default_us": [...], "off_us": [...]}}, the confirmation pass's
    alternating reruns) judged by them: the contender's time is the median of its reruns, its
    partner's that times rerun_ratio() of the two sides' reruns, so that their ratio is the
    reruns' verdict. A point without a rerun on both sides keeps its first measurement.
    Returns (mine, base, notes), notes per point: {first, confirmed (ratios shaddr-off /
    contender; confirmed None when not re-measured), reruns: (the contender's, shaddr
    off's)}."""
    mine, base, notes = dict(mine), dict(base), {}
    for k, p in points.items():
        if k not in mine or k not in base:
            continue
        first = base[k] / mine[k]
        d, o = p.get("default_us") or [], p.get("off_us") or []
        if not d or not o:
            notes[k] = {"first": first, "confirmed": None, "reruns": (len(d), len(o))}
            continue
        mine[k] = median(d)
        base[k] = mine[k] * rerun_ratio(o, d)
        notes[k] = {"first": first, "confirmed": base[k] / mine[k], "reruns": (len(d), len(o))}
    return mine, base, notes


def confirmation_points(confirmation, d, partner):
    """The confirmation pass's points of contender @d against @partner: {(coll, bytes): point}."""
    return {(p["coll"], p["bytes"]): p for p in (confirmation or {}).get("points", [])
            if p["contender"] == d and p["off"] == partner}


def against_shaddr_off(res, where, confirmation=None, pairs=None):
    """Each judged contender (AGAINST_OFF: the defaults, and the patched MPICH with the heap
    preloaded) against the same MPI library with shaddr off, size by size, judged within this
    run's noise: a point loses when shaddr-off time / contender time falls below the lowest
    the two runs' ping-pong (the same code) reached (noise_floor()). The points that lost in
    the main passes and were measured again by the confirmation pass (@confirmation,
    judge.py's confirm_losses()) are judged by those reruns (rerun_ratio())."""
    rows = []
    verdicts = []
    for d, off in (pairs or AGAINST_OFF).items():
        if d not in res and off not in res:
            continue  # not a contender of this part (host or module)
        mine, base = main_times(res, d), main_times(res, off)
        if not mine or not base:
            why = "; ".join(f"{k} {res[k].get('status')}" + (f" ({res[k]['reason']})"
                                                             if res[k].get("reason") else "")
                            for k in (d, off) if k in res and res[k].get("status") != "ok")
            rows.append([d, off, "—", "—", "—", why or "not run", "—", "—", "not judged"])
            verdicts.append("not judged")
            continue
        first = judge_pair(mine, base)
        mine, base, notes = apply_confirmation(mine, base,
                                                confirmation_points(confirmation, d, off))
        j = judge_pair(mine, base)
        # The noise stays the main passes' (the ping-pong is not measured again).
        floor, keys, ratio, slower, losses = (first["floor"], j["keys"], j["ratio"],
                                              j["slower"], [k for k in j["slower"]
                                                            if j["ratio"][k] < first["floor"]])
        pp = first["pingpong"]
        noise = (f"{pp[len(pp) // 2]:.2f} ({pp[0]:.2f}-{pp[-1]:.2f})" if pp else "—")
        too_noisy = floor < JUDGEABLE_FLOOR
        if too_noisy:
            # The points slower than the default at all, for the record; no verdict.
            losses = slower
        verdict = ("not judged" if too_noisy or not keys else "NOT met" if losses else "met")
        verdicts.append(verdict)

        def point(c, s):
            return f"{c} {fmt_size(s) if c != 'barrier' else ''}"
        listed = ", ".join(f"{point(c, s)}: {ratio[(c, s)]:.2f}"
                           + (" (confirmed)" if (notes.get((c, s)) or {}).get("confirmed")
                              else "")
                           for c, s in losses[:12]) + (" ..." if len(losses) > 12 else "")
        if too_noisy:
            listed = (f"too noisy to judge (the ping-pong down to {floor:.2f}); slower at all: "
                      + (listed or "—"))
        again = ", ".join(f"{point(c, s)}: {n['first']:.2f} → " +
                          (f"{n['confirmed']:.2f} ({n['reruns'][0]}+{n['reruns'][1]})"
                           if n["confirmed"] is not None else "not re-measured")
                          for (c, s), n in notes.items())
        rows.append([d, off, str(len(keys)), str(len(keys) - len(slower)),
                     "—" if too_noisy else str(len(keys) - len(losses)), listed or "—", noise,
                     again or "—", verdict])
    if not rows:
        return []
    unjudged = [r[0] for r in rows if r[-1] == "not judged"]
    overall = ("NOT met" if "NOT met" in verdicts else "met" if not unjudged else
               "not judged" if len(unjudged) == len(rows) else
               "met where judged; not judged for " + ", ".join(unjudged))
    conf = confirmation or {}
    how = ""
    if conf.get("points"):
        how = (f" The points that lost beyond the noise in the main passes were measured again "
               f"({len(conf['points'])} point{'s' if len(conf['points']) != 1 else ''}, "
               f"{conf.get('seconds', 0):.0f} s), alternating "
               "the contender and its shaddr-off partner with the same benchmark binary, and are "
               "judged by the median of every pairwise ratio of the two sides' reruns; "
               f"a point still lost after {conf.get('reps', 0)} reruns per side was measured "
               f"again up to {conf.get('max_reps', conf.get('reps', 0))} times per side "
               "(column \"re-measured\": the first ratio → the confirmed one, and the reruns "
               "per side)."
               + (f" The confirmation pass stopped at its time budget "
                  f"({conf.get('budget_s', 0):.0f} s): {conf['gave_up']}." if conf.get("gave_up")
                  else "")
               + (f" Reruns that failed (not counted): {'; '.join(conf['errors'])}."
                  if conf.get("errors") else ""))
    elif conf.get("skipped"):
        how = f" No confirmation pass: {conf['skipped']}."
    elif "points" in conf:
        how = " No point lost beyond the noise in the main passes: nothing to measure again."
    lost = [r for r in rows if r[-1] == "NOT met"]
    return [Goal(
        "Never slower than the same MPI with shaddr off", where,
        None if overall == "not judged" else overall != "NOT met", overall,
        value=len(lost), threshold=0,
        how="Judged within this run's noise: a point loses when shaddr-off time / contender "
            "time falls below the lowest the ping-pong reached, whose code neither side "
            "changes (column \"ping-pong\": median, and range over its sizes); \"as fast\" "
            "counts the points not slower at all. A loss lists that ratio (below 1: the "
            f"contender is slower). A run whose ping-pong went below {JUDGEABLE_FLOOR} (the "
            "same code more than 2x apart) judges nothing. Judged: each default, and the "
            "patched MPICH's defaults with the shared heap preloaded (`mpich-patched-heap`)."
            + how,
        columns=["contender", "same MPI, shaddr off", "points", "as fast", "within noise",
                 "slower beyond the noise at", "ping-pong, same code", "re-measured", "verdict"],
        rows=rows)]


def predicted_vs_published(tm):
    """The topology model's predictions (topomodel.predict_all(): a model, not a measurement)
    at the points where another library published a figure, beside that figure: one Goal, not
    judged (a model's number does not meet or miss a goal), or [] without a model."""
    if not tm or tm.get("error") or not tm.get("published"):
        return []
    rows = []
    for p in tm["published"]:
        row = (lookup(tm, p["machine"], p["ranks"], p["coll"], p["bytes"])
               if p.get("ranks") and p.get("bytes") else None)
        point = (f"{p['coll']} {fmt_size(p['bytes'])}, {p['ranks']} ranks, {p['machine']}"
                 if row else p["machine"])
        published = (f"{p['us']:g} ({p['algorithm']})" if p.get("us") is not None
                     else "none published")
        if row is None:
            rows.append([p["what"], point, published, "—", "—", "—", p["source"]])
            continue
        model = {"flat": row["flat_us"], "hierarchical": row["hier_us"]}
        same = model.get(p.get("algorithm"))
        rows.append([p["what"], point, published,
                     f"{row['flat_us']:.3g} ({row['flat_by']})",
                     f"{row['hier_us']:.3g} ({row['hier_by']})" if row["hier_us"] else "—",
                     f"{p['us'] / same:.2f}" if same and p.get("us") else "—", p["source"]])
    return [Goal("Predicted where it cannot be measured, beside published figures",
                 "model, not measured", None, "not judged (a model)",
                 how="The model's flat and hierarchical times (us, and what bounds each) at the "
                     "points another library published a time for; the ratio is the published "
                     "time over the model's time for the same algorithm (above 1: the model is "
                     "more optimistic than that library measured, below 1: more pessimistic).",
                 columns=["published", "point", "published us (algorithm)", "model flat",
                          "model hierarchical", "published / model", "source"],
                 rows=rows)]
