// SPDX-License-Identifier: MIT
// Node control block and its FIFOs across forked ranks (more ranks than cores), plus a thread
// version of the FIFO stress for ThreadSanitizer.
#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "bootstrap.h"
#include "fifo.h"
#include "nodeblock.h"

using namespace shaddr;

namespace {

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR *d = opendir("/dev/shm")) {
    while (dirent *e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

struct Payload {
  int32_t writer;
  int32_t index;
  uint64_t check;
};
uint64_t check_of(int w, int i) { return (static_cast<uint64_t>(w) << 32) ^ (i * 2654435761u); }

// Every rank pushes `count` messages and pops everyone else's, never blocking, so that ranks
// that all write at once cannot deadlock each other. p2p: rank r sends to every other rank.
int fifo_stress(NodeBlock &nb, int count, bool p2p) {
  const int n = nb.size(), me = nb.rank();
  std::vector<int> next_from(n, 0);  // per-writer order check
  const int expect = p2p ? (n - 1) * count : (n - 1) * count;
  int pushed = 0, dest = 0, received = 0;
  Fifo::Cursor cur;
  unsigned spins = 0;
  while (pushed < (p2p ? (n - 1) * count : count) || received < expect) {
    bool progress = false;
    if (pushed < (p2p ? (n - 1) * count : count)) {
      Payload p{me, p2p ? pushed / (n - 1) : pushed, 0};
      p.check = check_of(me, p.index);
      int err;
      if (p2p) {
        int to = (me + 1 + dest) % n;
        err = nb.p2p(to).try_push(me, 7, &p, sizeof(p), 1);
        if (!err) dest = (dest + 1) % (n - 1);
      } else {
        err = nb.bcast().try_push(me, static_cast<uint32_t>(me), &p, sizeof(p), n - 1, &cur);
      }
      if (!err) {
        pushed++;
        progress = true;
      } else if (err != -EAGAIN) {
        return 30;
      }
    }
    Payload got;
    Fifo::Message m;
    Fifo &f = p2p ? nb.p2p(me) : nb.bcast();
    int err = f.try_pop(&cur, &got, sizeof(got), &m);
    if (err == 0) {
      progress = true;
      if (m.bytes != sizeof(got) || m.writer != got.writer || got.writer == me) return 31;  // own messages are never returned
      if (!p2p && m.stream != static_cast<uint32_t>(got.writer)) return 32;
      if (got.index != next_from[got.writer]++) return 33;
      if (got.check != check_of(got.writer, got.index)) return 34;
      received++;
    } else if (err != -EAGAIN) {
      return 35;
    }
    if (!progress) wait_backoff(&spins);
  }
  for (int w = 0; w < n; w++)
    if (w != me && next_from[w] != count) return 36;
  return 0;
}

NodeBlockConfig small_fifos() {
  NodeBlockConfig cfg;
  cfg.fifo_slots = 4;  // wrap around many times
  cfg.fifo_payload = 64;
  return cfg;
}

}  // namespace

TEST(NodeBlock, SharedByAllRanksAndNothingLeftInDevShm) {
  const auto before = dev_shm();
  for (int n : {1, 2, 3, 5}) {
    int rc = run_forked(n, [&](const shaddr_host &h) {
      std::unique_ptr<NodeBlock> nb;
      std::string why;
      if (NodeBlock::create(h, NodeBlockConfig{}, &nb, &why)) {
        fprintf(stderr, "rank %d: %s\n", h.rank, why.c_str());
        return 10;
      }
      if (std::string(nb->how()) != "memfd") return 11;
      if (dev_shm() != before) return 12;  // not even while it is in use
      nb->area(h.rank).seq.store(100 + h.rank);
      static_cast<char *>(nb->reduce_slot(h.rank))[0] = static_cast<char>(h.rank + 1);
      if (h.barrier(h.ctx)) return 13;
      for (int r = 0; r < n; r++) {
        if (nb->area(r).seq.load() != static_cast<uint64_t>(100 + r)) return 14;
        if (static_cast<char *>(nb->reduce_slot(r))[0] != r + 1) return 15;
      }
      return h.barrier(h.ctx) ? 16 : 0;
    });
    EXPECT_EQ(rc, 0) << "n=" << n;
  }
  EXPECT_EQ(dev_shm(), before);
}

TEST(NodeBlock, PaddingKeepsRanksOnSeparateCacheLines) {
  EXPECT_EQ(sizeof(RankArea) % 128, 0u);
  EXPECT_EQ(sizeof(MsgCounter) % 128, 0u);
  EXPECT_EQ(alignof(RankArea), 128u);
}

// n forked ranks, each with a node block of 4-slot FIFOs, run fifo_stress(). placed: the
// layout of a block placed on NUMA nodes (every rank's parts on pages of their own), all on
// node 0, which every machine has.
static int stress_on_ranks(int n, int count, bool p2p, bool placed = false) {
  return run_forked(n, [=](const shaddr_host &h) {
    std::unique_ptr<NodeBlock> nb;
    std::string why;
    const NodePlacement placement{std::vector<int>(static_cast<size_t>(n), 0), placed};
    if (NodeBlock::create(h, small_fifos(), placement, &nb, &why) || nb->placed() != placed)
      return 10;
    int r = fifo_stress(*nb, count, p2p);
    return r ? r : (h.barrier(h.ctx) ? 11 : 0);
  });
}

TEST(NodeBlock, BcastFifoStressWithWrapAroundAndMoreRanksThanCores) {
  for (int n : {2, 3, 6}) EXPECT_EQ(stress_on_ranks(n, 5000, false), 0) << "n=" << n;
}

TEST(NodeBlock, P2PFifoStressWithWrapAround) {
  for (int n : {2, 4, 6}) EXPECT_EQ(stress_on_ranks(n, 2000, true), 0) << "n=" << n;
}

TEST(NodeBlock, FifoStressOnThePlacedLayout) {
  EXPECT_EQ(stress_on_ranks(3, 2000, false, true), 0);
  EXPECT_EQ(stress_on_ranks(3, 2000, true, true), 0);
}

TEST(NodeBlock, MessageCounterPipeline) {
  // The root announces bytes as they "land"; every other rank waits for each chunk, then
  // counts itself done; the root may reuse its buffer once done == n - 1.
  constexpr uint64_t kChunk = 4096, kChunks = 200;
  int rc = run_forked(4, [&](const shaddr_host &h) {
    std::unique_ptr<NodeBlock> nb;
    std::string why;
    if (NodeBlock::create(h, NodeBlockConfig{}, &nb, &why)) return 10;
    MsgCounter &c = nb->counter(0);
    unsigned spins = 0;
    for (int round = 0; round < 3; round++) {
      if (h.rank == 0) {
        c.done.store(0);
        c.base.store(0x1000 + round);
        if (h.barrier(h.ctx)) return 11;
        for (uint64_t k = 1; k <= kChunks; k++) c.bytes.store(k * kChunk, std::memory_order_release);
        while (c.done.load(std::memory_order_acquire) != static_cast<uint64_t>(h.size - 1))
          wait_backoff(&spins);
        c.bytes.store(0);
      } else {
        if (h.barrier(h.ctx)) return 12;
        if (c.base.load() != static_cast<uint64_t>(0x1000 + round)) return 13;
        uint64_t seen = 0;
        while (seen < kChunks * kChunk) {
          uint64_t b = c.bytes.load(std::memory_order_acquire);
          if (b < seen) return 14;  // never goes backwards within a round
          if (b == seen) wait_backoff(&spins);
          seen = b;
        }
        c.done.fetch_add(1, std::memory_order_acq_rel);
      }
      if (h.barrier(h.ctx)) return 15;
    }
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

TEST(FifoThreads, BcastAndP2PUnderThreads) {
  // The same protocol with threads over heap memory: what ThreadSanitizer can check.
  constexpr int kThreads = 4, kCount = 2000;
  for (bool bcast : {true, false}) {
    std::vector<char> mem(Fifo::bytes_for(4, 64) + 128);
    void *aligned = reinterpret_cast<void *>((reinterpret_cast<uintptr_t>(mem.data()) + 127) & ~uintptr_t{127});
    Fifo f(aligned, 4, 64);
    f.init();
    std::vector<int> errors(kThreads, 0);
    std::vector<std::thread> th;
    if (bcast) {
      // One writer (thread 0), three readers.
      for (int t = 0; t < kThreads; t++) {
        th.emplace_back([&, t] {
          if (t == 0) {
            Fifo::Cursor own;
            for (int i = 0; i < kCount; i++) f.push(0, 1, &i, sizeof(i), kThreads - 1, &own);
            return;
          }
          Fifo::Cursor cur;
          for (int i = 0; i < kCount; i++) {
            int v = -1;
            if (f.pop(&cur, &v, sizeof(v), nullptr) || v != i) errors[t]++;
          }
        });
      }
    } else {
      // Three writers, one reader (thread 0), per-writer order.
      for (int t = 0; t < kThreads; t++) {
        th.emplace_back([&, t] {
          if (t != 0) {
            for (int i = 0; i < kCount; i++) {
              int v = t * 1000000 + i;
              f.push(t, 0, &v, sizeof(v), 1);
            }
            return;
          }
          Fifo::Cursor cur;
          std::vector<int> next(kThreads, 0);
          for (int i = 0; i < (kThreads - 1) * kCount; i++) {
            int v = -1;
            Fifo::Message m;
            if (f.pop(&cur, &v, sizeof(v), &m) || v != m.writer * 1000000 + next[m.writer]++)
              errors[0]++;
          }
        });
      }
    }
    for (auto &x : th) x.join();
    for (int t = 0; t < kThreads; t++) EXPECT_EQ(errors[t], 0) << (bcast ? "bcast" : "p2p") << t;
  }
}

TEST(FifoThreads, OversizedMessagesAreRefused) {
  std::vector<char> mem(Fifo::bytes_for(2, 16) + 128);
  void *aligned = reinterpret_cast<void *>((reinterpret_cast<uintptr_t>(mem.data()) + 127) & ~uintptr_t{127});
  Fifo f(aligned, 2, 16);
  f.init();
  char big[17] = {};
  EXPECT_EQ(f.push(0, 0, big, 17, 1), -EMSGSIZE);
  EXPECT_EQ(f.push(0, 0, big, 16, 1), 0);
  Fifo::Cursor cur;
  char small[8];
  EXPECT_EQ(f.pop(&cur, small, sizeof(small), nullptr), -EMSGSIZE);
  EXPECT_EQ(f.try_pop(&cur, small, sizeof(small), nullptr), -EAGAIN);
}

// The doorbell (wait.h): a sleeping waiter wakes when the flag's owner rings, long before its
// sleep cap; without a ring it looks again only at the cap.
TEST(Wait, ASleeperWakesOnTheRingNotAtTheCap) {
  WaitPolicy p;
  p.spins = 0;
  p.yields = 0;
  p.sleep_max_ns = 30L * 1000 * 1000 * 1000;  // 30 s
  Bell bell;
  std::atomic<int> flag{0};
  double waited = -1;
  std::thread t([&] {
    Waiter w(p, &bell);
    const auto t0 = std::chrono::steady_clock::now();
    while (!w.round([&] { return flag.load(std::memory_order_acquire) == 1; })) {
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the waiter is asleep by now
  EXPECT_EQ(bell.sleepers.load(), 1u);
  flag.store(1, std::memory_order_release);
  ring(bell);
  t.join();
  EXPECT_GE(waited, 0.09);
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(bell.sleepers.load(), 0u);
}

TEST(Wait, WithoutARingASleeperLooksAgainAtTheCap) {
  WaitPolicy p;
  p.spins = 0;
  p.yields = 0;
  p.sleep_max_ns = 300L * 1000 * 1000;  // 0.3 s
  Bell bell;
  std::atomic<int> flag{0};
  double waited = -1;
  std::thread t([&] {
    Waiter w(p, &bell);
    const auto t0 = std::chrono::steady_clock::now();
    while (!w.round([&] { return flag.load(std::memory_order_acquire) == 1; })) {
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  flag.store(1, std::memory_order_release);  // no ring
  t.join();
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 10.0);
}

TEST(Wait, PolicyFromTheEnvironment) {
  WaitPolicy p;
  std::string err;
  setenv("SHADDR_WAIT", "spin", 1);
  ASSERT_EQ(WaitPolicy::from_env(2, &p, &err), 0);
  EXPECT_FALSE(p.sleep);
  setenv("SHADDR_WAIT", "sleep", 1);
  ASSERT_EQ(WaitPolicy::from_env(2, &p, &err), 0);
  EXPECT_TRUE(p.sleep);
  EXPECT_LT(p.spins + p.yields, 64u);
  EXPECT_EQ(p.sleep_max_ns, 1000000);
  setenv("SHADDR_WAIT", "auto", 1);
  setenv("SHADDR_WAIT_SLEEP_MAX", "250", 1);
  ASSERT_EQ(WaitPolicy::from_env(1, &p, &err), 0);
  EXPECT_EQ(p.sleep_max_ns, 250000);
  setenv("SHADDR_WAIT_SLEEP_MAX", "0", 1);
  EXPECT_EQ(WaitPolicy::from_env(1, &p, &err), -EINVAL);
  EXPECT_NE(err.find("SHADDR_WAIT_SLEEP_MAX=0"), std::string::npos) << err;
  unsetenv("SHADDR_WAIT_SLEEP_MAX");
  setenv("SHADDR_WAIT", "busy", 1);
  EXPECT_EQ(WaitPolicy::from_env(1, &p, &err), -EINVAL);
  EXPECT_NE(err.find("SHADDR_WAIT=busy: not one of: auto spin sleep"), std::string::npos) << err;
  unsetenv("SHADDR_WAIT");
  // More ranks of the job here than CPUs: auto sleeps soon; fewer: it spins and yields first.
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1000", 1);
  ASSERT_EQ(WaitPolicy::from_env(2, &p, &err), 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool many_cpus = sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1;
  if (many_cpus) {
    EXPECT_LT(p.spins + p.yields, 64u) << p.why;
  }
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}
