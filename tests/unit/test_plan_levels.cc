// SPDX-License-Identifier: MIT
// The plan's topology levels (plan.h, struct shaddr_plan's levels), the Bcast down them
// (coll_bcast.cc), the Allgather(v) across them (coll_gather.cc) and the reductions down their
// rank-order chain (coll_reduce.cc), on ranks given synthetic
// locations (set_own_location_for_tests: this host has one NUMA node): the levels the plan
// keeps, SHADDR_TOPOLOGY's say, the limits from which the two use them, their text; every
// root's Bcast and every Allgather(v) layout around those limits equal to the flat plan's, with
// the leaders and relays at work; a failure on a leader or relay reaches every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "comm.h"
#include "placement.h"
#include "plan.h"
#include "plan_model.h"
#include "plan_test_util.h"
#include "shaddr/coll.h"

namespace shaddr {
namespace {

// Each rank's domain per level (first CPU; -1: the level is not there), bound wherever given.
struct Layout {
  std::vector<int> package, numa, l3;
};

RankLocation location_of(const Layout &l, int rank) {
  RankLocation loc;
  loc.cpu = rank;
  const auto set = [&](Level lv, const std::vector<int> &d) {
    if (d.empty()) return;
    loc.domain[static_cast<size_t>(lv)] = d[static_cast<size_t>(rank)];
    loc.bound |= level_bit(lv);
  };
  set(Level::kPackage, l.package);
  set(Level::kNuma, l.numa);
  set(Level::kL3, l.l3);
  return loc;
}

// on_ranks() with every rank at its place in @layout (rank 0, this process, back at its own
// afterwards).
int on_layout(const Layout &layout, int n, const char *backend,
              const std::vector<std::pair<std::string, std::string>> &env,
              const std::function<int(shaddr_comm_t *, int)> &fn) {
  const int rc = on_ranks(n, backend, env, fn, [&](int rank) {
    const RankLocation loc = location_of(layout, rank);
    set_own_location_for_tests(&loc);
  });
  set_own_location_for_tests(nullptr);
  return rc;
}

const Layout kTwoNuma{{}, {0, 1, 0, 1}, {}};               // numa {0,2}, {1,3}
const Layout kTwoLevels{{0, 0, 4, 4}, {}, {0, 1, 4, 4}};   // package {0,1}, {2,3}; l3 {0} {1} {2,3}
const Layout kUneven{{}, {0, 0, 0, 1, 1, 0}, {}};          // numa {0,1,2,5}, {3,4}
const Layout kHalves{{}, {0, 0, 1, 1}, {}};                // numa {0,1}, {2,3}

std::string format(const shaddr_plan *p) {
  char buf[8192];
  shaddr_plan_format(p, buf, sizeof(buf));
  return buf;
}

// The first size of @coll's copy path.
size_t direct_from(const shaddr_plan &p, shaddr_coll coll = SHADDR_COLL_BCAST) {
  const shaddr_plan_table &t = p.tables[coll];
  size_t from = 0;
  for (int i = 0; i < t.nsteps; i++) {
    if (t.steps[i].algo == SHADDR_ALGO_DIRECT) return from;
    from = t.steps[i].upto + 1;
  }
  return 0;
}

TEST(PlanLevels, KeptFromTheLocationsAndTheSetting) {
  // Two NUMA domains of two ranks: one level, the copy path's sizes go down it.
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {}, [](shaddr_comm_t *c, int rank) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              if (!p || p->nlevels != 1 || p->levels[0].level != SHADDR_LEVEL_NUMA ||
                  p->levels[0].groups != 2 || p->levels[0].same_as)
                return 1;
              if (!p->limits.bcast_levels_min || p->limits.bcast_levels_min != direct_from(*p))
                return 2;
              if (!p->limits.allgather_levels_min ||
                  p->limits.allgather_levels_min != direct_from(*p, SHADDR_COLL_ALLGATHER))
                return 7;
              // Ranks alternating between the domains: the reduction's chain would cross at
              // every rank, more than the flat reduction reads across.
              if (p->limits.reduce_levels_min || p->limits.allreduce_levels_min) return 8;
              const std::string want = "\nlevels: numa 2 groups; bcast from " +
                                       std::to_string(p->limits.bcast_levels_min) +
                                       "; allgather from " +
                                       std::to_string(p->limits.allgather_levels_min) + "\n";
              if (format(p).find(want) == std::string::npos) return 3;
              // Every fallback's plan has the same levels.
              const shaddr_plan *m = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              if (!m || m->nlevels != 1 ||
                  m->limits.bcast_levels_min != p->limits.bcast_levels_min ||
                  m->limits.allgather_levels_min != p->limits.allgather_levels_min)
                return 4;
              const Grouping &g = from_handle(c)->levels();
              if (g.levels.size() != 1 || g.levels[0].group[static_cast<size_t>(rank)] != rank % 2)
                return 5;
              // No streams down the levels: the copy path runs to the end.
              const shaddr_plan_table &t = p->tables[SHADDR_COLL_BCAST];
              return t.steps[t.nsteps - 1].algo == SHADDR_ALGO_DIRECT ? 0 : 6;
            }),
            0);
  // Two levels that nest; the package and l3 splits both kept, coarse first.
  EXPECT_EQ(on_layout(kTwoLevels, 4, "cma", {}, [](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              if (!p || p->nlevels != 2 || p->levels[0].level != SHADDR_LEVEL_PACKAGE ||
                  p->levels[0].groups != 2 || p->levels[1].level != SHADDR_LEVEL_L3 ||
                  p->levels[1].groups != 3)
                return 1;
              return format(p).find("\nlevels: package 2 groups, l3 3 groups; bcast from ") !=
                             std::string::npos
                         ? 0
                         : 2;
            }),
            0);
  // Runs of consecutive ranks in a domain: the reductions' partitioned path goes down the chain
  // (from the end of the slots), in every fallback's plan, and the text says so.
  for (const Layout *layout : {&kHalves, &kUneven}) {
    const int n = static_cast<int>(layout->numa.size());
    EXPECT_EQ(on_layout(*layout, n, "cma", {}, [](shaddr_comm_t *c, int) {
                const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                if (!p || p->limits.reduce_levels_min != p->limits.slot_max + 1 ||
                    p->limits.allreduce_levels_min != p->limits.reduce_levels_min)
                  return 1;
                const shaddr_plan *m = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                if (!m || m->limits.reduce_levels_min != p->limits.reduce_levels_min ||
                    m->limits.allreduce_levels_min != p->limits.allreduce_levels_min)
                  return 2;
                const std::string from = std::to_string(p->limits.reduce_levels_min);
                const std::string want =
                    "; reduce from " + from + "; allreduce from " + from + "\n";
                return format(p).find(want) != std::string::npos ? 0 : 3;
              }),
              0)
        << n << " ranks";
  }
  // SHADDR_TOPOLOGY: flat, or a list without the level, keeps none: the flat plan, byte for byte
  // in its tables and digest.
  uint64_t flat_digest = 0, levels_digest = 0;
  for (const char *choice : {"flat", "l3,l2", "numa"}) {
    EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {{"SHADDR_TOPOLOGY", choice}},
                        [&](shaddr_comm_t *c, int rank) {
                          const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                          const bool want = std::strcmp(choice, "numa") == 0;
                          if (!p || p->nlevels != (want ? 1 : 0)) return 1;
                          if (!want && (p->limits.bcast_levels_min ||
                                        p->limits.allgather_levels_min ||
                                        p->limits.reduce_levels_min ||
                                        p->limits.allreduce_levels_min ||
                                        format(p).find("\nlevels: flat\n") == std::string::npos))
                            return 2;
                          if (rank == 0) (want ? levels_digest : flat_digest) = p->digest;
                          return 0;
                        }),
              0)
        << choice;
  }
  EXPECT_NE(flat_digest, levels_digest);
  EXPECT_EQ(on_ranks(4, "cma", {}, [&](shaddr_comm_t *c, int) {
              // This host's own locations: one NUMA node, nothing exchanged, flat.
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              if (machine_numa_nodes() > 1) return 0;
              return p && p->nlevels == 0 && p->digest == flat_digest ? 0 : 1;
            }),
            0);
  // A backend that stages its exposures keeps the levels but no Bcast or Allgather uses them.
  EXPECT_EQ(on_layout(kTwoNuma, 4, "shm", {}, [](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              return p && p->nlevels == 1 && !p->limits.bcast_levels_min &&
                             !p->limits.allgather_levels_min && !p->limits.reduce_levels_min &&
                             !p->limits.allreduce_levels_min
                         ? 0
                         : 1;
            }),
            0);
  EXPECT_EQ(on_layout(kHalves, 4, "shm", {}, [](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              return p && p->nlevels == 1 && !p->limits.reduce_levels_min &&
                             !p->limits.allreduce_levels_min
                         ? 0
                         : 1;
            }),
            0);
  // An Allgather that goes round the ring reads one neighbour at every size: not by levels.
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {{"SHADDR_ALLGATHER_RING", "1"}},
                      [](shaddr_comm_t *c, int) {
                        const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                        return p && p->limits.bcast_levels_min &&
                                       !p->limits.allgather_levels_min &&
                                       format(p).find("allgather from") == std::string::npos
                                   ? 0
                                   : 1;
                      }),
            0);
}

