// SPDX-License-Identifier: MIT
// Registration cache: per peer, remote ranges -> local mappings, so that mapping a peer's
// buffer and unmapping it (a system call each) are paid once per buffer, not per collective.
//
// A lookup names a key (the backend's token for the peer's memory: a segid, a window handle)
// and a byte range. A hit returns a pointer into an existing mapping that wholly covers the
// range and costs no system call. A miss rounds the range out to the cache granularity (a page
// or a slot) and asks the backend to map it; when the entry or byte caps are reached, or the
// backend answers -ENOSPC (no free slot), least-recently-used entries that no transfer holds are
// unmapped first. If everything is held, the lookup fails with -ENOSPC and the caller copies
// instead. Entries are never returned unless they wholly cover the request.
//
// Coherence is the kernel module's: a mapping follows the peer's current pages, so a freed and
// reallocated peer buffer needs no invalidation here. invalidate() exists for tokens that die
// (a revoked handle, a removed segment).
//
// Not thread-safe: one cache per peer, used by the rank's collective thread.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

namespace shaddr {

struct RegCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t refusals = 0;       // lookups that failed with everything in use (caller copies)
  uint64_t bytes_mapped = 0;   // currently mapped
  uint64_t entries = 0;        // currently cached
};

class RegCache {
 public:
  // Maps [base, base + len) of the peer's memory named by key. Returns 0 and the local address,
  // or a negative errno (-ENOSPC: no room in the backend; the cache evicts and retries).
  using MapFn = std::function<int(uint64_t key, uintptr_t base, size_t len, void **local)>;
  using UnmapFn = std::function<void(uint64_t key, uintptr_t base, size_t len, void *local)>;

  struct Limits {
    size_t granularity = 4096;  // power of two
    size_t max_entries = 64;
    size_t max_bytes = SIZE_MAX;
  };

  // A held mapping: valid until release(). ptr points at the requested address.
  struct Ref {
    void *ptr = nullptr;
    uint64_t entry = 0;  // opaque; 0 = none
  };

  RegCache(Limits limits, MapFn map, UnmapFn unmap);
  ~RegCache();  // unmaps everything
  RegCache(const RegCache &) = delete;
  RegCache &operator=(const RegCache &) = delete;

  // Returns 0 and a held Ref for [addr, addr + len) of key, or -EINVAL (len 0, overflow),
  // -ENOSPC (every entry in use), or the backend's error.
  // Inline, with the search for a covering entry: a warm transfer's hit costs no call.
  int acquire(uint64_t key, uintptr_t addr, size_t len, Ref *out) {
    if (!out || len == 0 || addr + len < addr) return -EINVAL;
    auto it = find_covering(key, addr, len);
    if (it == index_.end()) return acquire_new(key, addr, len, out);
    Entry &e = it->second;
    e.holds++;
    e.last_use = ++tick_;
    stats_.hits++;
    out->ptr = static_cast<char *>(e.local) + (addr - e.base);
    out->entry = e.id;
    return 0;
  }
  void release(const Ref &ref) {
    auto id = by_id_.find(ref.entry);
    if (id == by_id_.end()) return;
    Entry &e = id->second->second;
    if (e.holds && --e.holds == 0 && e.stale) drop(id->second);
  }

  // Unmaps every unheld entry of key overlapping [addr, addr + len); held ones are unmapped
  // when released. Returns how many entries were dropped or marked.
  size_t invalidate(uint64_t key, uintptr_t addr, size_t len);

  const RegCacheStats &stats() const { return stats_; }

 private:
  struct Entry {
    uint64_t id;
    uint64_t key;
    uintptr_t base;
    size_t len;
    void *local;
    uint64_t last_use;
    unsigned holds;
    bool stale;  // invalidated while held: unmap on last release
  };
  using Index = std::map<std::tuple<uint64_t, uintptr_t, uint64_t>, Entry>;  // (key, base, id)

  Index::iterator find_covering(uint64_t key, uintptr_t addr, size_t len) {
    // Candidates start in (addr - max_len_, addr]; the first that covers the end wins.
    auto it = index_.upper_bound({key, addr, UINT64_MAX});
    const uintptr_t lowest = addr >= max_len_ ? addr - max_len_ : 0;
    while (it != index_.begin()) {
      --it;
      const Entry &e = it->second;
      if (e.key != key || e.base < lowest) break;
      if (!e.stale && e.base + e.len >= addr + len) return it;
    }
    return index_.end();
  }
  int acquire_new(uint64_t key, uintptr_t addr, size_t len, Ref *out);  // a miss: maps
  bool evict_one();
  void drop(Index::iterator it);

  Limits limits_;
  MapFn map_;
  UnmapFn unmap_;
  Index index_;
  std::map<uint64_t, Index::iterator> by_id_;
  size_t max_len_ = 0;  // longest entry: bounds the search for a covering entry
  uint64_t tick_ = 0;
  uint64_t next_id_ = 1;
  RegCacheStats stats_;
};

}  // namespace shaddr
