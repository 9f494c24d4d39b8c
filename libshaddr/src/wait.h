// SPDX-License-Identifier: MIT
// How a rank waits for another: spin briefly, yield, then sleep on a doorbell until the rank it
// waits for rings it. Every wait in libshaddr goes through a Waiter: the flags of comm.h
// (Comm::wait_until) and the FIFOs (fifo.cc).
//
// With more ranks than CPUs (4 ranks on 2 cores), a waiter that keeps spinning or yielding stays
// runnable: it takes time slices from the rank it waits for and keeps the scheduler from moving
// that rank to the CPU the waiter holds. A sleeping waiter is off the run queue, so the rank it
// waits for gets a CPU. Sleeping costs a wake-up (a few microseconds), so where every rank has a
// CPU of its own a waiter spins and yields much longer before it sleeps (SHADDR_WAIT).
//
// The doorbell protocol: a rank changes a flag (release store), then ring()s the bell of the
// thing waited on (its own RankArea's, a FIFO's): one read-modify-write of the sleeper count
// (a full barrier), and only when someone sleeps an increment of the ring count and FUTEX_WAKE. A waiter reads the ring count,
// registers as a sleeper (a full barrier), checks its condition once more and sleeps with
// FUTEX_WAIT on the ring count it read. Either the ringer sees the sleeper or the sleeper sees
// the flag; a ring in between changes the count and FUTEX_WAIT returns at once. A sleep also
// ends after SHADDR_WAIT_SLEEP_MAX, so a rank that never rings (it died) is noticed by the
// caller's checks.
//
// MPI's progress rule: a process blocked in a collective keeps the MPI's other operations
// moving (passive-target RMA aimed at it, other ranks' point-to-point). The host runtime hands
// libshaddr a progress function (shaddr_set_progress, host.h); once a wait has stopped spinning
// (it yields or sleeps), the Waiter calls it every SHADDR_WAIT_PROGRESS microseconds of
// waiting, and a sleep lasts no longer than that. A short wait that ends while spinning never
// calls it.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace shaddr {

// The host's progress function, process-wide (set_progress). progress_now() calls it unless this
// thread is already inside it (a progress function that waited in libshaddr would recurse).
using ProgressFn = void (*)(void *ctx);
void set_progress(ProgressFn fn, void *ctx);
bool progress_set();
void progress_now();
int64_t monotonic_ns();

struct alignas(128) Bell {
  std::atomic<uint32_t> rings{0};
  std::atomic<uint32_t> sleepers{0};
};
static_assert(sizeof(Bell) == 128);

// Wakes b's sleepers (ring()'s system call).
void wake(Bell &b);

// After a store that may end someone's wait on b: wakes its sleepers (one atomic operation
// when there are none).
inline void ring(Bell &b) {
  // The store that ends the wait must be visible before the sleeper count is read (the
  // waiter's side: fetch_add, then its condition), or both could miss each other. A
  // read-modify-write of the count does it: either it comes after the waiter's increment and
  // sees it, or the waiter's increment reads from it and then sees the store. (Not a fence:
  // ThreadSanitizer does not model fences.)
  if (b.sleepers.fetch_add(0, std::memory_order_seq_cst) != 0) wake(b);
}

// Rounds of pausing before yielding, and of yielding before sleeping.
struct WaitPolicy {
  uint32_t spins = 256;
  uint32_t yields = 4096;
  bool sleep = true;  // false: yield for ever (SHADDR_WAIT=spin)
  long sleep_max_ns = 1000000;  // SHADDR_WAIT_SLEEP_MAX: one sleep lasts at most this long
  long progress_ns = 100000;    // SHADDR_WAIT_PROGRESS: the host's progress this often (0: never)
  const char *why = "default";

  // SHADDR_WAIT: auto (oversubscribed: sleep soon; else spin and yield long first), spin (never
  // sleep), sleep (sleep soon, as oversubscribed); SHADDR_WAIT_SLEEP_MAX (microseconds, 1000):
  // the longest sleep before a waiter looks again (a rank that died never rings; the tests set it
  // high to show that every wake-up comes from a ring). node_ranks: ranks of the node
  // communicator.
  // 0, or -EINVAL with *err set for an unknown value.
  static int from_env(int node_ranks, WaitPolicy *out, std::string *err);
  // How long one sleep may last: bounded by the progress interval when there is a host
  // progress function to call.
  long sleep_ns() const {
    return progress_ns > 0 && progress_ns < sleep_max_ns && progress_set() ? progress_ns
                                                                           : sleep_max_ns;
  }
};

// Is this node oversubscribed: more ranks of the job here than CPUs this process may run on?
// The ranks: the largest node communicator made in this process, or the launcher's count of
// local ranks (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS) if larger.
bool oversubscribed(int node_ranks);

void futex_sleep(std::atomic<uint32_t> *word, uint32_t seen, long ns);

class Waiter {
 public:
  Waiter(const WaitPolicy &policy, Bell *bell) : policy_(policy), bell_(bell) {}

  // One round of waiting for pred(): evaluates it once; if it does not hold yet, pauses,
  // yields, or (policy permitting) sleeps on the bell, having registered as a sleeper before
  // the evaluation. Returns pred()'s value.
  template <typename Pred>
  bool round(Pred &&pred) {
    const uint64_t n = rounds_++;
    if (n >= policy_.spins && policy_.progress_ns > 0) progress();
    if (policy_.sleep && bell_ && n >= uint64_t{policy_.spins} + policy_.yields) {
      const uint32_t seen = bell_->rings.load(std::memory_order_acquire);
      bell_->sleepers.fetch_add(1, std::memory_order_seq_cst);
      const bool done = pred();
      if (!done) futex_sleep(&bell_->rings, seen, policy_.sleep_ns());
      bell_->sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (!done) sleeps_++;
      return done;
    }
    if (pred()) return true;
    if (n < policy_.spins) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
    return false;
  }
  // Weighted rounds so far: a sleep counts as 256 (the callers look for a dead peer every 4096).
  uint64_t effort() const { return rounds_ + 255 * sleeps_; }

 private:
  // The host's progress, once every policy_.progress_ns of waiting past the spinning.
  void progress() {
    if (!progress_set()) return;
    const int64_t now = monotonic_ns();
    if (!next_progress_) {
      next_progress_ = now + policy_.progress_ns;
      return;
    }
    if (now < next_progress_) return;
    progress_now();
    next_progress_ = monotonic_ns() + policy_.progress_ns;
  }

  const WaitPolicy &policy_;
  Bell *bell_;
  uint64_t rounds_ = 0;
  uint64_t sleeps_ = 0;
  int64_t next_progress_ = 0;  // monotonic_ns() of the next progress call; 0: not yet timed
};

}  // namespace shaddr