uint8_t pattern(size_t i, int root, int call) {
  return static_cast<uint8_t>(i * 131 + static_cast<size_t>(root) * 7 + static_cast<size_t>(call));
}

// Every root's Bcast at the sizes around the limit and over several chunks, plain and
// segmented: each rank's buffer is the root's. Down the levels the leaders post their buffers
// (the root's own domain and the ranks below a leader do not), which the flat Bcast never does.
// @relay: the one rank that posts when rank 0 broadcasts down the levels (-1: flat).
int bcast_every_root(shaddr_comm_t *c, int rank, int relay) {
  const bool want_levels = relay >= 0;
  Comm &comm = *from_handle(c);
  const shaddr_plan &p = comm.plan(SHADDR_FALLBACK_NONE);
  if ((p.limits.bcast_levels_min != 0) != want_levels) return 1;
  const size_t min = want_levels ? p.limits.bcast_levels_min : 256u << 10;
  const size_t chunk = comm.tuning().chunk;
  int call = 0;
  for (size_t bytes : {min - 1, min, min + 1, 3 * chunk + 5}) {
    for (int root = 0; root < shaddr_comm_size(c); root++) {
      for (int segmented = 0; segmented < 2; segmented++, call++) {
        std::vector<uint8_t> buf(bytes, 0xee);
        if (rank == root)
          for (size_t i = 0; i < bytes; i++) buf[i] = pattern(i, root, call);
        const uint64_t posted = comm.block().area(rank).posted.load();
        int err;
        if (segmented) {
          auto ready = [](size_t, size_t, void *) { return 0; };
          err = shaddr_bcast_segmented(c, buf.data(), bytes, root, chunk / 2 + 3, ready, nullptr);
        } else {
          err = shaddr_bcast(c, buf.data(), bytes, root);
        }
        if (err) {
          std::fprintf(stderr, "rank %d: bcast of %zu from %d: %s\n", rank, bytes, root,
                       shaddr_last_error());
          return 10;
        }
        for (size_t i = 0; i < bytes; i++)
          if (buf[i] != pattern(i, root, call)) {
            std::fprintf(stderr, "rank %d: bcast of %zu from %d: byte %zu differs\n", rank,
                         bytes, root, i);
            return 11;
          }
        if (want_levels && root == 0 && bytes >= min && rank != 0) {
          const bool posts = comm.block().area(rank).posted.load() != posted;
          if (posts != (rank == relay)) return 12;
        }
      }
    }
  }
  return 0;
}

