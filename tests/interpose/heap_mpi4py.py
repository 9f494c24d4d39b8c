#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""heap_mpi4py: the shared heap under a real program not written for MPI_Alloc_mem.

mpi4py with NumPy arrays: NumPy allocates its data with malloc, so with libshaddr-heap.so
preloaded (build/tools/shaddr-run does it) arrays of SHADDR_HEAP_MIN (64 KiB) and more live in
the rank's heap, and the interposer's collectives read peers' arrays by pointer. Arrays of
several sizes (below and above 64 KiB, several MiB, odd element counts; float64 and int32) go
through comm.Bcast, Reduce, Allreduce (also in place), Allgather and Alltoall (the
buffer-protocol methods), and each result is checked against one computed here with NumPy from
every rank's data (regenerated from its seed). Exit 1 on any mismatch.

The interposer's counters (shaddr_interpose_get_stats, found by dlsym like tests/interpose's C tests;
its struct is read from libshaddr/interpose/shaddr_interpose.h) are summed over the ranks:
  SHADDR_EXPECT_HEAP=1  some transfer went through the heap layer (and the interposer ran
                        collectives in libshaddr);
  SHADDR_EXPECT_HEAP=0  none did (SHADDR_HEAP=off).
Exit 77 (a skip) when mpi4py or NumPy cannot be imported.

mpi4py asks for MPI_THREAD_MULTIPLE by default, and the interposer forwards every call to
PMPI_* when that is provided (its node communicators are not made for concurrent callers):
this program asks for MPI_THREAD_SINGLE (MPI4PY_RC_THREAD_LEVEL overrides it).

  mpiexec.openmpi -n 2 build/tools/shaddr-run --mpi openmpi /usr/bin/python3 heap_mpi4py.py
"""
import ctypes
import os
import re
import sys

try:
    import numpy as np
    import mpi4py
except ImportError as e:
    print(f"heap_mpi4py: SKIP: cannot import mpi4py/NumPy ({e}); install python3-mpi4py and "
          "python3-numpy (tools/shaddr-deps)", flush=True)
    sys.exit(77)

mpi4py.rc.thread_level = os.environ.get("MPI4PY_RC_THREAD_LEVEL", "single")
from mpi4py import MPI  # noqa: E402  (after mpi4py.rc)

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "libshaddr",
                      "interpose", "shaddr_interpose.h")

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
errors = 0

# Element counts: below the heap's 64 KiB, just above it, hundreds of KiB, several MiB; odd.
SIZES = {np.float64: [1, 1000, 8191, 8195, 100003, 393221, 1048583],
         np.int32: [7, 16389, 262147, 1048573]}


def data(r, n, dtype, salt):
    """Rank r's array: integers of modest size, so that float64 sums are exact in any order."""
    rng = np.random.default_rng([r, n, salt])
    return rng.integers(-1000, 1000, size=n).astype(dtype)


def check(what, got, want):
    global errors
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = np.flatnonzero(got != want) if got.shape == want.shape else []
        first = int(bad[0]) if len(bad) else -1
        print(f"heap_mpi4py: rank {rank}: {what}: {len(bad)} of {want.size} elements wrong"
              + (f", first at {first}: {got[first]} != {want[first]}" if first >= 0 else
                 f" (shape {got.shape} != {want.shape})"), file=sys.stderr, flush=True)
        errors += 1


