// SPDX-License-Identifier: MIT
// Registration cache: unit cases, and a property test against a brute-force model of the
// backend's mappings under random operation sequences (fixed seeds).
#include "regcache.h"

#include <cerrno>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

using shaddr::RegCache;

namespace {

// A backend that hands out fake local addresses and remembers every live mapping.
struct FakeBackend {
  struct Mapping {
    uint64_t key;
    uintptr_t base;
    size_t len;
  };
  std::map<uintptr_t, Mapping> live;  // by local address
  size_t max_live = SIZE_MAX;         // like a slot count: beyond it, -ENOSPC
  uintptr_t next_local = 1ull << 40;
  int fail_next = 0;                  // inject one error
  uint64_t maps = 0, unmaps = 0;
  std::function<void(uintptr_t)> on_unmap;

  RegCache::MapFn map_fn() {
    return [this](uint64_t key, uintptr_t base, size_t len, void **local) {
      if (fail_next) {
        int e = fail_next;
        fail_next = 0;
        return e;
      }
      if (live.size() >= max_live) return -ENOSPC;
      uintptr_t l = next_local;
      next_local += (len + (1ull << 32)) & ~((1ull << 32) - 1);
      live[l] = {key, base, len};
      *local = reinterpret_cast<void *>(l);
      maps++;
      return 0;
    };
  }
  RegCache::UnmapFn unmap_fn() {
    return [this](uint64_t key, uintptr_t base, size_t len, void *local) {
      auto it = live.find(reinterpret_cast<uintptr_t>(local));
      ASSERT_NE(it, live.end()) << "unmap of an unknown mapping";
      EXPECT_EQ(it->second.key, key);
      EXPECT_EQ(it->second.base, base);
      EXPECT_EQ(it->second.len, len);
      if (on_unmap) on_unmap(it->first);
      live.erase(it);
      unmaps++;
    };
  }
  // The live mapping containing local address p.
  const std::pair<const uintptr_t, Mapping> *containing(uintptr_t p) const {
    auto it = live.upper_bound(p);
    if (it == live.begin()) return nullptr;
    --it;
    return p < it->first + it->second.len ? &*it : nullptr;
  }
};

RegCache::Limits limits(size_t gran, size_t entries, size_t bytes = SIZE_MAX) {
  RegCache::Limits l;
  l.granularity = gran;
  l.max_entries = entries;
  l.max_bytes = bytes;
  return l;
}

}  // namespace

TEST(RegCache, HitReusesAMappingThatCoversTheRequest) {
  FakeBackend be;
  RegCache c(limits(4096, 8), be.map_fn(), be.unmap_fn());
  RegCache::Ref a, b, d;
  ASSERT_EQ(c.acquire(7, 0x10010, 100, &a), 0);
  EXPECT_EQ(be.maps, 1u);
  ASSERT_EQ(c.acquire(7, 0x10020, 200, &b), 0);  // same page: a hit
  EXPECT_EQ(be.maps, 1u);
  EXPECT_EQ(static_cast<char *>(b.ptr) - static_cast<char *>(a.ptr), 0x10);
  ASSERT_EQ(c.acquire(8, 0x10020, 200, &d), 0);  // another key: a miss
  EXPECT_EQ(be.maps, 2u);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().misses, 2u);
  c.release(a);
  c.release(b);
  c.release(d);
}

TEST(RegCache, NeverReturnsAMappingThatOnlyPartlyCovers) {
  FakeBackend be;
  RegCache c(limits(4096, 8), be.map_fn(), be.unmap_fn());
  RegCache::Ref a, b;
  ASSERT_EQ(c.acquire(1, 0x20000, 4096, &a), 0);
  ASSERT_EQ(c.acquire(1, 0x20000, 4097, &b), 0);  // one byte more than the entry covers
  EXPECT_EQ(be.maps, 2u);
  auto *m = be.containing(reinterpret_cast<uintptr_t>(b.ptr));
  ASSERT_NE(m, nullptr);
  EXPECT_GE(m->second.len, 8192u);
  c.release(a);
  c.release(b);
}

