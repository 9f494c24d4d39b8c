// SPDX-License-Identifier: MIT
#include "regcache.h"

#include <cerrno>

namespace shaddr {

RegCache::RegCache(Limits limits, MapFn map, UnmapFn unmap)
    : limits_(limits), map_(std::move(map)), unmap_(std::move(unmap)) {}

RegCache::~RegCache() {
  for (auto &[k, e] : index_) unmap_(e.key, e.base, e.len, e.local);
}

RegCache::Index::iterator RegCache::find_covering(uint64_t key, uintptr_t addr, size_t len) {
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

int RegCache::acquire(uint64_t key, uintptr_t addr, size_t len, Ref *out) {
  if (!out || len == 0 || addr + len < addr) return -EINVAL;
  auto it = find_covering(key, addr, len);
  if (it != index_.end()) {
    Entry &e = it->second;
    e.holds++;
    e.last_use = ++tick_;
    stats_.hits++;
    out->ptr = static_cast<char *>(e.local) + (addr - e.base);
    out->entry = e.id;
    return 0;
  }

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

void RegCache::release(const Ref &ref) {
  auto id = by_id_.find(ref.entry);
  if (id == by_id_.end()) return;
  Entry &e = id->second->second;
  if (e.holds && --e.holds == 0 && e.stale) drop(id->second);
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
