# SPDX-License-Identifier: MIT
"""What a communicator costs (make run's Communicators): comm_cost's record, the alternating
runs, and the goal "creation loop within 1.5x of stock"."""
from goals_md import table, verdict
from synth import echo_record, script
from shaddr_bench import commcost

HUMAN = ("comm_cost: 2 ranks: dup + 8-byte Allreduce + free: 36.2 us/iteration (300); 1 MiB "
         "Allreduce, first on a fresh communicator: dup 1633 us, new group first 19493 us, new "
         "group later 16268 us; once set up 881 us")
RECORD = {"tool": "comm_cost", "ranks": 2, "iterations": 300, "loop_us": 36.2, "dup_us": 1633.0,
          "new_first_us": 19493.0, "new_later_us": 16268.0, "set_up_us": 881.0, "wrong": False}


def test_run_once_reads_comm_costs_record(tmp_path):
    exe = str(tmp_path / "comm_cost")
    script(exe, "echo 'some MPI warning'\n" + echo_record(RECORD, HUMAN))
    r = commcost.run_once([exe], {}, 10)
    assert r == dict({k: v for k, v in RECORD.items() if k != "tool"}, seconds=r["seconds"])
    script(exe, echo_record(dict(RECORD, wrong=True), HUMAN) + "exit 1\n")
    assert commcost.run_once([exe], {}, 10)["error"] == "wrong results"
    script(exe, f'echo "{HUMAN}"; exit 3\n')
    assert commcost.run_once([exe], {}, 10) == {
        "error": f"exit 3, no comm_cost record ({HUMAN[:120]})"}
    script(exe, echo_record({k: v for k, v in RECORD.items() if k != "set_up_us"}, HUMAN))
    assert commcost.run_once([exe], {}, 10) == {
        "error": "exit 0, comm_cost's record has no set_up_us"}


def rec(loop, later=20000.0, once=1000.0, **extra):
    return dict({"ranks": 2, "loop_us": loop, "iterations": 300, "dup_us": 500.0,
                 "new_first_us": 30000.0, "new_later_us": later, "set_up_us": once,
                 "wrong": False}, **extra)


def test_the_best_run_of_each_side_judges_the_loop():
    # Stock's noise (a rank off its core) must not excuse shaddr-run, nor the other way.
    s = commcost.summarise({"stock": [rec(7037.4), rec(3.8), rec(18196.2)],
                            "shaddr-run": [rec(5.6), rec(3209.2), rec(13981.7)]})
    assert (s["stock"]["loop_us"], s["shaddr-run"]["loop_us"]) == (3.8, 5.6)
    assert s["stock"]["loop_us_median"] == 7037.4
    assert s["verdict"] == "met"
    s = commcost.summarise({"stock": [rec(4.0), rec(9.0)], "shaddr-run": [rec(6.1), rec(6.5)]})
    assert s["verdict"] == "NOT met" and round(s["ratio"], 3) == 1.525
    assert commcost.summarise({"stock": [rec(4.0)], "shaddr-run": [rec(6.0)]})["verdict"] == "met"


def test_the_set_up_is_the_first_call_on_a_new_group_beyond_the_same_call_set_up():
    s = commcost.summarise({"stock": [rec(4.0, later=900.0, once=1000.0)],
                            "shaddr-run": [rec(5.0, later=12000.0, once=400.0),
                                           rec(5.0, later=15000.0, once=300.0)]})
    assert s["shaddr-run"]["set_up_cost_us"] == 12000.0 - 300.0
    assert s["stock"]["set_up_cost_us"] < 0
    md = commcost.goals_md({"mpis": {"mpich": {"stock": [rec(4.0, later=900.0, once=1000.0)],
                                               "shaddr-run": [rec(5.0, 12000.0, 400.0)]}},
                            "reps": 1, "iterations": 300, "ranks": 2})
    rows = {(r[0], r[1]): r for r in table(md, "**The first collective's set-up")}
    assert rows[("mpich", "shaddr-run")][2:4] == ["11.60", "12.00"]
    assert rows[("mpich", "stock")][2] == "none above the noise"


def test_a_failed_shaddr_run_fails_the_goal_and_a_failed_stock_leaves_it_unjudged():
    s = commcost.summarise({"stock": [rec(4.0)],
                            "shaddr-run": [rec(4.5), {"error": "killed after 60 s"}]})
    assert s["verdict"] == "NOT met"
    s = commcost.summarise({"stock": [{"error": "exit 1, no comm_cost line (x)"}],
                            "shaddr-run": [rec(4.5)]})
    assert s["verdict"] == "not judged" and "ratio" not in s
    md = commcost.goals_md({"mpis": {"mpich": {"stock": [rec(4.0)], "shaddr-run":
                                               [rec(4.5, wrong=True, error="wrong results")]},
                                     "openmpi": {"skipped": "comm_cost-openmpi not built"}},
                            "reps": 1, "iterations": 300, "ranks": 2})
    assert verdict(md, "**Communicator creation loop") == "NOT met"
    rows = {r[0]: r for r in table(md, "**Communicator creation loop")}
    assert rows["mpich"][4] == "shaddr-run: wrong results"
    assert rows["mpich"][-1] == "NOT met"
    assert rows["openmpi"][-1] == "not judged"


def test_not_measured_is_not_judged():
    md = commcost.goals_md({"skipped": "--comm-cost-reps 0"})
    assert md[0].endswith("not judged (--comm-cost-reps 0).\n")
    assert "Not measured: --comm-cost-reps 0." in commcost.section_md({"skipped":
                                                                      "--comm-cost-reps 0"})[1]


def test_measure_alternates_stock_and_shaddr_run(tmp_path):
    # A build directory whose comm_cost prints a line (slower under shaddr-run) and logs each
    # run's side, and whose shaddr-run marks its child.
    build, log = str(tmp_path), tmp_path / "order"
    script(f"{build}/tools/shaddr-run", 'SHADDR_FAKE=1 exec "$@"\n')
    script(f"{build}/tests/interpose/comm_cost-mpich",
           f'if [ -n "$SHADDR_FAKE" ]; then LOOP=8.0; S=shaddr; else LOOP=4.0; S=stock; fi\n'
           f'echo $S >> {log}\n' + echo_record(RECORD, HUMAN, loop_us="$LOOP"))
    said = []
    cc = commcost.measure(build, ["mpich", "openmpi"], 2, 3, lambda m, n: [], said.append)
    assert log.read_text().split() == ["stock", "shaddr", "shaddr", "stock", "stock", "shaddr"]
    assert [r["loop_us"] for r in cc["mpis"]["mpich"]["stock"]] == [4.0, 4.0, 4.0]
    assert [r["loop_us"] for r in cc["mpis"]["mpich"]["shaddr-run"]] == [8.0, 8.0, 8.0]
    assert cc["mpis"]["openmpi"] == {"skipped": f"{build}/tests/interpose/comm_cost-openmpi "
                                                "not built"}
    md = commcost.goals_md(cc)
    rows = {r[0]: r for r in table(md, "**Communicator creation loop")}
    assert rows["mpich"][1:4] == ["4.0 (4.0)", "8.0 (8.0)", "2.00x"]
    assert rows["mpich"][-1] == "NOT met"
    # Past the budget, the first repetition still runs, no other.
    cc = commcost.measure(build, ["mpich"], 2, 3, lambda m, n: [], said.append, budget=-1)
    assert len(cc["mpis"]["mpich"]["stock"]) == len(cc["mpis"]["mpich"]["shaddr-run"]) == 1
    assert said[-1] == "communicator cost: 1 of 3 repetitions within -1 s"
