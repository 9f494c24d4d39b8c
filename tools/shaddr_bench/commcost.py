# SPDX-License-Identifier: MIT
"""What a communicator costs, stock and under the interposer's defaults (shaddr-run), on each
MPI: build/tests/interpose/comm_cost-<mpi> run alternately (stock, shaddr-run, shaddr-run,
stock, ...) and each side's medians taken. Judged: the loop of (MPI_Comm_dup, one 8-byte
MPI_Allreduce, MPI_Comm_free) within LOOP_GOAL x stock; stated: the set-up that the first
libshaddr collective (a 1 MiB MPI_Allreduce) pays on a fresh communicator."""
import os
import time
from statistics import median

from . import proc
from .text import md_table

LOOP_GOAL = 1.5
ITERATIONS = 300
SIDES = ("stock", "shaddr-run")

# comm_cost's record (its JSON line, rank 0): times in us, "wrong" when a result was wrong.
KEYS = ("ranks", "iterations", "loop_us", "dup_us", "new_first_us", "new_later_us", "set_up_us",
        "wrong")


def run_once(cmd, env, timeout):
    """One comm_cost run: its record (KEYS) with its seconds, or {error: why}."""
    t0 = time.time()
    p, rec, why = proc.run_for_record(cmd, env, timeout, "comm_cost", KEYS)
    if p is None:
        return {"error": why}
    rec["seconds"] = round(time.time() - t0, 1)
    if rec["wrong"] or p.returncode:
        rec["error"] = "wrong results" if rec["wrong"] else f"exit {p.returncode}"
    return rec


def measure(build, mpis, ranks, reps, launcher, say, timeout=60, budget=40):
    """comm_cost-<mpi> for each MPI of @mpis, stock and under build/tools/shaddr-run,
    alternating the two (the order swapped every repetition), @reps times each unless
    @budget seconds have passed (the first repetition always runs). Returns {mpi: {side:
    [run_once() records]} | {skipped: why}}, and the seconds it took."""
    run = os.path.join(build, "tools", "shaddr-run")
    out, cmds = {}, {}
    for m in mpis:
        exe = os.path.join(build, "tests", "interpose", f"comm_cost-{m}")
        if not os.access(exe, os.X_OK):
            out[m] = {"skipped": f"{exe} not built"}
        elif not os.access(run, os.X_OK):
            out[m] = {"skipped": f"{run} not built"}
        else:
            base = launcher(m, ranks)
            cmds[m] = {"stock": base + [exe, str(ITERATIONS)],
                       "shaddr-run": base + [run, exe, str(ITERATIONS)]}
            out[m] = {side: [] for side in SIDES}
    env = proc.mpi_env()
    t0 = time.time()
    for rep in range(reps):
        if rep and time.time() - t0 > budget:
            say(f"communicator cost: {rep} of {reps} repetitions within {budget} s")
            break
        for m, sides in cmds.items():
            for side in proc.alternate(rep, SIDES):
                rec = run_once(sides[side], env, timeout)
                out[m][side].append(rec)
                say(f"communicator cost, {m}, {side}: " +
                    (rec["error"] if "error" in rec else
                     f"{rec['loop_us']:.1f} us/iteration, 1 MiB Allreduce on a new group "
                     f"{rec['new_later_us']:.0f} us, once set up {rec['set_up_us']:.0f} us"))
    return {"mpis": out, "reps": reps, "iterations": ITERATIONS, "ranks": ranks,
            "seconds": round(time.time() - t0, 1), "commands": {m: {k: " ".join(v) for k, v in
                                                                     c.items()}
                                                                 for m, c in cmds.items()}}


def summarise(sides):
    """One MPI's runs ({side: [records]}): per side the best and the median of each time over
    its good runs, and its failures; the loop's ratio (of the bests) and its verdict against
    LOOP_GOAL. The best judges: on 2 busy cores a run whose rank lost its core waits a time
    slice per message (stock MPICH's loop read 3.8, 7,037 and 18,196 us in three runs of one
    minute), and that noise only adds time. A failed shaddr-run run (killed, exit, no line,
    wrong results) is a NOT met; a side without a good run leaves it not judged."""
    out = {}
    for side in SIDES:
        good = [r for r in sides.get(side, []) if "error" not in r]
        s = {"runs": len(sides.get(side, [])), "good": len(good),
             "errors": [r["error"] for r in sides.get(side, []) if "error" in r]}
        if good:
            for k in ("loop_us", "dup_us", "new_first_us", "new_later_us", "set_up_us"):
                s[k] = min(r[k] for r in good)
                s[k + "_median"] = median([r[k] for r in good])
            # What the first collective on a communicator of a new group costs on top of the
            # same call once set up.
            s["set_up_cost_us"] = s["new_later_us"] - s["set_up_us"]
        out[side] = s
    st, sh = out["stock"], out["shaddr-run"]
    if sh["errors"]:
        out["verdict"] = "NOT met"
    elif not st["good"] or not sh["good"]:
        out["verdict"] = "not judged"
    if st["good"] and sh["good"]:
        out["ratio"] = sh["loop_us"] / st["loop_us"]
        out.setdefault("verdict", "met" if out["ratio"] <= LOOP_GOAL else "NOT met")
    return out


def ms(us):
    return f"{us / 1e3:.2f}"