// A calibration with the NUMA nodes' copy rates (level.numa=): under SHADDR_TOPOLOGY=auto the
// plan uses the levels only where a domain's ranks reading another node at once ask more than
// the link gives; a list of levels takes them as given; a bad line is refused, naming itself.
// Two NUMA nodes of two ranks each, {0,1} {2,3}, as group_ranks() makes them.
LevelGroups halves() {
  LevelGroups l;
  l.level = Level::kNuma;
  l.group = {0, 0, 1, 1};
  l.leader = {0, 2};
  l.domain = {0, 1};
  return l;
}

// The model's times worked by hand: the busiest of the reader cores, the links between the
// domains and the copies inside each, plus a chunk's fill per extra phase and a stage a phase.
TEST(LevelModel, TimeIsTheBusiestResource) {
  const LevelRates r{10, 5, 8, 8};  // GB/s: 1e3 bytes a microsecond
  const LevelModel m(halves(), r, 1.0, 256u << 10);
  const double S = 4u << 20, fill = (256u << 10) / 1e3 / 10;
  // Bcast flat: ranks 2 and 3 both read the root across (2 S on the link at 8, over a reader's
  // S at 5); by the levels rank 2 reads the root and rank 3 reads rank 2: a reader's S at 5.
  LevelModel::Times t = m.times(SHADDR_COLL_BCAST, 4u << 20);
  EXPECT_NEAR(t.flat_us, 2 * S / 8e3 + 1, 1e-6);
  EXPECT_NEAR(t.levels_us, S / 5e3 + fill + 2, 1e-6);
  // Allgather flat: rank 0 reads 1 block inside and 2 across (S/10 + 2S/5 = S/2 a core), the
  // link carries 4 blocks (S/2 at 8); by the levels rank 0 reads 1 across and 2 inside (S/5 +
  // S/5), the link 2 blocks, but each domain copies 4 blocks inside it at 8: S/2 again.
  t = m.times(SHADDR_COLL_ALLGATHER, 4u << 20);
  EXPECT_NEAR(t.flat_us, S / 2e3 + 1, 1e-6);
  EXPECT_NEAR(t.levels_us, S / 2e3 + fill + 2, 1e-6);
  // So the Bcast goes by the levels from the size where the link's saving outgrows the fill
  // and a stage: S (1/4 - 1/5) / 1e3 > 26.2 + 1, from 1 MiB of the sizes doubling from 16 KiB;
  // the Allgather never (flat).
  EXPECT_EQ(m.levels_from(SHADDR_COLL_BCAST, 16u << 10), size_t{1} << 20);
  EXPECT_EQ(m.levels_from(SHADDR_COLL_BCAST, 3u << 20), size_t{3} << 20);
  EXPECT_EQ(m.levels_from(SHADDR_COLL_ALLGATHER, 16u << 10), 0u);
  EXPECT_EQ(m.levels_from(SHADDR_COLL_BCAST, 0), 0u);
  // On a link of 1 GB/s under cores of 100, the flat Allreduce carries each operand's quarter
  // across twice each way (2 S a direction), the chain a slice's partial across once and its
  // result back once (S): at 1 GiB the chain takes half the time.
  const LevelModel slow_link(halves(), LevelRates{100, 100, 100, 1}, 1.0, 256u << 10);
  t = slow_link.times(SHADDR_COLL_ALLREDUCE, LevelModel::kLargest);
  EXPECT_NEAR(t.levels_us / t.flat_us, 0.5, 0.01);
  EXPECT_EQ(slow_link.levels_from(SHADDR_COLL_ALLREDUCE, 16u << 10), size_t{16} << 10);
  // Where the domains copy inside them at 40 (10/5/40/8) the chain's Allreduce wins: a core
  // reads half the slices' operands or results inside and half across (S/5 against flat's
  // S/4). Its Reduce does not: the root reads every slice across (S/5) after its folds
  // (S/20), flat's root a quarter inside and half across in each of two phases (S/4), both
  // in two phases: a tie, which keeps flat.
  const LevelModel narrow(halves(), LevelRates{10, 5, 40, 8}, 1.0, 256u << 10);
  EXPECT_EQ(narrow.levels_from(SHADDR_COLL_REDUCE, 16u << 10), 0u);
  EXPECT_NE(narrow.levels_from(SHADDR_COLL_ALLREDUCE, 16u << 10), 0u);
  t = narrow.times(SHADDR_COLL_REDUCE, 4u << 20);
  EXPECT_NEAR(t.flat_us, S / 4e3 + fill + 2, 1e-6);
  EXPECT_NEAR(t.levels_us, S / 4e3 + fill + 2, 1e-6);
  // Ranks alternating between the domains: the chain does not pay, the reductions stay flat.
  LevelGroups alternating = halves();
  alternating.group = {0, 1, 0, 1};
  alternating.leader = {0, 1};
  const LevelModel alt(alternating, LevelRates{100, 100, 100, 1}, 1.0, 256u << 10);
  t = alt.times(SHADDR_COLL_ALLREDUCE, LevelModel::kLargest);
  EXPECT_EQ(t.levels_us, t.flat_us);
  EXPECT_EQ(alt.levels_from(SHADDR_COLL_ALLREDUCE, 16u << 10), 0u);
}

