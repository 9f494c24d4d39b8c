# SPDX-License-Identifier: MIT
"""What a collective must move and what message-passing algorithms cost: the copy limit's
arithmetic, shared by the comparison report, the goals and the multi-host model."""
import bisect
import math

# The collectives shaddr-bench measures (with its ping-pong) and the goals judge: the one list
# of them for every module and test.
COLLS = ["bcast", "reduce", "allreduce", "allgather", "alltoall", "barrier"]


# --- bytes that must move -----------------------------------------------------------------
# The least data that has to cross from one rank's memory into another's, in bytes copied (each
# read once and written once), for n ranks and size S (per-rank contribution for Allgather, the
# per-peer block for Alltoall):
MUST_MOVE_DOC = {
    "bcast": "(n-1)·S — every non-root needs the root's S bytes",
    "reduce": "(n-1)·S — the n-1 remote operand vectors must be read once by whoever reduces "
              "(the combining itself is not counted)",
    "allreduce": "2·(n-1)·S — reduce-scatter reads (n-1)·S of remote operands, then every rank "
                 "reads the (n-1)/n of the result it did not compute: (n-1)·S more",
    "allgather": "n·(n-1)·S — each rank receives S from each of n-1 peers",
    "alltoall": "n·(n-1)·S — each rank receives a distinct S block from each of n-1 peers",
    "barrier": "0 — no data (no efficiency)",
    "pingpong": "S per one-way message",
}


def must_move(coll, n, s):
    return {"bcast": (n - 1) * s, "reduce": (n - 1) * s, "allreduce": 2 * (n - 1) * s,
            "allgather": n * (n - 1) * s, "alltoall": n * (n - 1) * s,
            "pingpong": s}.get(coll, 0)


def lg(n):
    return math.ceil(math.log2(n)) if n > 1 else 0


def two_copy_model(coll, n, s, a, b, g):
    """Thakur-Gropp style costs of the usual message-passing algorithms (best of them), in us:
    a = alpha (us), b = us per byte of a point-to-point message, g = us per byte reduced."""
    f = (n - 1) / n
    if coll == "bcast":
        return min(lg(n) * (a + s * b), (lg(n) + n - 1) * a + 2 * f * s * b)
    if coll in ("reduce", "allreduce"):
        return min(lg(n) * (a + s * b + s * g), 2 * lg(n) * a + 2 * f * s * b + f * s * g)
    if coll == "allgather":
        return min(lg(n) * a + (n - 1) * s * b, (n - 1) * (a + s * b))
    if coll == "alltoall":
        return (n - 1) * (a + s * b)
    if coll == "barrier":
        return lg(n) * a
    return a + s * b


def copy_bw(limit, s, key):
    """Copy bandwidth (bytes/us) measured at the nearest size at or above s."""
    rows = limit["results"]
    sizes = [r["bytes"] for r in rows]
    i = min(bisect.bisect_left(sizes, max(s, 1)), len(rows) - 1)
    return rows[i][key] / 1e6

