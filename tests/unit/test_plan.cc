// SPDX-License-Identifier: MIT
// The plan (plan.h, shaddr_comm_plan in coll.h): what ran is what the plan says, for every
// collective and size class on each backend; the user's SHADDR_MIN settings and the model's
// crossings turn at the right sizes; a calibration's measured points win over its lines; the
// plan is the same on every rank; the C entry points refuse bad arguments.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "shaddr/coll.h"
#include "plan_test_util.h"

namespace shaddr {
namespace {



// Runs @coll with @bytes (one block where it has blocks) on every rank of @c.
int run_coll(shaddr_comm_t *c, shaddr_coll coll, size_t bytes, std::vector<char> &in,
             std::vector<char> &out) {
  const int n = shaddr_comm_size(c);
  const size_t need = bytes * static_cast<size_t>(n) + 64;
  if (in.size() < need) in.assign(need, 1);
  if (out.size() < need) out.assign(need, 0);
  switch (coll) {
    case SHADDR_COLL_BARRIER: return shaddr_barrier(c);
    case SHADDR_COLL_BCAST: return shaddr_bcast(c, in.data(), bytes, 0);
    case SHADDR_COLL_REDUCE:
      return shaddr_reduce(c, in.data(), out.data(), bytes, SHADDR_UINT8, SHADDR_OP_MAX, 0);
    case SHADDR_COLL_ALLREDUCE:
      return shaddr_allreduce(c, in.data(), out.data(), bytes, SHADDR_UINT8, SHADDR_OP_MAX);
    case SHADDR_COLL_GATHER: return shaddr_gather(c, in.data(), bytes, out.data(), 0);
    case SHADDR_COLL_SCATTER: return shaddr_scatter(c, in.data(), bytes, out.data(), 0);
    case SHADDR_COLL_ALLGATHER: return shaddr_allgather(c, in.data(), bytes, out.data());
    default: return shaddr_alltoall(c, in.data(), bytes, out.data());
  }
}

// The sizes to try in a plan: around every step's ends, and every power of two up to @max.
std::vector<size_t> sizes_of(const shaddr_plan &p, int table, size_t max) {
  std::vector<size_t> v;
  for (size_t b = 1; b <= max; b <<= 1) v.push_back(b);
  const shaddr_plan_table &t = p.tables[table];
  for (int i = 0; i < t.nsteps; i++)
    for (size_t b : {t.steps[i].upto, t.steps[i].upto + 1})
      if (b >= 1 && b <= max) v.push_back(b);
  return v;
}

class PlanRuns : public ::testing::TestWithParam<const char *> {};

// Every collective at every size class: the algorithm counted in the stats is the plan's.
TEST_P(PlanRuns, WhatRanIsWhatThePlanSays) {
  for (int n : {2, 3}) {
    EXPECT_EQ(on_ranks(n, GetParam(), {}, [&](shaddr_comm_t *c, int rank) {
                const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                if (!p) return 1;
                std::vector<char> in, out;
                int rc = 0;
                for (int coll = 0; coll < SHADDR_COLL_COUNT; coll++) {
                  const auto co = static_cast<shaddr_coll>(coll);
                  for (size_t bytes : sizes_of(*p, coll, size_t(1) << 20)) {
                    const shaddr_plan_step *s = shaddr_plan_lookup(p, co, bytes, 0);
                    shaddr_comm_stats before{}, after{};
                    shaddr_comm_get_stats(c, &before);
                    const int err = run_coll(c, co, bytes, in, out);
                    shaddr_comm_get_stats(c, &after);
                    int ran = -1;
                    for (int a = 0; a < SHADDR_ALGO_COUNT; a++)
                      if (after.runs[coll][a] != before.runs[coll][a])
                        ran = ran == -1 ? a : -2;
                    if (err || !s || ran != s->algo) {
                      std::fprintf(stderr, "rank %d/%d: %d at %zu B: plan %s, ran %s, err %d\n",
                                   rank, n, coll, bytes, s ? shaddr_algo_name(s->algo) : "-",
                                   ran >= 0 ? shaddr_algo_name(static_cast<shaddr_algo>(ran))
                                            : "none or several",
                                   err);
                      rc = 2;
                    }
                  }
                }
                return rc;
              }),
              0)
        << n << " ranks";
  }
}

INSTANTIATE_TEST_SUITE_P(Via, PlanRuns, ::testing::Values("cma", "shm"));

// The model's crossing, and the user's threshold where one is set.
TEST(Plan, TurnsWhereTheModelAndTheSettingsSay) {
  // shm, 2 ranks: slots up to 4 KiB, then the FIFO. The slots cost 1 us + 1 GB/s, MPICH 0.5 us
  // + 1 GB/s: MPICH wins every slot size; the FIFO's 2 us + 10 GB/s beats MPICH from 1667 B.
  TextFile tf(
      "SHADDR_SLOT_MAX=4096\n"
      "model.slots.bcast=1/1\n"
      "model.fifo.bcast=2/10\n"
      "model.mpich.bcast=0.5/1\n");
  EXPECT_EQ(on_ranks(2, "shm", {{"SHADDR_TUNING_FILE", tf.path}}, [&](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              if (!p || p->fallback != SHADDR_FALLBACK_MPICH) return 1;
              const shaddr_plan_step *s0 = shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 0, 0);
              const shaddr_plan_step *s1 = shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 4096, 0);
              const shaddr_plan_step *s2 = shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 4097, 0);
              if (!s0->use_fallback) return 2;  // nothing to move: the caller's own
              if (!s1->use_fallback || s1->algo != SHADDR_ALGO_SLOTS || s1->upto != 4096) return 3;
              if (s2->use_fallback || s2->algo != SHADDR_ALGO_FIFO) return 4;
              // Against no fallback, libshaddr everywhere.
              const shaddr_plan *none = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              if (shaddr_plan_lookup(none, SHADDR_COLL_BCAST, 4096, 0)->use_fallback) return 5;
              return 0;
            }),
            0);
  EXPECT_EQ(on_ranks(2, "shm", {{"SHADDR_TUNING_FILE", tf.path}, {"SHADDR_MIN_BCAST", "1000"}},
                     [&](shaddr_comm_t *c, int) {
                       const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                       if (!shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 999, 0)->use_fallback)
                         return 1;
                       if (shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 1000, 0)->use_fallback)
                         return 2;
                       // The model still decides the other collectives.
                       return shaddr_plan_lookup(p, SHADDR_COLL_ALLREDUCE, 999, 0) ? 0 : 3;
                     }),
            0);
}

