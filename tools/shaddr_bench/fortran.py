# SPDX-License-Identifier: MIT
"""Fortran's bindings against C: build/tools/shaddr-fortran-bench-<mpi>-<binding> times a 1 MiB
MPI_Allreduce (DOUBLE PRECISION, MPI_SUM) and MPI_Bcast from Fortran and the same calls from C
in the same process, stock and under shaddr-run, the two sides alternating. Judged: under
shaddr-run, each Fortran call within GOAL x the same call from C."""
import os

from . import proc
from .text import md_table

GOAL = 1.10
BINDINGS = ("mpifh", "mpi", "f08")
SIDES = ("stock", "shaddr-run")
# fortran_bench's record (its JSON line, rank 0): times in us, "ok" false when a result was
# wrong.
KEYS = ("binding", "ar_c", "ar_f", "bc_c", "bc_f", "ok")


def run_once(cmd, env, timeout):
    """One run: {binding, ar_c, ar_f, bc_c, bc_f (us)} or {error: why}."""
    p, rec, why = proc.run_for_record(cmd, env, timeout, "fortran_bench", KEYS)
    if p is None:
        return {"error": why}
    out = {k: float(rec[k]) for k in ("ar_c", "ar_f", "bc_c", "bc_f")}
    out["binding"] = rec["binding"]
    if not rec["ok"] or p.returncode:
        out["error"] = "wrong results" if not rec["ok"] else f"exit {p.returncode}"
    return out


def measure(build, mpis, ranks, reps, launcher, say, timeout=120):
    """Every binding of every MPI of @mpis, stock and under shaddr-run, alternating, @reps
    times each: {mpi: {binding: {side: [run_once() records]} | {skipped: why}}}."""
    run = os.path.join(build, "tools", "shaddr-run")
    env = proc.mpi_env()
    out = {}
    for m in mpis:
        out[m] = {}
        for b in BINDINGS:
            exe = os.path.join(build, "tools", f"shaddr-fortran-bench-{m}-{b}")
            if not os.access(exe, os.X_OK) or not os.access(run, os.X_OK):
                out[m][b] = {"skipped": f"{exe} or {run} not built"}
                continue
            cmds = {"stock": launcher(m, ranks) + [exe],
                    "shaddr-run": launcher(m, ranks) + [run, exe]}
            out[m][b] = {side: [] for side in SIDES}
            for rep in range(reps):
                for side in proc.alternate(rep, SIDES):
                    rec = run_once(cmds[side], env, timeout)
                    out[m][b][side].append(rec)
                    say(f"Fortran {m} {b}, {side}: " + (rec["error"] if "error" in rec else
                        f"Allreduce C {rec['ar_c']:.0f} / Fortran {rec['ar_f']:.0f} us, Bcast C "
                        f"{rec['bc_c']:.0f} / Fortran {rec['bc_f']:.0f} us"))
    return {"mpis": out, "reps": reps, "ranks": ranks}


def best(recs, key):
    good = [r[key] for r in recs if "error" not in r]
    return min(good) if good else None


def section_md(fb):
    """The report's section: per MPI and binding, each side's best of C and Fortran, and the
    verdict: under shaddr-run, Fortran within GOAL x C for both calls."""
    md = ["## Fortran bindings\n"]
    if not fb or not fb.get("mpis"):
        return md + [f"Not measured: {(fb or {}).get('skipped', 'not requested')}.\n"]
    md.append(f"`tools/bench/fortran_bench.F90`, {fb['ranks']} ranks: a 1 MiB `MPI_Allreduce` "
              "(`DOUBLE PRECISION`, `MPI_SUM`) and `MPI_Bcast` from Fortran through each "
              "binding, against the same calls from C in the same process and buffers (rounds of "
              f"20 calls alternating C and Fortran, the best of 7 rounds); {fb['reps']} run(s) per "
              "side, stock and under `shaddr-run` alternating, the best shown, in us. Goal: "
              f"under `shaddr-run`, Fortran within {GOAL:.2f}x of C.\n")
    rows = []
    for m, bindings in fb["mpis"].items():
        for b, sides in bindings.items():
            if "skipped" in sides:
                rows.append([m, b, "—", "—", "—", "—", sides["skipped"]])
                continue
            v = {side: {k: best(sides[side], k) for k in ("ar_c", "ar_f", "bc_c", "bc_f")}
                 for side in SIDES}
            sh = v["shaddr-run"]
            # Judged on shaddr-run's runs (a failed stock run leaves only its column empty).
            errs = [r["error"] for r in sides["shaddr-run"] if "error" in r]
            if errs or None in sh.values():
                verdict = "NOT met: " + "; ".join(errs) if errs else "not judged"
            else:
                worst = max(sh["ar_f"] / sh["ar_c"], sh["bc_f"] / sh["bc_c"])
                verdict = f"{'met' if worst <= GOAL else 'NOT met'} ({worst:.2f}x)"
            def pair(x, a, b):
                return "—" if x[a] is None else f"{x[a]:.0f} / {x[b]:.0f}"
            rows.append([m, b, pair(v["stock"], "ar_c", "ar_f"), pair(sh, "ar_c", "ar_f"),
                         pair(v["stock"], "bc_c", "bc_f"), pair(sh, "bc_c", "bc_f"), verdict])
    return md + [md_table(["MPI", "binding", "Allreduce stock, C / Fortran",
                           "Allreduce shaddr-run, C / Fortran", "Bcast stock, C / Fortran",
                           "Bcast shaddr-run, C / Fortran", "Fortran within goal"], rows), ""]
