// SPDX-License-Identifier: MIT
// Threaded, multi-process fuzzer for /dev/shaddr, run as root in the VM.
//
// Usage: shaddr_ioctl_fuzz [SECONDS [SEED]] [--seconds N] [--seed N] [--procs N] [--threads N]
//                          [--quiet]
//
// A supervisor starts --procs worker processes (default 3) of --threads fuzzing threads each
// (default 3) and keeps them running for SECONDS (default 60): it kills some (SIGKILL) and asks
// others to exit from one of their threads while the rest are mid-call, and starts new ones. The
// threads of all workers share
//  - device files: opened by each, inherited from the supervisor and by forked children, passed
//    between workers over unix sockets (SCM_RIGHTS), dup'ed, closed while in use elsewhere;
//  - handles, segids and access ids, through a table in shared memory (any thread may use any id
//    on any of its files);
// and issue every ioctl with valid, random and boundary arguments (ranges up to TASK_SIZE, the
// whole address space, 1 TiB and 128 TiB lengths, bad pointers, random command numbers), plain
// mmap() of the device at window offsets, and VMA operations on their buffers, windows and
// attachments: munmap (whole and partial), mremap (shrink, grow, MAYMOVE, MREMAP_FIXED same-size
// and resizing moves, MREMAP_DONTUNMAP, old_len 0 duplicates, partial moves), mprotect, madvise
// (DONTNEED, DONTFORK, DOFORK, REMOVE, PAGEOUT, COLD, FREE, POPULATE_*, WIPEONFORK, ...),
// move_pages() between the NUMA nodes (also of other workers' pages), memfd truncation and hole
// punching, reads and writes through windows (value-preserving writes: locked OR of 0), fork of
// children that use inherited files, export, import, fork again and exit or are killed (no
// exec). The VM runner fails the run on any kernel warning or memory-corruption report.
//
// The run fails (exit 1) if a fuzzer process dies of a signal it was not sent (SIGBUS/SIGSEGV
// raised inside a deliberate probe are caught and counted; anywhere else they kill the process
// and fail the run), if a process cannot be reaped (stuck in the kernel), if a plain mmap() of
// the device succeeds (contract item 2), or if any counter under /sys/class/misc/shaddr/stats/
// (exports, segments, windows, attachments, pages_pinned, open_files) is not 0 once every
// process is gone. It prints the seed and a summary: operations and successes per kind, errors
// per errno, probe signals, processes. --seed N gives every thread the same random stream again
// (the interleaving of threads and processes is not reproducible); --procs 1 --threads 1 is the
// most reproducible form.
//
// The fuzzer must never destroy its own memory: its processes map nothing behind its back after
// start-up (malloc is confined to brk, threads are started first), VMA operations and fixed
// mappings target only its arena and what the module mapped for it, never a range that was
// mapped at start-up, and every write through a window leaves the bytes as they were.
#include <dirent.h>
#include <linux/capability.h>
#include <linux/mempolicy.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <random>
#include <thread>
#include <vector>

#include "security_util.h"

using namespace shaddr_sec;

namespace {

// ---- Limits and boundary values -------------------------------------------------------------

constexpr int kMaxProcs = 8, kMaxThreads = 8;
constexpr uint64_t kArenaSlot = 16 * kMiB;
constexpr int kArenaSlots = 8;
constexpr uint64_t kArenaSize = kArenaSlot * kArenaSlots;
constexpr uint64_t kMemfdSize = 16 * kMiB;
constexpr int kIdSlots = 64, kRegions = 96, kPool = 8, kKids = 12, kMaxProtected = 1024;
constexpr uint64_t kTiB = 1ull << 40;
constexpr uint64_t kTask47 = 0x7ffffffff000ull;        // TASK_SIZE, 4-level paging
constexpr uint64_t kTask56 = 0x00fffffffffff000ull;    // TASK_SIZE, 5-level paging (LA57)
constexpr uint64_t kKernelAddr = 0xffff888000000000ull;

constexpr uint64_t kLens[] = {0,
                              1,
                              kPage - 1,
                              kPage,
                              kPage + 1,
                              kMiB - 1,
                              kMiB,
                              kMiB + 1,
                              2 * kMiB,
                              16 * kMiB,
                              256 * kMiB,
                              256 * kMiB + kPage,
                              1ull << 30,
                              kTiB - kPage,
                              kTiB,
                              kTiB + 1,
                              kTiB + kPage,
                              2 * kTiB,
                              (1ull << 47) - kPage,
                              1ull << 47,  // 128 TiB
                              kTask47,
                              kTask56,
                              1ull << 56,
                              1ull << 63,
                              ~0ull - kPage + 1,
                              ~0ull};

// ---- Operation kinds ------------------------------------------------------------------------

#define FUZZ_OPS(X)                                                                              \
  X(version) X(translate) X(revoke) X(map) X(unmap) X(query) X(set_slot_size) X(make) X(remove) \
  X(get) X(release) X(attach) X(attach_chain) X(detach) X(random_cmd) X(read_probe)              \
  X(write_probe) X(mmap_scratch) X(mmap_dev) X(munmap) X(munmap_partial) X(mremap_shrink)        \
  X(mremap_grow) X(mremap_maymove) X(mremap_fixed) X(mremap_fixed_resize) X(mremap_dontunmap)    \
  X(mremap_dontunmap_fixed) X(mremap_dup) X(mremap_partial) X(mprotect) X(mprotect_partial)      \
  X(madv_dontneed) X(madv_dontfork) X(madv_dofork) X(madv_remove) X(madv_pageout) X(madv_cold)  \
  X(madv_other) X(move_pages) X(memfd) X(open) X(close) X(dup) X(send_fd) X(recv_fd) X(fork)    \
  X(child_kill) X(worker_exit) X(worker_kill)
#define FUZZ_ENUM(n) k_##n,
#define FUZZ_NAME(n) #n,
enum Op : int { FUZZ_OPS(FUZZ_ENUM) kNumOps };
const char *const kOpNames[] = {FUZZ_OPS(FUZZ_NAME)};

constexpr int kErrSlots = 136;  // errno values below this are counted one by one

// ---- Shared memory (supervisor and every descendant) ----------------------------------------

// An id other processes may use: a handle (base, nr of blocks * unit, unit = block size), a
// segment (base, size) or an access id (its segment's base and size). A seqlock keeps readers
// from using a torn entry.
struct IdEntry {
  std::atomic<uint32_t> seq;
  uint32_t pad;
  std::atomic<uint64_t> id, base, size, unit;  // stored with release, loaded with acquire
};
struct IdValue {
  uint64_t id, base, size, unit;
};
enum IdKind { kHandles, kSegids, kApids };

struct Shared {
  std::atomic<int> stop;
  uint64_t seed;
  uint64_t arena;
  int nprocs, nthreads;
  std::atomic<uint64_t> ops[kNumOps], ok[kNumOps];
  std::atomic<uint64_t> err[kNumOps][kErrSlots + 1];
  std::atomic<uint64_t> probes[2][3];  // [read, write][no signal, SIGBUS, SIGSEGV]
  std::atomic<uint64_t> plain_mmap_ok, worker_starts, children, kids_killed;
  IdEntry ids[3][kIdSlots];
  std::atomic<int32_t> kill_intent[4096];
  std::atomic<int32_t> worker_pid[kMaxProcs];
  std::atomic<int32_t> exit_request[kMaxProcs];
  int sock_rx[kMaxProcs], sock_tx[kMaxProcs];
  int inherited_fd;
  std::atomic<uint32_t> failures, fail_next;
  char fail_msg[16][240];
};
Shared *S;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...) {
  char msg[240];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  S->failures.fetch_add(1);
  uint32_t i = S->fail_next.fetch_add(1);
  if (i < 16) memcpy(S->fail_msg[i], msg, sizeof(msg));
  char line[300];
  int n = snprintf(line, sizeof(line), "fuzz: FAILURE (pid %d): %s\n", getpid(), msg);
  if (write(2, line, n) < 0) { /* nothing to do */ }
}

void mark_kill(pid_t pid) { S->kill_intent[pid % 4096].store(pid); }
bool kill_intended(pid_t pid) { return S->kill_intent[pid % 4096].load() == pid; }

