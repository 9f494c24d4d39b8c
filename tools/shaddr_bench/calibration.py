# SPDX-License-Identifier: MIT
"""The comparison's calibration: measured first when this machine has none or an outdated one
(tools/shaddr-model calibrate), and whether libshaddr reads it in the contenders that decide by
it (`shaddr-info --model`'s JSON in each one's environment)."""
import json
import os
import subprocess

from . import model
from .runner import TOP, launcher, run_streaming, say
from .text import md_table

# What a calibration takes (seconds): `shaddr-model calibrate`, 3 rounds of its 12 jobs (one
# round without the patched MPICH's 2 took 38 s on a busy machine); the waits for the fast
# state come on top.
EXPECTED_SECONDS = 180
# The contenders whose choices come from the calibration, asked whether they read it.
READERS = ("interposer-mpich", "interposer-openmpi", "mpich-patched-auto")


def describe(path):
    """{path, date, state, mpi-builds, ...} of the calibration at @path (its header), or
    {path, status: "absent"}."""
    head = model.read_header(path)
    if head is None:
        return {"path": path, "status": "absent"}
    out = {k: head.get(k) for k in ("date", "state", "mpi-builds", "machine", "command",
                                    "best-cross-core-gbs")}
    out.update(path=path, status="present", curves=head["lines"])
    return out


def ensure(build, skip, timeout):
    """The calibration the contenders will read, measured first when it is missing or stale
    unless @skip says why not: a dict for the report."""
    try:
        path = model.info_calibration_path(build)
    except SystemExit as e:  # shaddr-info cannot say: the contenders' libshaddr cannot either
        say(f"calibration: unknown ({e})")
        return {"status": "unknown", "reason": str(e)}
    if path is None:
        say("calibration: off (SHADDR_CALIBRATION=off): the shipped model decides")
        return {"status": "off"}
    why = model.stale_reason(model.read_header(path), model.machine_key(build),
                             model.mpi_builds(build))
    cal = {"measured_now": False}
    if why and skip:
        say(f"calibration {path}: {why}; not measured ({skip})")
    elif why:
        say(f"calibration {path}: {why}: measuring it first with tools/shaddr-model "
            f"calibrate (about {EXPECTED_SECONDS // 60} minutes on an idle machine, more while "
            "it waits for the fast cross-core state; SHADDR_CALIBRATE=0 skips it)")
        rc, secs = run_streaming([os.path.join(TOP, "tools", "shaddr-model"), "--build", build,
                                  "calibrate"], os.environ, "calibrate", timeout)
        cal.update(measured_now=True, seconds=round(secs), exit=rc)
        why = model.stale_reason(model.read_header(path), model.machine_key(build),
                                 model.mpi_builds(build))
    cal.update(describe(path), stale=why)
    if not why:
        say(f"calibration: {path} ({cal.get('date')}, state {cal.get('state')})")
    return cal


def model_info(build, env, launch, timeout):
    """What libshaddr's cost model reads in @env: `shaddr-info --model` started by @launch (a
    launcher's command for one rank, as the contender's ranks are started), its JSON object
    ({"calibration": {"path", "read", "date"}, "tuning_file", "error"}); {"error": why} when
    it gives none."""
    exe = os.path.join(build, "tools", "shaddr-info")
    try:
        p = subprocess.run([*launch, exe, "--model"], env=env, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"{exe} --model: {e.__class__.__name__}"}
    for line in reversed(p.stdout.splitlines()):  # a launcher may print lines of its own
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"error": f"{exe} --model: no JSON (exit {p.returncode}) "
                     f"{p.stderr.strip()[-200:]}".rstrip()}


def check_read(cs, build, timeout):
    """For each contender of READERS here: does its libshaddr read a calibration, and which?
    The contender's environment and launcher, asked of `shaddr-info --model`."""
    out = {}
    for c in cs:
        if c.name not in READERS or c.skip:
            continue
        env = dict(os.environ, **c.env)
        if c.mpi == "openmpi":
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        info = model_info(build, env, launcher(c.mpi, 1), timeout)
        cal = info.get("calibration") or {}
        if cal.get("read"):
            out[c.name] = {"read": True, "path": cal["path"],
                           "date": cal.get("date") or "no date in its header"}
        else:
            why = (info.get("error") or
                   (f"none at {cal['path']}" if cal.get("path") else "calibration off"))
            out[c.name] = {"read": False, "said": [why]}
        r = out[c.name]
        say(f"calibration read by {c.name}: " +
            (f"{r['path']} ({r['date']})" if r["read"] else f"no ({r['said'][0]})"))
    return out


def report_md(cal, read):
    """The report's paragraph on the calibration."""
    if not cal:
        return []
    st = cal.get("status")
    if st == "off":
        head = "off (`SHADDR_CALIBRATION=off`): the shipped model decided."
    elif st == "unknown":
        head = f"unknown: {cal.get('reason')}."
    elif st == "absent":
        head = (f"none at `{cal['path']}` ({cal.get('stale')}): the shipped model decided "
                "(`tools/shaddr-model calibrate` measures it).")
    else:
        head = (f"`{cal['path']}`, measured {cal.get('date')} "
                f"({'in this run, ' + str(cal.get('seconds')) + ' s' if cal.get('measured_now') else 'before this run'}"
                f"; `{cal.get('command')}`), machine state met: **{cal.get('state')}**, "
                f"{cal.get('curves')} curves.")
        if cal.get("stale"):
            head += f" **Out of date**: {cal['stale']}."
    md = ["## Calibration\n",
          "The cost model's curves measured on this machine (`tools/shaddr-model calibrate`, "
          "[selection.md](../../docs/selection.md)), which libshaddr reads over its shipped "
          f"ones: {head}\n"]
    if read:
        rows = []
        for name, r in read.items():
            if r["read"]:
                same = cal.get("path") in (None, r["path"])
                rows.append([name, "yes", f"`{r['path']}`" + ("" if same else " (not the file above)"),
                             r["date"]])
            else:
                rows.append([name, "**no**", "; ".join(r["said"]) or "nothing read", ""])
        md += ["Read by libshaddr in the contenders that decide by it (`shaddr-info --model` "
               "in each one's environment, started by its launcher):\n",
               md_table(["contender", "read", "file", "its date"], rows), ""]
    return md


def skip_reason(args):
    """Why this comparison measures no calibration, or None."""
    if args.no_calibrate:
        return "--no-calibrate"
    if os.environ.get("SHADDR_CALIBRATE", "1") == "0":
        return "SHADDR_CALIBRATE=0"
    return None

