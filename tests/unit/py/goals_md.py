# SPDX-License-Identifier: MIT
"""Reading back the Goals' markdown in the tests: a verdict line and the table after it."""


def verdict(md, heading):
    """The verdict of the line that starts with @heading: "NOT met" or "met"."""
    line = [x for x in md if x.startswith(heading)][0]
    return "NOT met" if "NOT met" in line else "met"


def table(md, heading):
    """The markdown table following @heading, as rows of cells."""
    i = [k for k, x in enumerate(md) if x.startswith(heading)][0]
    rows = md[i + 1].split("\n")[2:]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]