// ---- Per-process state -----------------------------------------------------------------------

struct Spin {
  std::atomic<int> v{0};
  void lock() {
    while (v.exchange(1, std::memory_order_acquire)) sched_yield();
  }
  void unlock() { v.store(0, std::memory_order_release); }
};

enum RegionKind { kFree, kWindowReg, kAttachReg, kDevMap, kMoved };
struct Region {
  uint64_t addr, len;
  int kind;
};
struct Range {
  uint64_t lo, hi;
};

struct Local {
  Spin lock;  // guards pool, regs, kids
  int pool[kPool];
  Region regs[kRegions];
  pid_t kids[kKids];
  int memfd = -1;
  Range prot[kMaxProtected];
  int nprot = 0;
  int slot = -1;   // worker index
  int depth = 0;   // 0 worker, 1 child, 2 grandchild
  uint64_t incarnation = 0;
} L;

thread_local std::mt19937_64 rng;
thread_local char *tl_buf;    // 2 pages, the second PROT_NONE: arguments and boundary pointers
thread_local char tl_arg[8192];

uint64_t rnd(uint64_t n) { return n ? rng() % n : 0; }
bool chance(int one_in) { return rnd(one_in) == 0; }

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void note(Op k, long r) {
  S->ops[k].fetch_add(1, std::memory_order_relaxed);
  if (r >= 0) {
    S->ok[k].fetch_add(1, std::memory_order_relaxed);
  } else {
    long e = -r;
    S->err[k][e < kErrSlots ? e : kErrSlots].fetch_add(1, std::memory_order_relaxed);
  }
}
long sys(long r) { return r < 0 ? -errno : r; }
long sysp(void *p) { return p == MAP_FAILED ? -errno : 0; }

double now() { return now_seconds(); }

// ---- Protected ranges: what was mapped at start-up is never touched ----------------------------

bool arena_contains(uint64_t a, uint64_t len) {
  return a >= S->arena && len <= kArenaSize && a - S->arena <= kArenaSize - len;
}

bool touches_protected(uint64_t a, uint64_t len) {
  if (len == 0) len = 1;
  uint64_t end = a + len;
  if (end < a) end = ~0ull;
  for (int i = 0; i < L.nprot; i++)
    if (a < L.prot[i].hi && end > L.prot[i].lo) return true;
  return false;
}

void snapshot_protected() {
  static char buf[1 << 17];
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  size_t n = 0;
  for (ssize_t r; fd >= 0 && n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0;)
    n += r;
  if (fd >= 0) close(fd);
  buf[n] = 0;
  L.nprot = 0;
  for (char *line = buf; *line && L.nprot < kMaxProtected;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    unsigned long long lo, hi;
    if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && !(lo >= S->arena && hi <= S->arena + kArenaSize)) {
      if (strstr(line, "[heap]")) hi += 1ull << 32;                   // brk may grow
      if (strstr(line, "[stack]")) lo = lo > (64ull << 20) ? lo - (64ull << 20) : 0;
      L.prot[L.nprot++] = {lo, hi};
    }
    if (!nl) break;
    line = nl + 1;
  }
}

// ---- Regions: what the module (or a moved buffer) mapped for this process -------------------------

void reg_add(uint64_t addr, uint64_t len, int kind) {
  if (!addr || !len) return;
  L.lock.lock();
  int victim = -1;
  for (int i = 0; i < kRegions; i++)
    if (L.regs[i].kind == kFree) {
      victim = i;
      break;
    }
  if (victim < 0) victim = static_cast<int>(rnd(kRegions));  // forget one (it stays mapped)
  L.regs[victim] = {addr, len, kind};
  L.lock.unlock();
}

void reg_forget(uint64_t addr) {
  L.lock.lock();
  for (auto &r : L.regs)
    if (r.kind != kFree && r.addr == addr) r.kind = kFree;
  L.lock.unlock();
}

bool reg_pick(Region *out, int kind = -1) {
  L.lock.lock();
  int n = 0, idx[kRegions];
  for (int i = 0; i < kRegions; i++)
    if (L.regs[i].kind != kFree && (kind < 0 || L.regs[i].kind == kind)) idx[n++] = i;
  bool ok = n > 0;
  if (ok) *out = L.regs[idx[rnd(n)]];
  L.lock.unlock();
  return ok;
}

// Drops regions whose first page is no longer mapped (munmap, UNMAP, DETACH, MAP_FIXED over it).
void reg_prune() {
  L.lock.lock();
  for (auto &r : L.regs) {
    unsigned char v;
    if (r.kind != kFree && mincore(reinterpret_cast<void *>(r.addr), kPage, &v) && errno == ENOMEM)
      r.kind = kFree;
  }
  L.lock.unlock();
}

// ---- Device files ----------------------------------------------------------------------------------

// A private dup of a random pool file (so that a close elsewhere never hands this thread another
// file's number), or -1. The caller closes it.
int pool_dup() {
  L.lock.lock();
  int n = 0, cand[kPool];
  for (int fd : L.pool)
    if (fd >= 0) cand[n++] = fd;
  int fd = n ? fcntl(cand[rnd(n)], F_DUPFD_CLOEXEC, 3) : -1;
  L.lock.unlock();
  return fd;
}

// Puts fd into the pool, closing whatever it replaces.
void pool_put(int fd) {
  if (fd < 0) return;
  L.lock.lock();
  int i = static_cast<int>(rnd(kPool));
  for (int k = 0; k < kPool; k++)
    if (L.pool[k] < 0) {
      i = k;
      break;
    }
  int old = L.pool[i];
  L.pool[i] = fd;
  L.lock.unlock();
  if (old >= 0) close(old);
}

// ---- Shared id table ----------------------------------------------------------------------------------

void publish(IdKind k, uint64_t id, uint64_t base, uint64_t size, uint64_t unit) {
  IdEntry &e = S->ids[k][rnd(kIdSlots)];
  uint32_t s = e.seq.load();
  if ((s & 1) || !e.seq.compare_exchange_strong(s, s + 1)) return;  // someone else is writing it
  e.id.store(id, std::memory_order_release);
  e.base.store(base, std::memory_order_release);
  e.size.store(size, std::memory_order_release);
  e.unit.store(unit, std::memory_order_release);
  e.seq.store(s + 2, std::memory_order_release);
}

// A published id (mostly), or a random one; false if only random was available.
bool pick_id(IdKind k, IdValue *out) {
  if (!chance(10)) {
    for (int tries = 0; tries < 4; tries++) {
      IdEntry &e = S->ids[k][rnd(kIdSlots)];
      uint32_t s1 = e.seq.load(std::memory_order_acquire);
      if (s1 & 1 || s1 == 0) continue;
      // Acquire loads: the second load of seq cannot move before them.
      out->id = e.id.load(std::memory_order_acquire);
      out->base = e.base.load(std::memory_order_acquire);
      out->size = e.size.load(std::memory_order_acquire);
      out->unit = e.unit.load(std::memory_order_acquire);
      if (e.seq.load(std::memory_order_relaxed) == s1) return true;
    }
  }
  out->id = chance(4) ? rnd(4) : rng() & (chance(2) ? ~0ull : ~(1ull << 63));
  out->base = out->size = out->unit = 0;
  return false;
}

// ---- Argument generators ------------------------------------------------------------------------------

uint64_t arena_addr(uint64_t len_hint = kPage) {
  uint64_t slot = rnd(kArenaSlots);
  uint64_t off = rnd(kArenaSlot / kPage) * kPage;
  if (len_hint < kArenaSlot && off + len_hint > kArenaSlot) off = kArenaSlot - len_hint;
  return S->arena + slot * kArenaSlot + (len_hint >= kArenaSlot ? 0 : off);
}

uint64_t boundary_len() { return kLens[rnd(sizeof(kLens) / sizeof(kLens[0]))]; }

uint64_t boundary_addr() {
  switch (rnd(16)) {
    case 0: return 0;
    case 1: return kPage;
    case 2: return kTask47 - kPage;
    case 3: return kTask47 - kMiB;
    case 4: return kTask47 - kTiB;
    case 5: return kTask47;
    case 6: return kTask47 + kPage;
    case 7: return 1ull << 47;
    case 8: return kTask56 - kPage;
    case 9: return kTask56;
    case 10: return kKernelAddr;
    case 11: return 0xffffffffff600000ull;  // vsyscall page
    case 12: return ~0ull - kPage + 1;
    case 13: return S->arena + kArenaSize;
    case 14: return rng() & 0x7ffffffff000ull;
    default: return rng();
  }
}

