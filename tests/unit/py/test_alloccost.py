# SPDX-License-Identifier: MIT
"""The heap's allocation cost against glibc's (make bench's Goals): the bench's record, the
alternating runs, and the goal "every point within 1.2x of glibc"."""
import os

from goals_md import table, verdict
from shaddr_bench import alloccost
from synth import echo_record, script


RECORD = {"tool": "alloc_bench", "mode": "realloc", "size": 16 << 20, "threads": 4, "us": 65.25,
          "cpu_us": 50.5, "cpu_min_us": 48.0}
HUMAN = "alloc_bench: realloc 16777216 bytes, 4 threads: 65.250 us/round wall, 50.500 us/round CPU"
TIMES = {"us": 65.25, "cpu_us": 50.5, "cpu_min_us": 48.0}


def run(cpu, wall=None, batch=None):
    """A run's times: @cpu us per round of CPU time in its fastest batch, its median batch
    (@batch, else half as much again) and wall clock (@wall, else 3x)."""
    return {"us": wall if wall is not None else cpu * 3,
            "cpu_us": batch if batch is not None else cpu * 1.5, "cpu_min_us": cpu}


def test_run_once_reads_the_benchs_record(tmp_path):
    exe = str(tmp_path / "bench")
    script(exe, echo_record(RECORD, HUMAN))
    assert alloccost.run_once([exe], {}, 10) == TIMES
    script(exe, echo_record(RECORD, HUMAN) + "echo 'free(): invalid pointer' >&2; exit 134\n")
    assert alloccost.run_once([exe], {}, 10) == {"error": "exit 134 (free(): invalid pointer)"}
    script(exe, f'echo "{HUMAN}"\n')
    assert alloccost.run_once([exe], {}, 10) == {
        "error": f"exit 0, no alloc_bench record ({HUMAN})"}
    old = {k: v for k, v in RECORD.items() if k not in ("cpu_us", "cpu_min_us")}
    script(exe, echo_record(old, HUMAN))
    assert alloccost.run_once([exe], {}, 10) == {
        "error": "exit 0, alloc_bench's record has no cpu_us, cpu_min_us"}


def test_the_median_pairwise_cpu_ratio_judges_and_a_heap_failure_fails():
    s = alloccost.summarise({"glibc": [run(1.0), run(9.0), run(2.0)],
                             "heap": [run(1.1), run(9.0), run(2.6)]})
    assert s["glibc"] == 2.0 and s["heap"] == 2.6 and s["glibc_min"] == 1.0
    assert s["heap_min"] == 1.1 and s["glibc_batch"] == 3.0 and s["glibc_wall"] == 6.0
    assert round(s["ratio"], 2) == 1.1 and s["verdict"] == "met"
    s = alloccost.summarise({"glibc": [run(1.0)], "heap": [run(1.3)]})
    assert s["verdict"] == "NOT met"
    # Neither the wall clock (a wait for a core) nor the median batch (batches other processes
    # disturbed) judges: the fastest batch's CPU time does.
    s = alloccost.summarise({"glibc": [run(1.0, wall=1.0)], "heap": [run(1.0, wall=9.0)]})
    assert s["verdict"] == "met" and s["heap_wall"] == 9.0
    s = alloccost.summarise({"glibc": [run(1.0, batch=1.0)], "heap": [run(1.0, batch=9.0)]})
    assert s["verdict"] == "met" and s["heap_batch"] == 9.0
    s = alloccost.summarise({"glibc": [run(1.0, batch=9.0)], "heap": [run(1.3, batch=1.3)]})
    assert s["verdict"] == "NOT met"
    s = alloccost.summarise({"glibc": [run(1.0)], "heap": [{"error": "exit 134 (abort)"}]})
    assert s["verdict"] == "NOT met" and "ratio" not in s
    s = alloccost.summarise({"glibc": [{"error": "killed"}], "heap": [run(1.0)]})
    assert s["verdict"] == "not judged"


def test_measure_alternates_glibc_and_the_preloaded_heap(tmp_path):
    build, log = str(tmp_path), tmp_path / "order"
    os.makedirs(f"{build}/libshaddr/heap")
    open(f"{build}/libshaddr/heap/libshaddr-heap.so", "w").close()
    # The fake bench: slower with LD_PRELOAD set, and logs which side ran.
    script(f"{build}/tests/heap/shaddr_heap_alloc_bench",
           f'if [ -n "$LD_PRELOAD" ]; then US=3.0; S=heap; else US=2.0; S=glibc; fi\n'
           f'echo $S >> {log}\n' + echo_record(RECORD, cpu_us="$US", cpu_min_us="$US"))
    ac = alloccost.measure(build, 2, lambda m: None, modes=("malloc",), sizes=(1 << 20,),
                           threads=(1,))
    assert log.read_text().split() == ["glibc", "heap", "heap", "glibc"]
    md = alloccost.goals_md(ac)
    assert verdict(md, "**Allocation within") == "NOT met"
    assert table(md, "**Allocation within")[0] == ["malloc", "1 MiB", "1", "2.00 / 2.00",
                                                   "3.00 / 3.00", "1.50x", "2.00 / 3.00",
                                                   "65.25 / 65.25", "NOT met"]
    assert alloccost.measure(str(tmp_path / "none"), 1, print)["skipped"].endswith("not built")
    assert "not judged" in alloccost.goals_md({"skipped": "--alloc-cost-reps 0"})[0]


def test_a_point_not_judged_does_not_lose_the_goal():
    ok = {"glibc": [run(1.0)], "heap": [run(1.1)]}
    unjudged = {"glibc": [{"error": "killed after 120 s"}], "heap": [run(1.0)]}
    lost = {"glibc": [run(1.0)], "heap": [run(1.5)]}
    def doc(*points):
        return {"reps": 1, "points": {f"malloc/{1 << (20 + i)}/1": p
                                      for i, p in enumerate(points)}}
    assert "): met where judged." in alloccost.goals_md(doc(ok, unjudged))[0]
    assert "): NOT met (1 of 3)." in alloccost.goals_md(doc(ok, unjudged, lost))[0]
    assert "): met." in alloccost.goals_md(doc(ok, ok))[0]
