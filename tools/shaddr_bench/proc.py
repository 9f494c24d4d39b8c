# SPDX-License-Identifier: MIT
"""Running a measured program: its output, or why there is none; its record, the one line of
JSON it prints."""
import json
import os
import subprocess


def run(cmd, env, timeout):
    """(the CompletedProcess, None), or (None, why: killed after the timeout, cannot start)."""
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                              timeout=timeout), None
    except subprocess.TimeoutExpired:
        return None, f"killed after {timeout} s"
    except OSError as e:
        return None, str(e)


def mpi_env(**extra):
    """This environment for an MPI launch (Open MPI refuses root without these), plus @extra."""
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                **extra)


def tail(p):
    """The last line of a finished process's output, for a reason."""
    return ((p.stdout + p.stderr).strip().splitlines()[-1:] or ["no output"])[0][:120]


def alternate(rep, sides):
    """The order of @sides in repetition @rep: as given in even ones, reversed in odd ones, so
    neither side always runs first."""
    return sides if rep % 2 == 0 else sides[::-1]


def overall(verdicts):
    """One goal's verdict from its points' ("met", "NOT met", "not judged"): NOT met if any
    point is; a point not judged does not make the goal lost."""
    if "NOT met" in verdicts:
        lost = verdicts.count("NOT met")
        return "NOT met" if lost == len(verdicts) else f"NOT met ({lost} of {len(verdicts)})"
    if "not judged" not in verdicts:
        return "met"
    return "not judged" if set(verdicts) == {"not judged"} else "met where judged"


def record(text, tool):
    """The last line of @text that is a JSON object with "tool": @tool, as a dict, or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("tool") == tool:
            return rec
    return None


def run_for_record(cmd, env, timeout, tool, keys):
    """run(), and the output must have @tool's record() with each of @keys: (the
    CompletedProcess, the record without "tool", None), or (None, None, why), why quoting the
    last line of the output when it has no record."""
    p, why = run(cmd, env, timeout)
    if p is None:
        return None, None, why
    rec = record(p.stdout, tool)
    if rec is None:
        return None, None, f"exit {p.returncode}, no {tool} record ({tail(p)})"
    missing = [k for k in keys if k not in rec]
    if missing:
        return None, None, f"exit {p.returncode}, {tool}'s record has no {', '.join(missing)}"
    del rec["tool"]
    return p, rec, None
