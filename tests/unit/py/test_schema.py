# SPDX-License-Identifier: MIT
"""The benchmarks' JSON schemas accept what the tools write and name what is wrong."""
import copy

import synth
from shaddr_bench import schema


def doc(**kw):
    return synth.bench_doc(lambda c, s: 1.0 + s / 1000, **kw)


def test_a_good_document_passes():
    assert schema.bench_problems(doc(), "passed", 2) == []


def test_a_failed_validation_must_count_errors():
    assert schema.bench_problems(doc(validation="failed", errors=4), "failed", 2) == []
    assert "does not match" in schema.bench_problems(doc(validation="failed"), "failed", 2)[0]


def test_wrong_verdict_and_ranks_are_named():
    p = schema.bench_problems(doc(ranks=4), "failed", 2)
    assert any("validation is 'passed'" in x for x in p)
    assert any("ranks = 4, expected 2" in x for x in p)


def test_schema_catches_a_missing_field_and_a_bad_time():
    d = doc()
    del d["results"][3]["t_avg_us"]
    problems = schema.bench_problems(d, "passed", 2)
    assert any("'t_avg_us' is a required property" in x for x in problems)
    d = doc()
    d["results"][0]["t_max_us"] = 0
    assert any(x.startswith("results/0/t_max_us") for x in schema.bench_problems(d, "passed", 2))
    d = doc()
    d["results"][0]["coll"] = "scan"
    assert schema.bench_problems(d, "passed", 2)


def test_order_and_completeness():
    d = doc()
    d["results"][0]["t_min_us"] = d["results"][0]["t_max_us"] * 2
    assert any("out of order" in x for x in schema.bench_problems(d, "passed", 2))
    d = doc()
    d["results"] = [r for r in d["results"] if r["coll"] != "alltoall"]
    assert "no alltoall result" in schema.bench_problems(d, "passed", 2)


def test_churn_counters():
    d = doc()
    for r in d["results"]:
        r.update(misses_per_call=0.5, bytes_mapped_max=4096)
    assert schema.bench_problems(d, "passed", 2, "cache") == []
    assert any("none expected" in x for x in schema.bench_problems(d, "passed", 2, "none"))
    for r in d["results"]:
        r.update(misses_per_call=None, bytes_mapped_max=None)
    assert schema.bench_problems(d, "passed", 2, "none") == []
    assert any("cache expected" in x for x in schema.bench_problems(d, "passed", 2, "cache"))


MACHINE = {"cpu": "c", "kernel": "k", "cpus": 2, "default_chunk": 65536, "l1d": 32768,
           "l2": 524288, "l3": 0}
MICRO = {"mode": "micro", "error": "", "machine": MACHINE, "fifo_error": "",
         "backends": [{"name": "segment", "available": False, "reason": "no /dev/shaddr"},
                      {"name": "window", "available": False, "reason": "no /dev/shaddr"},
                      {"name": "cma", "available": True, "reason": "", "read_call_ns": 900,
                       "cached": True, "hit_ns": 20, "miss_ns": 3000, "miss_fraction": 0.5,
                       "granularity": 4096,
                       "copy": [{"bytes": 4096, "gb_per_s": 5, "memcpy_gb_per_s": 10,
                                 "ratio": 0.5}]},
                      {"name": "shm", "available": True, "reason": "", "read_call_ns": 300,
                       "cached": False,
                       "copy": [{"bytes": 4096, "gb_per_s": 5, "memcpy_gb_per_s": 10,
                                 "ratio": 0.5}]}],
         "fifo": [{"ranks": 2, "bytes": 4096, "messages": 100, "msgs_per_s": 1e5,
                   "gb_per_s": 0.4, "backend": "cma"}]}


def test_microbench_schema():
    assert schema.schema_errors(MICRO, schema.MICRO) == []
    bad = copy.deepcopy(MICRO)
    bad["backends"][0]["reason"] = ""
    assert schema.schema_errors(bad, schema.MICRO)  # skipped without a reason
    bad = copy.deepcopy(MICRO)
    bad["backends"][2]["miss_fraction"] = 1.5
    assert schema.schema_errors(bad, schema.MICRO)
    bad = copy.deepcopy(MICRO)
    for b in bad["backends"]:
        b.update(available=False, reason="none here")
    assert schema.schema_errors(bad, schema.MICRO)  # nothing measured


def test_seed001_tables():
    cols = [{"label": "4 KiB", "segment": 4096, "default_chunk": True},
            {"label": "1 MiB", "segment": 1 << 20},
            {"label": "libshaddr default", "segment": 0, "defaults": True}]
    table = {"ranks": 2, "backend": "cma", "columns": cols,
             "rows": [{"message": 65536, "us": [10.0, None, 9.0]}]}
    d = {"error": "", "machine": MACHINE,
         "seed001": [dict(table, mode="chunk"), dict(table, mode="loop")]}
    assert schema.seed001_problems(d) == []
    d["seed001"][1]["rows"] = [{"message": 65536, "us": [10.0, 3.0, 9.0]}]
    assert schema.seed001_problems(d) == ["loop: 65536/1 MiB: should be *"]
