# SPDX-License-Identifier: MIT
"""shaddr-model calibrate: the file it writes (header, `model.` and `point.` lines), the machine
state it reports, and its cache (measures only when the file no longer describes this machine
and these MPI builds). Synthetic measurements: no MPI runs."""
import os
import stat

import pytest
import synth
from shaddr_bench import model


def cma(c, s):
    return 3.0 + s / 9000.0  # us


def posix(c, s):
    return 1.0 + s / 20000.0


def measurement(states=(25.0, 24.0, 26.0), slow_only=()):
    """run_jobs()'s result for two libshaddr paths, the patch layer and one fallback."""
    return {"libs": ["slots", "cma", "patch"],
            "libdocs": {"slots": [synth.bench_doc(lambda c, s: 2.0)],
                        "cma": [synth.bench_doc(lambda c, s: cma(c, s) * 1.5),
                                synth.bench_doc(cma)],
                        "patch": [synth.bench_doc(lambda c, s: 2.5)]},
            "tunes": ["cma"], "tuned": {"cma": [{"model.cma.gather": (1.0, 10.0, "2")}]},
            "benches": ["mpich-posix"], "docs": {"mpich-posix": [synth.bench_doc(posix)]},
            "states": list(states), "slow_only": list(slow_only), "failed": []}


def parse(text):
    """{key: value} of the `model.`/`point.` lines."""
    return dict(ln.split("=", 1) for ln in text.splitlines()
                if ln.startswith(("model.", "point.")))


BUILDS = {"mpich": "aaaa", "openmpi": "bbbb", "mpich-patched": "key:cccc"}


def test_the_file_holds_points_and_lines_for_every_side_measured():
    text, state = model.calibration_text(measurement(), 2, "key1", BUILDS, 0.0, "cmd")
    lines = parse(text)
    # The points: each size's best over the runs, at the rank count measured.
    items = lines["point.cma.bcast"].split()
    assert [it.split("@")[1] for it in items] == ["2"] * len(synth.SIZES)
    got = {int(it.split(":")[0]): float(it.split(":")[1].split("@")[0]) for it in items}
    assert got == {s: pytest.approx(cma("bcast", s), abs=1e-3) for s in synth.SIZES}
    assert "point.mpich-posix.allreduce" in lines
    assert "point.mpich-posix.barrier" not in lines  # one time, no size: its model. line
    assert lines["model.mpich-posix.barrier"].startswith("1.000/")
    assert "point.slots.bcast" in lines
    assert "point.cma.pingpong" not in lines  # not a collective of the model
    # The patch layer's cost at each size (0.5 us everywhere here), and its median beyond.
    assert lines["point.patch.bcast"].split()[0] == f"{synth.SIZES[0]}:0.500@2"
    # The fitted lines beside them, the Gather from shaddr-tune, the patch layer's cost.
    assert "model.cma.bcast" in lines and "model.mpich-posix.bcast" in lines
    assert lines["model.cma.gather"] == "1.000/10.000@2"
    assert lines["model.patch.bcast"].startswith("0.500/")
    assert state.startswith("fast")


