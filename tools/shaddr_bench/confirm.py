# SPDX-License-Identifier: MIT
"""The confirmation pass of the goals that compare two contenders point by point: on a noisy
host one pass often shows a point lost that a direct rerun contradicts. Every point that a
judged contender lost beyond the noise to the same MPI with shaddr off
(goals.losses_beyond_noise()), and every point where the best default lost to the best stock
contender (goals.losses_vs_best_stock()), is measured again, alternating the two contenders
("contender" and its partner, "off"), REPS times each, within BUDGET_S seconds; the goals
judge by the median of every pairwise ratio of the two sides' reruns (goals.rerun_ratio()).

A launch's state moves a short call's time by more than the differences judged, and in two
ways. Rooted calls of a few KiB run in one of two states per launch, a slow one about three
times the fast one, with shaddr or without. And a few launches land in a rare fast state.
The best of each side then says which side drew a rare launch, and the medians of the two
sides how the two states fell; the median of every pairwise ratio is the least moved by
either, which is why the goals judge by it. With few launches per side it still reads a loss
now and then where there is none, so a point whose reruns still say the contender is slower
after REPS gets more, up to MAX_REPS each side, the same number on both."""
import time

from .goals import rerun_ratio

REPS = 5
MAX_REPS = 15
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


def undecided(point):
    """True while @point's reruns say the contender is slower than its partner (rerun_ratio()):
    what MAX_REPS measures further (not a point whose reruns failed on a side: they would
    again)."""
    d, o = point["default_us"], point["off_us"]
    return bool(d and o) and rerun_ratio(o, d) < 1


def run(targets, measure, reps=REPS, budget=BUDGET_S, clock=time.monotonic, max_reps=MAX_REPS):
    """Measures @targets again: for each repetition and each (contender, off, coll) of plan(),
    measure(name, coll, sizes_arg) for the contender and its partner, the order swapped every
    repetition; after @reps, further repetitions up to @max_reps for the points still
    undecided(), each group's run covering only those. measure() returns ({bytes: us}, None)
    or (None, why it failed). Stops starting runs once @budget seconds have passed. Returns the
    confirmation record: {points: [{contender, off, coll, bytes, default_us: [...], off_us:
    [...]}], reps, max_reps, budget_s, seconds, gave_up (why not every rerun ran, or absent),
    errors: [...]}."""
    groups = plan(targets)
    points = {(d, off, c, s): {"contender": d, "off": off, "coll": c, "bytes": s,
                               "default_us": [], "off_us": []}
              for (d, off, c), sizes in groups.items() for s in sizes}
    errors, gave_up = [], None
    t0 = clock()
    for rep in range(max(reps, max_reps)):
        for (d, off, coll), sizes in groups.items():
            if rep >= reps:
                sizes = [s for s in sizes if undecided(points[(d, off, coll, s)])]
                if not sizes:
                    continue
            order = [(d, "default_us"), (off, "off_us")]
            for i, (name, field) in enumerate(order if rep % 2 == 0 else order[::-1]):
                # A further repetition is started for both sides or neither: each side is
                # judged over the same number of launches.
                if gave_up is None and (i == 0 or rep < reps) and clock() - t0 > budget:
                    gave_up = (f"stopped in repetition {rep + 1} of {reps}" if rep < reps else
                               f"stopped in further repetition {rep + 1} of at most {max_reps}")
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
    out = {"points": list(points.values()), "reps": reps, "max_reps": max_reps,
           "budget_s": budget, "seconds": round(clock() - t0, 1), "errors": errors}
    if gave_up:
        short = [p for p in points.values() if not p["default_us"] or not p["off_us"]]
        out["gave_up"] = (f"{gave_up}; {len(short)} of {len(points)} points without a rerun "
                          "on both sides (judged by their first measurement)" if short else
                          f"{gave_up}; every point has a rerun on both sides")
    return out