// Under SHADDR_TOPOLOGY=auto with the calibration's NUMA rates, each collective takes the levels
// from the size the model gives (above: by hand), not the copy path's first size; a named list
// takes the levels from the copy path as given.
TEST(PlanLevels, WeighedByTheCalibrationsNumaRates) {
  // The copy paths' sizes, which SHADDR_TOPOLOGY=numa takes as given.
  shaddr_plan_limits given{};
  const TextFile narrow("# calibration\nlevel.numa=10.0/5.0/40.0/8.0\n");
  EXPECT_EQ(on_layout(kHalves, 4, "cma",
                      {{"SHADDR_CALIBRATION", narrow.path}, {"SHADDR_TOPOLOGY", "numa"}},
                      [&](shaddr_comm_t *c, int rank) {
                        const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                        if (!p || p->nlevels != 1 || level_model(*from_handle(c))) return 1;
                        if (rank == 0) given = p->limits;
                        return 0;
                      }),
            0);
  ASSERT_NE(given.bcast_levels_min, 0u);
  ASSERT_NE(given.allgather_levels_min, 0u);
  ASSERT_NE(given.reduce_levels_min, 0u);
  ASSERT_EQ(given.allreduce_levels_min, given.reduce_levels_min);
  // Under auto: the model's sizes. A narrow link (2 readers at 5 ask 10 of its 8): every
  // collective by the levels, from larger sizes than the copy path's; a core-bound machine
  // (10/9/40/30): the Bcast flat; 10/5/8/8 (above): the Bcast by the levels, the Allgather flat.
  for (const char *rates : {"10.0/5.0/40.0/8.0", "10/9/40/30", "10/5/8/8"}) {
    const TextFile f(std::string("level.numa=") + rates + "\n");
    EXPECT_EQ(on_layout(kHalves, 4, "cma", {{"SHADDR_CALIBRATION", f.path}},
                        [&](shaddr_comm_t *c, int) {
                          const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                          if (!p || p->nlevels != 1) return 1;
                          const std::optional<LevelModel> m = level_model(*from_handle(c));
                          if (!m) return 2;
                          const shaddr_plan_limits &l = p->limits;
                          if (l.bcast_levels_min !=
                                  m->levels_from(SHADDR_COLL_BCAST, given.bcast_levels_min) ||
                              l.allgather_levels_min !=
                                  m->levels_from(SHADDR_COLL_ALLGATHER,
                                                 given.allgather_levels_min) ||
                              l.reduce_levels_min !=
                                  m->levels_from(SHADDR_COLL_REDUCE, given.reduce_levels_min) ||
                              l.allreduce_levels_min !=
                                  m->levels_from(SHADDR_COLL_ALLREDUCE,
                                                 given.allreduce_levels_min))
                            return 3;
                          const std::string r = rates;
                          if (r == "10.0/5.0/40.0/8.0" &&
                              (l.bcast_levels_min <= given.bcast_levels_min ||
                               !l.allgather_levels_min || !l.allreduce_levels_min))
                            return 4;
                          if (r == "10/9/40/30" && l.bcast_levels_min) return 5;
                          if (r == "10/5/8/8" && (!l.bcast_levels_min || l.allgather_levels_min))
                            return 6;
                          // SHADDR_VERBOSE's account names each choice with its times.
                          const std::string why = levels_weighing(*from_handle(c), *p);
                          if (why.find("GB/s: one core 10 local") == std::string::npos ||
                              why.find("(bcast at ") == std::string::npos ||
                              why.find("(allreduce at ") == std::string::npos)
                            return 7;
                          return 0;
                        }),
              0)
        << rates;
  }
  // A staging backend takes no collective by the levels, and the verbose account says nothing
  // of a model it does not follow.
  EXPECT_EQ(on_layout(kHalves, 4, "shm", {{"SHADDR_CALIBRATION", narrow.path}},
                      [&](shaddr_comm_t *c, int) {
                        const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                        if (!p || p->nlevels != 1 || p->limits.bcast_levels_min ||
                            p->limits.allreduce_levels_min)
                          return 1;
                        return levels_weighing(*from_handle(c), *p).empty() ? 0 : 2;
                      }),
            0);
  // A line that does not parse: no communicator, and the error names the line.
  for (const char *bad : {"level.numa=10/9/40\n", "level.numa=10/0/40/30\n",
                          "level.numa=10/9/40/30x\n"}) {
    const TextFile f(bad);
    EXPECT_EQ(on_layout(kHalves, 4, "cma", {{"SHADDR_CALIBRATION", f.path}},
                        [](shaddr_comm_t *, int) { return 0; }),
              100)
        << bad;
    CostModel m;
    std::string why;
    std::string line(bad);
    line.pop_back();
    EXPECT_EQ(m.parse_line(line, &why), -EINVAL) << bad;
    EXPECT_NE(why.find("level.numa=<one local>"), std::string::npos) << why;
  }
  CostModel m;
  std::string why;
  EXPECT_EQ(m.parse_line("level.numa=12.5/6/50/20", &why), 0);
  EXPECT_TRUE(m.numa_rates().known());
  EXPECT_EQ(m.numa_rates().all_remote, 20.0);
  EXPECT_EQ(m.parse_line("level.numa=-", &why), 0);
  EXPECT_FALSE(m.numa_rates().known());
}