def test_the_patch_layer_is_weighed_at_each_size_measured():
    # The layer costs 0.1 us at every size but one, where it costs 0.7: the plan must weigh
    # 0.7 there (its median, 0.1, only beyond the sizes measured), and never less than nothing.
    big = synth.SIZES[len(synth.SIZES) // 2]
    m = measurement()
    m["libdocs"]["patch"] = [synth.bench_doc(lambda c, s: 2.7 if s == big else
                                             1.5 if s == synth.SIZES[-1] else 2.1)]
    lines = parse(model.calibration_text(m, 2, "key1", BUILDS, 0.0, "cmd")[0])
    assert lines["model.patch.reduce"].startswith("0.100/")
    got = dict(it.split("@")[0].split(":") for it in lines["point.patch.reduce"].split())
    assert float(got[str(big)]) == pytest.approx(0.7)
    assert float(got[str(synth.SIZES[0])]) == pytest.approx(0.1)
    assert float(got[str(synth.SIZES[-1])]) == pytest.approx(model.LAYER_FLOOR_US)


def test_points_need_two_sizes():
    one = synth.bench_doc(cma)
    one["results"] = [r for r in one["results"] if r["coll"] != "reduce" or r["bytes"] == 8]
    lines = parse("\n".join(model.point_lines("cma", [one], 4)))
    assert "point.cma.reduce" not in lines and "point.cma.barrier" not in lines
    assert lines["point.cma.bcast"].startswith("8:3.001@4 256:3.028@4 ")


def test_the_header_names_date_machine_builds_state_and_command():
    text, _ = model.calibration_text(measurement(), 2, "key1", BUILDS, 0.0, "the command")
    assert text.splitlines()[0] == model.CAL_TITLE
    path_fields = dict(ln[2:].split(": ", 1) for ln in text.splitlines()[1:]
                       if ln.startswith("# "))
    assert path_fields["machine"] == "key1"
    assert path_fields["mpi-builds"] == "mpich=aaaa mpich-patched=key:cccc openmpi=bbbb"
    assert path_fields["cross-core-gbs"].startswith("25.0 24.0 26.0 ")
    assert path_fields["best-cross-core-gbs"] == "26.0"
    assert path_fields["command"] == "the command"
    assert path_fields["date"].endswith(" UTC")


def test_the_state_met_is_judged_against_the_machines_best():
    state, seen = model.judge_state(measurement(), 0.0)
    assert state.startswith("fast") and "first calibration" in state and seen == 26.0
    state, _ = model.judge_state(measurement(slow_only=["bench:mpich"]), 0.0)
    assert state.startswith("mixed") and "bench:mpich" in state
    # Every probe slow against what an earlier calibration of this machine saw: slow, even
    # though the jobs agree among themselves.
    state, seen = model.judge_state(measurement(states=(9.1, 9.5)), 25.0)
    assert state.startswith("slow") and seen == 25.0
    state, _ = model.judge_state(measurement(states=(24.0,)), 25.0)
    assert state.startswith("fast") and "first" not in state
    state, _ = model.judge_state(measurement(states=(0, 0)), 0.0)
    assert state.startswith("unknown")


def test_a_measurement_beside_other_work_is_busy_and_says_what():
    m = dict(measurement(slow_only=["lib:slots"]), busy_only=["lib:slots"],
             busy=[0.0, 0.6, 0.0])
    state, _ = model.judge_state(m, 25.0)
    assert state.startswith("busy") and "lib:slots" in state
    text, _ = model.calibration_text(m, 2, "k", BUILDS, 25.0, "tools/shaddr-model calibrate")
    assert "# other-work: 0.00 0.60 0.00 " in text


def test_other_work_is_the_cpus_busy_share_without_idle_iowait_or_steal():
    # user nice system idle iowait irq softirq steal
    a = [100, 0, 50, 1000, 10, 0, 0, 0]
    b = [160, 0, 70, 1100, 30, 5, 5, 30]  # 90 busy of 240
    assert model.busy_share(a, b) == 90 / 240
    assert model.busy_share(a, a) == 0.0
    assert 0.0 <= model.others_busy(0.01) <= 1.0


@pytest.fixture
def tool(tmp_path, monkeypatch):
    """calibrate() with the measurement, the MPI builds and the machine key replaced; counts
    the measurements."""
    env = {"path": str(tmp_path / "cal" / "k.model"), "key": "key1", "builds": dict(BUILDS),
           "runs": 0, "m": measurement()}

    def run_jobs(args, prior):
        env["runs"] += 1
        env["prior"] = prior
        return env["m"]
    monkeypatch.setattr(model, "info_calibration_path", lambda build, e=None: env["path"])
    monkeypatch.setattr(model, "machine_key", lambda build: env["key"])
    monkeypatch.setattr(model, "mpi_builds", lambda build, patched=None: dict(env["builds"]))
    monkeypatch.setattr(model, "run_jobs", run_jobs)
    return env


def calibrate(*argv):
    return model.main(["--build", "/nonexistent", "calibrate", *argv])


def test_calibrate_writes_the_file_then_keeps_it(tool, capsys):
    assert calibrate("--quick") == 0
    assert tool["runs"] == 1
    with open(tool["path"]) as f:
        text = f.read()
    assert "point.cma.bcast=" in text and "# command: tools/shaddr-model calibrate --quick" in text
    assert os.listdir(os.path.dirname(tool["path"])) == ["k.model"]  # no temporary left
    assert calibrate() == 0
    assert tool["runs"] == 1
    assert "calibration up to date" in capsys.readouterr().err
    assert calibrate("--force") == 0
    assert tool["runs"] == 2
    assert tool["prior"] == 26.0  # the earlier file's best probe is the reference


def test_calibrate_measures_again_when_an_mpi_build_or_the_machine_changed(tool, capsys):
    calibrate("--quick")
    tool["builds"]["mpich-patched"] = "key:dddd"
    calibrate("--quick")
    assert tool["runs"] == 2
    assert "MPI builds changed" in capsys.readouterr().err
    tool["key"] = "key2"
    calibrate("--quick")
    assert tool["runs"] == 3
    assert tool["prior"] == 0.0  # another machine's probes are no reference
    calibrate("--quick")
    assert tool["runs"] == 3


def test_a_calibration_measured_beside_other_work_is_measured_again(tool, capsys):
    tool["m"] = dict(measurement(slow_only=["bench:mpich"]), busy_only=["bench:mpich"])
    calibrate("--quick")
    calibrate("--quick")
    assert tool["runs"] == 2
    assert "measured beside other work" in capsys.readouterr().err
    tool["m"] = measurement()
    calibrate("--quick")
    calibrate("--quick")
    assert tool["runs"] == 3  # a clean one is kept


def test_a_file_without_curves_or_not_a_calibration_is_stale(tool):
    os.makedirs(os.path.dirname(tool["path"]))
    with open(tool["path"], "w") as f:
        f.write("model.cma.bcast=1/10\n")  # a tuning file, no calibration header
    assert calibrate() == 1  # someone else's file: not replaced without --force
    assert tool["runs"] == 0
    calibrate("--force")
    assert tool["runs"] == 1
    head = model.read_header(tool["path"])
    with open(tool["path"], "w") as f:
        f.write("\n".join(f"# {k}: {v}" if k != "lines" else model.CAL_TITLE
                          for k, v in head.items()) + "\n")
    calibrate()
    assert tool["runs"] == 2


def test_nothing_measured_leaves_the_old_file(tool, capsys):
    calibrate("--quick")
    with open(tool["path"]) as f:
        before = f.read()
    tool["m"] = dict(measurement(), libdocs={"slots": [], "cma": [], "patch": []},
                     docs={"mpich-posix": []}, tuned={"cma": []})
    assert calibrate("--force") == 1
    with open(tool["path"]) as f:
        assert f.read() == before
    assert "not written" in capsys.readouterr().err


def test_calibration_off_measures_nothing(tool, capsys):
    tool["path"] = None
    assert calibrate() == 0
    assert tool["runs"] == 0
    assert "calibration off" in capsys.readouterr().err


def fake_info(tmp_path, script):
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    exe = tools / "shaddr-info"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(tmp_path)


def test_the_path_and_the_key_come_from_shaddr_info(tmp_path, monkeypatch):
    build = fake_info(tmp_path, 'test "$1" = --calibration-path || exit 2\n'
                                'echo "${SHADDR_CALIBRATION:-/c/shaddr/calibration/cpu-2-8G.model}"\n')
    monkeypatch.delenv("SHADDR_CALIBRATION", raising=False)
    assert model.info_calibration_path(build) == "/c/shaddr/calibration/cpu-2-8G.model"
    monkeypatch.setenv("SHADDR_CALIBRATION", "/elsewhere/mine.model")
    assert model.info_calibration_path(build) == "/elsewhere/mine.model"
    assert model.machine_key(build) == "cpu-2-8G"  # the key, whatever the variable says
    monkeypatch.setenv("SHADDR_CALIBRATION", "off")
    assert model.info_calibration_path(build) is None


def test_no_path_from_shaddr_info_is_an_error(tmp_path):
    build = fake_info(tmp_path, "echo 'unknown option' >&2; exit 2\n")
    with pytest.raises(SystemExit, match="--calibration-path failed"):
        model.info_calibration_path(build)
    assert model.machine_key(build) == "unknown"


def test_the_patched_mpich_is_named_by_its_build_key(tmp_path):
    prefix = tmp_path / "mpich"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libmpich.so").write_bytes(b"one")
    b1 = model.mpi_builds(str(tmp_path), str(prefix))["mpich-patched"]
    (prefix / "lib" / "libmpich.so").write_bytes(b"two")
    b2 = model.mpi_builds(str(tmp_path), str(prefix))["mpich-patched"]
    assert b1 != b2 and "absent" not in (b1, b2)
    (prefix / ".shaddr-mpich-key").write_text("abc123\n")
    assert model.mpi_builds(str(tmp_path), str(prefix))["mpich-patched"] == "key:abc123"
    assert model.mpi_builds(str(tmp_path), str(tmp_path / "none"))["mpich-patched"] == "absent"


# --- make run's side: measured first when stale, reported with who read it ----------------
@pytest.fixture
def compare_side(tool, monkeypatch):
    """calibration.ensure() with `shaddr-model calibrate` replaced by calibrate() in-process."""
    from shaddr_bench import calibration
    calls = []

    def run_streaming(cmd, env, prefix, timeout):
        calls.append(cmd)
        assert cmd[-1] == "calibrate"
        return model.main(["--build", "/nonexistent", "calibrate"]), 12.0
    monkeypatch.setattr(calibration, "run_streaming", run_streaming)
    tool["calls"] = calls
    return calibration


def test_make_run_calibrates_when_stale_and_not_when_fresh(compare_side, tool):
    cal = compare_side.ensure("/nonexistent", None, 60)
    assert len(tool["calls"]) == 1 and tool["runs"] == 1
    assert cal["measured_now"] and cal["seconds"] == 12 and cal["stale"] is None
    assert cal["status"] == "present" and cal["state"].startswith("fast")
    cal = compare_side.ensure("/nonexistent", None, 60)
    assert len(tool["calls"]) == 1 and not cal["measured_now"]


def test_make_run_can_skip_the_calibration(compare_side, tool, monkeypatch):
    monkeypatch.setenv("SHADDR_CALIBRATE", "0")

    class Args:
        no_calibrate = False
    skip = compare_side.skip_reason(Args())
    assert skip == "SHADDR_CALIBRATE=0"
    cal = compare_side.ensure("/nonexistent", skip, 60)
    assert tool["calls"] == [] and cal["status"] == "absent" and cal["stale"].startswith("none there")
    md = "\n".join(compare_side.report_md(cal, {}))
    assert "none at" in md and "shipped model decided" in md


def test_the_report_says_which_calibration_and_who_read_it(compare_side, tool):
    cal = compare_side.ensure("/nonexistent", None, 60)
    read = {"interposer-mpich": {"read": True, "path": tool["path"], "date": cal["date"]},
            "mpich-patched-auto": {"read": False, "said": []}}
    md = "\n".join(compare_side.report_md(cal, read))
    assert f"`{tool['path']}`, measured {cal['date']} (in this run, 12 s" in md
    assert "machine state met: **fast" in md
    assert f"| interposer-mpich | yes | `{tool['path']}` |" in md
    assert "| mpich-patched-auto | **no** | nothing read |" in md


def test_who_reads_the_calibration_comes_from_shaddr_info_json(tmp_path, monkeypatch):
    from shaddr_bench import calibration
    from shaddr_bench.runner import Contender
    # shaddr-info --model as libshaddr prints it, in the contender's environment: read where
    # SHADDR_CALIBRATION names a file, off where it says so, an error where the file is bad.
    build = fake_info(tmp_path, 'test "$1" = --model || exit 2\n'
                      'echo "launcher noise"\n'
                      'case "$SHADDR_CALIBRATION" in\n'
                      'off) echo \'{"calibration": {"path": null, "read": false, "date": null}, '
                      '"tuning_file": null, "error": null}\' ;;\n'
                      'bad) echo \'{"calibration": {"path": "bad", "read": false, "date": null}, '
                      '"tuning_file": null, "error": "the calibration: `x`: not a model line"}\'; '
                      'exit 1 ;;\n'
                      'none) exit 3 ;;\n'
                      '*) echo "{\\"calibration\\": {\\"path\\": \\"$SHADDR_CALIBRATION\\", '
                      '\\"read\\": true, \\"date\\": \\"2026-11-27 06:10:00 UTC\\"}, '
                      '\\"tuning_file\\": null, \\"error\\": null}" ;;\n'
                      'esac\n')
    monkeypatch.setattr(calibration, "launcher", lambda mpi, ranks: [])
    cs = [Contender("interposer-mpich", "", "mpich", env={"SHADDR_CALIBRATION": "/c/k.model"}),
          Contender("interposer-openmpi", "", "openmpi", env={"SHADDR_CALIBRATION": "off"}),
          Contender("mpich-patched-auto", "", "mpich", env={"SHADDR_CALIBRATION": "bad"}),
          Contender("mpich", "", "mpich", env={"SHADDR_CALIBRATION": "none"})]
    read = calibration.check_read(cs, build, 60)
    assert read["interposer-mpich"] == {"read": True, "path": "/c/k.model",
                                        "date": "2026-11-27 06:10:00 UTC"}
    assert read["interposer-openmpi"] == {"read": False, "said": ["calibration off"]}
    assert read["mpich-patched-auto"] == {
        "read": False, "said": ["the calibration: `x`: not a model line"]}
    assert "mpich" not in read  # not a contender that decides by the model
    monkeypatch.setenv("SHADDR_CALIBRATION", "none")
    assert "no JSON (exit 3)" in calibration.model_info(build, None, [], 60)["error"]


def test_jobs_measure_without_a_calibration(monkeypatch):
    monkeypatch.setenv("SHADDR_CALIBRATION", "/some/file")
    env = model.job_env({"SHADDR_BACKEND": "cma"})
    assert env["SHADDR_CALIBRATION"] == "off" and env["SHADDR_BACKEND"] == "cma"