TEST(RegCache, EvictsLeastRecentlyUsedUnheldEntries) {
  FakeBackend be;
  RegCache c(limits(4096, 2), be.map_fn(), be.unmap_fn());
  RegCache::Ref r1, r2, r3;
  ASSERT_EQ(c.acquire(1, 0x1000, 1, &r1), 0);
  ASSERT_EQ(c.acquire(1, 0x2000, 1, &r2), 0);
  c.release(r1);
  c.release(r2);
  ASSERT_EQ(c.acquire(1, 0x1000, 1, &r1), 0);  // touch 0x1000: 0x2000 is now LRU
  c.release(r1);
  ASSERT_EQ(c.acquire(1, 0x3000, 1, &r3), 0);
  EXPECT_EQ(c.stats().evictions, 1u);
  RegCache::Ref again;
  ASSERT_EQ(c.acquire(1, 0x1000, 1, &again), 0);
  EXPECT_EQ(c.stats().hits, 2u) << "0x1000 survived";
  c.release(again);
  c.release(r3);
}

TEST(RegCache, AllHeldMeansENOSPCAndTheCallerCopies) {
  FakeBackend be;
  be.max_live = 3;  // three slots
  RegCache c(limits(1 << 20, 64), be.map_fn(), be.unmap_fn());
  RegCache::Ref r[4];
  for (int i = 0; i < 3; i++) ASSERT_EQ(c.acquire(1, (i + 1) << 20, 10, &r[i]), 0);
  EXPECT_EQ(c.acquire(1, 10 << 20, 10, &r[3]), -ENOSPC);
  EXPECT_EQ(c.stats().refusals, 1u);
  c.release(r[1]);
  ASSERT_EQ(c.acquire(1, 10 << 20, 10, &r[3]), 0) << "a released slot is evicted and reused";
  EXPECT_EQ(be.live.size(), 3u);
  c.release(r[0]);
  c.release(r[2]);
  c.release(r[3]);
}

TEST(RegCache, ByteCapAndBadInput) {
  FakeBackend be;
  RegCache c(limits(4096, 64, 3 * 4096), be.map_fn(), be.unmap_fn());
  RegCache::Ref r;
  EXPECT_EQ(c.acquire(1, 0x1000, 0, &r), -EINVAL);
  EXPECT_EQ(c.acquire(1, UINTPTR_MAX - 10, 100, &r), -EINVAL);
  EXPECT_EQ(c.acquire(1, 0x1000, 1, nullptr), -EINVAL);
  EXPECT_EQ(c.acquire(1, 0x1000, 4 * 4096, &r), -ENOSPC) << "larger than the byte cap";
  be.fail_next = -ENOMEM;
  EXPECT_EQ(c.acquire(1, 0x1000, 1, &r), -ENOMEM) << "backend errors pass through";
  EXPECT_EQ(c.stats().entries, 0u);
}

TEST(RegCache, InvalidateDropsUnheldAndDefersHeld) {
  FakeBackend be;
  RegCache c(limits(4096, 8), be.map_fn(), be.unmap_fn());
  RegCache::Ref held, loose;
  ASSERT_EQ(c.acquire(5, 0x1000, 1, &held), 0);
  ASSERT_EQ(c.acquire(5, 0x9000, 1, &loose), 0);
  c.release(loose);
  EXPECT_EQ(c.invalidate(5, 0, 0x10000), 2u);
  EXPECT_EQ(be.live.size(), 1u) << "the held one stays until released";
  RegCache::Ref fresh;
  ASSERT_EQ(c.acquire(5, 0x1000, 1, &fresh), 0);
  EXPECT_NE(fresh.ptr, held.ptr) << "an invalidated entry is never handed out again";
  c.release(held);
  EXPECT_EQ(be.live.size(), 1u);
  c.release(fresh);
}

TEST(RegCache, RepeatedHitsMakeNoBackendCalls) {
  // (The hit's cost in time is the benchmark's to report; here: a hit never calls the backend.)
  FakeBackend be;
  RegCache c(limits(4096, 64), be.map_fn(), be.unmap_fn());
  RegCache::Ref r;
  for (int i = 0; i < 64; i++) {
    ASSERT_EQ(c.acquire(1, i * 8192, 100, &r), 0);
    c.release(r);
  }
  for (int i = 0; i < 100000; i++) {
    ASSERT_EQ(c.acquire(1, (i % 64) * 8192 + 8, 50, &r), 0);
    c.release(r);
  }
  EXPECT_EQ(be.maps, 64u);
}

class RegCacheProperty : public ::testing::TestWithParam<int> {};