uint64_t normal_len() {
  switch (rnd(4)) {
    case 0: return kPage * (1 + rnd(16));
    case 1: return kMiB * (1 + rnd(4));
    case 2: return 1 + rnd(4 * kMiB);
    default: return kPage * (1 + rnd(kArenaSlot / kPage));
  }
}

// A pointer for an ioctl argument the kernel may write back: mostly `good` (thread-local), else a
// bad or boundary pointer that can never be memory someone else needs.
void *out_ptr(void *good, size_t n) {
  if (!chance(8)) return good;
  switch (rnd(7)) {
    case 0: return nullptr;
    case 1: return reinterpret_cast<void *>(kKernelAddr + rnd(1ull << 30));
    case 2: return reinterpret_cast<void *>(~0ull - rnd(64));
    case 3: return tl_buf + kPage - n / 2;  // runs into the PROT_NONE page
    case 4: return reinterpret_cast<void *>(kTask47 - rnd(16));
    case 5: return reinterpret_cast<void *>(1ull << 47);
    default: {  // misaligned copy of the argument
      char *p = tl_arg + 1 + rnd(63);
      memmove(p, good, n);
      return p;
    }
  }
}

// After an ioctl that succeeded with out_ptr(good): the answer in `good` if it is readable there
// (a misaligned copy is copied back), false if it went to a bad pointer.
bool answer(void *arg, void *good, size_t n) {
  if (arg == good) return true;
  char *p = static_cast<char *>(arg);
  if (p < tl_arg || p + n > tl_arg + sizeof(tl_arg)) return false;
  memcpy(good, p, n);
  return true;
}

// A pointer to an input-only argument (the kernel only reads it): also window and arena memory.
void *in_ptr(void *good, size_t n) {
  if (!chance(6)) return good;
  Region r;
  if (chance(2) && reg_pick(&r)) return reinterpret_cast<void *>(r.addr + rnd(r.len));
  if (chance(2)) return reinterpret_cast<void *>(arena_addr());
  return out_ptr(good, n);
}

uint32_t random_prot() {
  static const uint32_t p[] = {kRO, kRW, 0, SHADDR_PROT_WRITE, 4, 0xffffffffu};
  return chance(5) ? p[2 + rnd(4)] : p[rnd(2)];
}

// ---- Ioctls ---------------------------------------------------------------------------------------------

// Ioctls go to a dup of a pool file; `fd` < 0 still makes the call (EBADF is a path too).
struct DupFd {
  int fd = pool_dup();
  ~DupFd() {
    if (fd >= 0) close(fd);
  }
};

void op_version() {
  DupFd f;
  shaddr_version v{};
  note(k_version, xioctl(f.fd, SHADDR_IOC_VERSION, out_ptr(&v, sizeof(v))));
}

void op_translate() {
  DupFd f;
  shaddr_translate t{};
  switch (rnd(8)) {
    case 0:  // the whole address space
      t.va = 0;
      t.len = chance(2) ? kTask47 : kTask56;
      break;
    case 1:
      t.va = boundary_addr();
      t.len = boundary_len();
      break;
    case 2:
      t.va = boundary_addr();
      t.len = normal_len();
      break;
    default:
      t.va = arena_addr() + rnd(kPage);
      t.len = chance(8) ? boundary_len() : normal_len();
  }
  t.prot = random_prot();
  t.flags = chance(12) ? rng() : 0;
  void *arg = out_ptr(&t, sizeof(t));
  int r = xioctl(f.fd, SHADDR_IOC_TRANSLATE, arg);
  note(k_translate, r);
  if (r == 0 && answer(arg, &t, sizeof(t)) && t.handle) publish(kHandles, t.handle, t.base, t.block_size * t.nr_blocks, t.block_size);
}

void op_revoke() {
  DupFd f;
  IdValue e;
  pick_id(kHandles, &e);
  uint64_t h = e.id;
  note(k_revoke, xioctl(f.fd, SHADDR_IOC_REVOKE, in_ptr(&h, sizeof(h))));
}

void op_map() {
  DupFd f;
  IdValue e;
  shaddr_map m{};
  bool known = pick_id(kHandles, &e);
  m.handle = e.id;
  const uint64_t nr = known && e.unit ? e.size / e.unit : 0;
  const uint64_t target = arena_addr();
  if (known && e.unit && target >= e.base && target - e.base < e.size && !chance(3))
    m.block = static_cast<uint32_t>((target - e.base) / e.unit);  // onto the exporter's arena
  else if (chance(2))
    m.block = 0;
  else
    m.block = chance(2) ? static_cast<uint32_t>(nr - rnd(2) + rnd(2)) : static_cast<uint32_t>(rng());
  m.prot = random_prot();
  m.flags = chance(12) ? rng() : 0;
  void *arg = out_ptr(&m, sizeof(m));
  int r = xioctl(f.fd, SHADDR_IOC_MAP, arg);
  note(k_map, r);
  if (r == 0 && answer(arg, &m, sizeof(m))) reg_add(m.addr, m.size, kWindowReg);
}

void op_unmap() {
  DupFd f;
  shaddr_unmap u{};
  Region r;
  if (!chance(3) && reg_pick(&r, kWindowReg)) {
    u.addr = r.addr;
  } else {
    u.addr = chance(2) ? boundary_addr() : arena_addr();
    u.slot = chance(2) ? rnd(4) : static_cast<uint32_t>(chance(2) ? 16 + rnd(2) : rng());
    u.flags = chance(2) ? SHADDR_UNMAP_BY_SLOT : (chance(4) ? rng() : 0);
  }
  note(k_unmap, xioctl(f.fd, SHADDR_IOC_UNMAP, in_ptr(&u, sizeof(u))));
}

void op_query() {
  DupFd f;
  static thread_local shaddr_query q;
  note(k_query, xioctl(f.fd, SHADDR_IOC_QUERY, out_ptr(&q, 64)));
}

void op_set_slot_size() {
  DupFd f;
  static const uint64_t sizes[] = {SHADDR_SLOT_1M, SHADDR_SLOT_16M, SHADDR_SLOT_256M, 0,
                                   2 * kMiB,       kMiB + 1,        ~0ull,            kTiB};
  uint64_t s = sizes[chance(3) ? 3 + rnd(5) : rnd(3)];
  note(k_set_slot_size, xioctl(f.fd, SHADDR_IOC_SET_SLOT_SIZE, in_ptr(&s, sizeof(s))));
}

void op_make() {
  DupFd f;
  shaddr_make mk{};
  switch (rnd(6)) {
    case 0:  // the whole address space, as MPI libraries do
      mk.va = 0;
      mk.size = ~0ull;
      break;
    case 1:
      mk.va = boundary_addr() & (chance(4) ? ~0ull : ~(kPage - 1));
      mk.size = boundary_len();
      break;
    default:
      mk.va = arena_addr();
      mk.size = chance(8) ? boundary_len() : normal_len() & ~(kPage - 1);
  }
  mk.mode = chance(6) ? static_cast<uint32_t>(rng()) : (chance(2) ? 0666 : rnd(01000));
  mk.flags = chance(12) ? rng() : 0;
  void *arg = out_ptr(&mk, sizeof(mk));
  int r = xioctl(f.fd, SHADDR_IOC_MAKE, arg);
  note(k_make, r);
  if (r == 0 && answer(arg, &mk, sizeof(mk))) {
    uint64_t end = mk.size > kTask47 - std::min<uint64_t>(mk.va, kTask47) ? kTask47 : mk.va + mk.size;
    publish(kSegids, mk.segid, mk.va, end > mk.va ? end - mk.va : 0, 0);
  }
}

void op_remove() {
  DupFd f;
  IdValue e;
  pick_id(kSegids, &e);
  uint64_t id = e.id;
  note(k_remove, xioctl(f.fd, SHADDR_IOC_REMOVE, in_ptr(&id, sizeof(id))));
}