def run(dtype, n):
    name = f"{np.dtype(dtype).name}[{n}]"
    mpitype = MPI.DOUBLE if dtype is np.float64 else MPI.INT
    everyone = [data(r, n, dtype, 1) for r in range(size)]
    mine = everyone[rank]

    for root in sorted({0, size - 1}):
        buf = everyone[root].copy() if rank == root else np.full(n, -7, dtype=dtype)
        comm.Bcast([buf, mpitype], root=root)
        check(f"Bcast {name} root {root}", buf, everyone[root])

        out = np.full(n, -7, dtype=dtype) if rank == root else None
        comm.Reduce([mine, mpitype], [out, mpitype] if out is not None else None, op=MPI.SUM,
                    root=root)
        if rank == root:
            check(f"Reduce(SUM) {name} root {root}", out, np.sum(everyone, axis=0, dtype=dtype))

    for opname, op, ref in (("SUM", MPI.SUM, lambda a: np.sum(a, axis=0, dtype=dtype)),
                            ("MAX", MPI.MAX, lambda a: np.max(a, axis=0))):
        out = np.full(n, -7, dtype=dtype)
        comm.Allreduce([mine, mpitype], [out, mpitype], op=op)
        check(f"Allreduce({opname}) {name}", out, ref(everyone))
    inplace = mine.copy()
    comm.Allreduce(MPI.IN_PLACE, [inplace, mpitype], op=MPI.SUM)
    check(f"Allreduce(SUM, in place) {name}", inplace, np.sum(everyone, axis=0, dtype=dtype))

    out = np.full(n * size, -7, dtype=dtype)
    comm.Allgather([mine, mpitype], [out, mpitype])
    check(f"Allgather {name}", out, np.concatenate(everyone))

    # Alltoall: n elements to each rank; block j of rank i's array goes to rank j.
    blocks = [data(r, n * size, dtype, 2) for r in range(size)]
    out = np.full(n * size, -7, dtype=dtype)
    comm.Alltoall([blocks[rank], mpitype], [out, mpitype])
    check(f"Alltoall {name}", out,
          np.concatenate([blocks[i][rank * n:(rank + 1) * n] for i in range(size)]))


def interposer_stats():
    """This process's shaddr_interpose_stats as a dict, or None without the interposer."""
    try:
        get = ctypes.CDLL(None).shaddr_interpose_get_stats
    except AttributeError:
        return None
    text = open(HEADER).read()
    enum = re.search(r"enum shaddr_interpose_call \{(.*?)\};", text, re.S).group(1)
    count = [e.strip() for e in enum.split(",") if e.strip()].index("SHADDR_IP_COUNT")
    body = re.search(r"struct shaddr_interpose_stats \{(.*?)\};", text, re.S).group(1)
    fields = []
    for line in filter(None, (ln.strip() for ln in body.splitlines())):
        m = re.fullmatch(r"uint64_t (\w+)(\[SHADDR_IP_COUNT\])?;", line)
        if not m:
            raise SystemExit(f"heap_mpi4py: cannot read the stats struct at '{line}' ({HEADER})")
        fields.append((m.group(1), ctypes.c_uint64 * count if m.group(2) else ctypes.c_uint64))
    st = type("Stats", (ctypes.Structure,), {"_fields_": fields})()
    if get(ctypes.byref(st)) != 0:
        return None
    return {f: (sum(getattr(st, f)) if isinstance(t, type) and issubclass(t, ctypes.Array)
                else getattr(st, f)) for f, t in fields}


for dtype, counts in SIZES.items():
    for n in counts:
        run(dtype, n)

st = interposer_stats()
mine = np.array([st["accelerated"], st["lib_calls"], st["heap_transfers"], st["heap_bytes"]]
                if st else [0, 0, 0, 0], dtype=np.uint64)
total = np.zeros_like(mine)
comm.Allreduce(mine, total, op=MPI.SUM)
acc, lib, heap, heap_bytes = (int(x) for x in total)
want = os.environ.get("SHADDR_EXPECT_HEAP")
if rank == 0:
    print(f"heap_mpi4py: {size} ranks, thread level {mpi4py.rc.thread_level}; interposer: "
          + (f"{acc} calls accelerated, libshaddr ran {lib}; {heap} transfers ({heap_bytes} "
             "bytes) through the heap layer" if st else "not loaded"), flush=True)
    if want == "1" and (not st or not lib or not heap):
        print(f"heap_mpi4py: SHADDR_EXPECT_HEAP=1 but {heap} transfers through the heap layer"
              + ("" if st else " (no interposer)"), file=sys.stderr, flush=True)
        errors += 1
    elif want == "0" and heap:
        print(f"heap_mpi4py: SHADDR_EXPECT_HEAP=0 but {heap} transfers through the heap layer",
              file=sys.stderr, flush=True)
        errors += 1
    elif want not in (None, "0", "1"):
        print(f"heap_mpi4py: SHADDR_EXPECT_HEAP={want}: want 0 or 1", file=sys.stderr)
        errors += 1
total_errors = comm.allreduce(errors, op=MPI.SUM)
if rank == 0:
    print(f"heap_mpi4py: {total_errors} error(s): {'FAILED' if total_errors else 'passed'}",
          flush=True)
sys.exit(1 if total_errors else 0)