// The first size any variant of @coll sends to libshaddr, walked through the lookup.
size_t first_lib_size(const shaddr_plan *p, shaddr_coll coll) {
  size_t first = SIZE_MAX;
  for (unsigned flags : {0u, SHADDR_PLAN_IN_PLACE, SHADDR_PLAN_SEGMENTED}) {
    size_t from = 0;
    const shaddr_plan_step *st = shaddr_plan_lookup(p, coll, from, flags);
    while (st->use_fallback && st->upto != SIZE_MAX)
      st = shaddr_plan_lookup(p, coll, from = st->upto + 1, flags);
    if (!st->use_fallback) first = std::min(first, from);
  }
  return first;
}

// lib_from, what a caller compares before its lookup, is the first size any variant's table
// sends to libshaddr: every smaller size is the caller's in every variant, that size is not.
TEST(Plan, LibFromIsTheFirstSizeAnyVariantSendsToLibshaddr) {
  TextFile tf(
      "SHADDR_SLOT_MAX=4096\n"
      "model.slots.bcast=1/1\n"
      "model.fifo.bcast=2/10\n"
      "model.mpich.bcast=0.5/1\n");
  for (const char *min_bcast : {"", "1000"}) {
    std::vector<std::pair<std::string, std::string>> env = {{"SHADDR_TUNING_FILE", tf.path}};
    if (*min_bcast) env.emplace_back("SHADDR_MIN_BCAST", min_bcast);
    EXPECT_EQ(on_ranks(2, "shm", env, [&](shaddr_comm_t *c, int) {
                for (int f = 0; f < SHADDR_FALLBACK_COUNT; f++) {
                  const shaddr_plan *p = shaddr_comm_plan(c, static_cast<shaddr_fallback>(f));
                  if (!p) return 1;
                  for (int coll = 0; coll < SHADDR_COLL_COUNT; coll++) {
                    const size_t first = first_lib_size(p, static_cast<shaddr_coll>(coll));
                    if (p->lib_from[coll] == first) continue;
                    std::fprintf(stderr, "fallback %d coll %d: lib_from %zu, first %zu\n", f,
                                 coll, p->lib_from[coll], first);
                    return 2;
                  }
                }
                // The FIFO from 4097 B (the model), or from the setting's 1000 B.
                const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                if (p->lib_from[SHADDR_COLL_BCAST] != (*min_bcast ? 1000u : 4097u)) return 3;
                // Against no fallback, libshaddr at every size.
                const shaddr_plan *none = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                return none->lib_from[SHADDR_COLL_BCAST] == 0 ? 0 : 4;
              }),
              0)
        << "SHADDR_MIN_BCAST=" << min_bcast;
  }
}