void op_get() {
  DupFd f;
  IdValue e;
  pick_id(kSegids, &e);
  shaddr_get g{};
  g.segid = e.id;
  g.flags = chance(6) ? static_cast<uint32_t>(chance(2) ? rnd(4) : rng()) : 1 + rnd(2);
  g.pad = chance(12) ? rng() : 0;
  void *arg = out_ptr(&g, sizeof(g));
  int r = xioctl(f.fd, SHADDR_IOC_GET, arg);
  note(k_get, r);
  if (r == 0 && answer(arg, &g, sizeof(g))) publish(kApids, g.apid, e.base, e.size, 0);
}

void op_release() {
  DupFd f;
  IdValue e;
  pick_id(kApids, &e);
  uint64_t id = e.id;
  note(k_release, xioctl(f.fd, SHADDR_IOC_RELEASE, in_ptr(&id, sizeof(id))));
}

// ATTACH with an access id (chain: MAKE and GET on the same file first, so it is valid there).
void do_attach(bool chain) {
  DupFd f;
  shaddr_attach a{};
  IdValue e;
  bool known = pick_id(kApids, &e);
  a.apid = e.id;
  if (chain) {
    shaddr_make mk{};
    shaddr_get g{};
    if (chance(3)) {
      mk.va = 0;
      mk.size = ~0ull;
    } else {
      mk.va = S->arena + rnd(kArenaSlots) * kArenaSlot;
      mk.size = kArenaSlot * (1 + rnd(2));
    }
    mk.mode = 0600;
    g.flags = 1 + rnd(2);
    if (xioctl(f.fd, SHADDR_IOC_MAKE, &mk) == 0) {
      uint64_t end = mk.size > kTask47 - mk.va ? kTask47 : mk.va + mk.size;
      publish(kSegids, mk.segid, mk.va, end - mk.va, 0);
      g.segid = mk.segid;
      if (xioctl(f.fd, SHADDR_IOC_GET, &g) == 0) {
        publish(kApids, g.apid, mk.va, end - mk.va, 0);
        a.apid = g.apid;
        e.base = mk.va;
        e.size = end - mk.va;
        known = true;
      }
    }
  }
  const uint64_t target = arena_addr();
  if (known && target >= e.base && target - e.base < e.size && !chance(4))
    a.offset = target - e.base + (chance(4) ? rnd(kPage) : 0);  // onto the exporter's arena
  else
    a.offset = chance(2) ? rnd(4) * kPage : (chance(2) ? e.size - rnd(2) * kPage : rng());
  a.size = chance(5) ? boundary_len() : normal_len();
  if (chance(4)) {
    a.vaddr = chance(2) ? arena_addr() : boundary_addr();
    a.vaddr = (a.vaddr & ~(kPage - 1)) | (a.offset & (kPage - 1));
    if (chance(2)) {
      a.flags = SHADDR_ATTACH_FIXED;
      const uint64_t len = ((a.offset & (kPage - 1)) + a.size + kPage - 1) & ~(kPage - 1);
      if (!len || touches_protected(a.vaddr & ~(kPage - 1), len)) a.flags = 0;
    }
  }
  if (chance(15)) a.flags = static_cast<uint32_t>(rng()) & ~SHADDR_ATTACH_FIXED;
  a.pad = chance(15) ? rng() : 0;
  void *arg = out_ptr(&a, sizeof(a));
  int r = xioctl(f.fd, SHADDR_IOC_ATTACH, arg);
  note(chain ? k_attach_chain : k_attach, r);
  if (r == 0 && answer(arg, &a, sizeof(a)))
    reg_add(a.addr & ~(kPage - 1), ((a.addr & (kPage - 1)) + a.size + kPage - 1) & ~(kPage - 1),
            kAttachReg);
}
void op_attach() { do_attach(false); }
void op_attach_chain() { do_attach(true); }

void op_detach() {
  DupFd f;
  Region r;
  uint64_t addr = !chance(4) && reg_pick(&r, kAttachReg) ? r.addr + rnd(r.len) : boundary_addr();
  note(k_detach, xioctl(f.fd, SHADDR_IOC_DETACH, in_ptr(&addr, sizeof(addr))));
}

void op_random_cmd() {
  DupFd f;
  for (int i = 0; i < 256; i++) tl_arg[i] = static_cast<char>(rng());
  unsigned long cmd = _IOC(rnd(4), chance(8) ? rnd(256) : SHADDR_IOC_MAGIC, rnd(32), rnd(1024));
  if (chance(10)) cmd = rng() & 0xffffffff;
  note(k_random_cmd, xioctl(f.fd, cmd, out_ptr(tl_arg, 256)));
}

// ---- Memory touches ---------------------------------------------------------------------------------

void probe_op(bool write) {
  Region r;
  uint64_t addr = reg_pick(&r) && !chance(3) ? r.addr + rnd(r.len) : arena_addr() + rnd(kPage);
  int sig = probe(reinterpret_cast<volatile char *>(addr), write ? Touch::kPreserve : Touch::kRead);
  S->probes[write][sig == SIGBUS ? 1 : sig == SIGSEGV ? 2 : 0].fetch_add(1);
  note(write ? k_write_probe : k_read_probe, sig ? -EFAULT : 0);
}
void op_read_probe() { probe_op(false); }
void op_write_probe() { probe_op(true); }

// ---- VMA operations ---------------------------------------------------------------------------------

// A range to operate on: a region (whole or part), an arena range, or a boundary range. False if
// it would touch memory mapped at start-up. Ranges longer than `max_len` are cut to a random
// part of that length (madvise walks, e.g. MADV_COLLAPSE over a 64 TiB reservation, hold the
// mmap lock for minutes).
bool pick_range(uint64_t *addr, uint64_t *len, bool partial_ok = true, uint64_t max_len = ~0ull) {
  Region r;
  switch (rnd(10)) {
    case 0: case 1: case 2: case 3: case 4:
      if (reg_pick(&r)) {
        *addr = r.addr;
        *len = r.len;
        if (partial_ok && chance(3)) {
          switch (rnd(4)) {
            case 0: *len = kPage; break;
            case 1: *addr = r.addr + r.len - kPage; *len = kPage; break;
            case 2: *addr = r.addr + (r.len / 2 & ~(kPage - 1)); *len = kPage; break;
            default: *len = (r.len / 2 + kPage - 1) & ~(kPage - 1);
          }
        }
        break;
      }
      [[fallthrough]];
    case 5: case 6: case 7: case 8:
      *len = chance(2) ? kPage * (1 + rnd(512)) : kArenaSlot;
      *addr = arena_addr(*len);
      break;
    default:
      *addr = chance(2) ? boundary_addr() & ~(kPage - 1) : arena_addr();
      *len = boundary_len();
  }
  if (*len > max_len) {
    *addr += rnd((*len - max_len) / kPage) * kPage;
    *len = max_len;
  }
  return !touches_protected(*addr, *len);
}

void op_munmap(bool partial) {
  uint64_t a, l;
  if (!pick_range(&a, &l, partial)) return;
  note(partial ? k_munmap_partial : k_munmap, sys(munmap(reinterpret_cast<void *>(a), l)));
}

