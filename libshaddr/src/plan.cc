// SPDX-License-Identifier: MIT
// The plan: building it from the collectives' rules (coll_rules.h), the settings agreed when
// the communicator was made (the limits the rules turn at, the user's SHADDR_MIN, the
// hierarchy's across nodes), the backend and the cost model (plan_model.h), looking a call up in
// it, and its C entry points (the per-call entry that routes a call by it is call.cc).
#include "plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "../heap/heap.h"
#include "coll_rules.h"
#include "comm.h"
#include "error.h"
#include "hash.h"
#include "plan_model.h"
#include "settings.h"

namespace shaddr {
namespace {

shaddr_coll table_coll(int table) {
  if (table == SHADDR_PLAN_ALLREDUCE_IN_PLACE) return SHADDR_COLL_ALLREDUCE;
  if (table == SHADDR_PLAN_BCAST_SEGMENTED) return SHADDR_COLL_BCAST;
  return static_cast<shaddr_coll>(table);
}

// The limits the plan decides from the settings as agreed, the node and the backend.
shaddr_plan_limits plan_limits(const Comm &c, shaddr_fallback fallback) {
  const Tuning &t = c.tuning();
  const Backend &be = c.backend();
  shaddr_plan_limits l{};
  l.slot_max = std::min<size_t>(t.slot_max, NodeBlockConfig{}.reduce_slot_bytes);
  l.bcast_fifo_max = t.bcast_fifo_max;
  // Copy-only backends pay a system call per read: on cma the FIFO's two copies win up to
  // 256 KiB. Under the heap layer the FIFO and the slots stop just below SHADDR_HEAP_MIN's
  // default: from there buffers are malloc'd in the heap and readers copy straight from its
  // mapping, faster than two copies (docs/defaults.md). A root buffer outside the heap then
  // costs cma's read (heap+cma) or is staged whole before the readers copy it (heap+shm, where
  // the FIFO would otherwise take every size: bcast_fifo_always).
  const BackendKind kind = be.kind();
  const bool on_heap = be.heap_stats() != nullptr &&
                       (kind == BackendKind::kCma || kind == BackendKind::kShm);
  if (!t.bcast_fifo_configured) {
    if (kind == BackendKind::kCma && !on_heap) l.bcast_fifo_max = 256u << 10;
    if (on_heap) l.bcast_fifo_max = heap::kDefaultMinSize - 1;
  }
  if (!t.slot_max_configured && on_heap)
    l.slot_max = std::min(l.slot_max, heap::kDefaultMinSize - 1);
  // The hierarchy across nodes is the interposer's, whose fallbacks these are.
  if (fallback == SHADDR_FALLBACK_MPICH || fallback == SHADDR_FALLBACK_OPENMPI) {
    l.hier_segment = t.hier_segment;
    l.hier_mesh_max = t.hier_mesh_max;
  }
  return l;
}

// The collectives' rules, in the order they apply them: libshaddr's algorithm for a call of
// @bytes (one rank's block where the collective has blocks) in table @table, where the rules
// turn at @t's sizes (the plan's limits).
shaddr_algo rule_algorithm(const Comm &c, const Tuning &t, int table, size_t bytes) {
  const Backend &be = c.backend();
  const int n = c.size();
  const shaddr_coll coll = table_coll(table);
  if (coll == SHADDR_COLL_BARRIER) return n > 1 ? SHADDR_ALGO_BARRIER : SHADDR_ALGO_NONE;
  if (n == 1 || bytes == 0) return SHADDR_ALGO_NONE;
  // A block of every rank in one slot: Scatter's root and every Alltoall rank publish n blocks.
  const auto n_blocks_fit = [&] {
    return bytes <= SIZE_MAX / static_cast<size_t>(n) &&
           gather_slots_fit(bytes * static_cast<size_t>(n), t);
  };
  switch (coll) {
    case SHADDR_COLL_BCAST: {
      const bool segmented = table == SHADDR_PLAN_BCAST_SEGMENTED;
      if (bcast_slot_fits(bytes, t)) return SHADDR_ALGO_SLOTS;
      if (bcast_fifo_wins(bytes,
                          bcast_fifo_always(be.stages(), be.heap_stats() != nullptr, segmented), t))
        return SHADDR_ALGO_FIFO;
      // Down the topology's levels the root's memory is read once per domain: streams,
      // which read it across the levels, are not used there (bcast_by_levels()).
      if (c.levels().flat() && bcast_streams_win(n, bytes, segmented, be.stages(), t))
        return SHADDR_ALGO_STREAMS;
      return SHADDR_ALGO_DIRECT;
    }
    case SHADDR_COLL_REDUCE:
      if (reduce_slots_fit(bytes, t)) return SHADDR_ALGO_SLOTS;
      return reduce_direct_wins(n, bytes, t) ? SHADDR_ALGO_ROOT : SHADDR_ALGO_PARTITIONED;
    case SHADDR_COLL_ALLREDUCE:
      return reduce_slots_fit(bytes, t) ? SHADDR_ALGO_SLOTS : SHADDR_ALGO_PARTITIONED;
    case SHADDR_COLL_ALLGATHER:
      if (gather_slots_fit(bytes, t)) return SHADDR_ALGO_SLOTS;
      if (allgather_ring_wins(n, be.stages(), be.max_mappings(), t)) return SHADDR_ALGO_RING;
      return SHADDR_ALGO_DIRECT;
    case SHADDR_COLL_GATHER:
      return gather_slots_fit(bytes, t) ? SHADDR_ALGO_SLOTS : SHADDR_ALGO_DIRECT;
    default:  // Scatter, Alltoall
      return n_blocks_fit() ? SHADDR_ALGO_SLOTS : SHADDR_ALGO_DIRECT;
  }
}

struct Decision {
  shaddr_algo algo;
  bool use_fallback;
  bool operator==(const Decision &o) const {
    return algo == o.algo && use_fallback == o.use_fallback;
  }
};

class Builder {
 public:
  Builder(const Comm &c, shaddr_fallback fallback)
      : c_(c), fallback_(fallback), limits_(plan_limits(c, fallback)), rules_(c.tuning()) {
    rules_.slot_max = limits_.slot_max;
    rules_.bcast_fifo_max = limits_.bcast_fifo_max;
  }