// A calibration's measured points decide where they are, over its lines and the shipped ones.
TEST(Plan, CalibrationPointsWinOverLines) {
  // By the lines libshaddr's FIFO wins everywhere (2 us + 10 GB/s against 50 us + 5 GB/s); the points
  // measured MPICH faster at 64 KiB and 128 KiB only.
  TextFile cal(
      "# date: 2026-11-27 06:00 UTC\n"
      "SHADDR_SLOT_MAX=4096\n"
      "model.fifo.bcast=2/10\n"
      "model.mpich.bcast=50/5\n"
      "point.fifo.bcast=32768:10 65536:20 131072:40 262144:60\n"
      "point.mpich.bcast=32768:12 65536:15 131072:30 262144:70\n");
  EXPECT_EQ(on_ranks(2, "shm", {{"SHADDR_CALIBRATION", cal.path}, {"SHADDR_BCAST_FIFO_MAX", "1M"}},
                     [&](shaddr_comm_t *c, int) {
                       const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                       if (!p || !p->calibrated) return 1;
                       auto fb = [&](size_t b) {
                         return shaddr_plan_lookup(p, SHADDR_COLL_BCAST, b, 0)->use_fallback;
                       };
                       if (fb(32768) || !fb(65536) || !fb(131072) || fb(262144)) return 2;
                       if (fb(1 << 20)) return 3;  // beyond the points: the lines
                       return 0;
                     }),
            0);
  // A point above a later one of the same path (a warm-up) counts as that later one.
  TextFile warm(
      "SHADDR_SLOT_MAX=4096\n"
      "point.slots.bcast=8:0.26 16:0.27 32:0.30\n"
      "point.mpich.bcast=8:0.67 16:0.24 32:0.25\n");
  EXPECT_EQ(on_ranks(2, "shm", {{"SHADDR_CALIBRATION", warm.path}}, [&](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              return shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 8, 0)->use_fallback ? 0 : 1;
            }),
            0);
  // A tuning file's line replaces the calibration's whole curve, points included.
  TextFile tuning("model.mpich.bcast=1000/1\n");
  EXPECT_EQ(on_ranks(2, "shm",
                     {{"SHADDR_CALIBRATION", cal.path}, {"SHADDR_BCAST_FIFO_MAX", "1M"},
                      {"SHADDR_TUNING_FILE", tuning.path}},
                     [&](shaddr_comm_t *c, int) {
                       const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                       return shaddr_plan_lookup(p, SHADDR_COLL_BCAST, 65536, 0)->use_fallback;
                     }),
            0);
  // A calibration that does not parse is refused, naming itself.
  TextFile bad("point.fifo.bcast=100:1\n");
  EXPECT_EQ(on_ranks(2, "shm", {{"SHADDR_CALIBRATION", bad.path}}, [](shaddr_comm_t *, int) {
              return 0;
            }),
            100);
}

