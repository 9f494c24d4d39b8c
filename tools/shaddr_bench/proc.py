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
