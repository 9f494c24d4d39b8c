# SPDX-License-Identifier: MIT
"""Merging a contender's rounds: each size's best, errors summed, a failed round wins."""
import synth
from shaddr_bench.rounds import merge_rounds


def rounds(*factors):
    return [synth.contender(lambda c, s, f=f: f * (1 + s / 1000)) for f in factors]


def test_single_round_is_returned_as_is():
    r = rounds(1.0)
    assert merge_rounds(r) is r[0]


def test_best_of_each_time_per_size():
    m = merge_rounds(rounds(3.0, 1.0, 2.0))
    assert m["rounds"] == 3
    for x in m["passes"]["main"]["results"]:
        base = 1 + x["bytes"] / 1000
        assert x["t_max_us"] == base
        assert x["t_min_us"] == base * 0.9
        assert x["first_call_us"] == base * 3
        assert x["t_max_us_rounds"] == [3 * base, base, 2 * base]


def test_errors_are_summed_and_probes_kept():
    rs = rounds(1.0, 2.0)
    rs[0]["passes"]["main"]["results"][0]["errors"] = 2
    rs[1]["passes"]["main"]["results"][0]["errors"] = 3
    rs[1]["cross_core_ref_Bps"] = 9e9
    m = merge_rounds(rs)
    assert m["passes"]["main"]["results"][0]["errors"] == 5
    assert m["cross_core_ref_Bps"] == [25e9, 9e9]


def test_a_failed_round_is_the_record():
    rs = rounds(1.0, 1.0, 1.0)
    rs[1] = {"desc": "d", "status": "wrong results", "reason": "main pass: 3 wrong words"}
    rs[2] = {"desc": "d", "status": "failed", "reason": "later"}
    assert merge_rounds(rs) is rs[1]


def test_a_size_missing_from_a_round_takes_the_others():
    rs = rounds(1.0, 0.5)
    rs[1]["passes"]["main"]["results"] = [x for x in rs[1]["passes"]["main"]["results"]
                                         if x["bytes"] != 4096]
    m = merge_rounds(rs)
    x = [x for x in m["passes"]["main"]["results"] if x["coll"] == "bcast" and
         x["bytes"] == 4096][0]
    assert x["t_max_us"] == 1 + 4096 / 1000
    assert x["t_max_us_rounds"] == [1 + 4096 / 1000]


def test_seconds_add_up_over_rounds():
    rs = rounds(1.0, 1.0)
    rs[0]["passes"]["main"]["seconds"] = 10.0
    rs[1]["passes"]["main"]["seconds"] = 2.5
    assert merge_rounds(rs)["passes"]["main"]["seconds"] == 12.5
