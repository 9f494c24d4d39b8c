// SPDX-License-Identifier: MIT
// The plan's topology levels (plan.h, struct shaddr_plan's levels) and the Bcast down them
// (coll_bcast.cc), on ranks given synthetic locations (set_own_location_for_tests: this host has
// one NUMA node): the levels the plan keeps, SHADDR_TOPOLOGY's say, the limit from which a Bcast
// goes down them, its text; every root's Bcast around that limit equal to the flat plan's, with
// the leaders relaying; a failure on a leader reaches every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm.h"
#include "placement.h"
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

std::string format(const shaddr_plan *p) {
  char buf[8192];
  shaddr_plan_format(p, buf, sizeof(buf));
  return buf;
}

// The first size of the Bcast table's copy path.
size_t direct_from(const shaddr_plan &p) {
  const shaddr_plan_table &t = p.tables[SHADDR_COLL_BCAST];
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
              const std::string want = "\nlevels: numa 2 groups; bcast from " +
                                       std::to_string(p->limits.bcast_levels_min) + "\n";
              if (format(p).find(want) == std::string::npos) return 3;
              // Every fallback's plan has the same levels.
              const shaddr_plan *m = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              if (!m || m->nlevels != 1 || m->limits.bcast_levels_min != p->limits.bcast_levels_min)
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
  // A backend that stages its exposures keeps the levels but no Bcast goes down them.
  EXPECT_EQ(on_layout(kTwoNuma, 4, "shm", {}, [](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              return p && p->nlevels == 1 && !p->limits.bcast_levels_min ? 0 : 1;
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

}  // namespace
}  // namespace shaddr
