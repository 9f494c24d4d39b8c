# SPDX-License-Identifier: MIT
"""The confirmation pass: which runs it makes, in which order, what it records, its budget;
and the Goals judging by it, on the losses a main pass found."""
import synth
from goals_md import table, verdict
from shaddr_bench import confirm, goals

A, OFF, H = "mpich-patched-auto", "mpich-patched-off", "mpich-patched-heap"


def test_one_run_per_contender_and_collective_covers_its_lost_sizes():
    targets = [(A, OFF, "bcast", 131072), (A, OFF, "bcast", 1024), (A, OFF, "reduce", 1 << 20),
               (H, OFF, "barrier", 0)]
    assert confirm.plan(targets) == {(A, OFF, "bcast"): [1024, 131072],
                                     (A, OFF, "reduce"): [1 << 20], (H, OFF, "barrier"): [0]}
    assert confirm.sizes_arg("bcast", [1024, 131072]) == "1024:131072"
    assert confirm.sizes_arg("barrier", [0]) == "8"


class Bench:
    """A fake benchmark: the contender's time at each size, and the runs it was asked for."""
    def __init__(self, times, fail=()):
        self.times, self.fail, self.calls = times, fail, []

    def __call__(self, name, coll, sizes):
        self.calls.append((name, coll, sizes))
        if (name, coll) in self.fail:
            return None, "exit 1, no results (FileNotFoundError)"
        lo, hi = (int(x) for x in sizes.split(":")) if ":" in sizes else (0, 0)
        out, s = {}, lo
        while True:  # the benchmark's doubling sizes, the ones not asked for included
            out[s] = self.times(name, coll, s)
            if s >= hi:
                return out, None
            s *= 2


def test_the_two_contenders_alternate_and_every_lost_point_gets_its_reruns():
    n = [0]

    def times(name, coll, s):
        n[0] += 1
        return (10.0 if name == A else 20.0) + n[0]
    bench = Bench(times)
    out = confirm.run([(A, OFF, "bcast", 1024), (A, OFF, "bcast", 4096), (H, OFF, "barrier", 0)],
                      bench, reps=3, budget=100)
    assert bench.calls == [(A, "bcast", "1024:4096"), (OFF, "bcast", "1024:4096"),
                           (H, "barrier", "8"), (OFF, "barrier", "8"),
                           (OFF, "bcast", "1024:4096"), (A, "bcast", "1024:4096"),
                           (OFF, "barrier", "8"), (H, "barrier", "8"),
                           (A, "bcast", "1024:4096"), (OFF, "bcast", "1024:4096"),
                           (H, "barrier", "8"), (OFF, "barrier", "8")]
    pts = {(p["contender"], p["coll"], p["bytes"]): p for p in out["points"]}
    assert set(pts) == {(A, "bcast", 1024), (A, "bcast", 4096), (H, "barrier", 0)}
    p = pts[(A, "bcast", 1024)]
    assert p["off"] == OFF and len(p["default_us"]) == len(p["off_us"]) == 3
    assert all(t < 30 for t in p["default_us"]) and all(t > 20 for t in p["off_us"])
    assert len(pts[(H, "barrier", 0)]["default_us"]) == 3
    assert "gave_up" not in out and out["errors"] == []


def test_a_failed_rerun_counts_nothing_and_is_reported():
    bench = Bench(lambda name, c, s: 5.0, fail={(OFF, "reduce")})
    out = confirm.run([(A, OFF, "reduce", 65536)], bench, reps=2, budget=100)
    p = out["points"][0]
    assert p["default_us"] == [5.0, 5.0] and p["off_us"] == []
    assert out["errors"] == ["mpich-patched-off reduce: exit 1, no results "
                             "(FileNotFoundError)"] * 2


def test_the_budget_stops_the_reruns_and_says_what_is_left():
    now = [0.0]

    def clock():
        return now[0]

    def times(name, coll, s):
        now[0] += 40  # each run takes 40 s
        return 1.0
    bench = Bench(times)
    out = confirm.run([(A, OFF, "bcast", 8), (A, OFF, "allgather", 8)], bench, reps=3,
                      budget=100, clock=clock)
    assert len(bench.calls) == 3  # started at 0, 40 and 80 s
    assert out["gave_up"] == ("stopped in repetition 1 of 3; 1 of 2 points without a rerun on "
                              "both sides (judged by their first measurement)")
    assert out["seconds"] == 120


def stock(c, s):
    return 2.0 + s / 2000.0


