// SPDX-License-Identifier: MIT
// The declarations of every setting (settings.h). docs/settings.md's table is printed from this
// file (`shaddr-info --settings=markdown`); tests/unit keeps the two in sync.
#include <cstdint>

#include "settings.h"
#include "topology.h"

namespace shaddr {
namespace {

using T = SettingType;
using L = SettingLayer;
constexpr uint64_t kMax = UINT64_MAX;
constexpr uint64_t kKi = 1024, kMi = kKi * kKi, kGi = kMi * kKi, kTi = kGi * kKi;

// A setting that libshaddr or the interposer reads.
constexpr SettingDef typed(const char *name, T type, L layer, bool equal, bool tunable,
                           uint64_t lo, uint64_t hi, const char *choices, const char *dflt,
                           const char *doc) {
  return {name, type, layer, equal, tunable, lo, hi, choices, "", dflt, doc, nullptr};
}
// A text setting with a grammar of its own (@check parses it; the ranks agree on its value).
constexpr SettingDef checked(const char *name, L layer, bool equal,
                             int (*check)(std::string_view, uint64_t *, std::string *),
                             const char *dflt, const char *doc) {
  return {name, T::kText, layer, equal, false, 0, 0, "", "", dflt, doc, check};
}
// Documented here, read elsewhere (a tool, a test, the module, MPICH).
constexpr SettingDef other(const char *name, const char *kind, const char *dflt,
                           const char *doc) {
  return {name, T::kDoc, L::kOther, false, false, 0, 0, "", kind, dflt, doc, nullptr};
}

// Per rank / equal on every rank / also from the tuning file.
constexpr bool kRank = false, kEqual = true, kTunable = true, kEnvOnly = false;

constexpr SettingDef kSettings[] = {
    // --- libshaddr ---
    typed("SHADDR_DEVICE", T::kText, L::kLibrary, kRank, kEnvOnly, 0, 0, "", "`/dev/shaddr`",
          "device node libshaddr, libxpmem and `shaddr-info` open"),
    typed("SHADDR_BACKEND", T::kChoice, L::kLibrary, kEqual, kEnvOnly, 0, 0,
          "auto segment window cma shm", "`auto`",
          "`auto` (the first that works of `segment`, `window`, `cma`, `shm`; "
          "`SHADDR_VERBOSE=1` says why the others were passed over), or one of them by name"),
    typed("SHADDR_WINDOW_SLOT", T::kSize, L::kLibrary, kEqual, kEnvOnly, 0, 256 * kMi, "",
          "`0`",
          "`window` backend: slot (block) size, `1M`, `16M` or `256M`; `0`: the module's "
          "`slot_size`"),
    typed("SHADDR_SHM_STAGING", T::kSize, L::kLibrary, kEqual, kEnvOnly, 4 * kKi, kTi, "",
          "`256M`",
          "`shm` backend: bytes of staging area per rank, into which exposed buffers are "
          "copied; a collective whose buffers do not fit gets `ENOBUFS`"),
    typed("SHADDR_VERBOSE", T::kBool, L::kLibrary, kRank, kEnvOnly, 0, 0, "", "`0`",
          "`1`: rank 0 of each node communicator prints the backend, why it was chosen, and "
          "the tuning in force; fallbacks say why; the interposer and the patched MPICH say "
          "what they do"),
    typed("SHADDR_TUNING_FILE", T::kText, L::kLibrary, kRank, kEnvOnly, 0, 0, "", "—",
          "file of `NAME=VALUE` lines for the settings of kind `env / tuning file` (the "
          "environment wins over it) and of the cost model's `model.<who>.<coll>=` lines "
          "(`docs/selection.md`; agreed on the node). `build/tools/shaddr-tune -n RANKS "
          "[--model] -o FILE` writes one from this machine's measurements, "
          "`tools/shaddr-model measure` the whole model"),
    typed("SHADDR_CALIBRATION", T::kText, L::kLibrary, kRank, kEnvOnly, 0, 0, "",
          "`~/.cache/shaddr/calibration/<machine>.model`",
          "this machine's calibration (`model.` and `point.` lines, written by "
          "`tools/shaddr-model calibrate`), read over the shipped cost model and under "
          "`SHADDR_TUNING_FILE`; `off`: none. Every rank must read the same one"),
    typed("SHADDR_MIN", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "", "— (the plan)",
          "sets every `SHADDR_MIN_<COLL>` at once (`0`: every non-empty call through libshaddr, "
          "as the MPI tests run)"),
    typed("SHADDR_MIN_BCAST", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)",
          "set, Bcasts of fewer bytes run in the caller's MPI (interposer, patched MPICH) and "
          "the others in libshaddr; unset, the cost model decides per size (the plan, "
          "`docs/selection.md`)"),
    typed("SHADDR_MIN_REDUCE", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)", "the same for Reduce"),
    typed("SHADDR_MIN_ALLREDUCE", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)", "the same for Allreduce"),
    typed("SHADDR_MIN_GATHER", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)", "the same for Gather (bytes of one rank's block)"),
    typed("SHADDR_MIN_SCATTER", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)", "the same for Scatter (bytes of one rank's block)"),
    typed("SHADDR_MIN_ALLGATHER", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)",
          "the same for Allgather and Allgatherv (bytes of one rank's block; Allgatherv: the "
          "blocks' mean)"),
    typed("SHADDR_MIN_ALLTOALL", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "— (the plan)", "the same for Alltoall (bytes of one rank's block)"),
    typed("SHADDR_PLAN_MARGIN", T::kInt, L::kLibrary, kEqual, kTunable, 0, 90, "", "`10`",
          "percent: where no `SHADDR_MIN_<COLL>` is set, the plan gives a size to libshaddr "
          "only if the cost model has it this much faster than the caller's own collective, "
          "and leaves to the caller a libshaddr range spanning less than a factor of two "
          "between two of the caller's (measurements differ this much from run to run); `0`: "
          "the model's faster path at every size"),
    typed("SHADDR_CHUNK", T::kSize, L::kLibrary, kEqual, kTunable, 4 * kKi, kGi, "", "L2 / 2",
          "copy unit of pipelined transfers (a cache-sized segment)"),
    typed("SHADDR_REDUCE_UNIT", T::kSize, L::kLibrary, kEqual, kTunable, 256, 64 * kMi, "",
          "L1d / 2",
          "bytes of the vector reduced per pipeline step (the accumulator stays in L1)"),
    typed("SHADDR_BCAST_FIFO_MAX", T::kSize, L::kLibrary, kEqual, kTunable, 0, kGi, "",
          "`16384` (`262144` on `cma`, `16383` on `heap+cma` and `heap+shm`)",
          "Bcast of at most this many bytes goes through the Bcast FIFO (no closing barrier); "
          "larger ones copy straight from the root (on `shm` without the heap: the FIFO at "
          "every size); the plan's `bcast_fifo_max` is what is in force"),
    typed("SHADDR_ALLGATHER_RING", T::kChoice, L::kLibrary, kEqual, kTunable, 0, 0, "0 1 auto",
          "`auto`",
          "`1`: Allgather(v) above the slot size always goes round the ring (not on `shm`, "
          "whose exposures are copies); `0`: never; `auto`: where the backend cannot map every "
          "peer at once (`window`: more than max_slots + 1 ranks)"),
    typed("SHADDR_SLOT_MAX", T::kSize, L::kLibrary, kEqual, kTunable, 0, 16 * kKi, "",
          "`16384` / (n − 1) on n ranks, at least `4096`; on a `heap+` backend below the "
          "heap's `16K`",
          "Bcast messages, Reduce/Allreduce vectors, Gather/Scatter/Allgather/Alltoall whose "
          "per-rank data is at most this many bytes, and Allgatherv whose every block is at "
          "most 8 bytes less, go through the per-rank slots in the control block (no closing "
          "barrier); the plan's `slot_max` is what is in force"),
    typed("SHADDR_BCAST_STREAMS", T::kInt, L::kLibrary, kEqual, kTunable, 1, 255, "", "`4`",
          "streams of a multi-stream Bcast (each copied from the root by one rank, from it "
          "by the others); `1` turns it off"),
    typed("SHADDR_BCAST_STREAMS_MIN", T::kSize, L::kLibrary, kEqual, kTunable, 0, kMax, "",
          "`8M`", "smallest Bcast cut into streams (with 3 or more ranks)"),
    checked("SHADDR_TOPOLOGY", L::kLibrary, kEqual, check_topology_setting, "`auto`",
            "levels of the node's topology the collectives may group ranks by: `auto` (every "
            "level that splits the node's bound ranks), `flat` (none), or a comma list of "
            "`package`, `numa`, `l3`, `l2` (docs/topology.md). The plan groups the ranks by "
            "these levels (its `levels:` line); large Bcast, Allgather, Reduce and Allreduce "
            "use them (under `auto`, where the calibration measured the NUMA copy rates, each "
            "from the size the cost model has them faster, or not at all); `shaddr-info "
            "--topology` shows the grouping"),
    typed("SHADDR_WAIT", T::kChoice, L::kLibrary, kRank, kEnvOnly, 0, 0, "auto spin sleep",
          "`auto`",
          "how a rank waits for a peer: `auto` (spin and yield with a CPU per rank; with more "
          "ranks than CPUs 16 pauses, 2 yields, then sleep on the peer's doorbell futex), "
          "`spin` (never sleep), `sleep` (sleep soon, as when oversubscribed)"),
    typed("SHADDR_WAIT_SLEEP_MAX", T::kInt, L::kLibrary, kRank, kEnvOnly, 1, 60000000, "",
          "`1000`",
          "microseconds one sleep of a waiter lasts at most before it looks again, so a peer "
          "that died is noticed"),
    typed("SHADDR_WAIT_PROGRESS", T::kInt, L::kLibrary, kRank, kEnvOnly, 0, 60000000, "",
          "`100`",
          "microseconds between two calls of the host's progress engine (the interposer's, "
          "MPICH's) while a rank waits in libshaddr, once it has stopped spinning; a sleep lasts "
          "no longer, so a rank blocked in a collective still serves others' one-sided and "
          "point-to-point traffic (MPI's progress rule); `0`: never (a program that mixes "
          "passive-target RMA with collectives can then hang)"),
    typed("SHADDR_FAIL_INJECT", T::kInt, L::kLibrary, kEqual, kEnvOnly, 0, kMax, "", "`0`",
          "testing aid: on each node communicator, every n-th step of a rank that can fail "
          "(exposing a buffer, mapping or reading a peer's) fails with `ECANCELED`, so every "
          "fallible step of every algorithm, and the callers' fallbacks, can be reached; `0`: "
          "off"),
    typed("SHADDR_FAIL_INJECT_RANK", T::kInt, L::kLibrary, kEqual, kEnvOnly, 0, kMax, "",
          "all ranks", "testing aid: `SHADDR_FAIL_INJECT` on this node rank only"),
    // --- libshaddr-heap: the allocator of each process (read at load, malloc-free, by this
    // grammar: libshaddr/heap/heap_internal.h); per rank, since each process's heap is its own
    typed("SHADDR_HEAP", T::kChoice, L::kLibrary, kRank, kEnvOnly, 0, 0,
          "auto off mpi-alloc-only", "`auto`",
          "with `libshaddr-heap.so` preloaded (`shaddr-run` does it): `auto` puts malloc-family "
          "allocations of `SHADDR_HEAP_MIN` bytes or more and `MPI_Alloc_mem` in a "
          "per-process memfd that the node's peers map once, received over a unix socket "
          "(no ptrace rights needed), so reads of them are single copies by pointer; "
          "`mpi-alloc-only`: `MPI_Alloc_mem` only; `off`: neither (`shaddr-run` does not "
          "preload it)"),
    typed("SHADDR_HEAP_MIN", T::kSize, L::kLibrary, kRank, kEnvOnly, 0, kMax, "", "`16K`",
          "smallest malloc-family allocation that goes to the heap; smaller ones stay with "
          "glibc, whose malloc+free costs less (docs/defaults.md)"),
    typed("SHADDR_HEAP_MAX", T::kSize, L::kLibrary, kRank, kEnvOnly, 2 * kMi, 64 * kTi, "",
          "RAM, at most `64G` and a quarter of `RLIMIT_AS`",
          "address space a process reserves for its heap (and maps once per node peer); "
          "allocations beyond it go to glibc"),
    // --- the interposer: equal on every rank of the job, agreed at MPI_Init ---
    typed("SHADDR_PRELOAD_CHILDREN", T::kBool, L::kInterposer, kRank, kEnvOnly, 0, 0, "", "`0`",
          "`0`: once a process is an MPI rank (at `MPI_Init`), the processes it starts "
          "(`system`, `popen`, `posix_spawn`, `exec`) do not inherit `libshaddr-heap.so` and the "
          "interposer from `LD_PRELOAD`; `1`: they do (a rank that launches another MPI job "
          "under shaddr); docs/heap.md"),
    typed("SHADDR_NODES", T::kInt, L::kInterposer, kEqual, kEnvOnly, 0, 1 << 20, "", "`0`",
          "interposer, testing aid: cut each node into this many virtual nodes (blocks of node "
          "ranks), so the multi-node hierarchy runs on one machine; `0`/`1`: real nodes"),
    typed("SHADDR_INTERPOSE", T::kBool, L::kInterposer, kEqual, kEnvOnly, 0, 0, "", "`1`",
          "`0`: the interposer forwards every call to `PMPI_*`"),
    typed("SHADDR_INTERPOSE_FORWARD", T::kText, L::kInterposer, kEqual, kEnvOnly, 0, 0, "", "—",
          "interposer: calls forwarded to `PMPI_*` whatever their size, a comma-separated list "
          "of `barrier`, `bcast`, `reduce`, `allreduce`, `gather`, `gatherv`, `scatter`, "
          "`scatterv`, `allgather`, `allgatherv`, `alltoall`, `alltoallv` (or `all`), any "
          "case; e.g. `barrier` for a program whose barriers must be MPI's own. An unknown "
          "name turns the interposer off"),
    typed("SHADDR_INTERPOSE_SEGMENT", T::kSize, L::kInterposer, kEqual, kEnvOnly, 4 * kKi, kGi,
          "", "`256K`",
          "interposer: piece size of the leaders' pipelined Bcast across nodes (at most 1024 "
          "pieces per message); the interposer's plans carry it as `hier_segment`"),
    typed("SHADDR_INTERPOSE_FAIL_EVERY", T::kInt, L::kInterposer, kEqual, kEnvOnly, 0, kMax, "",
          "`0`",
          "interposer, testing aid: every n-th libshaddr call on a communicator is reported "
          "failed after it ran, so the fallback to `PMPI_*` (with in-place inputs restored) is "
          "exercised; `0`: off"),
    typed("SHADDR_INTERPOSE_MESH_MAX", T::kSize, L::kInterposer, kEqual, kEnvOnly, 0, kMax, "",
          "`64`",
          "interposer: across nodes, Alltoall blocks up to this many bytes go through the "
          "leaders' 2D virtual mesh, which combines short messages (4 or more leaders that "
          "factor into at least 2 x 2); the interposer's plans carry it as `hier_mesh_max`"),
    typed("SHADDR_VERIFY", T::kBool, L::kInterposer, kEqual, kEnvOnly, 0, 0, "", "`0`",
          "interposer: `1` checks every intercepted collective against the MPI library's own "
          "(`PMPI_*` on copies of the buffers) and the ranks' call sequences per communicator; "
          "a mismatch names communicator, call, collective and first differing byte, then "
          "`MPI_Abort(..., 70)` (see \"Verification mode\")"),
    typed("SHADDR_VERIFY_INJECT", T::kInt, L::kInterposer, kEqual, kEnvOnly, 0, kMax, "", "`0`",
          "testing aid for `SHADDR_VERIFY=1`: spoil the n-th checked result, so that the tests "
          "see a mismatch caught"),
    // --- read by tools, tests, the module and the patched MPICH ---
    other("SHADDR_INTERPOSE_DIR", "env", "next to `shaddr-run`",
          "where `shaddr-run` looks for `libshaddr-{mpich,openmpi}.so`"),
    other("SHADDR_TEST_MPI", "env", "—",
          "`full`: `tools/shaddr-test mpi` runs the whole interposer matrix (`make "
          "test-mpi-full`)"),
    other("SHADDR_TEST_FULL", "env", "`0`",
          "`1` (`make test-full`): `tools/shaddr-test` adds the labels `kmod-full` and "
          "`mpi-full` to what `make test` runs"),
    other("SHADDR_MPICH_COLL_TIMEOUT", "env", "`180`",
          "seconds per MPICH `test/mpi/coll` program run by `tests/interpose/run-mpich-coll`"),
    other("MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM", "env (patched MPICH)", "`auto`",
          "`<COLL>` = `BCAST`, `REDUCE`, `ALLREDUCE`, `BARRIER` (also `mpir`, "
          "`release_gather`), `ALLGATHER`, `ALLTOALL` (also `mpir`): `shaddr` forces the "
          "single-copy algorithm, `auto` follows the patched json trees"),
    other("MPIR_CVAR_CH4_POSIX_SHADDR_ENABLE", "env (patched MPICH)", "`1`",
          "`0`: do not load libshaddr; the shaddr algorithms fall back to "
          "`release_gather`/MPIR"),
    other("MPIR_CVAR_CH4_POSIX_SHADDR_LIBRARY", "env (patched MPICH)", "`libshaddr.so.0`",
          "what the patched MPICH `dlopen`s"),
    other("MPIR_CVAR_CH4_POSIX_SHADDR_VERBOSE", "env (patched MPICH)", "`0`",
          "`1` (or `SHADDR_VERBOSE=1` once libshaddr is loaded): rank 0 says whether "
          "libshaddr was loaded, every fallback and why, and each communicator's libshaddr call counters when it is "
          "freed"),
    other("MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE", "env (patched MPICH)", "—",
          "json file replacing the posix selection tree (read from this CVAR since patch "
          "0001)"),
    other("SHADDR_CALIBRATE", "env", "`1`",
          "`0`: `tools/shaddr-compare` (`make run`, `make bench`) does not first measure this "
          "machine's calibration when it is missing or stale (`tools/shaddr-model calibrate`)"),
    other("SHADDR_BUILD", "env", "`build`",
          "build directory `tools/shaddr-mpich` and `tests/mpich-patch/run-mpich-tests` use "
          "(libshaddr from it, MPICH into `<it>/mpich`)"),
    other("SHADDR_CACHE", "env", "`$XDG_CACHE_HOME/shaddr`",
          "where `tools/shaddr-mpich` and `tools/shaddr-mpich-source` cache the MPICH source and "
          "the patched MPICH's builds"),
    other("SHADDR_MPICH_TEST_TIMEOUT", "env", "`300`",
          "seconds per MPI run in `tests/mpich-patch/run-mpich-tests`"),
    other("SHADDR_VM_KERNEL", "env", "`6.1`",
          "kernel `tools/shaddr-vm` boots when `--kernel` is not given (`6.1`, `6.12`, "
          "`debug` or an exact version)"),
    other("SHADDR_VM_TIMEOUT", "env", "`900`",
          "seconds before `tools/shaddr-vm` kills the guest (`--timeout`)"),
    other("SHADDR_VM_PARALLEL", "env", "`0`",
          "`1`: let several `tools/shaddr-vm` guests run at once (by default each waits "
          "for the previous one: a guest uses every core)"),
    other("SHADDR_VM_ACCEL", "env", "`auto`",
          "`auto`, `kvm` or `tcg` (`--accel`)"),
    other("SHADDR_VM_RESULTS", "env (set in the guest)", "—",
          "the guest's path of the results directory"),
    other("SHADDR_TEST_KERNELS", "env / CMake cache", "`6.1 6.12` (+ `debug` when built)",
          "kernel series the `kmod` tests boot; the environment's list is taken as is; "
          "the MPI suites never run on `debug`"),
    other("SHADDR_DEBUG_KERNEL_SLOWDOWN", "CMake cache", "`4`",
          "factor on the time limits of the debug kernel's guests"),
    other("SHADDR_KMOD_BATCH_KERNELS", "CMake cache", "`6.1 6.12 debug`",
          "kernels whose module tests share one guest per label (`tools/shaddr-vm --batch`: "
          "`kmod.<kernel>.guest`, each test the verdict on its part)"),
    other("KDIR", "make variable", "every `/lib/modules/*/build` and the debug kernel's tree",
          "kernel build directory to build `shaddr.ko` against"),
    other("XDG_CACHE_HOME", "env", "`~/.cache`",
          "`shaddr/` below it caches the VM initramfs, the KVM probe, `checkpatch.pl` and"
          " the debug kernel (`kernel/`)"),
    other("SHADDR_FUZZ_SECONDS", "CMake cache", "`60`",
          "how long the ioctl fuzzer (`tests/kmod/ioctl_fuzz.cc`) runs: on the debug kernel in "
          "`make test`, on every kernel in `make test-full`"),
    other("SHADDR_TEST_SLOWDOWN", "env (set in the guest)", "`1`",
          "time factor of `tests/kmod/test_lifetime.cc`'s races and limits; "
          "`lifetime.cmake` sets `SHADDR_DEBUG_KERNEL_SLOWDOWN` for the debug kernel"),
    other("SHADDR_RACE_SECONDS", "CMake cache / env", "`60`",
          "how long the race stress program (`tests/kmod/race_stress.cc`) runs: on the debug "
          "kernel in `make test`, on every kernel in `make test-full`"),
    other("SHADDR_RACE_SEED", "env", "random",
          "race stress: the seed (printed by every run) to repeat a run's random choices"),
    other("SHADDR_RACE_SKIP", "env", "—",
          "race stress, diagnosis aid: comma-separated parts left out (`mremap`, `plain`)"),
    other("SHADDR_TEST_BACKENDS", "env", "`cma shm` (host), `segment window` (VM)",
          "backends the collectives' differential tests (`tests/unit/test_coll.cc`) run "
          "on"),
    other("SHADDR_TEST_NODE_SIZES", "env", "`1 2 3 4 7 8`",
          "node sizes (threads as ranks) of the collectives' differential tests; `make "
          "test`'s ASan run and the VM's (`make test-full`) use `1 2 3 4`"),
    other("SHADDR_TEST_NUMA_NODES", "env", "—",
          "NUMA nodes `Topology.ThisMachine` (`tests/unit/test_topology.cc`) and the "
          "`Placement` tests (`tests/unit/test_placement.cc`) must find, the latter then also "
          "a placed control block: the kernel guests' run of them sets their count"),
    other("SHADDR_TEST_BIG_SIZES", "env", "—",
          "extra message sizes (bytes, space-separated) for the collectives' differential"
          " tests"),
    other("SHADDR_SOAK_ITERATIONS", "env", "`10000`",
          "calls of the collectives' soak test (`make test` under ASan and `make test-full` in "
          "the VM: 2000)"),
    other("SHADDR_SCALAPACK_TIMEOUT", "env", "Open MPI `120`, MPICH `500`",
          "seconds per driver run in `tests/interpose/run-scalapack`"),
    other("SHADDR_TEST_LACON_POISON", "env", "—",
          "`rank`: `tests/interpose/scalapack/lacon_est.c` leaves a rank-dependent EST, to show"
          " ScaLAPACK's own failure stock (`lacon-bug`); `trace`: EST initialised, every "
          "PSLACON call traced (`lacon-trace`)"),
    other("SHADDR_TEST_LACON_TRACE_DIR", "env", "—",
          "with `SHADDR_TEST_LACON_POISON=trace`: directory of the per-rank PSLACON traces "
          "(`rank-R`; `tests/interpose/run-scalapack lacon-trace` sets it)"),
    other("SHADDR_SCALAPACK_DIR", "env", "`/usr/lib/x86_64-linux-gnu/scalapack`",
          "the ScaLAPACK test drivers `tests/interpose/run-scalapack` runs"),
    other("SHADDR_SCALAPACK_DATA", "env", "`/usr/share/scalapack`", "the drivers' input files"),
    other("SHADDR_EXPECT", "env", "—",
          "`tests/interpose/coll_diff.c`: what the interposer's counters must show (`accel`, `hier`, "
          "`off`, `none`); `SHADDR_EXPECT_MESH=1`: the leaders' mesh Alltoall ran; "
          "`SHADDR_EXPECT_HEAP=1` (also `tests/interpose/heap_jacobi.c`): some transfer went "
          "through the heap layer, `0`: none did"),
    other("max_slots", "module parameter", "`3`",
          "window slots per open file (1–16)"),
    other("slot_size", "module parameter", "`16777216`",
          "default slot (block) size: 1, 16 or 256 MiB"),
    other("max_exports", "module parameter", "`256`",
          "handles and segments together that one open file may export, and (counted "
          "apart) access ids it may hold; the next gets `ENOSPC`"),
    other("max_attachments", "module parameter", "`8192`",
          "segment attachments per open file; the next ATTACH gets `ENOSPC`"),
    other("max_attach_mib", "module parameter", "`1048576`",
          "MiB of segment attachments per open file; beyond it ATTACH gets `ENOMEM`"),
    other("max_user_map_mib", "module parameter", "`4194304`",
          "MiB of windows and attachments one user (real uid) may have mapped over all its "
          "open files and processes; beyond it MAP and ATTACH get `ENOMEM`"),
};

}  // namespace

std::span<const SettingDef> setting_defs() { return kSettings; }

}  // namespace shaddr