void op_mremap() {
  uint64_t a, l;
  if (!pick_range(&a, &l, false, 4 * kArenaSlot) || l == 0) return;
  const uint64_t pages = l / kPage ? l / kPage : 1;
  uint64_t nl = l, t = 0;
  int flags = 0;
  Op kind;
  switch (rnd(9)) {
    case 0: kind = k_mremap_shrink; nl = (pages / 2 ? pages / 2 : 1) * kPage; break;
    case 1: kind = k_mremap_grow; nl = l + kPage * (1 + rnd(64)); break;
    case 2: kind = k_mremap_maymove; nl = l * (1 + rnd(3)); flags = MREMAP_MAYMOVE; break;
    case 3: kind = k_mremap_fixed; flags = MREMAP_MAYMOVE | MREMAP_FIXED; break;
    case 4:
      kind = k_mremap_fixed_resize;
      nl = chance(2) ? l + kPage * (1 + rnd(64)) : (pages / 2 ? pages / 2 : 1) * kPage;
      flags = MREMAP_MAYMOVE | MREMAP_FIXED;
      break;
    case 5: kind = k_mremap_dontunmap; flags = MREMAP_MAYMOVE | MREMAP_DONTUNMAP; break;
    case 6:
      kind = k_mremap_dontunmap_fixed;
      flags = MREMAP_MAYMOVE | MREMAP_DONTUNMAP | MREMAP_FIXED;
      break;
    case 7: kind = k_mremap_dup; flags = MREMAP_MAYMOVE; break;  // old_len 0: a second mapping
    default:
      kind = k_mremap_partial;
      a += (pages / 2) * kPage;
      l = nl = kPage;
      flags = MREMAP_MAYMOVE | MREMAP_FIXED;
  }
  if (chance(12)) nl = boundary_len();
  if (flags & MREMAP_FIXED) {
    t = arena_addr(nl);
    if (touches_protected(t, nl)) return;
  }
  void *p = mremap(reinterpret_cast<void *>(a), kind == k_mremap_dup ? 0 : l, nl, flags,
                   reinterpret_cast<void *>(t));
  note(kind, sysp(p));
  if (p != MAP_FAILED) {
    const uint64_t np = reinterpret_cast<uint64_t>(p);
    if (!arena_contains(np, nl)) reg_add(np, nl, kMoved);
    if (np != a && !(flags & MREMAP_DONTUNMAP) && kind != k_mremap_dup) reg_forget(a);
  }
}

void op_mprotect(bool partial) {
  uint64_t a, l;
  if (!pick_range(&a, &l, partial)) return;
  static const int prots[] = {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE, PROT_READ | PROT_EXEC,
                              PROT_READ | PROT_WRITE | PROT_EXEC, PROT_WRITE};
  note(partial ? k_mprotect_partial : k_mprotect,
       sys(mprotect(reinterpret_cast<void *>(a), l, prots[rnd(6)])));
}

void op_madvise() {
  uint64_t a, l;
  if (!pick_range(&a, &l, true, 4 * kArenaSlot)) return;
  static const int others[] = {MADV_WILLNEED,       MADV_FREE,      MADV_HUGEPAGE,
                               MADV_NOHUGEPAGE,     MADV_MERGEABLE, MADV_UNMERGEABLE,
                               22 /* POPULATE_READ */, 23 /* POPULATE_WRITE */,
                               MADV_WIPEONFORK,     MADV_KEEPONFORK, MADV_DONTDUMP,
                               MADV_DODUMP,         MADV_NORMAL,    MADV_RANDOM,
                               MADV_SEQUENTIAL,     25 /* COLLAPSE */, 99 /* invalid */};
  Op kind;
  int advice;
  switch (rnd(8)) {
    case 0: kind = k_madv_dontneed; advice = MADV_DONTNEED; break;
    case 1: kind = k_madv_dontfork; advice = MADV_DONTFORK; break;
    case 2: kind = k_madv_dofork; advice = MADV_DOFORK; break;
    case 3: kind = k_madv_remove; advice = MADV_REMOVE; break;
    case 4: kind = k_madv_pageout; advice = MADV_PAGEOUT; break;
    case 5: kind = k_madv_cold; advice = MADV_COLD; break;
    default: kind = k_madv_other; advice = others[rnd(sizeof(others) / sizeof(others[0]))];
  }
  note(kind, sys(madvise(reinterpret_cast<void *>(a), l, advice)));
}

// mmap into the arena: anonymous (private/shared), memfd (shared/private), THP-aligned; fixed,
// fixed-noreplace or a hint. Sometimes a huge PROT_NONE reservation anywhere.
void op_mmap_scratch() {
  uint64_t len = chance(2) ? kPage * (1 + rnd(256)) : kMiB * (1 + rnd(kArenaSlot / kMiB));
  uint64_t addr = arena_addr(len);
  int flags = chance(5) ? MAP_FIXED_NOREPLACE : MAP_FIXED;
  int prot = PROT_READ | PROT_WRITE, fd = -1;
  off_t off = 0;
  bool thp = false;
  switch (rnd(6)) {
    case 0: flags |= MAP_PRIVATE | MAP_ANONYMOUS | (chance(2) ? MAP_POPULATE : 0); break;
    case 1: flags |= MAP_SHARED | MAP_ANONYMOUS; break;
    case 2: flags |= MAP_SHARED; fd = L.memfd; break;
    case 3: flags |= MAP_PRIVATE; fd = L.memfd; break;
    case 4:
      flags |= MAP_PRIVATE | MAP_ANONYMOUS;
      addr = S->arena + rnd(kArenaSlots) * kArenaSlot + rnd(kArenaSlot / (2 * kMiB)) * 2 * kMiB;
      len = 2 * kMiB * (1 + rnd(2));
      if (addr + len > S->arena + kArenaSize) addr -= len;
      thp = true;
      break;
    default:
      if (chance(4)) {  // a huge reservation, placed by the kernel
        note(k_mmap_scratch, 0);
        len = chance(2) ? kTiB : 64 * kTiB;
        void *p = mmap(nullptr, len, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) reg_add(reinterpret_cast<uint64_t>(p), len, kMoved);
        return;
      }
      flags = MAP_PRIVATE | MAP_ANONYMOUS;  // a hint only
  }
  if (fd >= 0) {
    off = rnd(kMemfdSize / kPage) * kPage;
    if (len > kMemfdSize) len = kMemfdSize;
  }
  if (touches_protected(addr, len)) return;
  void *p = mmap(reinterpret_cast<void *>(addr), len, prot, flags, fd, off);
  note(k_mmap_scratch, sysp(p));
  if (p == MAP_FAILED) return;
  if (!arena_contains(reinterpret_cast<uint64_t>(p), len))
    reg_add(reinterpret_cast<uint64_t>(p), len, kMoved);
  if (thp) {
    madvise(p, len, MADV_HUGEPAGE);
    madvise(p, len, 23 /* MADV_POPULATE_WRITE */);
  }
}

// A plain mmap() of the device: must always fail (contract item 2).
void op_mmap_dev() {
  DupFd f;
  static const uint64_t lens[] = {kPage, kMiB, 2 * kMiB, 16 * kMiB, 256 * kMiB, kTiB};
  uint64_t len = lens[rnd(6)];
  off_t off;
  switch (rnd(4)) {
    case 0: off = 0; break;
    case 1: off = static_cast<off_t>(rnd(8) << 40); break;
    case 2: off = static_cast<off_t>((rnd(8) << 40) + rnd(512) * kPage); break;
    default: off = static_cast<off_t>(rng() & 0x7ffffffffffff000ull);
  }
  int flags = chance(4) ? MAP_PRIVATE : MAP_SHARED;
  void *hint = nullptr;
  if (chance(3)) {
    hint = reinterpret_cast<void *>(arena_addr(len));
    if (chance(2) && !touches_protected(reinterpret_cast<uint64_t>(hint), len)) flags |= MAP_FIXED;
  }
  void *p = mmap(hint, len, chance(2) ? PROT_READ : PROT_READ | PROT_WRITE, flags, f.fd, off);
  note(k_mmap_dev, sysp(p));
  if (p != MAP_FAILED) {
    S->plain_mmap_ok.fetch_add(1);
    fail("a plain mmap() of the device succeeded (offset 0x%llx, length 0x%llx)",
         static_cast<unsigned long long>(off), static_cast<unsigned long long>(len));
    reg_add(reinterpret_cast<uint64_t>(p), len, kDevMap);
  }
}

void op_move_pages() {
  uint64_t a, l;
  if (!pick_range(&a, &l, true, 4 * kArenaSlot)) return;
  void *pages[16];
  int nodes[16], status[16];
  const int n = 1 + static_cast<int>(rnd(16));
  for (int i = 0; i < n; i++) {
    pages[i] = reinterpret_cast<void *>(a + (l > kPage ? rnd(l / kPage) * kPage : 0));
    nodes[i] = static_cast<int>(rnd(2));
  }
  pid_t pid = 0;
  if (chance(2)) {  // another worker's pages at the same (arena) addresses
    int32_t w = S->worker_pid[rnd(S->nprocs)].load();
    if (w > 0) pid = w;
  }
  note(k_move_pages, sys(syscall(SYS_move_pages, pid, n, pages, nodes, status,
                                 chance(4) ? MPOL_MF_MOVE_ALL : MPOL_MF_MOVE)));
}