  const shaddr_plan_limits &limits() const { return limits_; }

  Decision decide(int table, size_t bytes) const {
    const shaddr_coll coll = table_coll(table);
    Decision d{rule_algorithm(c_, rules_, table, bytes), false};
    if (fallback_ == SHADDR_FALLBACK_NONE) return d;
    // Nothing to move: the caller's own collective does what MPI asks of an empty call.
    if (bytes == 0 && coll != SHADDR_COLL_BARRIER) {
      d.use_fallback = true;
      return d;
    }
    if (d.algo == SHADDR_ALGO_NONE) return d;  // one rank: nothing to weigh
    const Tuning &t = c_.tuning();
    if (t.min_set[coll]) {
      d.use_fallback = bytes < t.min_bytes[coll];
      return d;
    }
    const double mine = time_us(table, d.algo, bytes), theirs = fallback_time(coll, bytes);
    d.use_fallback = mine >= 0 && theirs >= 0 && mine > theirs * (1 - margin());
    return d;
  }

  // SHADDR_PLAN_MARGIN as a fraction: libshaddr must be modelled this much faster. Not where
  // the user set SHADDR_MIN_<COLL> or where there is no fallback to weigh against.
  double margin() const { return c_.tuning().plan_margin_pct / 100.0; }
  bool weighed(int table) const {
    return fallback_ != SHADDR_FALLBACK_NONE && !c_.tuning().min_set[table_coll(table)];
  }