TEST_P(RegCacheProperty, RandomOperationsKeepEveryInvariant) {
  std::mt19937_64 rng(GetParam());
  auto rnd = [&](uint64_t n) { return rng() % n; };
  FakeBackend be;
  be.max_live = 2 + rnd(6);
  const size_t gran = size_t{4096} << rnd(3);
  const size_t max_entries = 1 + rnd(10);
  const size_t max_bytes = rnd(2) ? SIZE_MAX : gran * (4 + rnd(20));
  std::map<uintptr_t, int> held_by_local;  // backend mapping -> refs the test holds
  std::set<uintptr_t> dead;                // invalidated mappings
  be.on_unmap = [&](uintptr_t l) {
    ASSERT_EQ(held_by_local[l], 0) << "a held mapping was unmapped";
    held_by_local.erase(l);
    dead.erase(l);
  };
  RegCache c(limits(gran, max_entries, max_bytes), be.map_fn(), be.unmap_fn());
  std::vector<std::pair<RegCache::Ref, uintptr_t>> refs;  // ref, its mapping
  uint64_t acquires = 0;

  for (int step = 0; step < 4000; step++) {
    const int op = static_cast<int>(rnd(10));
    if (op < 5) {
      const uint64_t key = rnd(3);
      const uintptr_t addr = rnd(64) * 1024 + rnd(1024);
      const size_t len = 1 + rnd(rnd(4) ? 3 * gran : 8 * gran);
      // Is there a live, valid mapping that covers it? Then this must be a hit.
      bool coverable = false;
      for (auto &[l, m] : be.live)
        if (!dead.count(l) && m.key == key && m.base <= addr && addr + len <= m.base + m.len)
          coverable = true;
      const uint64_t maps_before = be.maps;
      if (rnd(50) == 0) be.fail_next = -EIO;
      const bool injected = be.fail_next != 0;
      RegCache::Ref r;
      const int err = c.acquire(key, addr, len, &r);
      acquires++;
      if (coverable) {
        be.fail_next = 0;
        ASSERT_EQ(err, 0);
        ASSERT_EQ(be.maps, maps_before) << "covered request must not map again";
      }
      if (err == 0) {
        auto *m = be.containing(reinterpret_cast<uintptr_t>(r.ptr));
        ASSERT_NE(m, nullptr);
        ASSERT_FALSE(dead.count(m->first));
        ASSERT_EQ(m->second.key, key);
        ASSERT_LE(m->second.base, addr);
        ASSERT_GE(m->second.base + m->second.len, addr + len);
        ASSERT_EQ(reinterpret_cast<uintptr_t>(r.ptr), m->first + (addr - m->second.base));
        held_by_local[m->first]++;
        refs.push_back({r, m->first});
      } else if (err == -ENOSPC) {
        // Only when nothing can be evicted, or the request exceeds the byte cap.
        bool all_held = true;
        for (auto &[l, m] : be.live)
          if (!held_by_local[l] && !dead.count(l)) all_held = false;
        const size_t span = ((addr + len + gran - 1) & ~(gran - 1)) - (addr & ~(gran - 1));
        ASSERT_TRUE(all_held || span > max_bytes);
      } else {
        ASSERT_TRUE(injected) << "unexpected error " << err;
        be.fail_next = 0;
      }
    } else if (op < 9) {
      if (refs.empty()) continue;
      const size_t i = rnd(refs.size());
      held_by_local[refs[i].second]--;
      c.release(refs[i].first);
      refs.erase(refs.begin() + i);
    } else {
      const uint64_t key = rnd(3);
      const uintptr_t addr = rnd(64) * 1024;
      const size_t len = 1 + rnd(16 * 1024);
      for (auto &[l, m] : be.live)
        if (m.key == key && m.base < addr + len && addr < m.base + m.len) dead.insert(l);
      c.invalidate(key, addr, len);
    }
    ASSERT_LE(be.live.size(), be.max_live);
    ASSERT_LE(c.stats().entries, max_entries);
    ASSERT_LE(c.stats().bytes_mapped, max_bytes);
    ASSERT_EQ(c.stats().entries, be.live.size());
  }
  EXPECT_EQ(c.stats().hits + c.stats().misses, acquires);
  for (auto &[r, l] : refs) {
    held_by_local[l]--;
    c.release(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, RegCacheProperty, ::testing::Range(1, 21));
