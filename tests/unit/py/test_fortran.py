# SPDX-License-Identifier: MIT
"""Fortran's bindings against C (make run's "Fortran bindings"): shaddr-fortran-bench's record,
the runs stock and under shaddr-run, and the goal "Fortran within 1.10x of C"."""
from shaddr_bench import fortran
from synth import echo_record, script

RECORD = {"tool": "fortran_bench", "binding": "use-mpi_f08", "ranks": 2, "ar_c": 50.0,
          "ar_f": 50.0, "bc_c": 22.0, "bc_f": 21.0, "ok": True}


def rows_of(md):
    return [[c.strip() for c in r.strip("|").split("|")] for r in "\n".join(md).splitlines()
            if r.startswith("| mpich")]


def test_measure_runs_every_binding_both_sides_and_judges_fortran_against_c(tmp_path):
    build = str(tmp_path)
    script(f"{build}/tools/shaddr-run", 'SHADDR_FAKE=1 exec "$@"\n')
    # Under shaddr-run the Fortran Allreduce is 1.5x C's: not met; stock it is met.
    for b in fortran.BINDINGS:
        script(f"{build}/tools/shaddr-fortran-bench-mpich-{b}",
               'if [ -n "$SHADDR_FAKE" ]; then C=40.0; F=60.0; else C=200.0; F=200.0; fi\n'
               + echo_record(RECORD, "fortran_bench: a line for people", ar_c="$C", ar_f="$F"))
    said = []
    fb = fortran.measure(build, ["mpich", "openmpi"], 2, 2, lambda m, n: [], said.append)
    assert [r["ar_f"] for r in fb["mpis"]["mpich"]["f08"]["shaddr-run"]] == [60.0, 60.0]
    assert [r["ar_c"] for r in fb["mpis"]["mpich"]["mpifh"]["stock"]] == [200.0, 200.0]
    assert "skipped" in fb["mpis"]["openmpi"]["mpi"]
    rows = rows_of(fortran.section_md(fb))
    assert [r[1] for r in rows] == list(fortran.BINDINGS)
    assert all(r[3] == "40 / 60" and r[-1].startswith("NOT met (1.50x)") for r in rows)


def test_wrong_results_or_no_line_fail_the_goal(tmp_path):
    build = str(tmp_path)
    script(f"{build}/tools/shaddr-run", 'exec "$@"\n')
    script(f"{build}/tools/shaddr-fortran-bench-mpich-mpifh",
           echo_record(dict(RECORD, ok=False)))
    script(f"{build}/tools/shaddr-fortran-bench-mpich-mpi", "echo crashed; exit 3\n")
    script(f"{build}/tools/shaddr-fortran-bench-mpich-f08",
           echo_record({k: v for k, v in RECORD.items() if k != "bc_f"}))
    fb = fortran.measure(build, ["mpich"], 2, 1, lambda m, n: [], lambda s: None)
    rows = {r[1]: r for r in rows_of(fortran.section_md(fb))}
    assert rows["mpifh"][-1] == "NOT met: wrong results"  # shaddr-run's run; stock's too
    assert rows["mpi"][-1].startswith("NOT met: exit 3, no fortran_bench record (crashed)")
    assert rows["f08"][-1].startswith("NOT met: exit 0, fortran_bench's record has no bc_f")
    assert fortran.section_md(None)[1].startswith("Not measured")


def test_a_failed_stock_run_does_not_judge_fortran_under_shaddr_run(tmp_path):
    build = str(tmp_path)
    script(f"{build}/tools/shaddr-run", 'SHADDR_FAKE=1 exec "$@"\n')
    script(f"{build}/tools/shaddr-fortran-bench-mpich-mpifh",
           'if [ -z "$SHADDR_FAKE" ]; then echo stock crashed; exit 3; fi\n'
           + echo_record(RECORD, "fortran_bench: a line for people"))
    fb = fortran.measure(build, ["mpich"], 2, 1, lambda m, n: [], lambda s: None)
    row = {r[1]: r for r in rows_of(fortran.section_md(fb))}["mpifh"]
    assert row[2] == "—" and row[-1] == "met (1.00x)"
