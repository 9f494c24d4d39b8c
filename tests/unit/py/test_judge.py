# SPDX-License-Identifier: MIT
"""shaddr-compare's judge: which points the confirmation pass measures again, with which
benchmark runs, and the record the Goals read."""
import json

import synth
from shaddr_bench import judge, runner


class Args:
    confirm_reps = 2
    confirm_budget = 600
    iters = 0
    ranks = 2
    timeout = 60


def synth_time(c, s):
    return 2.0 + s / 3000.0


def res_where_interposer_loses(point, factor):
    """Stock MPICH and the interposer on it, the same but @factor x slower at @point."""
    def mine(c, s):
        return synth_time(c, s) * (factor if (c, s) == point else 1.0)
    return {"mpich": synth.contender(synth_time), "interposer-mpich": synth.contender(mine)}


def test_confirm_losses_reruns_the_lost_point_alternating_with_its_partner(tmp_path,
                                                                           monkeypatch):
    res = res_where_interposer_loses(("bcast", 65536), 2.0)
    cs = [runner.Contender(n, "x", "mpich") for n in res]
    runs = []

    def run_bench(c, bench, args, jpath, opts, env, what):
        # The reruns find the two equal: the first pass's loss was noise.
        runs.append((c.name, opts))
        coll, sizes = opts[1], opts[3]
        lo = int(sizes.split(":")[0])
        with open(jpath, "w") as f:
            json.dump({"validation": "passed", "results": [
                {"coll": coll, "bytes": lo, "t_max_us": synth_time(coll, lo)}]}, f)
        return 0, 0.1
    monkeypatch.setattr(judge, "run_bench", run_bench)
    out = judge.confirm_losses(cs, res, {"mpich": "bench"}, Args(), str(tmp_path))
    assert [r[0] for r in runs] == ["interposer-mpich", "mpich", "mpich", "interposer-mpich"]
    assert all(o[:4] == ["--coll", "bcast", "--sizes", "65536:65536"] for _, o in runs)
    (p,) = out["points"]
    assert (p["contender"], p["off"], p["coll"], p["bytes"]) == ("interposer-mpich", "mpich",
                                                                 "bcast", 65536)
    t = synth_time("bcast", 65536)
    assert p["default_us"] == p["off_us"] == [t, t] and out["errors"] == []


def test_confirm_losses_says_why_it_measured_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(judge, "run_bench", lambda *a: (_ for _ in ()).throw(AssertionError))
    res = res_where_interposer_loses(None, 1.0)
    cs = [runner.Contender(n, "x", "mpich") for n in res]
    assert judge.confirm_losses(cs, res, {}, Args(), str(tmp_path)) == {"points": []}

    class NoReps(Args):
        confirm_reps = 0
    assert judge.confirm_losses(cs, res, {}, NoReps(), str(tmp_path)) == {
        "skipped": "--confirm-reps 0"}


def test_a_failed_rerun_is_an_error_not_a_time(tmp_path, monkeypatch):
    res = res_where_interposer_loses(("allreduce", 4096), 3.0)
    cs = [runner.Contender(n, "x", "mpich") for n in res]
    monkeypatch.setattr(judge, "run_bench", lambda *a: (7, 0.1))  # no JSON written
    out = judge.confirm_losses(cs, res, {}, Args(), str(tmp_path))
    assert out["points"][0]["default_us"] == [] and len(out["errors"]) == 4
    assert out["errors"][0] == ("interposer-mpich allreduce: exit 7, no results "
                                "(FileNotFoundError)")
