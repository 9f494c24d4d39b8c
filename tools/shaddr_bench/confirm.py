# SPDX-License-Identifier: MIT
"""The confirmation pass of the goals that compare two contenders point by point: on a noisy
host one pass often shows a point lost that a direct rerun contradicts. Every point that a
judged contender lost beyond the noise to the same MPI with shaddr off
(goals.losses_beyond_noise()), and every point where the best default lost to the best stock
contender (goals.losses_vs_best_stock()), is measured again, alternating the two contenders
("contender" and its partner, "off"), REPS times each, within BUDGET_S seconds; the goals judge
by the best rerun of each side."""
import time

REPS = 5
BUDGET_S = 240


def plan(targets):
    """{(contender, off, coll): [sizes]} from losses_beyond_noise()'s [(contender, off, coll,
    bytes)]: one benchmark run per contender and collective covers its lost sizes."""
    out = {}
    for d, off, coll, s in targets:
        out.setdefault((d, off, coll), []).append(s)
    return {k: sorted(set(v)) for k, v in out.items()}


def sizes_arg(coll, sizes):
    """shaddr-bench's --sizes for @sizes of @coll (a Barrier moves no data: one run)."""
    if coll == "barrier":
        return "8"
    return f"{min(sizes)}:{max(sizes)}"


def run(targets, measure, reps=REPS, budget=BUDGET_S, clock=time.monotonic):
    """Measures @targets again: for each repetition and each (contender, off, coll) of plan(),
    measure(name, coll, sizes_arg) for the contender and its partner, the order swapped every
    repetition. measure() returns ({bytes: us}, None) or (None, why it failed). Stops starting
    runs once @budget seconds have passed. Returns the confirmation record: {points:
    [{contender, off, coll, bytes, default_us: [...], off_us: [...]}], reps, budget_s, seconds,
    gave_up (why not every rerun ran, or absent), errors: [...]}."""
    groups = plan(targets)
    points = {(d, off, c, s): {"contender": d, "off": off, "coll": c, "bytes": s,
                               "default_us": [], "off_us": []}
              for (d, off, c), sizes in groups.items() for s in sizes}
    errors, gave_up = [], None
    t0 = clock()
    for rep in range(reps):
        for (d, off, coll), sizes in groups.items():
            order = [(d, "default_us"), (off, "off_us")]
            for name, field in (order if rep % 2 == 0 else order[::-1]):
                if gave_up is None and clock() - t0 > budget:
                    gave_up = f"stopped in repetition {rep + 1} of {reps}"
                if gave_up:
                    continue
                times, why = measure(name, coll, sizes_arg(coll, sizes))
                if times is None:
                    errors.append(f"{name} {coll}: {why}")
                    continue
                for s in sizes:
                    t = times.get(0 if coll == "barrier" else s)
                    if t is not None:
                        points[(d, off, coll, s)][field].append(t)
    out = {"points": list(points.values()), "reps": reps, "budget_s": budget,
           "seconds": round(clock() - t0, 1), "errors": errors}
    if gave_up:
        short = [p for p in points.values() if not p["default_us"] or not p["off_us"]]
        out["gave_up"] = (f"{gave_up}; {len(short)} of {len(points)} points without a rerun "
                          "on both sides (judged by their first measurement)" if short else
                          f"{gave_up}; every point has a rerun on both sides")
    return out