TEST(PlanLevels, BcastDownTheLevelsIsTheFlatBcast) {
  // From root 0, rank 1 leads {1,3} and relays to rank 3; rank 2 reads the root.
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return bcast_every_root(c, rank, 1); }),
            0);
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {{"SHADDR_TOPOLOGY", "flat"}},
                      [](shaddr_comm_t *c, int rank) { return bcast_every_root(c, rank, -1); }),
            0);
  // Two levels, from root 0: rank 2 leads package {2,3} and relays to rank 3; rank 1 (l3 of its
  // own in the root's package) reads the root.
  EXPECT_EQ(on_layout(kTwoLevels, 4, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return bcast_every_root(c, rank, 2); }),
            0);
}

uint8_t block_byte(size_t i, int owner, int call) {
  return static_cast<uint8_t>(i * 29 + static_cast<size_t>(owner) * 61 +
                              static_cast<size_t>(call) * 7 + 1);
}

// Whether @rank relays blocks across the coarsest level: its index in its group is below the
// number of the other groups' ranks (coll_gather.cc level_allgatherv()).
bool relays(Comm &comm, int rank) {
  const LevelGroups &l = comm.levels().levels.front();
  const int g = l.group[static_cast<size_t>(rank)];
  int mine = 0, across = 0;
  for (int r = 0; r < comm.size(); r++) {
    if (l.group[static_cast<size_t>(r)] != g) across++;
    else if (r < rank) mine++;
  }
  return mine < across;
}

