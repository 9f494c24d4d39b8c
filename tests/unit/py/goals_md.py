# SPDX-License-Identifier: MIT
"""Reading the goals in the tests: goals.py's results (goals.Goal) by name, or, for the parts
that still write Markdown (commcost, alloccost), a verdict line and the table after it."""


def _goal(results, heading):
    """The goal result named by @heading ("**At least as fast": its name's start)."""
    name = heading.strip("*")
    return [g for g in results if g.name.startswith(name)][0]


def verdict(md, heading):
    """The verdict of the goal (or of the line that starts with @heading): "NOT met" or
    "met"."""
    if md and not isinstance(md[0], str):
        return "NOT met" if "NOT met" in _goal(md, heading).verdict else "met"
    line = [x for x in md if x.startswith(heading)][0]
    return "NOT met" if "NOT met" in line else "met"


def table(md, heading):
    """The goal's rows (or the markdown table following @heading), as rows of cells."""
    if md and not isinstance(md[0], str):
        return _goal(md, heading).rows
    i = [k for k, x in enumerate(md) if x.startswith(heading)][0]
    rows = md[i + 1].split("\n")[2:]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]