void op_memfd() {
  long r;
  switch (rnd(3)) {
    case 0: r = sys(ftruncate(L.memfd, rnd(kMemfdSize / kPage + 1) * kPage)); break;
    case 1:
      r = sys(fallocate(L.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        rnd(kMemfdSize / kPage) * kPage, kPage * (1 + rnd(256))));
      break;
    default: {
      for (int i = 0; i < 256; i++) tl_arg[i] = static_cast<char>(rng());
      r = sys(pwrite(L.memfd, tl_arg, 1 + rnd(4096), rnd(kMemfdSize)));
    }
  }
  note(k_memfd, r);
}

// ---- Files --------------------------------------------------------------------------------------------

void op_open() {
  static const int modes[] = {O_RDWR, O_RDWR, O_RDWR, O_RDONLY, O_WRONLY};
  int fd = open("/dev/shaddr", modes[rnd(5)] | (chance(2) ? O_CLOEXEC : 0));
  note(k_open, sys(fd));
  if (fd >= 0 && chance(3)) {
    uint64_t s = chance(2) ? SHADDR_SLOT_1M : SHADDR_SLOT_256M;
    xioctl(fd, SHADDR_IOC_SET_SLOT_SIZE, &s);
  }
  pool_put(fd);
}

void op_close() {
  L.lock.lock();
  int i = static_cast<int>(rnd(kPool)), fd = L.pool[i];
  L.pool[i] = -1;
  L.lock.unlock();
  if (fd >= 0) note(k_close, sys(close(fd)));
}

void op_dup() {
  int fd = pool_dup();
  note(k_dup, fd);
  pool_put(fd);
}

void op_send_fd() {
  int fd = pool_dup();
  if (fd < 0) return;
  note(k_send_fd, send_fd(S->sock_tx[rnd(S->nprocs)], fd, MSG_DONTWAIT | MSG_NOSIGNAL));
  close(fd);
}

void op_recv_fd() {
  if (L.slot < 0) return;
  int fd = recv_fd(S->sock_rx[L.slot], MSG_DONTWAIT);
  if (fd == -EAGAIN) return;
  note(k_recv_fd, fd);
  pool_put(fd);
}

// ---- Processes ------------------------------------------------------------------------------------------

void child_main(int depth);

void op_fork() {
  if (L.depth >= 2) return;
  L.lock.lock();
  int free_slot = -1;
  for (int i = 0; i < kKids; i++)
    if (L.kids[i] <= 0) {
      free_slot = i;
      break;
    }
  if (free_slot < 0) {
    L.lock.unlock();
    return;
  }
  const uint64_t child_seed = rng();
  pid_t pid = fork();
  if (pid == 0) {
    rng.seed(child_seed);
    child_main(L.depth + 1);  // never returns
  }
  if (pid > 0) L.kids[free_slot] = pid;
  L.lock.unlock();
  note(k_fork, sys(pid));
  if (pid > 0) S->children.fetch_add(1);
}

void op_child_kill() {
  L.lock.lock();
  int n = 0;
  pid_t cand[kKids];
  for (pid_t p : L.kids)
    if (p > 0) cand[n++] = p;
  pid_t victim = n ? cand[rnd(n)] : 0;
  if (victim) mark_kill(victim);
  L.lock.unlock();
  if (!victim) return;
  note(k_child_kill, sys(kill(victim, SIGKILL)));
  S->kids_killed.fetch_add(1);
}

// Checks how a child of this process ended. Exit 0, or SIGKILL that someone meant, are fine.
void judge(pid_t pid, int status, const char *what) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && kill_intended(pid)) return;
  char d[96];
  fail("%s %d %s", what, pid, describe_status(status, d, sizeof(d)));
}

// Reaps this process's children that have exited; with `all`, kills and reaps every one.
void reap_kids(bool all) {
  for (;;) {
    if (all) {
      L.lock.lock();
      for (pid_t p : L.kids)
        if (p > 0) {
          mark_kill(p);
          kill(p, SIGKILL);
        }
      L.lock.unlock();
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, all ? 0 : WNOHANG);
    if (pid <= 0) {
      if (pid < 0 && errno == EINTR) continue;
      return;
    }
    L.lock.lock();
    for (pid_t &p : L.kids)
      if (p == pid) p = 0;
    L.lock.unlock();
    judge(pid, status, "child");
  }
}

// ---- The operation mix --------------------------------------------------------------------------------

struct Weighted {
  void (*fn)();
  int weight;
};

void op_munmap_whole() { op_munmap(false); }
void op_munmap_part() { op_munmap(true); }
void op_mprotect_whole() { op_mprotect(false); }
void op_mprotect_part() { op_mprotect(true); }

const Weighted kMix[] = {
    {op_version, 1},       {op_translate, 8},     {op_revoke, 3},        {op_map, 10},
    {op_unmap, 4},         {op_query, 2},         {op_set_slot_size, 1}, {op_make, 5},
    {op_remove, 3},        {op_get, 6},           {op_release, 2},       {op_attach, 5},
    {op_attach_chain, 5},  {op_detach, 3},        {op_random_cmd, 2},    {op_read_probe, 8},
    {op_write_probe, 6},   {op_mmap_scratch, 6},  {op_mmap_dev, 3},      {op_munmap_whole, 3},
    {op_munmap_part, 2},   {op_mremap, 8},        {op_mprotect_whole, 2}, {op_mprotect_part, 2},
    {op_madvise, 8},       {op_move_pages, 2},    {op_memfd, 2},         {op_open, 2},
    {op_close, 1},         {op_dup, 1},           {op_send_fd, 2},       {op_recv_fd, 3},
    {op_fork, 1},          {op_child_kill, 1},
};

void one_op() {
  static const int total = [] {
    int t = 0;
    for (const Weighted &w : kMix) t += w.weight;
    return t;
  }();
  int x = static_cast<int>(rnd(total));
  for (const Weighted &w : kMix) {
    if (x < w.weight) {
      w.fn();
      break;
    }
    x -= w.weight;
  }
  if (chance(16)) reg_prune();
}

// A forked child: uses the inherited files (foreign to it), opens its own, exports, imports,
// touches, forks again (to depth 2), and exits after at most about a second -- or is killed.
void child_main(int depth) {
  new (&L.lock) Spin();  // a lock held by another thread at fork stays held in the copy
  L.depth = depth;
  for (pid_t &p : L.kids) p = 0;
  L.slot = -1;  // do not steal the worker's passed fds
  const double end = now() + 0.02 + rnd(1000) / 1000.0;
  int n = 0;
  while (now() < end && !S->stop.load(std::memory_order_relaxed)) {
    if (chance(40)) break;  // exit at a random point, holding whatever it has
    one_op();
    if (++n % 8 == 0) reap_kids(false);
  }
  reap_kids(true);
  _exit(0);
}

// ---- Workers ----------------------------------------------------------------------------------------------

void fatal_signal(int sig, siginfo_t *si, void *ctx) {
  if (detail::probe_active) {
    detail::probe_handler(sig, si, ctx);
    return;
  }
  char line[160];
  int n = snprintf(line, sizeof(line), "fuzz: pid %d: %s at address %p outside a probe\n", getpid(),
                   strsignal(sig), si->si_addr);
  if (write(2, line, n) < 0) { /* dying anyway */ }
  signal(sig, SIG_DFL);  // the instruction faults again and the process dies of it
}

void install_fatal_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGSEGV, &sa, nullptr);
}