// SHADDR_PLAN_MARGIN: libshaddr only where it is modelled clearly faster, and no narrow
// libshaddr range between two of the caller's; 0 follows the model size by size.
TEST(Plan, MarginLeavesNearTiesAndNarrowWinsToTheCaller) {
  // The FIFO 5 % faster at 32 KiB, MPICH faster at 64 and 128 KiB, the FIFO 29 % faster at
  // 96 KiB (a range narrower than a factor of two), and far faster at 256 and 512 KiB (beyond
  // the points, the shipped lines decide).
  TextFile cal(
      "SHADDR_SLOT_MAX=4096\n"
      "point.fifo.bcast=16384:10 32768:19 65536:40 98304:50 131072:80 262144:100 524288:150\n"
      "point.mpich.bcast=16384:10.5 32768:20 65536:38 98304:70 131072:78 262144:150 "
      "524288:300\n");
  for (const char *margin : {"10", "0"}) {
    const bool smooth = std::strcmp(margin, "0") != 0;
    EXPECT_EQ(on_ranks(2, "shm",
                       {{"SHADDR_CALIBRATION", cal.path}, {"SHADDR_BCAST_FIFO_MAX", "1M"},
                        {"SHADDR_PLAN_MARGIN", margin}},
                       [&](shaddr_comm_t *c, int) {
                         const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                         if (!p) return 1;
                         auto fb = [&](size_t b) {
                           return shaddr_plan_lookup(p, SHADDR_COLL_BCAST, b, 0)->use_fallback;
                         };
                         if (fb(32768) != smooth) return 2;
                         if (!fb(65536) || !fb(131072)) return 3;
                         if (fb(98304) != smooth) return 4;
                         if (fb(262144) || fb(400000)) return 5;
                         // Against no fallback there is nothing to weigh: libshaddr throughout.
                         const shaddr_plan *none = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
                         return shaddr_plan_lookup(none, SHADDR_COLL_BCAST, 65536, 0)->use_fallback
                                    ? 6
                                    : 0;
                       }),
              0)
        << "SHADDR_PLAN_MARGIN=" << margin;
  }
}

// Every rank builds the same plan (its digest), and different settings make different plans.
TEST(Plan, SameOnEveryRank) {
  uint64_t first = 0;
  for (const char *min : {"0", "65536"}) {
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    EXPECT_EQ(on_ranks(3, "cma", {{"SHADDR_MIN", min}}, [&](shaddr_comm_t *c, int) {
                const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_OPENMPI);
                if (!p || p->ranks != 3) return 1;
                if (write(pipefd[1], &p->digest, sizeof(p->digest)) != sizeof(p->digest)) return 2;
                return 0;
              }),
              0);
    close(pipefd[1]);
    uint64_t d[3];
    ASSERT_EQ(read(pipefd[0], d, sizeof(d)), static_cast<ssize_t>(sizeof(d)));
    close(pipefd[0]);
    EXPECT_EQ(d[0], d[1]);
    EXPECT_EQ(d[1], d[2]);
    if (!first) first = d[0];
    else EXPECT_NE(first, d[0]);
  }
}

// Against a fallback, neighbouring ranges that go to it print as one range (the empty call's
// 0-0 apart): below SHADDR_MIN_BCAST the slots, FIFO and direct sizes all go to the MPI.
TEST(Plan, FormatJoinsTheFallbacksRanges) {
  EXPECT_EQ(on_ranks(2, "shm", {{"SHADDR_MIN_BCAST", "1048576"}}, [](shaddr_comm_t *c, int) {
              const shaddr_plan *mp = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              char mbuf[4096];
              if (shaddr_plan_format(mp, mbuf, sizeof(mbuf)) <= 0) return 7;
              if (!std::strstr(mbuf, "bcast: 0-0 mpi, 1-1048575 mpi, 1M- ")) return 10;
              std::string prev;  // the previous range of the line, "A-B algo"
              for (const char *p = mbuf; *p; p++) {
                const size_t n = std::strcspn(p, ",\n");
                std::string range(p, n);
                if (const size_t colon = range.find(": "); colon != std::string::npos)
                  range = range.substr(colon + 2), prev.clear();
                while (!range.empty() && range[0] == ' ') range.erase(0, 1);
                const bool mpi = range.size() > 4 && range.compare(range.size() - 4, 4, " mpi") == 0;
                if (mpi && prev.size() > 4 && prev.compare(prev.size() - 4, 4, " mpi") == 0 &&
                    prev.rfind("0-0 ", 0) != 0)
                  return 8;
                prev = p[n] == '\n' ? std::string() : range;
                p += n;
                if (!*p) break;
              }
              return 0;
            }),
            0);
}

