// SPDX-License-Identifier: MIT
// shaddr_select() (coll.h): a call's step in the plan against the caller's fallback (plan.h),
// explained with the cost model's times (plan_model.h) and the reason the plan chose it; and
// the algorithms' names that it and the plan's text (shaddr_plan_format) use.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "comm.h"
#include "plan.h"
#include "plan_model.h"

namespace shaddr {
namespace {

constexpr const char *kAlgoNames[] = {"fallback", "none",        "fifo", "slots", "direct",
                                      "streams",  "ring", "partitioned", "root", "barrier"};
static_assert(std::size(kAlgoNames) == SHADDR_ALGO_COUNT);
static_assert(sizeof(shaddr_coll) == sizeof(int) && sizeof(shaddr_fallback) == sizeof(int) &&
              sizeof(shaddr_algo) == sizeof(int));

// shaddr_select() for a checked query.
shaddr_selection select(Comm &c, const shaddr_select_query &q) {
  shaddr_selection out{};
  const unsigned flags = q.in_place ? SHADDR_PLAN_IN_PLACE : 0;
  const shaddr_plan &plan = c.plan(q.fallback);
  const shaddr_plan_step &step = plan_step(plan, plan_table(q.coll, flags), q.bytes);
  out.algo = step.algo;
  const bool reduction = q.coll == SHADDR_COLL_REDUCE || q.coll == SHADDR_COLL_ALLREDUCE;
  if (reduction && !q.reducible) {
    out.algo = SHADDR_ALGO_FALLBACK;
    out.why = "libshaddr cannot reduce this datatype with this op";
    return out;
  }
  if (out.algo == SHADDR_ALGO_NONE && !step.use_fallback) {
    out.why = "nothing to move";
    return out;
  }
  const CostModel &m = c.model();
  const Backend &be = c.backend();
  out.shaddr_us = std::max(0.0, m.shaddr_us(q.coll, step.algo, be.kind(), be.heap_stats(),
                                            q.bytes, c.size(), q.in_place, q.fallback));
  out.fallback_us = std::max(0.0, m.fallback_us(q.fallback, q.coll, q.bytes, c.size()));
  if (step.use_fallback) {
    out.algo = SHADDR_ALGO_FALLBACK;
    out.why = c.tuning().min_set[q.coll] ? "below the SHADDR_MIN setting: the fallback"
              : q.bytes == 0            ? "nothing to move: the fallback"
                                        : "the model says the fallback is faster";
  } else if (q.fallback == SHADDR_FALLBACK_NONE) {
    out.why = "no fallback to weigh";
  } else if (c.tuning().min_set[q.coll]) {
    out.why = "at or above the SHADDR_MIN setting: libshaddr";
  } else if (out.shaddr_us == 0 || out.fallback_us == 0) {
    out.why = "no model for this case: libshaddr";
  } else {
    out.why = "the model says libshaddr is faster";
  }
  return out;
}

}  // namespace
}  // namespace shaddr

using shaddr::Comm;

extern "C" {

SHADDR_API int shaddr_select(const shaddr_comm_t *comm, const struct shaddr_select_query *q,
                             struct shaddr_selection *out) {
  if (!comm || !q || !out) return -EINVAL;
  // A C caller may pass any int in an enum's place: read them as ints.
  int coll, fallback;
  std::memcpy(&coll, &q->coll, sizeof(coll));
  std::memcpy(&fallback, &q->fallback, sizeof(fallback));
  if (coll < 0 || coll >= SHADDR_COLL_COUNT || fallback < 0 || fallback >= SHADDR_FALLBACK_COUNT)
    return -EINVAL;
  *out = shaddr::select(*const_cast<Comm *>(shaddr::from_handle(comm)), *q);
  return 0;
}

SHADDR_API const char *shaddr_algo_name(enum shaddr_algo algo) {
  int a;
  std::memcpy(&a, &algo, sizeof(a));
  return a >= 0 && a < SHADDR_ALGO_COUNT ? shaddr::kAlgoNames[a] : "?";
}

}  // extern "C"