  double time_us(int table, shaddr_algo algo, size_t bytes) const {
    const Backend &be = c_.backend();
    return c_.model().shaddr_us(table_coll(table), algo, be.kind(), be.heap_stats() != nullptr,
                                bytes, c_.size(), table == SHADDR_PLAN_ALLREDUCE_IN_PLACE,
                                fallback_);
  }
  double fallback_time(shaddr_coll coll, size_t bytes) const {
    return c_.model().fallback_us(fallback_, coll, bytes, c_.size());
  }

  // The sizes every change of decision is looked for between: the ends of each power-of-two
  // class cut in eighths, every size a rule or a setting turns at (and the next one), and the
  // sizes the model has measured points at.
  std::vector<size_t> samples(int table) const {
    std::vector<size_t> v = {0, 1};
    for (int k = 0; k < 64; k++) {
      const size_t lo = size_t{1} << k;
      for (int j = 0; j < 8; j++) {
        const size_t step = k >= 3 ? (lo >> 3) * j : 0;
        v.push_back(lo + step);
      }
      v.push_back(k == 63 ? SIZE_MAX : (lo << 1) - 1);
    }
    const Tuning &t = rules_;
    const size_t n = static_cast<size_t>(c_.size());
    for (size_t x : {t.slot_max, t.slot_max / std::max<size_t>(n, 1), t.bcast_fifo_max,
                     t.bcast_streams_min, kReduceDirectMax,
                     t.min_bytes[table_coll(table)]}) {
      v.push_back(x);
      if (x < SIZE_MAX) v.push_back(x + 1);
      if (x > 0) v.push_back(x - 1);
    }
    const shaddr_coll coll = table_coll(table);
    for (int w = 0; w < static_cast<int>(Who::kCount); w++)
      for (const CostPoint &p : c_.model().curve(static_cast<Who>(w), coll).points)
        if (p.bytes < 1.8e19) v.push_back(static_cast<size_t>(p.bytes));
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }

  // Fills @out with the steps of @table. False if they do not fit SHADDR_PLAN_MAX_STEPS.
  bool build(int table, shaddr_plan_table *out) const {
    std::vector<Range> r = ranges(table);
    if (weighed(table) && margin() > 0) smooth(&r);
    if (r.size() > SHADDR_PLAN_MAX_STEPS) return false;
    const shaddr_coll coll = table_coll(table);
    out->nsteps = 0;
    for (const Range &x : r) {
      shaddr_plan_step &s = out->steps[out->nsteps++];
      s.upto = x.upto;
      s.algo = x.d.algo;
      s.use_fallback = x.d.use_fallback;
      const double mine = x.d.algo == SHADDR_ALGO_NONE ? -1 : time_us(table, x.d.algo, x.from);
      const double theirs = fallback_time(coll, x.from);
      s.shaddr_us = mine > 0 ? mine : 0;
      s.fallback_us = theirs > 0 ? theirs : 0;
    }
    return true;
  }

 private:
  struct Range {
    size_t from, upto;
    Decision d;
  };

  // The sizes of @table cut where the decision changes: every change between two samples,
  // each found by bisection.
  std::vector<Range> ranges(int table) const {
    const std::vector<size_t> at = samples(table);
    std::vector<Range> out;
    size_t start = 0;
    Decision cur = decide(table, 0);
    for (size_t i = 1; i < at.size(); i++) {
      while (!(decide(table, at[i]) == cur)) {
        size_t same = std::max(start, at[i - 1]), other = at[i];
        while (other - same > 1) {
          const size_t mid = same + (other - same) / 2;
          (decide(table, mid) == cur ? same : other) = mid;
        }
        out.push_back({start, other - 1, cur});
        start = other;
        cur = decide(table, other);
      }
    }
    out.push_back({start, SIZE_MAX, cur});
    return out;
  }