// The limits the rules turn at are the plan's, from the settings and the backend: the Bcast
// FIFO up to 256 KiB on cma unless set, 16 KiB elsewhere; and the interposer's hierarchy limits
// in its fallbacks' plans only. shaddr_plan_format prints them; the Bcast table turns there.
TEST(Plan, LimitsAreThePlansAndPrinted) {
  const auto fifo_upto = [](const shaddr_plan &p) {
    const shaddr_plan_table &t = p.tables[SHADDR_COLL_BCAST];
    size_t upto = 0;
    for (int i = 0; i < t.nsteps; i++)
      if (t.steps[i].algo == SHADDR_ALGO_FIFO) upto = t.steps[i].upto;
    return upto;
  };
  EXPECT_EQ(on_ranks(2, "cma", {}, [&](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              if (!p || p->limits.bcast_fifo_max != 256u << 10) return 1;
              if (p->limits.slot_max != 16384 || p->limits.hier_segment) return 2;
              if (fifo_upto(*p) != 256u << 10) return 3;
              const shaddr_plan *m = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              if (!m || m->limits.hier_segment != 256u << 10 || m->limits.hier_mesh_max != 64)
                return 4;
              const shaddr_plan *posix = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH_POSIX);
              if (!posix || posix->limits.hier_segment || posix->limits.hier_mesh_max) return 5;
              char buf[4096];
              shaddr_plan_format(p, buf, sizeof(buf));
              if (!std::strstr(buf, "\nlimits: slot_max 16K, bcast_fifo_max 256K\n")) return 6;
              shaddr_plan_format(m, buf, sizeof(buf));
              if (!std::strstr(buf, "\nlimits: slot_max 16K, bcast_fifo_max 256K, hier_segment "
                                    "256K, hier_mesh_max 64\n"))
                return 7;
              return 0;
            }),
            0);
  EXPECT_EQ(on_ranks(2, "shm", {}, [&](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              return p && p->limits.bcast_fifo_max == 16384 ? 0 : 1;
            }),
            0);
  // Set, they win over the backend's defaults; the plans' digests follow them.
  uint64_t digest = 0;
  EXPECT_EQ(on_ranks(2, "cma", {}, [&](shaddr_comm_t *c, int rank) {
              if (rank == 0) digest = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH)->digest;
              return 0;
            }),
            0);
  EXPECT_EQ(on_ranks(2, "cma",
                     {{"SHADDR_BCAST_FIFO_MAX", "32K"}, {"SHADDR_SLOT_MAX", "2K"},
                      {"SHADDR_INTERPOSE_SEGMENT", "64K"}, {"SHADDR_INTERPOSE_MESH_MAX", "0"}},
                     [&](shaddr_comm_t *c, int) {
                       const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
                       if (p->limits.bcast_fifo_max != 32u << 10 || p->limits.slot_max != 2048)
                         return 1;
                       if (p->limits.hier_segment != 64u << 10 || p->limits.hier_mesh_max != 0)
                         return 2;
                       if (fifo_upto(*shaddr_comm_plan(c, SHADDR_FALLBACK_NONE)) != 32u << 10)
                         return 3;
                       return p->digest != digest ? 0 : 4;
                     }),
            0);
  // Equal steps, other hierarchy limits: another digest.
  EXPECT_EQ(on_ranks(2, "cma", {{"SHADDR_INTERPOSE_MESH_MAX", "65"}}, [&](shaddr_comm_t *c, int) {
              return shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH)->digest != digest ? 0 : 1;
            }),
            0);
}

TEST(Plan, FormatsAndRefusesBadArguments) {
  EXPECT_EQ(shaddr_comm_plan(nullptr, SHADDR_FALLBACK_NONE), nullptr);
  EXPECT_EQ(shaddr_plan_lookup(nullptr, SHADDR_COLL_BCAST, 1, 0), nullptr);
  EXPECT_EQ(shaddr_plan_format(nullptr, nullptr, 0), -EINVAL);
  EXPECT_EQ(on_ranks(2, "shm", {}, [](shaddr_comm_t *c, int) {
              // Out of the API's range, inside the enums' (a C caller's int).
              int bad_fb = SHADDR_FALLBACK_COUNT, bad_coll = SHADDR_COLL_COUNT;
              shaddr_fallback fb;
              shaddr_coll coll;
              std::memcpy(&fb, &bad_fb, sizeof(fb));
              std::memcpy(&coll, &bad_coll, sizeof(coll));
              if (shaddr_comm_plan(c, fb)) return 1;
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_NONE);
              if (shaddr_plan_lookup(p, coll, 1, 0)) return 2;
              char buf[4096];
              const int len = shaddr_plan_format(p, buf, sizeof(buf));
              if (len <= 0 || static_cast<size_t>(len) >= sizeof(buf)) return 3;
              if (!std::strstr(buf, "bcast: 0-0 none, 1-")) return 4;
              if (!std::strstr(buf, "allreduce in place:")) return 5;
              // Truncated to fit, still terminated; the length is the whole text's.
              char small[8];
              if (shaddr_plan_format(p, small, sizeof(small)) != len || small[7]) return 6;
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace shaddr