def test_the_goals_judge_a_main_pass_loss_by_its_confirmation():
    # The last session's case: auto's Bcast at 64 KiB 0.21 of shaddr off in one pass, while
    # reruns alternating the two gave auto 15.9 us against off's 22.1 us.
    def auto(c, s):
        return stock(c, s) / 0.21 if (c, s) == ("bcast", 65536) else stock(c, s)
    res = {A: synth.contender(auto), OFF: synth.contender(stock)}
    targets = goals.losses_beyond_noise(res)
    assert targets == [(A, OFF, "bcast", 65536)]
    out = confirm.run(targets, Bench(lambda name, c, s: 15.9 if name == A else 22.1), reps=3)
    md = goals.against_shaddr_off(res, "host", out)
    assert verdict(md, "**Never slower") == "met"
    row = table(md, "**Never slower")[0]
    assert row[5] == "—" and row[7] == "bcast 64 KiB: 0.21 → 1.39 (3+3)"


def test_the_goals_say_when_there_was_nothing_to_confirm_or_no_pass():
    res = {A: synth.contender(stock), OFF: synth.contender(stock)}
    assert goals.losses_beyond_noise(res) == []
    md = goals.against_shaddr_off(res, "host", confirm.run([], Bench(stock)))
    assert "nothing to measure again" in md[0].how
    md = goals.against_shaddr_off(res, "guest", {"skipped": "not run in the module part"})
    assert "No confirmation pass: not run in the module part." in md[0].how


def test_one_contender_against_two_partners_keeps_its_points_apart():
    # interposer-openmpi against openmpi (never slower) and against mpich-patched-off (the
    # best stock contender) at the same point: two records.
    ip, om = "interposer-openmpi", "openmpi"
    bench = Bench(lambda name, c, s: {ip: 1.0, om: 2.0, OFF: 3.0}[name])
    out = confirm.run([(ip, om, "reduce", 64), (ip, OFF, "reduce", 64)], bench, reps=1,
                      budget=100)
    pts = {(p["contender"], p["off"]): p for p in out["points"]}
    assert pts[(ip, om)]["off_us"] == [2.0] and pts[(ip, OFF)]["off_us"] == [3.0]
    assert pts[(ip, om)]["default_us"] == pts[(ip, OFF)]["default_us"] == [1.0]


def test_a_point_still_lost_gets_more_reruns_on_both_sides_and_a_won_one_none():
    # 1 KiB: the contender slower in every launch (stays undecided to max_reps); 4 KiB: won
    # after the first reps (no further runs); the further runs ask for 1 KiB only.
    bench = Bench(lambda name, c, s: (3.0 if s == 1024 else 1.0) if name == A else 2.0)
    out = confirm.run([(A, OFF, "bcast", 1024), (A, OFF, "bcast", 4096)], bench, reps=2,
                      budget=100, max_reps=5)
    pts = {p["bytes"]: p for p in out["points"]}
    assert len(pts[1024]["default_us"]) == len(pts[1024]["off_us"]) == 5
    assert len(pts[4096]["default_us"]) == len(pts[4096]["off_us"]) == 2
    assert bench.calls[4:] == [(A, "bcast", "1024:1024"), (OFF, "bcast", "1024:1024"),
                               (OFF, "bcast", "1024:1024"), (A, "bcast", "1024:1024"),
                               (A, "bcast", "1024:1024"), (OFF, "bcast", "1024:1024")]
    assert out["max_reps"] == 5 and "gave_up" not in out


def by_launch(contender_us):
    """Times for Bench: the partner 2.0 us in every launch, the contender
    contender_us(its launch number, from 1)."""
    n = {A: 0}

    def times(name, c, s):
        if name != A:
            return 2.0
        n[A] += 1
        return contender_us(n[A])
    return times


def test_further_reruns_stop_when_the_reruns_no_longer_say_the_contender_is_slower():
    # Slow in the first two launches only.
    bench = Bench(by_launch(lambda i: 3.0 if i <= 2 else 1.5))
    out = confirm.run([(A, OFF, "reduce", 64)], bench, reps=2, budget=100, max_reps=10)
    p = out["points"][0]
    # Pairwise 2 / 3 and 2 / 1.5, as many of each at the fourth launch: a median of 1.
    assert len(p["default_us"]) == len(p["off_us"]) == 4


def test_one_fast_launch_of_the_contender_settles_nothing():
    # The fourth launch in a rare fast state.
    bench = Bench(by_launch(lambda i: 1.5 if i == 4 else 3.0))
    out = confirm.run([(A, OFF, "reduce", 64)], bench, reps=2, budget=100, max_reps=10)
    p = out["points"][0]
    assert len(p["default_us"]) == len(p["off_us"]) == 10 and min(p["default_us"]) == 1.5


def test_the_budget_ends_further_reruns_between_pairs_not_inside_one():
    now = [0.0]

    def times(name, coll, s):
        now[0] += 40
        return 3.0 if name == A else 1.0
    out = confirm.run([(A, OFF, "bcast", 8)], Bench(times), reps=1, budget=100,
                      clock=lambda: now[0], max_reps=10)
    p = out["points"][0]
    # pairs started at 0 and 80 s; at 160 s the budget is spent
    assert len(p["default_us"]) == len(p["off_us"]) == 2
    assert out["gave_up"] == ("stopped in further repetition 3 of at most 10; every point has "
                              "a rerun on both sides")
