// SPDX-License-Identifier: MIT
// The cost model's flat-vs-levels choice: the time of a collective read flat across a level's
// domains and by the levels (coll_bcast.cc level_bcast(), coll_gather.cc level_allgatherv(),
// coll_reduce.cc level_reduce()), from the copy rates the calibration measured between NUMA
// nodes (CostModel::numa_rates()). The plan takes the levels per collective from the size on
// which this says they win (plan.cc plan_levels(); docs/topology.md).
#pragma once

#include <cstddef>
#include <vector>

#include "coll_rules.h"
#include "plan_model.h"
#include "shaddr/coll.h"
#include "topology.h"

namespace shaddr {

// Every algorithm is a set of single copies, each read by its destination rank; what bounds it
// is the busiest of: a reader's core (one_local or one_remote GB/s by where the source lies), the
// link from one domain to another (all_remote: every core of a node reading another at once),
// and a domain's copies inside it (all_local). Its phases are pipelined in chunks, so the time is
//   T(S) = max over those (bytes / rate) + (phases - 1) * min(S, chunk) / one_local
//          + phases * stage_us.
// The same form as tools/shaddr_bench/topomodel.py, on the one level the rates were measured for.
class LevelModel {
 public:
  // Root 0 for the rooted collectives, the chain's slices as at large sizes.
  LevelModel(const LevelGroups &level, const LevelRates &rates, double stage_us, size_t chunk);

  struct Times {
    double flat_us = 0, levels_us = 0;
  };
  // @coll (Bcast, Allgather, Reduce or Allreduce) of @bytes (one rank's block or vector); a
  // reduction whose chain does not pay (reduce_chain_pays()) costs flat both ways.
  Times times(shaddr_coll coll, size_t bytes) const;
  // The first of @from and the sizes doubling from it up to 1 GiB from which the levels are
  // faster at every one; 0 where they are not at 1 GiB.
  size_t levels_from(shaddr_coll coll, size_t from) const;
  static constexpr size_t kLargest = size_t{1} << 30;

 private:
  // Multiples of the message size S each resource carries, over every phase.
  struct Loads {
    std::vector<double> local, remote;  // per reader rank: read inside its domain / across
    std::vector<double> link;           // per (source domain, reader domain)
    std::vector<double> inside;         // per domain: copied inside it
    int phases = 0;
  };
  Loads empty(int phases) const;
  void add(Loads *l, int from, int to, double share) const;
  double time_us(const Loads &l, size_t bytes) const;
  Loads bcast(bool levels) const;
  Loads allgather(bool levels) const;
  Loads reduction(bool levels, bool all) const;

  std::vector<int> group_;  // per rank
  std::vector<std::vector<int>> members_;  // per domain, in rank order
  std::vector<int> leader_;  // per domain
  std::vector<ChainRun> runs_;  // the rank-order chain (coll_rules.h)
  LevelRates rates_;
  double stage_us_;
  size_t chunk_;
  bool chain_pays_;
  size_t slices_;  // the chain's, at large sizes
  Loads flat_[SHADDR_COLL_COUNT], levels_[SHADDR_COLL_COUNT];
};

}  // namespace shaddr