void thread_init(uint64_t seed) {
  rng.seed(seed);
  tl_buf = static_cast<char *>(mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (tl_buf == MAP_FAILED || mprotect(tl_buf + kPage, kPage, PROT_NONE)) _exit(5);
}

[[noreturn]] void worker_main(int slot, uint64_t incarnation) {
  L.slot = slot;
  L.incarnation = incarnation;
  for (int &fd : L.pool) fd = -1;
  const uint64_t base_seed = splitmix(S->seed ^ (static_cast<uint64_t>(slot) << 32) ^ (incarnation << 40));
  thread_init(base_seed);
  L.memfd = static_cast<int>(syscall(SYS_memfd_create, "shaddr-fuzz", MFD_CLOEXEC));
  if (L.memfd < 0 || ftruncate(L.memfd, kMemfdSize)) _exit(3);
  for (int i = 0; i < 2; i++) pool_put(open_dev());
  uint64_t mib = SHADDR_SLOT_1M;
  xioctl(L.pool[0], SHADDR_IOC_SET_SLOT_SIZE, &mib);
  pool_put(fcntl(S->inherited_fd, F_DUPFD_CLOEXEC, 3));  // the supervisor's: foreign here

  // Start the threads while the arena is still reserved, so that their stacks land elsewhere;
  // then record what is mapped, and free the arena for the fuzzing.
  std::atomic<int> ready{0}, go{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < S->nthreads; t++) {
    threads.emplace_back([&, t] {
      thread_init(splitmix(base_seed + t + 1));
      ready.fetch_add(1);
      while (!go.load()) sched_yield();
      while (!S->stop.load(std::memory_order_relaxed)) {
        if (S->exit_request[slot].load(std::memory_order_relaxed)) {
          // Exit the whole worker from this thread, while the others are inside calls.
          note(k_worker_exit, 0);
          _exit(0);
        }
        one_op();
      }
    });
  }
  while (ready.load() < S->nthreads) sched_yield();
  snapshot_protected();
  munmap(reinterpret_cast<void *>(S->arena), kArenaSize);
  // Some content to start with: anonymous, memfd-backed and THP-aligned scratch, and exports.
  for (int i = 0; i < 4; i++) op_mmap_scratch();
  for (int i = 0; i < 3; i++) op_translate();
  op_make();
  go.store(1);

  while (!S->stop.load()) {
    reap_kids(false);
    if (chance(16)) op_child_kill();
    usleep(20000);
  }
  for (auto &t : threads) t.join();
  reap_kids(true);
  _exit(0);
}

// ---- The supervisor -------------------------------------------------------------------------------------

struct Options {
  int seconds = 60;
  uint64_t seed = 0;
  bool seed_given = false;
  int procs = 3, threads = 3;
  bool quiet = false;
};

Options parse(int argc, char **argv) {
  Options o;
  int positional = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    auto value = [&](const char *name) -> const char * {
      if (i + 1 >= argc) {
        fprintf(stderr, "fuzz: %s needs a value\n", name);
        exit(2);
      }
      return argv[++i];
    };
    if (!strcmp(a, "--seconds")) {
      o.seconds = atoi(value(a));
    } else if (!strcmp(a, "--seed")) {
      o.seed = strtoull(value(a), nullptr, 0);
      o.seed_given = true;
    } else if (!strcmp(a, "--procs")) {
      o.procs = atoi(value(a));
    } else if (!strcmp(a, "--threads")) {
      o.threads = atoi(value(a));
    } else if (!strcmp(a, "--quiet")) {
      o.quiet = true;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf("usage: %s [SECONDS [SEED]] [--seconds N] [--seed N] [--procs N] [--threads N] "
             "[--quiet]\n", argv[0]);
      exit(0);
    } else if (a[0] != '-' && positional == 0) {
      o.seconds = atoi(a);
      positional++;
    } else if (a[0] != '-' && positional == 1) {
      o.seed = strtoull(a, nullptr, 0);
      o.seed_given = true;
      positional++;
    } else {
      fprintf(stderr, "fuzz: unknown argument %s\n", a);
      exit(2);
    }
  }
  if (o.seconds < 1) o.seconds = 1;
  o.procs = std::clamp(o.procs, 1, kMaxProcs);
  o.threads = std::clamp(o.threads, 1, kMaxThreads);
  if (!o.seed_given) {
    if (getrandom(&o.seed, sizeof(o.seed), 0) != sizeof(o.seed)) o.seed = time(nullptr);
    o.seed &= (1ull << 53) - 1;  // short enough to retype
  }
  return o;
}

pid_t start_worker(int slot, uint64_t incarnation) {
  S->exit_request[slot].store(0);
  pid_t pid = fork();
  if (pid == 0) worker_main(slot, incarnation);
  if (pid > 0) {
    S->worker_pid[slot].store(pid);
    S->worker_starts.fetch_add(1);
  }
  return pid;
}

// Our children right now (workers, and orphans the subreaper inherited), from /proc.
int list_children(pid_t *out, int max) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", getpid(), getpid());
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int n = 0;
  if (fd >= 0) {
    char buf[8192];
    ssize_t r = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[r > 0 ? r : 0] = 0;
    for (char *p = buf; *p && n < max;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      out[n++] = static_cast<pid_t>(v);
      p = end;
    }
  }
  return n;
}

