# SPDX-License-Identifier: MIT
"""Formatting of sizes, times and markdown tables for the reports."""


def fmt_size(s):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if s >= k and s % k == 0:
            return f"{s // k} {unit}"
    return f"{s} B"


def fmt_us(t):
    return f"{t:.2f}" if t < 100 else f"{t:.0f}"


def md_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)