// Allgather and Allgatherv at the sizes around the limit and over several chunks: uniform, in
// place, each rank's own displacements (block i at slot (i + rank) % n, with a gap of its own)
// and an empty block: every rank's buffer holds every block and nothing else changed. Across the
// levels a relay posts a stage per block it read, which the flat Allgather never does.
// @levels: whether the plan uses the levels.
int allgather_layouts(shaddr_comm_t *c, int rank, bool levels) {
  Comm &comm = *from_handle(c);
  const shaddr_plan &p = comm.plan(SHADDR_FALLBACK_NONE);
  if ((p.limits.allgather_levels_min != 0) != levels) return 1;
  const int n = comm.size();
  const size_t min = levels ? p.limits.allgather_levels_min : 64u << 10;
  const bool relay = levels && relays(comm, rank);
  int call = 0;
  for (size_t bytes : {min - 1, min, min + 1, 3 * comm.tuning().chunk + 5}) {
    // 0: Allgather; 1: in place; 2: Allgatherv, own displacements, block 1 empty; 3: in place
    for (int kind = 0; kind < 4; kind++, call++) {
      const bool v = kind >= 2, ip = kind % 2 == 1;
      const size_t gap = v ? 64 * static_cast<size_t>(rank + 1) : 0;
      std::vector<size_t> counts(static_cast<size_t>(n), bytes), displs(counts.size());
      for (int i = 0; i < n; i++) {
        const size_t slot = static_cast<size_t>(v ? (i + rank) % n : i);
        displs[static_cast<size_t>(i)] = slot * (bytes + gap);
      }
      if (v) counts[1] = 0;
      const size_t mine = counts[static_cast<size_t>(rank)];
      std::vector<uint8_t> send(mine + 1), out(static_cast<size_t>(n) * (bytes + gap) + 64, 0xee);
      std::vector<uint8_t> want = out;
      for (int i = 0; i < n; i++)
        for (size_t k = 0; k < counts[static_cast<size_t>(i)]; k++)
          want[displs[static_cast<size_t>(i)] + k] = block_byte(k, i, call);
      for (size_t k = 0; k < mine; k++) send[k] = block_byte(k, rank, call);
      if (ip) std::memcpy(out.data() + displs[static_cast<size_t>(rank)], send.data(), mine);
      const void *sb = ip ? SHADDR_IN_PLACE : send.data();
      const uint64_t stage = comm.block().area(rank).stage.load();
      const int err = v ? shaddr_allgatherv(c, sb, mine, out.data(), counts.data(), displs.data())
                        : shaddr_allgather(c, sb, bytes, out.data());
      if (err) {
        std::fprintf(stderr, "rank %d: kind %d of %zu: %s\n", rank, kind, bytes,
                     shaddr_last_error());
        return 10;
      }
      for (size_t k = 0; k < out.size(); k++)
        if (out[k] != want[k]) {
          std::fprintf(stderr, "rank %d: kind %d of %zu: byte %zu is %u, not %u\n", rank, kind,
                       bytes, k, out[k], want[k]);
          return 11;
        }
      const bool staged = comm.block().area(rank).stage.load() != stage;
      if (staged != (relay && bytes >= min)) {
        std::fprintf(stderr, "rank %d: kind %d of %zu: stage %s\n", rank, kind, bytes,
                     staged ? "posted" : "not posted");
        return 12;
      }
    }
  }
  return 0;
}

TEST(PlanLevels, AllgatherAcrossTheLevelsIsTheFlatAllgather) {
  // numa {0,2} {1,3}: rank 0 relays block 1, rank 2 block 3; rank 1 block 0, rank 3 block 2.
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return allgather_layouts(c, rank, true); }),
            0);
  // The coarsest of two levels: package {0,1} {2,3}.
  EXPECT_EQ(on_layout(kTwoLevels, 4, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return allgather_layouts(c, rank, true); }),
            0);
  // Groups of 4 and 2: ranks 0 and 1 relay blocks 3 and 4, ranks 2 and 5 none; rank 3 relays
  // blocks 0, 2 and rank 4 blocks 1, 5 (two stages each).
  EXPECT_EQ(on_layout(kUneven, 6, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return allgather_layouts(c, rank, true); }),
            0);
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {{"SHADDR_TOPOLOGY", "flat"}},
                      [](shaddr_comm_t *c, int rank) { return allgather_layouts(c, rank, false); }),
            0);
}

// A rank whose count differs from the others' view of it fails the Allgatherv on every rank
// with -EMSGSIZE (its group reads it from it, the other group through a relay), and the
// communicator goes on.
TEST(PlanLevels, AllgatherCountMismatchAcrossTheLevels) {
  EXPECT_EQ(on_layout(kUneven, 6, "cma", {}, [](shaddr_comm_t *c, int rank) {
              const size_t bytes = 1u << 20;
              std::vector<size_t> counts(6, bytes), displs(6);
              for (size_t i = 0; i < 6; i++) displs[i] = i * (bytes + 64);
              std::vector<uint8_t> send(bytes + 64, 1), out(6 * (bytes + 64));
              const int err = shaddr_allgatherv(c, send.data(), rank == 2 ? bytes + 8 : bytes,
                                                out.data(), counts.data(), displs.data());
              if (err != -EMSGSIZE) return 1;
              return shaddr_barrier(c) == 0 ? 0 : 2;
            }),
            0);
}

