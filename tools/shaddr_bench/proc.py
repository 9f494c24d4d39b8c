# SPDX-License-Identifier: MIT
"""Running a measured program: its output, or why there is none."""
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


def run_for_line(cmd, env, timeout, what):
    """run(), and the output must have a line with @what: (the CompletedProcess, None), or
    (None, why), why quoting the last line of the output when @what is missing."""
    p, why = run(cmd, env, timeout)
    if p is not None and what not in p.stdout:
        tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {p.returncode}, no {what} line ({tail[0][:120]})"
    return p, why