  // Where two measured curves run within the noise of each other, the model's answer flips
  // from size to size. A libshaddr range between two of the caller's that spans less than a
  // factor of two goes to the caller too; neighbours that then agree are joined.
  static void smooth(std::vector<Range> *r) {
    for (size_t i = 1; i + 1 < r->size(); i++) {
      Range &x = (*r)[i];
      if (!x.d.use_fallback && x.d.algo != SHADDR_ALGO_NONE && (*r)[i - 1].d.use_fallback &&
          (*r)[i + 1].d.use_fallback && x.upto / 2 < x.from)
        x.d.use_fallback = true;
    }
    std::vector<Range> joined;
    for (const Range &x : *r) {
      if (!joined.empty() && joined.back().d == x.d)
        joined.back().upto = x.upto;
      else
        joined.push_back(x);
    }
    *r = std::move(joined);
  }

  const Comm &c_;
  shaddr_fallback fallback_;
  shaddr_plan_limits limits_;
  Tuning rules_;  // the settings as agreed, with the limits in force
};

static_assert(static_cast<int>(Level::kPackage) == SHADDR_LEVEL_PACKAGE &&
              static_cast<int>(Level::kNuma) == SHADDR_LEVEL_NUMA &&
              static_cast<int>(Level::kL3) == SHADDR_LEVEL_L3 &&
              static_cast<int>(Level::kL2) == SHADDR_LEVEL_L2 && kLevels == SHADDR_LEVEL_COUNT);

// The levels of @c's grouping, and from which size a Bcast, an Allgather and a reduction use
// them: the copy path's sizes (the first "direct" step of the Bcast and Allgather tables, the
// first "partitioned" of the reductions'; slots and the FIFO have their own copies), not on a
// backend that stages (a relay's exposure, or a folder's partial result, is staged when it is
// posted, before its data has arrived). Where the calibration measured the NUMA nodes' copy
// rates, each collective from the first of those sizes on which the model has the levels faster
// (level_model(); docs/topology.md), or flat.
void plan_levels(const Comm &c, shaddr_plan *out) {
  for (const LevelGroups &l : c.levels().levels) {
    shaddr_plan_level &pl = out->levels[out->nlevels++];
    pl.level = static_cast<shaddr_level>(l.level);
    pl.same_as = l.same_as;
    pl.groups = static_cast<int>(l.groups());
  }
  if (!out->nlevels || c.backend().stages()) return;
  // The first size of @coll's copy path, if its last step is that path (a ring or streams
  // at the large sizes read across the levels their own way).
  const auto direct_from = [&](shaddr_coll coll) -> size_t {
    const shaddr_plan_table &t = out->tables[coll];
    if (!t.nsteps || t.steps[t.nsteps - 1].algo != SHADDR_ALGO_DIRECT) return 0;
    size_t from = 0;
    for (int i = 0; i < t.nsteps; i++) {
      if (t.steps[i].algo == SHADDR_ALGO_DIRECT) return std::max<size_t>(from, 1);
      from = t.steps[i].upto + 1;
    }
    return 0;
  };
  out->limits.bcast_levels_min = direct_from(SHADDR_COLL_BCAST);
  // A relay's progress is a stage (8 bits) per block it has read.
  if (c.size() <= 255) out->limits.allgather_levels_min = direct_from(SHADDR_COLL_ALLGATHER);
  // A reduction's partitioned path (the same sizes in Reduce and Allreduce: the slots' end;
  // a Reduce's direct path is for 2 ranks, whose chain never pays).
  if (reduce_chain_pays(c.levels().levels.front())) {
    const shaddr_plan_table &t = out->tables[SHADDR_COLL_ALLREDUCE];
    size_t from = 0;
    for (int i = 0; i < t.nsteps && !out->limits.reduce_levels_min; i++) {
      if (t.steps[i].algo == SHADDR_ALGO_PARTITIONED)
        out->limits.reduce_levels_min = std::max<size_t>(from, 1);
      from = t.steps[i].upto + 1;
    }
    out->limits.allreduce_levels_min = out->limits.reduce_levels_min;
  }
  if (const std::optional<LevelModel> m = level_model(c)) {
    shaddr_plan_limits &l = out->limits;
    l.bcast_levels_min = m->levels_from(SHADDR_COLL_BCAST, l.bcast_levels_min);
    l.allgather_levels_min = m->levels_from(SHADDR_COLL_ALLGATHER, l.allgather_levels_min);
    l.reduce_levels_min = m->levels_from(SHADDR_COLL_REDUCE, l.reduce_levels_min);
    l.allreduce_levels_min = m->levels_from(SHADDR_COLL_ALLREDUCE, l.allreduce_levels_min);
  }
}

uint64_t digest(const shaddr_plan &p) {
  uint64_t h = hash_mix(kHashSeed, static_cast<uint64_t>(p.fallback));
  h = hash_mix(h, static_cast<uint64_t>(p.ranks));
  for (const shaddr_plan_table &t : p.tables) {
    h = hash_mix(h, static_cast<uint64_t>(t.nsteps));
    for (int i = 0; i < t.nsteps; i++) {
      h = hash_mix(h, t.steps[i].upto);
      h = hash_mix(h, static_cast<uint64_t>(t.steps[i].algo) << 1 | (t.steps[i].use_fallback ? 1 : 0));
    }
  }
  for (size_t v : {p.limits.slot_max, p.limits.bcast_fifo_max, p.limits.hier_segment,
                   p.limits.hier_mesh_max, p.limits.bcast_levels_min,
                   p.limits.allgather_levels_min, p.limits.reduce_levels_min,
                   p.limits.allreduce_levels_min})
    h = hash_mix(h, v);
  for (int i = 0; i < p.nlevels; i++)
    h = hash_mix(h, static_cast<uint64_t>(p.levels[i].level) << 40 |
                        static_cast<uint64_t>(p.levels[i].same_as) << 32 |
                        static_cast<uint32_t>(p.levels[i].groups));
  return h;
}

const char *table_name(int table) {
  if (table == SHADDR_PLAN_ALLREDUCE_IN_PLACE) return "allreduce in place";
  if (table == SHADDR_PLAN_BCAST_SEGMENTED) return "bcast segmented";
  return coll_name(static_cast<shaddr_coll>(table));
}

std::string size_text(size_t b) {
  static const char *const units[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  while (u < 6 && b % 1024 == 0 && b >= 1024) b /= 1024, u++;
  return std::to_string(b) + units[u];
}

}  // namespace

std::optional<LevelModel> level_model(const Comm &c) {
  const LevelRates &r = c.model().numa_rates();
  if (c.levels().flat() || !c.levels_weighed() || !r.known()) return std::nullopt;
  const LevelGroups &l = c.levels().levels.front();
  if (l.level != Level::kPackage && l.level != Level::kNuma) return std::nullopt;
  // A stage of an algorithm is a post and a wait, as a Barrier's round is: its calibrated time.
  const Backend &be = c.backend();
  const double stage = c.model().shaddr_us(SHADDR_COLL_BARRIER, SHADDR_ALGO_BARRIER, be.kind(),
                                           be.heap_stats() != nullptr, 0, c.size(), false,
                                           SHADDR_FALLBACK_NONE);
  return LevelModel(l, r, std::max(stage, 0.0), c.tuning().chunk);
}

std::string levels_weighing(const Comm &c, const shaddr_plan &p) {
  // On a staging backend no collective goes by the levels, whatever the model says.
  const std::optional<LevelModel> m = level_model(c);
  if (!m || !p.nlevels || c.backend().stages()) return {};
  const LevelRates &r = c.model().numa_rates();
  char line[512];
  std::snprintf(line, sizeof(line),
                "the model over the calibration's NUMA copy rates (GB/s: one core %.3g local, "
                "%.3g remote; every core %.3g local, %.3g remote):",
                r.one_local, r.one_remote, r.all_local, r.all_remote);
  std::string out = line;
  const struct {
    const char *name;
    shaddr_coll coll;  // whose times are shown
    size_t from;
  } colls[] = {{"bcast", SHADDR_COLL_BCAST, p.limits.bcast_levels_min},
               {"allgather", SHADDR_COLL_ALLGATHER, p.limits.allgather_levels_min},
               {"reduce", SHADDR_COLL_REDUCE, p.limits.reduce_levels_min},
               {"allreduce", SHADDR_COLL_ALLREDUCE, p.limits.allreduce_levels_min}};
  const char *sep = " ";
  for (const auto &k : colls) {
    const size_t at = k.from ? k.from : LevelModel::kLargest;
    const LevelModel::Times t = m->times(k.coll, at);
    std::snprintf(line, sizeof(line), "%s%s %s%s (%s at %s: flat %.1f us, levels %.1f us)", sep,
                  k.name, k.from ? "by the levels from " : "flat",
                  k.from ? size_text(k.from).c_str() : "", coll_name(k.coll),
                  size_text(at).c_str(), t.flat_us, t.levels_us);
    out += line;
    sep = ", ";
  }
  return out;
}

void build_plan(const Comm &c, shaddr_fallback fallback, shaddr_plan *out) {
  std::memset(out, 0, sizeof(*out));
  out->fallback = fallback;
  out->calibrated = !c.model().calibration().empty();
  const Builder b(c, fallback);
  for (int t = 0; t < SHADDR_PLAN_TABLES; t++) {
    if (b.build(t, &out->tables[t])) continue;
    // More turns than a table holds: no plan (the caller says so and runs its own collective).
    if (verbose())
      std::fprintf(stderr, "shaddr: the plan's %s table needs more than %d steps\n",
                   table_name(t), SHADDR_PLAN_MAX_STEPS);
    std::memset(out, 0, sizeof(*out));
    return;
  }
  out->ranks = c.size();
  out->limits = b.limits();
  plan_levels(c, out);
  out->digest = digest(*out);
  // What a caller's per-call test reads first: the first step of each table that is not the
  // caller's, over the collective's variants.
  std::fill(std::begin(out->lib_from), std::end(out->lib_from), SIZE_MAX);
  for (int t = 0; t < SHADDR_PLAN_TABLES; t++) {
    size_t &lib_from = out->lib_from[table_coll(t)];
    size_t from = 0;
    for (int i = 0; i < out->tables[t].nsteps; i++) {
      const shaddr_plan_step &s = out->tables[t].steps[i];
      if (!s.use_fallback) {
        lib_from = std::min(lib_from, from);
        break;
      }
      from = s.upto + 1;
    }
  }
}

std::string plan_levels_text(const shaddr_plan &p) {
  std::string out = "levels:";
  if (!p.nlevels) out += " flat";
  for (int i = 0; i < p.nlevels; i++) {
    const shaddr_plan_level &l = p.levels[i];
    out += std::string(i ? ", " : " ") + level_name(static_cast<Level>(l.level));
    for (Level o : kAllLevels)
      if (l.same_as & level_bit(o)) out += std::string(" = ") + level_name(o);
    out += " " + std::to_string(l.groups) + " groups";
  }
  if (p.limits.bcast_levels_min)
    out += "; bcast from " + size_text(p.limits.bcast_levels_min);
  if (p.limits.allgather_levels_min)
    out += "; allgather from " + size_text(p.limits.allgather_levels_min);
  if (p.limits.reduce_levels_min)
    out += "; reduce from " + size_text(p.limits.reduce_levels_min);
  if (p.limits.allreduce_levels_min)
    out += "; allreduce from " + size_text(p.limits.allreduce_levels_min);
  return out;
}

const shaddr_plan_step &plan_step(const shaddr_plan &p, int table, size_t bytes) {
  const shaddr_plan_table &t = p.tables[table];
  int i = 0;
  while (i < t.nsteps - 1 && t.steps[i].upto < bytes) i++;
  return t.steps[i];
}

const shaddr_plan &Comm::build_plan_once(shaddr_fallback fallback) {
  std::lock_guard<std::mutex> hold(plans_lock_);
  std::unique_ptr<shaddr_plan> &p = plans_[fallback];
  if (!p) {
    p.reset(new (std::nothrow) shaddr_plan);
    if (!p) {
      static const shaddr_plan kNone{};  // ranks 0: no plan
      return kNone;
    }
    build_plan(*this, fallback, p.get());
    plan_ready_[fallback].store(p.get(), std::memory_order_release);
  }
  return *p;
}

const shaddr_plan_step &Comm::step(shaddr_coll coll, size_t bytes, unsigned flags) const {
  // plans_[SHADDR_FALLBACK_NONE] was built by create(), before any collective could run.
  return plan_step(*plans_[SHADDR_FALLBACK_NONE], plan_table(coll, flags), bytes);
}

}  // namespace shaddr

extern "C" {

SHADDR_API const struct shaddr_plan *shaddr_comm_plan(shaddr_comm_t *comm,
                                                      enum shaddr_fallback fallback) {
  int f;
  std::memcpy(&f, &fallback, sizeof(f));
  if (!comm || f < 0 || f >= SHADDR_FALLBACK_COUNT) return nullptr;
  const shaddr_plan &p = shaddr::from_handle(comm)->plan(fallback);
  return p.ranks ? &p : nullptr;
}

SHADDR_API const struct shaddr_plan_step *shaddr_plan_lookup(const struct shaddr_plan *plan,
                                                             enum shaddr_coll coll, size_t bytes,
                                                             unsigned int flags) {
  int c;
  std::memcpy(&c, &coll, sizeof(c));
  if (!plan || !plan->ranks || c < 0 || c >= SHADDR_COLL_COUNT) return nullptr;
  return &shaddr::plan_step(*plan, shaddr::plan_table(coll, flags), bytes);
}

SHADDR_API int shaddr_plan_format(const struct shaddr_plan *plan, char *buf, size_t len) {
  if (!plan || (!buf && len)) return -EINVAL;
  std::string out;
  for (int t = 0; t < SHADDR_PLAN_TABLES; t++) {
    const shaddr_plan_table &tab = plan->tables[t];
    out += std::string(shaddr::table_name(t)) + ":";
    size_t from = 0;
    for (int i = 0; i < tab.nsteps; i++) {
      const shaddr_plan_step &s = tab.steps[i];
      // Steps that go to the caller differ only in the algorithm that would have run: one
      // range (the empty call's 0-0 stays apart).
      if (s.use_fallback && from > 0 && i + 1 < tab.nsteps && tab.steps[i + 1].use_fallback)
        continue;
      out += std::string(i ? ", " : " ") + shaddr::size_text(from) + "-" +
             (s.upto == SIZE_MAX ? "" : shaddr::size_text(s.upto)) + " " +
             (s.use_fallback ? "mpi" : shaddr_algo_name(s.algo));
      from = s.upto + 1;
    }
    out += "\n";
  }
  const shaddr_plan_limits &l = plan->limits;
  out += "limits: slot_max " + shaddr::size_text(l.slot_max) + ", bcast_fifo_max " +
         shaddr::size_text(l.bcast_fifo_max);
  if (l.hier_segment)
    out += ", hier_segment " + shaddr::size_text(l.hier_segment) + ", hier_mesh_max " +
           shaddr::size_text(l.hier_mesh_max);
  out += "\n" + shaddr::plan_levels_text(*plan) + "\n";
  return std::snprintf(buf, len, "%s", out.c_str());
}

}  // extern "C"
