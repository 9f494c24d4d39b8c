// SPDX-License-Identifier: MIT
// The plan (struct shaddr_plan in coll.h): per collective, sorted size ranges, each naming the
// algorithm libshaddr runs there and whether the caller's own collective runs instead. The only
// policy: built once per node communicator and fallback from what every rank agreed when the
// communicator was made (the settings, the backend, the cost model), so it is identical on
// every rank; libshaddr's collectives run the step's algorithm, callers with a fallback look
// the step up once per call.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "level_model.h"
#include "shaddr/coll.h"

namespace shaddr {

class Comm;

// The plan of @c against @fallback (SHADDR_FALLBACK_NONE: libshaddr at every size).
void build_plan(const Comm &c, shaddr_fallback fallback, shaddr_plan *out);

// The table of @coll for a call with shaddr_plan_lookup() @flags.
inline int plan_table(shaddr_coll coll, unsigned flags) {
  if (coll == SHADDR_COLL_ALLREDUCE && (flags & SHADDR_PLAN_IN_PLACE))
    return SHADDR_PLAN_ALLREDUCE_IN_PLACE;
  if (coll == SHADDR_COLL_BCAST && (flags & SHADDR_PLAN_SEGMENTED))
    return SHADDR_PLAN_BCAST_SEGMENTED;
  return coll;
}

// "levels: flat", or "levels: numa 2 groups; bcast from 16K; allgather from 8193;
// reduce from 5462; allreduce from 5462"
// (shaddr_plan_format's last line, without its newline; SHADDR_VERBOSE=1 prints it).
std::string plan_levels_text(const shaddr_plan &p);

// Whether a Bcast of @bytes that runs the copy path ("direct") goes down the plan's levels:
// a function of the plan and the call, so equal on every rank.
inline bool bcast_by_levels(const shaddr_plan &p, size_t bytes) {
  return p.nlevels > 0 && p.limits.bcast_levels_min && bytes >= p.limits.bcast_levels_min;
}
// Whether an Allgather(v) whose largest block is @largest, on the copy path, reads across the
// plan's coarsest level once per group (coll_gather.cc): the same on every rank.
inline bool allgather_by_levels(const shaddr_plan &p, size_t largest) {
  return p.nlevels > 0 && p.limits.allgather_levels_min && largest >= p.limits.allgather_levels_min;
}

// Whether a Reduce (@allreduce: Allreduce) of @bytes a rank, on the partitioned path, goes down
// the rank-order chain of the plan's coarsest level (coll_reduce.cc): the same on every rank.
inline bool reduce_by_levels(const shaddr_plan &p, size_t bytes, bool allreduce) {
  const size_t from = allreduce ? p.limits.allreduce_levels_min : p.limits.reduce_levels_min;
  return p.nlevels > 0 && from && bytes >= from;
}

// The flat-vs-levels model of @c's coarsest level (level_model.h), where the plan weighs its
// levels by it: SHADDR_TOPOLOGY=auto, the calibration measured the NUMA nodes' copy rates, and
// the level is a NUMA node's or a package's. Else none: SHADDR_TOPOLOGY names the levels, or
// nothing was measured, and the levels take the copy paths' sizes (docs/topology.md).
std::optional<LevelModel> level_model(const Comm &c);
// What the model said of plan @p's levels, for SHADDR_VERBOSE=1 ("" where it was not asked).
std::string levels_weighing(const Comm &c, const shaddr_plan &p);

// The step of table @table for @bytes.
const shaddr_plan_step &plan_step(const shaddr_plan &p, int table, size_t bytes);

}  // namespace shaddr