// Rank r's operand element i: values of very different magnitudes, so that a sum in any other
// order than x0 + x1 + ... + xn-1 differs in the last bits.
double operand(size_t i, int r, int call) {
  const double big[] = {1e16, -1e16, 3.0e15, 1.0};
  return big[(i + static_cast<size_t>(r) + static_cast<size_t>(call)) % 4] +
         static_cast<double>((i * 7 + static_cast<size_t>(r) * 13) % 97) * 0.1 + 0.37 * r;
}

// Reduce from every root and Allreduce, in place and not, of doubles (sum: the rank-order
// fold, bitwise, element by element) and ints (max), at the sizes around the limit and over many
// slices: every result as x0 op x1 op ... op xn-1 computed here, every other rank's receive
// buffer untouched. Down the chain a rank posts a stage per slice it folds or relays (more than
// the flat reduction's one). @levels: whether the plan goes down the chain.
int reductions(shaddr_comm_t *c, int rank, bool levels) {
  Comm &comm = *from_handle(c);
  const shaddr_plan &p = comm.plan(SHADDR_FALLBACK_NONE);
  // Without NUMA rates both reductions take the chain from the same size.
  if ((p.limits.reduce_levels_min != 0) != levels ||
      p.limits.allreduce_levels_min != p.limits.reduce_levels_min)
    return 1;
  const int n = comm.size();
  const size_t min = levels ? p.limits.reduce_levels_min : p.limits.slot_max + 1;
  int call = 0;
  for (size_t bytes : {min - 1, min + 7, size_t{1} << 20 | 24, (size_t{3} << 20) + 8 * 1001}) {
    const size_t count = bytes / sizeof(double);
    for (int root = -1; root < n; root++) {
      for (int ip = 0; ip < 2; ip++, call++) {
        // In place where the result lands (a Reduce's other ranks send as usual).
        const bool result = root < 0 || root == rank, in_place = ip && result;
        std::vector<double> in(count), out(count, -7.0), want(count);
        for (size_t i = 0; i < count; i++) {
          in[i] = operand(i, rank, call);
          want[i] = operand(i, 0, call);
          for (int r = 1; r < n; r++) want[i] += operand(i, r, call);
        }
        if (in_place) out = in;
        const uint64_t stage = comm.block().area(rank).stage.load();
        const void *sb = in_place ? SHADDR_IN_PLACE : in.data();
        const int err =
            root < 0 ? shaddr_allreduce(c, sb, out.data(), count, SHADDR_DOUBLE, SHADDR_OP_SUM)
                     : shaddr_reduce(c, sb, out.data(), count, SHADDR_DOUBLE, SHADDR_OP_SUM, root);
        if (err) {
          std::fprintf(stderr, "rank %d: root %d of %zu: %s\n", rank, root, bytes,
                       shaddr_last_error());
          return 10;
        }
        if (result ? std::memcmp(out.data(), want.data(), count * sizeof(double)) != 0
                   : out != std::vector<double>(count, -7.0)) {
          std::fprintf(stderr, "rank %d: root %d in place %d of %zu: result differs\n", rank, root,
                       ip, bytes);
          return 11;
        }
        // The flat reduction posts one stage, for its second phase; down the chain each rank
        // posts one per slice it folds or relays, and every rank folds some at these sizes.
        const unsigned posted = comm.block().area(rank).stage.load() & 0xff;
        const bool chained = comm.block().area(rank).stage.load() != stage && posted > 1;
        if (bytes >= min && bytes >= (64u << 10) && chained != levels) {
          std::fprintf(stderr, "rank %d: root %d of %zu: stage %u\n", rank, root, bytes, posted);
          return 12;
        }
      }
    }
    // Integers, max: exact in any order; a count that leaves uneven slices.
    const size_t ints = bytes / sizeof(int32_t) + 3;
    const auto value = [](size_t i, int r) {
      return static_cast<int32_t>((i * 2654435761u + static_cast<size_t>(r) * 40503u) % 100003);
    };
    std::vector<int32_t> in(ints), out(ints), want(ints, INT32_MIN);
    for (size_t i = 0; i < ints; i++) {
      for (int r = 0; r < n; r++) want[i] = std::max(want[i], value(i, r));
      in[i] = value(i, rank);
    }
    if (shaddr_allreduce(c, in.data(), out.data(), ints, SHADDR_INT32, SHADDR_OP_MAX)) return 13;
    if (out != want) return 14;
  }
  return 0;
}

