// SPDX-License-Identifier: MIT
#include "regcache.h"

#include <cerrno>

namespace shaddr {

RegCache::RegCache(Limits limits, MapFn map, UnmapFn unmap)
    : limits_(limits), map_(std::move(map)), unmap_(std::move(unmap)) {}

RegCache::~RegCache() {
  for (auto &[k, e] : index_) unmap_(e.key, e.base, e.len, e.local);
}

void RegCache::drop(Index::iterator it) {
  Entry &e = it->second;
  unmap_(e.key, e.base, e.len, e.local);
  stats_.bytes_mapped -= e.len;
  stats_.entries--;
  by_id_.erase(e.id);
  index_.erase(it);
}

bool RegCache::evict_one() {
  auto victim = index_.end();
  for (auto it = index_.begin(); it != index_.end(); ++it) {
    if (it->second.holds) continue;
    if (victim == index_.end() || it->second.last_use < victim->second.last_use) victim = it;
  }
  if (victim == index_.end()) return false;
  drop(victim);
  stats_.evictions++;
  return true;
}

int RegCache::acquire_new(uint64_t key, uintptr_t addr, size_t len, Ref *out) {
  stats_.misses++;
  const uintptr_t g = limits_.granularity;
  const uintptr_t base = addr & ~(g - 1);
  const uintptr_t end = (addr + len + g - 1) & ~(g - 1);
  if (end <= base) return -EINVAL;  // rounding overflowed
  const size_t span = end - base;
  if (span > limits_.max_bytes) return -ENOSPC;

  while (stats_.entries >= limits_.max_entries || stats_.bytes_mapped + span > limits_.max_bytes) {
    if (!evict_one()) {
      stats_.refusals++;
      return -ENOSPC;
    }
  }
  void *local = nullptr;
  int err;
  while ((err = map_(key, base, span, &local)) == -ENOSPC) {
    if (!evict_one()) {
      stats_.refusals++;
      return -ENOSPC;
    }
  }
  if (err) return err;

  const uint64_t id = next_id_++;
  auto pos = index_.emplace(std::make_tuple(key, base, id),
                            Entry{id, key, base, span, local, ++tick_, 1, false})
                 .first;
  by_id_[id] = pos;
  if (span > max_len_) max_len_ = span;
  stats_.entries++;
  stats_.bytes_mapped += span;
  out->ptr = static_cast<char *>(local) + (addr - base);
  out->entry = id;
  return 0;
}

size_t RegCache::invalidate(uint64_t key, uintptr_t addr, size_t len) {
  size_t n = 0;
  auto it = index_.lower_bound({key, 0, 0});
  while (it != index_.end() && it->second.key == key) {
    Entry &e = it->second;
    if (e.base < addr + len && addr < e.base + e.len) {
      n++;
      if (e.holds) {
        e.stale = true;
      } else {
        auto next = std::next(it);
        drop(it);
        it = next;
        continue;
      }
    }
    ++it;
  }
  return n;
}

}  // namespace shaddr
