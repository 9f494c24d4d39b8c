// SPDX-License-Identifier: MIT
// The flat-vs-levels model (level_model.h): each algorithm's copies as the library makes them,
// summed into the loads of the resources they pass through.
#include "level_model.h"

#include <algorithm>
#include <cstdint>

namespace shaddr {

LevelModel::LevelModel(const LevelGroups &level, const LevelRates &rates, double stage_us,
                       size_t chunk)
    : group_(level.group),
      members_(level.groups()),
      leader_(level.leader),
      runs_(chain_runs(level)),
      rates_(rates),
      stage_us_(stage_us),
      chunk_(chunk),
      chain_pays_(reduce_chain_pays(level)),
      slices_(chain_slices(level, SIZE_MAX, SIZE_MAX)) {
  for (size_t r = 0; r < group_.size(); r++)
    members_[static_cast<size_t>(group_[r])].push_back(static_cast<int>(r));
  for (bool levels : {false, true}) {
    Loads *to = levels ? levels_ : flat_;
    to[SHADDR_COLL_BCAST] = bcast(levels);
    to[SHADDR_COLL_ALLGATHER] = allgather(levels);
    to[SHADDR_COLL_REDUCE] = reduction(levels, false);
    to[SHADDR_COLL_ALLREDUCE] = reduction(levels, true);
  }
}

LevelModel::Loads LevelModel::empty(int phases) const {
  Loads l;
  l.local.assign(group_.size(), 0);
  l.remote.assign(group_.size(), 0);
  l.link.assign(members_.size() * members_.size(), 0);
  l.inside.assign(members_.size(), 0);
  l.phases = phases;
  return l;
}

// Rank @to copies @share of S from rank @from.
void LevelModel::add(Loads *l, int from, int to, double share) const {
  const size_t g = static_cast<size_t>(group_[static_cast<size_t>(from)]);
  const size_t h = static_cast<size_t>(group_[static_cast<size_t>(to)]);
  if (g == h) {
    l->local[static_cast<size_t>(to)] += share;
    l->inside[g] += share;
  } else {
    l->remote[static_cast<size_t>(to)] += share;
    l->link[g * members_.size() + h] += share;
  }
}

double LevelModel::time_us(const Loads &l, size_t bytes) const {
  const double s = static_cast<double>(bytes) / 1e3;  // GB/s are 1e3 bytes a microsecond
  double busiest = 0;
  for (size_t r = 0; r < l.local.size(); r++)
    busiest = std::max(busiest,
                       s * (l.local[r] / rates_.one_local + l.remote[r] / rates_.one_remote));
  for (double c : l.link) busiest = std::max(busiest, s * c / rates_.all_remote);
  for (double c : l.inside) busiest = std::max(busiest, s * c / rates_.all_local);
  const double fill = static_cast<double>(std::min(bytes, chunk_)) / 1e3 / rates_.one_local;
  return busiest + (l.phases - 1) * fill + l.phases * stage_us_;
}

// From root 0. Flat: every rank reads the root. Down the level: the root's domain reads the
// root; every other domain's leader reads the root, and its domain reads the leader.
LevelModel::Loads LevelModel::bcast(bool levels) const {
  Loads l = empty(levels ? 2 : 1);
  const int home = group_[0];
  for (size_t r = 1; r < group_.size(); r++) {
    const int g = group_[r];
    int from = levels && g != home ? leader_[static_cast<size_t>(g)] : 0;
    if (from == static_cast<int>(r)) from = 0;
    add(&l, from, static_cast<int>(r), 1);
  }
  return l;
}

// Flat: every rank reads every other rank's block. Down the level: each block of another domain
// is read by one relay of the domain (its ranks take the far ranks in turn), which the others
// read; blocks of the domain from their owners.
LevelModel::Loads LevelModel::allgather(bool levels) const {
  Loads l = empty(levels ? 2 : 1);
  const int n = static_cast<int>(group_.size());
  if (!levels) {
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        if (i != j) add(&l, j, i, 1);
    return l;
  }
  for (size_t d = 0; d < members_.size(); d++) {
    const std::vector<int> &mine = members_[d];
    size_t turn = 0;
    for (size_t e = 0; e < members_.size(); e++) {
      if (e == d) continue;
      for (int x : members_[e]) {
        const int relay = mine[turn++ % mine.size()];
        add(&l, x, relay, 1);
        for (int y : mine)
          if (y != relay) add(&l, relay, y, 1);
      }
    }
    for (int x : mine)
      for (int y : mine)
        if (x != y) add(&l, x, y, 1);
  }
  return l;
}

// Flat (partitioned): each rank reduces its n-th of the vector reading every other rank's, then
// the root (@all: every rank) reads the other slices. Down the chain (coll_reduce.cc
// level_reduce()): slice t is folded by rank first + t % m of each run in turn, each reading its
// run's other operands and the previous run's partial; the root reads each slice from the last
// run's folder; an Allreduce's holders' domain reads them there, every other domain through a
// relay of its own (its ranks take the slices in turn).
LevelModel::Loads LevelModel::reduction(bool levels, bool all) const {
  const int n = static_cast<int>(group_.size());
  if (!levels || !chain_pays_) {
    Loads l = empty(2);
    const double slice = 1.0 / n;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        if (i != j) {
          add(&l, j, i, slice);
          if (all || i == 0) add(&l, j, i, slice);
        }
    return l;
  }
  Loads l = empty(all ? 3 : 2);
  const double share = 1.0 / static_cast<double>(slices_);
  std::vector<int> holder(slices_);
  for (size_t t = 0; t < slices_; t++) {
    int prev = -1;
    for (const ChainRun &run : runs_) {
      const int f = run.first + static_cast<int>(t % static_cast<size_t>(run.count));
      for (int x = run.first; x < run.first + run.count; x++)
        if (x != f) add(&l, x, f, share);
      if (prev >= 0) add(&l, prev, f, share);
      prev = f;
    }
    holder[t] = prev;
  }
  if (!all) {
    for (size_t t = 0; t < slices_; t++)
      if (holder[t] != 0) add(&l, holder[t], 0, share);
    return l;
  }
  const int last = group_[static_cast<size_t>(runs_.back().first)];
  for (size_t g = 0; g < members_.size(); g++) {
    const std::vector<int> &mates = members_[g];
    for (size_t t = 0; t < slices_; t++) {
      const int h = holder[t];
      const int src = static_cast<int>(g) == last ? h : mates[t % mates.size()];
      if (src != h) add(&l, h, src, share);
      for (int r : mates)
        if (r != src) add(&l, src, r, share);
    }
  }
  return l;
}

LevelModel::Times LevelModel::times(shaddr_coll coll, size_t bytes) const {
  return {time_us(flat_[coll], bytes), time_us(levels_[coll], bytes)};
}

size_t LevelModel::levels_from(shaddr_coll coll, size_t from) const {
  if (!from) return 0;
  const auto wins = [&](size_t s) {
    const Times t = times(coll, s);
    return t.levels_us < t.flat_us;
  };
  std::vector<size_t> sizes{from};
  size_t p = 1;
  while (p <= from && p < kLargest) p <<= 1;
  for (; p > from && p <= kLargest; p <<= 1) sizes.push_back(p);
  size_t first = 0;
  for (auto s = sizes.rbegin(); s != sizes.rend() && wins(*s); ++s) first = *s;
  return first;
}

}  // namespace shaddr
