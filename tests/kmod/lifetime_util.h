// SPDX-License-Identifier: MIT
// Helpers shared by the lifetime regression tests (test_lifetime.cc) and the race stress
// program (race_stress.cc): generation-tagged page patterns and the read invariant, a
// thread-safe SIGBUS/SIGSEGV probe, shared memory between processes, bounded waits for
// children, the module's live counters, and a watch on the kernel log (/dev/kmsg).
//
// The invariant: an exporter writes tag(magic, gen, page) into the first and last word of every
// page of its buffer. `started` is the generation whose change is under way (the exporter sets
// it before it invalidates anything), `done` the last generation fully written. A read through
// a window of page p, with d = done loaded before the read and s = started loaded after it, is
// legitimate if it is
//   - a signal (SIGBUS: hole, revoked, exporter gone),
//   - tag(magic, g, p) with d <= g <= s,
//   - zero while a change is under way (s > d: freshly faulted anonymous memory),
// and anything else is a violation: poison (0xaa..), zeros, another page's or another
// process's data, or a generation the exporter no longer maps. Once the exporter has returned
// from REVOKE/REMOVE/close or has exited (and was reaped), every read must raise SIGBUS.
#pragma once

#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "shaddr_test_util.h"

namespace shaddr_lifetime {

using shaddr_test::kMiB;
using shaddr_test::kPage;

constexpr uint64_t kPoison = 0xaaaaaaaaaaaaaaaaull;
constexpr size_t kWordsPerPage = kPage / sizeof(uint64_t);
// Word of each page that importers may write (the exporter's tags are words 0 and 511).
constexpr size_t kScratchWord = 256;

// ---------------------------------------------------------------------------------- tags

// [63:48] magic (never 0 or 0xaaaa), [47:20] generation, [19:0] page index.
inline uint64_t tag(uint16_t magic, uint32_t gen, uint32_t page) {
  return (uint64_t{magic} << 48) | (uint64_t{gen & 0xfffffffu} << 20) | (page & 0xfffffu);
}
inline uint16_t tag_magic(uint64_t v) { return static_cast<uint16_t>(v >> 48); }
inline uint32_t tag_gen(uint64_t v) { return static_cast<uint32_t>((v >> 20) & 0xfffffffu); }
inline uint32_t tag_page(uint64_t v) { return static_cast<uint32_t>(v & 0xfffffu); }

// A magic number for instance `n` (distinct for n < 0x7000, never 0 or 0xaaaa).
inline uint16_t magic_for(uint32_t n, uint32_t salt = 0) {
  uint16_t m = static_cast<uint16_t>(0x1000 + ((n * 0x9e37u + salt) % 0x7000u));
  return m == 0xaaaa ? 0x1001 : m;
}

// Fills pages [0, npages) at `base` with generation `gen` (first and last word of each page).
inline void write_tags(char *base, size_t npages, uint16_t magic, uint32_t gen,
                       uint32_t first_page = 0) {
  for (size_t p = 0; p < npages; p++) {
    auto *w = reinterpret_cast<volatile uint64_t *>(base + p * kPage);
    const uint64_t t = tag(magic, gen, static_cast<uint32_t>(first_page + p));
    w[0] = t;
    w[kWordsPerPage - 1] = t;
  }
}

inline std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof(b), "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

// Why value `v` read at exporter page `page` breaks the invariant, or "" if it is legitimate.
inline std::string judge(uint64_t v, uint16_t magic, uint32_t page, uint32_t done,
                         uint32_t started) {
  if (v == 0) {
    if (started > done) return "";
    return "zeros (exporter at generation " + std::to_string(done) + ", no change under way)";
  }
  if (tag_magic(v) == magic && tag_page(v) == page) {
    const uint32_t g = tag_gen(v);
    if (g >= done && g <= started) return "";
    return "generation " + std::to_string(g) + " that the exporter no longer maps (it is at " +
           std::to_string(done) + (started > done ? "->" + std::to_string(started) : "") + ")";
  }
  if (v == kPoison) return "page poison " + hex(v) + " (a freed page)";
  if (tag_magic(v) == magic)
    return "page " + std::to_string(tag_page(v)) + "'s data (generation " +
           std::to_string(tag_gen(v)) + ")";
  return "foreign data " + hex(v);
}

// ---------------------------------------------------------------------------------- probes

namespace detail {
inline thread_local sigjmp_buf *probe_jmp = nullptr;
inline void probe_signal(int sig, siginfo_t *, void *) {
  sigjmp_buf *j = probe_jmp;
  if (j) {
    probe_jmp = nullptr;
    siglongjmp(*j, sig);
  }
  // Not a probe: die of the signal as if no handler were installed.
  signal(sig, SIG_DFL);
}
}  // namespace detail

// Installs the process-wide SIGBUS/SIGSEGV handler that probe_read/probe_write rely on
// (signals outside a probe still kill the process). Idempotent; survives fork.
inline void install_probe_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = detail::probe_signal;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGSEGV, &sa, nullptr);
}