def goals_md(cc, where="host"):
    """The Goals' lines: the loop judged per MPI, the first collective's set-up stated."""
    if not cc or not cc.get("mpis"):
        return [f"**Communicator creation loop within {LOOP_GOAL}x of stock** ({where}): not "
                f"judged ({(cc or {}).get('skipped', 'not measured')}).\n"]
    rows, setup, verdicts = [], [], []
    for m, sides in cc["mpis"].items():
        if "skipped" in sides:
            rows.append([m, "—", "—", "—", sides["skipped"], "not judged"])
            verdicts.append("not judged")
            continue
        s = summarise(sides)
        st, sh = s["stock"], s["shaddr-run"]
        verdicts.append(s["verdict"])
        why = "; ".join(f"{side}: {', '.join(s[side]['errors'])}" for side in SIDES
                        if s[side]["errors"])
        def loop(x):
            return (f"{x['loop_us']:.1f} ({x['loop_us_median']:.1f})" if x["good"] else "—")
        rows.append([m, loop(st), loop(sh), f"{s['ratio']:.2f}x" if "ratio" in s else "—",
                     why or "—", s["verdict"]])
        for side in SIDES:
            x = s[side]
            if x["good"]:
                cost = (ms(x["set_up_cost_us"]) if x["set_up_cost_us"] > 0 else
                        "none above the noise")
                setup.append([m, side, cost, ms(x["new_later_us"]), ms(x["new_first_us"]),
                              ms(x["set_up_us"]), ms(x["dup_us"])])
    overall = proc.overall(verdicts)
    md = [f"**Communicator creation loop within {LOOP_GOAL}x of stock** ({where}): {overall}. "
          f"A loop of ({cc['iterations']} x `MPI_Comm_dup` of `MPI_COMM_WORLD`, one 8-byte "
          f"`MPI_Allreduce` on it, `MPI_Comm_free`), {cc['ranks']} ranks, us per iteration: "
          f"`tests/interpose/comm_cost` stock and under `shaddr-run` (the interposer's "
          f"defaults), alternating, {cc['reps']} runs each (section "
          "[Communicators](#communicators)); the best run of each side judges, the median "
          "follows in parentheses (a rank that loses its core on this busy host waits a time "
          "slice per message: noise only adds time). A failed run under `shaddr-run` (killed, "
          "wrong results) fails the goal.\n",
          md_table(["MPI", "stock, best (median)", "shaddr-run, best (median)",
                    "shaddr-run / stock", "failed runs", "verdict"], rows), ""]
    if setup:
        md += ["**The first collective's set-up on a fresh communicator** (stated): a 1 MiB "
               "`MPI_Allreduce` (libshaddr's under `shaddr-run`) on a communicator of a new "
               "group (the ranks reversed, by `MPI_Comm_split`; freed each time), against the "
               "same call once set up; ms, the best over the runs (a run's own figures are "
               "means: of its 19 later new groups, its 20 dups, its 40 calls once set up). "
               "\"set-up\" is the difference; under `shaddr-run` it is the interposer's "
               "set-up of the communicator (node "
               "communicator, backend, heap connections), stock the MPI's own lazy set-up. "
               "\"first ever\" is the first such communicator of the run; a dup of "
               "`MPI_COMM_WORLD` reuses `MPI_COMM_WORLD`'s set-up.\n",
               md_table(["MPI", "", "set-up", "first call, new group", "first ever",
                         "once set up", "first call, dup of WORLD"], setup), ""]
    return md


def section_md(cc):
    """The report's section: every run's numbers and the commands."""
    md = ["## Communicators\n"]
    if not cc or not cc.get("mpis"):
        return md + [f"Not measured: {(cc or {}).get('skipped', 'not requested')}.\n"]
    md.append(f"`tests/interpose/comm_cost` ({cc['iterations']} iterations, {cc['ranks']} "
              f"ranks), each MPI stock and under `shaddr-run`, alternating (the order swapped "
              f"each repetition; {cc['seconds']:.0f} s in all). Per run: the loop in us per "
              "iteration; the 1 MiB `MPI_Allreduce` in us: first on a dup of `MPI_COMM_WORLD`, "
              "first on a communicator of a new group (the first ever, then the mean of the "
              "later ones), once set up.\n")
    rows = []
    for m, sides in cc["mpis"].items():
        if "skipped" in sides:
            rows.append([m, "—", "—", f"skipped: {sides['skipped']}", "", "", "", ""])
            continue
        for side in SIDES:
            for i, r in enumerate(sides[side], 1):
                if "loop_us" not in r:
                    rows.append([m, side, str(i), r["error"], "", "", "", ""])
                    continue
                rows.append([m, side, str(i),
                             f"{r['loop_us']:.1f}" + (f" ({r['error']})" if "error" in r
                                                      else ""),
                             f"{r['dup_us']:.0f}", f"{r['new_first_us']:.0f}",
                             f"{r['new_later_us']:.0f}", f"{r['set_up_us']:.0f}"])
    md += [md_table(["MPI", "", "run", "loop, us/iteration", "dup of WORLD", "new group, first",
                     "new group, later", "once set up"], rows), ""]
    for m, c in cc.get("commands", {}).items():
        md += [f"- {m}: `{c['shaddr-run']}` (stock: without `shaddr-run`)"]
    return md + [""]