// For a report on processes that do not die: every thread of every other process with this
// program's name (a process stuck in exit has no /proc/PID/exe any more), with its state, wait
// channel and kernel stack.
void dump_stuck() {
  auto slurp = [](const char *path, char *buf, size_t len) -> ssize_t {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t r = read(fd, buf, len - 1);
    close(fd);
    buf[r > 0 ? r : 0] = 0;
    return r;
  };
  char self[64];
  if (slurp("/proc/self/comm", self, sizeof(self)) <= 0) return;
  DIR *proc = opendir("/proc");
  if (!proc) return;
  for (dirent *d; (d = readdir(proc));) {
    const pid_t pid = atoi(d->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    char path[PATH_MAX], comm[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", pid);
    if (slurp(path, comm, sizeof(comm)) <= 0 || strcmp(comm, self)) continue;
    snprintf(path, sizeof(path), "/proc/%d/task", pid);
    DIR *tasks = opendir(path);
    for (dirent *t; tasks && (t = readdir(tasks));) {
      if (t->d_name[0] == '.') continue;
      for (const char *what : {"stat", "wchan", "stack"}) {
        char buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", pid, t->d_name, what);
        ssize_t r = slurp(path, buf, sizeof(buf));
        if (r < 0) continue;
        printf("fuzz: stuck pid %d task %s %s: %s%s", pid, t->d_name, what, buf,
               r > 0 && buf[r - 1] == '\n' ? "" : "\n");
      }
    }
    if (tasks) closedir(tasks);
  }
  closedir(proc);
}

void print_summary(const Options &o, double elapsed) {
  printf("fuzz: seed %" PRIu64 ", %d s (ran %.1f s), %d workers x %d threads\n", o.seed, o.seconds,
         elapsed, o.procs, o.threads);
  uint64_t total = 0, total_ok = 0;
  printf("fuzz: %-24s %10s %10s  errors (errno: count)\n", "operation", "calls", "succeeded");
  for (int k = 0; k < kNumOps; k++) {
    const uint64_t n = S->ops[k].load(), ok = S->ok[k].load();
    total += n;
    total_ok += ok;
    if (!n) continue;
    char errs[512];
    size_t off = 0;
    errs[0] = 0;
    for (int e = 1; e <= kErrSlots && off < sizeof(errs) - 40; e++) {
      const uint64_t c = S->err[k][e].load();
      if (!c) continue;
      const char *name = e < kErrSlots ? strerrorname_np(e) : nullptr;
      off += snprintf(errs + off, sizeof(errs) - off, "%s%s %" PRIu64, off ? ", " : "",
                      name ? name : "other", c);
    }
    printf("fuzz: %-24s %10" PRIu64 " %10" PRIu64 "  %s\n", kOpNames[k], n, ok, errs);
  }
  printf("fuzz: %-24s %10" PRIu64 " %10" PRIu64 "\n", "total", total, total_ok);
  printf("fuzz: errors per errno:");
  for (int e = 1; e <= kErrSlots; e++) {
    uint64_t c = 0;
    for (int k = 0; k < kNumOps; k++) c += S->err[k][e].load();
    if (!c) continue;
    const char *name = e < kErrSlots ? strerrorname_np(e) : nullptr;
    printf(" %s %" PRIu64, name ? name : "other", c);
  }
  printf("\nfuzz: probes: reads %" PRIu64 " clean, %" PRIu64 " SIGBUS, %" PRIu64
         " SIGSEGV; writes %" PRIu64 " clean, %" PRIu64 " SIGBUS, %" PRIu64 " SIGSEGV\n",
         S->probes[0][0].load(), S->probes[0][1].load(), S->probes[0][2].load(),
         S->probes[1][0].load(), S->probes[1][1].load(), S->probes[1][2].load());
  printf("fuzz: processes: %" PRIu64 " workers started, %" PRIu64 " children forked, %" PRIu64
         " SIGKILLs sent to children; plain device mmaps that succeeded: %" PRIu64 "\n",
         S->worker_starts.load(), S->children.load(), S->kids_killed.load(),
         S->plain_mmap_ok.load());
}

}  // namespace

// The fuzzer runs as root, but attacks as a user: without CAP_SYS_RAWIO, which lets root map
// below vm.mmap_min_addr (boundary addresses of 0 then fail as they do for a user). There the
// kernel has a bug of its own (6.1 and 6.12, mm/mprotect.c): mprotect() of a range starting at
// address 0 starts an mmu notifier invalidation that it never ends (range.start == 0 means "not
// started" to it), and from then on every mmu interval notifier of that address space waits for
// ever: MAP, ATTACH and the exporter's exit hang, for any interval-notifier user, not only this
// module. Found by this fuzzer (ATTACH fixed at address 0, then mprotect of it).
void drop_low_mappings() {
  if (prctl(PR_CAPBSET_DROP, CAP_SYS_RAWIO, 0, 0, 0) && errno != EINVAL) perror("PR_CAPBSET_DROP");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (syscall(SYS_capget, &hdr, data)) return;
  const uint32_t bit = 1u << (CAP_SYS_RAWIO % 32);
  auto &d = data[CAP_SYS_RAWIO / 32];
  d.effective &= ~bit;
  d.permitted &= ~bit;
  d.inheritable &= ~bit;
  if (syscall(SYS_capset, &hdr, data)) perror("capset");
}

int main(int argc, char **argv) {
  const Options o = parse(argc, argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // malloc from brk only: nothing may appear in the address space behind the fuzzer's back.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_ARENA_MAX, 1);
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  drop_low_mappings();
  rlimit nofile{4096, 4096};
  setrlimit(RLIMIT_NOFILE, &nofile);

  S = static_cast<Shared *>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (S == MAP_FAILED) return 3;
  S->seed = o.seed;
  S->nprocs = o.procs;
  S->nthreads = o.threads;
  // The arena: the same addresses in every worker (all are forks of this process).
  char *raw = static_cast<char *>(mmap(nullptr, kArenaSize + 2 * kMiB, PROT_NONE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (raw == MAP_FAILED) return 3;
  S->arena = (reinterpret_cast<uint64_t>(raw) + 2 * kMiB - 1) & ~(2 * kMiB - 1);
  // Exactly the arena stays reserved (workers leave ranges inside it out of their start-up map).
  if (S->arena > reinterpret_cast<uint64_t>(raw)) munmap(raw, S->arena - reinterpret_cast<uint64_t>(raw));
  munmap(reinterpret_cast<void *>(S->arena + kArenaSize),
         reinterpret_cast<uint64_t>(raw) + kArenaSize + 2 * kMiB - (S->arena + kArenaSize));
  S->inherited_fd = open_dev(O_RDWR);  // every worker inherits this file: foreign to them
  if (S->inherited_fd < 0) {
    fprintf(stderr, "fuzz: cannot open /dev/shaddr: %s\n", strerror(-S->inherited_fd));
    return 4;
  }
  for (int i = 0; i < o.procs; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv)) return 3;
    S->sock_rx[i] = sv[0];
    S->sock_tx[i] = sv[1];
  }
  install_fatal_handlers();
  printf("fuzz: seed %" PRIu64 " (reproduce the random streams: %s %d --seed %" PRIu64
         " --procs %d --threads %d)\n",
         o.seed, argv[0], o.seconds, o.seed, o.procs, o.threads);

  const double start = now(), end = start + o.seconds;
  uint64_t incarnations = 0;
  for (int i = 0; i < o.procs; i++)
    if (start_worker(i, incarnations++) < 0) return 3;
  std::mt19937_64 sup(splitmix(o.seed));
  double next_churn = start + 2 + sup() % 3000 / 1000.0;

  // Run: reap, judge, restart; now and then kill a worker or ask it to exit mid-flight.
  auto reap_one = [&](bool block) -> bool {
    int status = 0;
    pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);
    if (pid <= 0) return false;
    int slot = -1;
    for (int i = 0; i < o.procs; i++)
      if (S->worker_pid[i].load() == pid) slot = i;
    judge(pid, status, slot >= 0 ? "worker" : "orphaned child");
    if (slot >= 0) {
      S->worker_pid[slot].store(0);
      if (now() < end && !S->stop.load()) start_worker(slot, incarnations++);
    }
    return true;
  };
  double next_sample = start;
  bool negative_seen = false;
  while (now() < end) {
    while (reap_one(false)) {
    }
    if (now() >= next_sample && !negative_seen) {  // a counter below 0: something freed twice
      for (const char *c : kLiveCounters) {
        const long long v = stat_value(c);
        if (v < 0 && v != kNoCounter) {
          fail("counter %s is %lld during the run", c, v);
          negative_seen = true;
        }
      }
      next_sample = now() + 0.5;
    }
    if (now() >= next_churn) {
      const int slot = static_cast<int>(sup() % o.procs);
      const pid_t pid = S->worker_pid[slot].load();
      if (pid > 0) {
        if (sup() % 2) {
          mark_kill(pid);
          kill(pid, SIGKILL);
          S->ops[k_worker_kill].fetch_add(1);
          S->ok[k_worker_kill].fetch_add(1);
        } else {
          S->exit_request[slot].store(1);
        }
      }
      next_churn = now() + 2 + sup() % 4000 / 1000.0;
    }
    usleep(20000);
  }

  // Stop: workers finish their calls, kill and reap their children, and exit.
  S->stop.store(1);
  const double stop_at = now();
  bool killed = false, stuck = false;
  for (;;) {
    while (reap_one(false)) {
    }
    pid_t kids[256];
    const int n = list_children(kids, 256);
    siginfo_t si{};
    if (n == 0 && waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) break;
    if (!killed && now() - stop_at > 30) {
      for (int i = 0; i < n; i++) {
        mark_kill(kids[i]);
        kill(kids[i], SIGKILL);
      }
      killed = true;
      printf("fuzz: processes still alive 30 s after the stop: killed %d\n", n);
      dump_stuck();
    } else if (killed && now() - stop_at > 60) {
      fail("%d process(es) cannot be reaped 60 s after the stop (stuck in the kernel?)", n);
      dump_stuck();
      // What they wait for may be a kernel thread (a workqueue, khugepaged): every blocked
      // task's stack into the kernel log.
      if (FILE *f = fopen("/proc/sysrq-trigger", "w")) {
        fputs("w", f);
        fclose(f);
      }
      stuck = true;
      break;
    } else if (killed) {
      for (int i = 0; i < n; i++) {
        mark_kill(kids[i]);
        kill(kids[i], SIGKILL);
      }
    }
    usleep(20000);
  }
  const double elapsed = now() - start;

  close(S->inherited_fd);
  for (int i = 0; i < o.procs; i++) {
    close(S->sock_rx[i]);  // drops the device files still in flight
    close(S->sock_tx[i]);
  }
  char why[256] = "";
  const bool zero = !stuck && wait_counters_zero(15, why, sizeof(why));
  if (!o.quiet || !zero || S->failures.load()) print_summary(o, elapsed);
  printf("fuzz: counters after all processes are gone:");
  for (const char *c : kLiveCounters) {
    const long long v = stat_value(c);
    if (v == kNoCounter)
      printf(" %s ?", c);
    else
      printf(" %s %lld", c, v);
  }
  printf("\n");
  const uint32_t nfail = S->failures.load();
  for (uint32_t i = 0; i < nfail && i < 16; i++) printf("fuzz: failure: %s\n", S->fail_msg[i]);
  if (!zero) printf("fuzz: FAIL: objects left behind: %s\n", stuck ? "processes stuck" : why);
  if (nfail) printf("fuzz: FAIL: %u failure(s)\n", nfail);
  if (zero && !nfail) printf("fuzz: PASS\n");
  return zero && !nfail ? 0 : 1;
}
