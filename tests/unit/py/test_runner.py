# SPDX-License-Identifier: MIT
"""shaddr-compare's runner: the probe of the machine's cross-core state, the stock against
shaddr-run measurements' choice of MPIs."""
import json

from shaddr_bench import runner
from synth import script


def test_the_state_probe_reads_copy_limits_json(tmp_path):
    # A shaddr-copy-limit that writes its --json (the cross-core rate the probe wants, beside
    # the others) and prints a table the probe must not read.
    build = str(tmp_path)
    doc = {"tool": "shaddr-copy-limit", "threads": 2, "results": [
        {"bytes": 262144, "one_core_Bps": 3e10, "all_core_Bps": 5e10, "cross_core_Bps": 1.5e10}]}
    script(f"{build}/tools/shaddr-copy-limit",
           'while [ "$1" != --json ]; do shift; done\n'
           f"echo '{json.dumps(doc)}' > \"$2\"\necho '  262144 1.00 2.00 3.00'\n")
    assert runner.cross_core_probe(build, 10) == 1.5e10
    # No JSON (it failed), or not the probe's size: no state.
    script(f"{build}/tools/shaddr-copy-limit", "echo '  262144 1.00 2.00 3.00'; exit 1\n")
    assert runner.cross_core_probe(build, 10) is None
    doc["results"][0]["bytes"] = 4096
    script(f"{build}/tools/shaddr-copy-limit",
           'while [ "$1" != --json ]; do shift; done\n'
           f"echo '{json.dumps(doc)}' > \"$2\"\n")
    assert runner.cross_core_probe(build, 10) is None
    assert runner.cross_core_probe(str(tmp_path / "none"), 10) is None


def test_stock_vs_run_measures_the_mpis_only_names(monkeypatch):
    class Args:
        only = "interposer-openmpi,mpich"
        ranks = 4
    calls = []

    def measure(build, mpis, ranks, reps, launcher, say):
        calls.append((build, mpis, ranks, reps, launcher))
        return {"mpis": mpis}
    monkeypatch.setattr(runner, "say", lambda m: None)
    assert runner.run_stock_vs_run("/b", Args(), 3, "--x-reps", measure, "x") == {
        "mpis": ["openmpi"]}
    assert calls == [("/b", ["openmpi"], 4, 3, runner.launcher)]
    assert runner.run_stock_vs_run("/b", Args(), 0, "--x-reps", measure, "x") == {
        "skipped": "--x-reps 0"}
    Args.only = "mpich"
    assert runner.run_stock_vs_run("/b", Args(), 3, "--x-reps", measure, "x") == {
        "skipped": "--only names no interposer-<mpi>"}
    Args.only = None
    runner.run_stock_vs_run("/b", Args(), 3, "--x-reps", measure, "x")
    assert calls[-1][1] == ["mpich", "openmpi"]
