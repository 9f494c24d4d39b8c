// SPDX-License-Identifier: MIT
#include "wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "settings.h"
#include "shaddr/host.h"

namespace shaddr {
namespace {

// The largest node communicator this process has made (all threads: atomic).
std::atomic<int> g_node_ranks{0};

// The host's progress function and its argument, set together (one pointer to a pair that is
// never freed: a waiter in another thread may still be reading the previous one).
struct ProgressHook {
  ProgressFn fn;
  void *ctx;
  const ProgressHook *older;  // every hook made stays reachable (no leak reported at exit)
};
std::atomic<const ProgressHook *> g_progress{nullptr};
std::atomic<const ProgressHook *> g_hooks{nullptr};  // the newest hook made
thread_local bool t_in_progress = false;

int env_int(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

int cpus_for_this_process() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

void set_progress(ProgressFn fn, void *ctx) {
  const ProgressHook *old = g_progress.load(std::memory_order_acquire);
  if (!fn) {
    g_progress.store(nullptr, std::memory_order_release);
    return;
  }
  if (old && old->fn == fn && old->ctx == ctx) return;
  // Kept for the life of the process: set once by a host, rarely changed.
  auto *h = new ProgressHook{fn, ctx, g_hooks.load(std::memory_order_acquire)};
  while (!g_hooks.compare_exchange_weak(h->older, h, std::memory_order_acq_rel)) {
  }
  g_progress.store(h, std::memory_order_release);
}

bool progress_set() { return g_progress.load(std::memory_order_relaxed) != nullptr; }

void progress_now() {
  const ProgressHook *h = g_progress.load(std::memory_order_acquire);
  if (!h || t_in_progress) return;
  t_in_progress = true;
  h->fn(h->ctx);
  t_in_progress = false;
}

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void wake(Bell &b) {
  b.rings.fetch_add(1, std::memory_order_release);
  // Not FUTEX_PRIVATE_FLAG: the sleepers are other processes sharing the mapping.
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&b.rings), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

void futex_sleep(std::atomic<uint32_t> *word, uint32_t seen, long ns) {
  timespec ts{ns / 1000000000, ns % 1000000000};
  // EAGAIN (rung meanwhile), EINTR, ETIMEDOUT: the caller checks its condition either way.
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

bool oversubscribed(int node_ranks) {
  int seen = g_node_ranks.load(std::memory_order_relaxed);
  while (node_ranks > seen &&
         !g_node_ranks.compare_exchange_weak(seen, node_ranks, std::memory_order_relaxed)) {
  }
  const int ranks = std::max({node_ranks, seen, env_int("OMPI_COMM_WORLD_LOCAL_SIZE"),
                              env_int("MPI_LOCALNRANKS")});
  const int cpus = cpus_for_this_process();
  // One CPU in the affinity mask: the launcher bound this rank to a core, which MPI launchers
  // do only when every rank gets one.
  return cpus > 1 && ranks > cpus;
}

int WaitPolicy::from_env(int node_ranks, WaitPolicy *out, std::string *err) {
  SettingsReader in;  // checked by agree_settings() when a node communicator is created
  const int mode = in.choice("SHADDR_WAIT", 0);  // "auto spin sleep"
  WaitPolicy p;
  // Oversubscribed: a few pauses (the flag may be just about to change), two yields (the rank
  // waited for may be next in this CPU's queue), then sleep.
  WaitPolicy soon;
  soon.spins = 16;
  soon.yields = 2;
  if (mode == 0) {
    if (oversubscribed(node_ranks)) {
      p = soon;
      p.why = "auto: more ranks than CPUs, sleep soon";
    } else {
      p.why = "auto: a CPU per rank, spin and yield first";
    }
  } else if (mode == 2) {
    p = soon;
    p.why = "SHADDR_WAIT=sleep";
  } else {
    p.sleep = false;
    p.why = "SHADDR_WAIT=spin: never sleep";
  }
  const size_t us = in.size("SHADDR_WAIT_SLEEP_MAX", 1000);
  const size_t progress_us = in.size("SHADDR_WAIT_PROGRESS", 100);
  if (in.error()) {
    *err = in.why();
    return in.error();
  }
  p.sleep_max_ns = static_cast<long>(us) * 1000;
  p.progress_ns = static_cast<long>(progress_us) * 1000;
  *out = p;
  return 0;
}

}  // namespace shaddr

extern "C" SHADDR_API void shaddr_set_progress(void (*fn)(void *ctx), void *ctx) {
  shaddr::set_progress(fn, ctx);
}