TEST(PlanLevels, ReductionDownTheChainIsTheRankOrderFold) {
  // numa {0,1} {2,3}: runs {0,1} {2,3}; the holders' group {2,3}, the other through relays.
  EXPECT_EQ(on_layout(kHalves, 4, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return reductions(c, rank, true); }),
            0);
  // numa {0,1,2,5} {3,4}: runs {0,1,2} {3,4} {5}; the last run's group also holds the first.
  EXPECT_EQ(on_layout(kUneven, 6, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return reductions(c, rank, true); }),
            0);
  // Flat (and alternating domains, where the chain does not pay): the same results.
  EXPECT_EQ(on_layout(kHalves, 4, "cma", {{"SHADDR_TOPOLOGY", "flat"}},
                      [](shaddr_comm_t *c, int rank) { return reductions(c, rank, false); }),
            0);
  EXPECT_EQ(on_layout(kTwoNuma, 4, "cma", {},
                      [](shaddr_comm_t *c, int rank) { return reductions(c, rank, false); }),
            0);
}

// A folder or relay whose exposure, read of an operand, of the previous run's partial, or of a
// result fails (the n-th fallible step of rank 1, of the first run, or of rank 2, of the last):
// every rank fails the call, none waits for a slice that will not come, an in-place input is as
// it was, and the communicator goes on (a Reduce after it right, where it gets past the n-th).
TEST(PlanLevels, FailureDownTheChainReachesEveryRank) {
  for (const char *who : {"1", "2"}) {
    for (const char *nth : {"1", "2", "3", "5", "40"}) {
      EXPECT_EQ(on_layout(kHalves, 4, "cma",
                          {{"SHADDR_FAIL_INJECT", nth}, {"SHADDR_FAIL_INJECT_RANK", who}},
                          [](shaddr_comm_t *c, int rank) {
                            const size_t count = (1u << 20) / sizeof(double) + 5;
                            std::vector<double> buf(count), orig(count);
                            for (size_t i = 0; i < count; i++)
                              buf[i] = orig[i] = operand(i, rank, 0);
                            if (!shaddr_allreduce(c, SHADDR_IN_PLACE, buf.data(), count,
                                                  SHADDR_DOUBLE, SHADDR_OP_SUM))
                              return 1;
                            if (std::memcmp(buf.data(), orig.data(), count * sizeof(double)))
                              return 2;
                            // Every n-th step: a Reduce after it fails too, or is right.
                            std::vector<double> out(count);
                            if (!shaddr_reduce(c, orig.data(), out.data(), count, SHADDR_DOUBLE,
                                               SHADDR_OP_SUM, 3) && rank == 3)
                              for (size_t i = 0; i < count; i++) {
                                double want = operand(i, 0, 0);
                                for (int r = 1; r < 4; r++) want += operand(i, r, 0);
                                if (std::memcmp(&want, &out[i], sizeof(want))) return 3;
                              }
                            return shaddr_barrier(c) == 0 ? 0 : 4;
                          }),
                0)
          << "rank " << who << ", SHADDR_FAIL_INJECT=" << nth;
    }
  }
}

// A leader whose exposure (1), or read of the root (2), fails: the rank below it stops and
// every rank fails the call, instead of waiting for data that will not come.
TEST(PlanLevels, FailureOnALeaderReachesEveryRank) {
  for (const char *every : {"1", "2"}) {
    EXPECT_EQ(on_layout(kTwoNuma, 4, "cma",
                        {{"SHADDR_FAIL_INJECT", every}, {"SHADDR_FAIL_INJECT_RANK", "1"}},
                        [](shaddr_comm_t *c, int rank) {
                          const size_t bytes = 2u << 20;
                          std::vector<uint8_t> buf(bytes, static_cast<uint8_t>(rank));
                          return shaddr_bcast(c, buf.data(), bytes, 0) ? 0 : 1;
                        }),
              0)
        << "SHADDR_FAIL_INJECT=" << every;
  }
}

// A relay whose exposure (1, 2), read of the block it relays (3), read of its own group's block
// (4), or read from the other relay of its group (5) fails: every rank fails the Allgather,
// none waits for a block that will not come, and the communicator goes on.
TEST(PlanLevels, FailureOnARelayReachesEveryRank) {
  for (const char *nth : {"1", "2", "3", "4", "5"}) {
    EXPECT_EQ(on_layout(kTwoNuma, 4, "cma",
                        {{"SHADDR_FAIL_INJECT", nth}, {"SHADDR_FAIL_INJECT_RANK", "1"}},
                        [](shaddr_comm_t *c, int rank) {
                          const size_t bytes = 1u << 20;
                          std::vector<uint8_t> send(bytes, static_cast<uint8_t>(rank)),
                              out(4 * bytes);
                          if (!shaddr_allgather(c, send.data(), bytes, out.data())) return 1;
                          return shaddr_barrier(c) == 0 ? 0 : 2;
                        }),
              0)
        << "SHADDR_FAIL_INJECT=" << nth;
  }
}

}  // namespace
}  // namespace shaddr