// A full barrier between a read of mapped memory and the loads of the counters that judge it.
// TSan does not model fences (GCC refuses them under -fsanitize=thread); a locked read-modify-
// write is a full barrier on x86 too and TSan sees it.
inline void full_fence() {
#if defined(__SANITIZE_THREAD__)
  static std::atomic<unsigned> word;
  word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Loads the word at p: 0 and *out, or the signal the access raised (SIGBUS, SIGSEGV).
// Thread-safe; needs install_probe_handlers().
[[gnu::noinline]] inline int probe_read(const volatile uint64_t *p, uint64_t *out) {
  sigjmp_buf env;
  const int sig = sigsetjmp(env, 0);
  if (sig == 0) {
    detail::probe_jmp = &env;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    const uint64_t v = *p;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    detail::probe_jmp = nullptr;
    *out = v;
  }
  return sig;
}

[[gnu::noinline]] inline int probe_write(volatile uint64_t *p, uint64_t v) {
  sigjmp_buf env;
  const int sig = sigsetjmp(env, 0);
  if (sig == 0) {
    detail::probe_jmp = &env;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    *p = v;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    detail::probe_jmp = nullptr;
  }
  return sig;
}

inline const volatile uint64_t *word(const void *base, size_t page, size_t w = 0) {
  return reinterpret_cast<const volatile uint64_t *>(static_cast<const char *>(base) +
                                                     page * kPage) +
         w;
}
inline volatile uint64_t *word_rw(void *base, size_t page, size_t w = 0) {
  return reinterpret_cast<volatile uint64_t *>(static_cast<char *>(base) + page * kPage) + w;
}

// What a sweep over pages [0, npages) of a window found, against one expected state.
struct Sweep {
  size_t ok = 0, sigbus = 0, sigsegv = 0, bad = 0;
  std::string first_bad;  // the first violation, described
};

// Reads word 0 and the last word of every page of `win` (its page i is exporter page
// first_page + i) and judges each against generations [lo, hi] (zero_ok: zeros are legit).
// with_signal_ok: a SIGBUS is legitimate (otherwise it counts as bad too).
inline Sweep sweep(const void *win, size_t npages, uint16_t magic, uint32_t first_page,
                   uint32_t lo, uint32_t hi, bool sigbus_ok) {
  Sweep s;
  for (size_t i = 0; i < npages; i++) {
    for (size_t w : {size_t{0}, kWordsPerPage - 1}) {
      uint64_t v = 0;
      const int sig = probe_read(word(win, i, w), &v);
      std::string why;
      if (sig == SIGBUS) {
        s.sigbus++;
        if (sigbus_ok) continue;
        why = "SIGBUS";
      } else if (sig) {
        s.sigsegv++;
        why = "signal " + std::to_string(sig);
      } else {
        // lo..hi; zeros only when the caller says a change may be under way (hi > lo).
        why = judge(v, magic, static_cast<uint32_t>(first_page + i), lo, hi);
        if (why.empty()) {
          s.ok++;
          continue;
        }
      }
      if (s.bad++ == 0)
        s.first_bad = "page " + std::to_string(i) + " word " + std::to_string(w) + ": " + why;
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------- memory

// `n` objects of T in memory shared with every process forked afterwards.
template <typename T>
T *shared_new(size_t n = 1) {
  void *p = mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) abort();
  T *t = static_cast<T *>(p);
  for (size_t i = 0; i < n; i++) new (t + i) T();
  return t;
}
template <typename T>
void shared_delete(T *t, size_t n = 1) {
  for (size_t i = 0; i < n; i++) t[i].~T();
  munmap(t, sizeof(T) * n);
}

// An anonymous private mapping of `size` bytes aligned to `align` (untouched); the slack
// around it is unmapped, so that the range can be moved and remapped freely.
inline char *map_aligned(size_t size, size_t align, int prot = PROT_READ | PROT_WRITE) {
  char *raw = static_cast<char *>(
      mmap(nullptr, size + align, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t p = (reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1);
  char *a = reinterpret_cast<char *>(p);
  if (a > raw) munmap(raw, a - raw);
  if (a + size < raw + size + align) munmap(a + size, raw + size + align - (a + size));
  return a;
}

// mremap(2) itself: glibc 2.36's wrapper passes new_address only with MREMAP_FIXED, so a
// MREMAP_DONTUNMAP move without it gets garbage there (and EINVAL before any mm code runs).
inline void *sys_mremap(void *old, size_t old_len, size_t new_len, int flags,
                        void *new_addr = nullptr) {
  return reinterpret_cast<void *>(
      syscall(SYS_mremap, old, old_len, new_len, flags, new_addr));
}

// A free stretch of address space of `size` bytes aligned to `align`: reserved PROT_NONE.
inline char *reserve_aligned(size_t size, size_t align) {
  return map_aligned(size, align, PROT_NONE);
}

// ---------------------------------------------------------------------------------- time

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline void sleep_ms(double ms) {
  if (ms <= 0) return;
  const long ns = static_cast<long>(ms * 1e6);
  timespec ts{ns / 1000000000, ns % 1000000000};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

// Polls until pred() or `seconds` passed; returns pred(). Yields at first, then sleeps 0.2 ms
// between polls (spinning waiters would take the guest's few CPUs from the racing threads).
template <typename Pred>
bool wait_until(Pred pred, double seconds) {
  const double end = now_s() + seconds;
  for (int i = 0; !pred(); i++) {
    if (now_s() > end) return pred();
    if (i < 50)
      sched_yield();
    else
      sleep_ms(0.2);
  }
  return true;
}

// ---------------------------------------------------------------------------------- children

inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

// What each thread of a live process is doing, for the message of a child that did not answer:
// per thread its name, state, CPU ticks and kernel stack (root reads /proc/PID/task/T/stack).
inline std::string describe_tasks(pid_t pid) {
  auto slurp = [](const std::string &path) {
    std::string text;
    if (FILE *f = fopen(path.c_str(), "r")) {
      char buf[512];
      for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
      fclose(f);
    }
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  };
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR *d = opendir(dir.c_str());
  if (!d) return "process " + std::to_string(pid) + ": gone";
  std::string out;
  while (const dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string t = dir + "/" + e->d_name;
    // stat: "tid (comm) S ... utime stime" (fields 14 and 15).
    const std::string stat = slurp(t + "/stat");
    const size_t close = stat.rfind(')');
    std::string state = "?", ticks = "?";
    if (close != std::string::npos) {
      std::vector<std::string> f;
      for (size_t i = close + 2, j; i < stat.size(); i = j + 1) {
        j = stat.find(' ', i);
        if (j == std::string::npos) j = stat.size();
        f.push_back(stat.substr(i, j - i));
      }
      if (f.size() > 12) state = f[0], ticks = f[11] + "+" + f[12];
    }
    out += "\n    task " + std::string(e->d_name) + " (" + slurp(t + "/comm") + ") " + state +
           ", user+sys ticks " + ticks + "\n      " + slurp(t + "/stack");
  }
  closedir(d);
  return out;
}

// waitpid with a limit: true and *status once `pid` is reaped, false after `seconds`.
inline bool wait_child(pid_t pid, double seconds, int *status) {
  const double end = now_s() + seconds;
  for (;;) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return false;
    if (now_s() > end) return false;
    sleep_ms(2);
  }
}

// SIGKILL and reap, waiting at most `seconds`; false if the child would not die (a task stuck
// in the kernel).
inline bool kill_and_reap(pid_t pid, double seconds = 10, int *status = nullptr) {
  int st = 0;
  kill(pid, SIGKILL);
  const bool ok = wait_child(pid, seconds, &st);
  if (status) *status = st;
  return ok;
}

// The syscall a task is blocked in, from /proc/PID/syscall (-1: running or unknown).
inline long current_syscall(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/syscall", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long nr = -1;
  if (fscanf(f, "%ld", &nr) != 1) nr = -1;
  fclose(f);
  return nr;
}

// Becomes uid/gid 65534 (nobody) for good; false if that failed.
inline bool become_nobody() {
  return setgroups(0, nullptr) == 0 && setresgid(65534, 65534, 65534) == 0 &&
         setresuid(65534, 65534, 65534) == 0;
}

// ---------------------------------------------------------------------------------- counters

inline const std::vector<std::string> &live_counters() {
  static const std::vector<std::string> names = {"exports",      "segments",
                                                 "windows",      "attachments",
                                                 "pages_pinned", "open_files"};
  return names;
}

// "" once every live counter reads 0 (polled up to `seconds`: teardown may finish in a
// worker), else "name=value ..." of those that did not.
inline std::string wait_counters_zero(double seconds) {
  std::string left;
  const double end = now_s() + seconds;
  for (;;) {
    left.clear();
    for (const auto &c : live_counters()) {
      const long long v = shaddr_test::stat_value(c);
      if (v != 0) left += (left.empty() ? "" : " ") + c + "=" + std::to_string(v);
    }
    if (left.empty() || now_s() > end) return left;
    sleep_ms(20);
  }
}

// ---------------------------------------------------------------------------------- kernel log

// Lines that show memory corruption, a kernel bug or a stall.
inline bool kernel_line_is_bad(const std::string &l) {
  static const char *const pats[] = {
      "BUG:",          "WARNING:",        "Oops",           "general protection",
      "KASAN",         "UBSAN",           "kmemleak",       "pagealloc: memory corruption",
      "list_del corruption", "list_add corruption", "Bad page", "soft lockup",
      "hung task",     "blocked for more than", "RCU stall", "rcu_sched detected stall",
      "rcu_preempt detected stall", "self-detected stall", "refcount_t", "lockdep",
      "kernel BUG",    "Unable to handle kernel"};
  for (const char *p : pats)
    if (l.find(p) != std::string::npos) return true;
  return false;
}

// Kernel log records that appear after construction (needs root: /dev/kmsg).
class KmsgWatch {
 public:
  KmsgWatch() {
    fd_ = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ >= 0) lseek(fd_, 0, SEEK_END);
  }
  ~KmsgWatch() {
    if (fd_ >= 0) close(fd_);
  }
  KmsgWatch(const KmsgWatch &) = delete;
  KmsgWatch &operator=(const KmsgWatch &) = delete;
  bool available() const { return fd_ >= 0; }
  // Every new record's message (continuation lines joined) since the last call.
  std::vector<std::string> new_lines() {
    std::vector<std::string> out;
    if (fd_ < 0) return out;
    char buf[8192];
    for (;;) {
      const ssize_t n = read(fd_, buf, sizeof(buf) - 1);
      if (n < 0) {
        if (errno == EPIPE) continue;  // records overwritten: go on with the next
        break;
      }
      if (n == 0) break;
      buf[n] = 0;
      std::string rec(buf, n);
      const size_t semi = rec.find(';');
      std::string msg = semi == std::string::npos ? rec : rec.substr(semi + 1);
      while (!msg.empty() && msg.back() == '\n') msg.pop_back();
      out.push_back(msg);
    }
    return out;
  }
  // The new lines that kernel_line_is_bad(), with a few lines of context after each.
  std::vector<std::string> bad_lines() {
    std::vector<std::string> all = new_lines(), out;
    for (size_t i = 0; i < all.size(); i++) {
      if (!kernel_line_is_bad(all[i])) continue;
      for (size_t j = i; j < all.size() && j < i + 4; j++) out.push_back(all[j]);
      i += 3;
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------------------------- rng

// splitmix64: small, seedable, the same everywhere.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  bool chance(unsigned percent) { return below(100) < percent; }
};

}  // namespace shaddr_lifetime
