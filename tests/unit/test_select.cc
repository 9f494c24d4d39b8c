// SPDX-License-Identifier: MIT
// The selection call (shaddr_select, plan_select.cc) and its cost model (plan_model.h): the
// model's grammar and arithmetic, the answer against hand-made models on forked ranks,
// agreement of the model between ranks, and that the collectives run the algorithm it reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "plan_model.h"
#include "shaddr/coll.h"
#include "plan_test_util.h"

namespace shaddr {
namespace {

TEST(SelectModel, ParsesModelLines) {
  CostModel m;
  std::string why;
  EXPECT_EQ(m.parse_line("model.cma.bcast=4.5/2.0@2", &why), 0) << why;
  const CostCurve &c = m.curve(Who::kCma, SHADDR_COLL_BCAST);
  EXPECT_EQ(c.ref_ranks, 2);
  EXPECT_DOUBLE_EQ(c.lines[0].alpha_us, 4.5);
  EXPECT_DOUBLE_EQ(c.lines[0].gbps, 2.0);
  // Two lines, no @: the reference node size is 2.
  EXPECT_EQ(m.parse_line("model.mpich-posix.allreduce=0.4/1.5 3/6", &why), 0) << why;
  EXPECT_EQ(m.curve(Who::kMpichPosix, SHADDR_COLL_ALLREDUCE).ref_ranks, 2);
  EXPECT_DOUBLE_EQ(m.curve(Who::kMpichPosix, SHADDR_COLL_ALLREDUCE).lines[1].gbps, 6);
  EXPECT_EQ(m.parse_line("SHADDR_CHUNK=65536", &why), 1);  // not ours
  EXPECT_EQ(m.parse_line("# model.cma.bcast=1/1", &why), 1);
}

// An Alltoall's source buffer is n blocks; at the largest block sizes that product must not
// wrap to a small number (the heap's curve applies from a size up, the inner backend's below).
TEST(SelectModel, SourceSizeOfBlocksDoesNotWrap) {
  CostModel m;
  std::string why;
  ASSERT_EQ(m.parse_line("model.heap.alltoall=1/1000@2", &why), 0) << why;
  ASSERT_EQ(m.parse_line("model.cma.alltoall=1/1@2", &why), 0) << why;
  for (size_t bytes : {size_t{1} << 62, (size_t{1} << 63) + 4096, SIZE_MAX / 2 + 1}) {
    const double heap = m.shaddr_us(SHADDR_COLL_ALLTOALL, SHADDR_ALGO_DIRECT, BackendKind::kCma,
                                    true, bytes, 2, false, SHADDR_FALLBACK_OPENMPI);
    const double cma = m.shaddr_us(SHADDR_COLL_ALLTOALL, SHADDR_ALGO_DIRECT, BackendKind::kCma,
                                   false, bytes, 2, false, SHADDR_FALLBACK_OPENMPI);
    EXPECT_LT(heap, cma / 100) << bytes;
  }
}

TEST(SelectModel, RefusesBadLinesNamingThem) {
  CostModel m;
  for (const char *bad :
       {"model.cma.bcast", "model.cma=1/1", "model.nobody.bcast=1/1", "model.cma.bcastx=1/1",
        "model.cma.bcast=", "model.cma.bcast=1", "model.cma.bcast=1/0", "model.cma.bcast=-1/2",
        "model.cma.bcast=1/2@0", "model.cma.bcast=1/2@2.5", "model.cma.bcast=x/2",
        "model.cma.bcast=1/2 1/2 1/2 1/2 1/2", "model.cma.bcast=1/inf"}) {
    std::string why;
    EXPECT_EQ(m.parse_line(bad, &why), -EINVAL) << bad;
    EXPECT_NE(why.find(bad), std::string::npos) << why;
  }
}

TEST(SelectModel, CurveIsTheLowerEnvelopeScaledAlike) {
  CostModel m;
  std::string why;
  ASSERT_EQ(m.parse_line("model.mpich.bcast=1/1 10/10", &why), 0);
  const CostCurve &c = m.curve(Who::kMpich, SHADDR_COLL_BCAST);
  EXPECT_NEAR(c.time_us(SHADDR_COLL_BCAST, 1000, 2), 2.0, 1e-9);          // 1 + 1000 B / 1 GB/s
  EXPECT_NEAR(c.time_us(SHADDR_COLL_BCAST, 1000000, 2), 110.0, 1e-9);     // 10 + 100
  // Bigger nodes: both sides grow by the same factor, so comparisons hold.
  ASSERT_EQ(m.parse_line("model.cma.bcast=1.5/1", &why), 0);
  const CostCurve &d = m.curve(Who::kCma, SHADDR_COLL_BCAST);
  for (size_t bytes : {size_t(100), size_t(2000), size_t(1) << 20})
    for (int n : {3, 8, 64}) {
      const bool at2 = d.time_us(SHADDR_COLL_BCAST, bytes, 2) < c.time_us(SHADDR_COLL_BCAST, bytes, 2);
      const bool atn = d.time_us(SHADDR_COLL_BCAST, bytes, n) < c.time_us(SHADDR_COLL_BCAST, bytes, n);
      EXPECT_EQ(at2, atn) << bytes << " B, " << n << " ranks";
    }
  ASSERT_EQ(m.parse_line("model.mpich.bcast=-", &why), 0);  // removed: no curve
  EXPECT_LT(c.time_us(SHADDR_COLL_BCAST, 8, 2), 0);
}

// Runs fn on 2 forked ranks over shm with SHADDR_TUNING_FILE = path (removed again after: rank
// 0 is this process).
int with_model(const std::string &path, const std::function<int(shaddr_comm_t *, int)> &fn) {
  return on_ranks(2, "shm", {{"SHADDR_TUNING_FILE", path}}, fn);
}

shaddr_selection ask(shaddr_comm_t *c, shaddr_coll coll, size_t bytes,
                     shaddr_fallback fb = SHADDR_FALLBACK_MPICH, int reducible = 1) {
  const shaddr_select_query q{coll, bytes, reducible, 0, fb};
  shaddr_selection a{};
  EXPECT_EQ(shaddr_select(c, &q, &a), 0);
  return a;
}

TEST(Select, WeighsLibshaddrAgainstTheFallback) {
  // shm, 2 ranks: Bcast runs on the slots up to SHADDR_SLOT_MAX (4 KiB), then the FIFO.
  // libshaddr's slots cost 1 us + 1 GB/s, the FIFO 2 us + 10 GB/s; MPICH 0.5 us + 1 GB/s,
  // so MPICH wins the slot sizes (by 0.5 us), the FIFO wins from the point where 2 + s/10000
  // < 0.5 + s/1000: s > 1667 B, which is inside the slots' range, so every FIFO size.
  TextFile tf(
      "SHADDR_SLOT_MAX=4096\n"
      "model.slots.bcast=1/1\n"
      "model.fifo.bcast=2/10\n"
      "model.mpich.bcast=0.5/1\n"
      "model.openmpi.bcast=-\n");
  EXPECT_EQ(with_model(tf.path, [](shaddr_comm_t *c, int) {
              auto small = ask(c, SHADDR_COLL_BCAST, 64);
              if (small.algo != SHADDR_ALGO_FALLBACK) return 1;
              if (!(small.fallback_us < small.shaddr_us)) return 2;
              auto big = ask(c, SHADDR_COLL_BCAST, 1 << 20);
              if (big.algo != SHADDR_ALGO_FIFO) return 3;  // shm stages: FIFO at every size
              if (!(big.shaddr_us < big.fallback_us)) return 4;
              // No fallback to weigh: the algorithm alone.
              if (ask(c, SHADDR_COLL_BCAST, 64, SHADDR_FALLBACK_NONE).algo != SHADDR_ALGO_SLOTS)
                return 5;
              // Without a curve for the fallback (Open MPI here): libshaddr, saying why.
              auto none = ask(c, SHADDR_COLL_BCAST, 64, SHADDR_FALLBACK_OPENMPI);
              if (none.algo != SHADDR_ALGO_SLOTS || std::string(none.why).find("no model") ==
                                                        std::string::npos)
                return 6;
              return 0;
            }),
            0);
}

// Whether @s ran @algo with libshaddr's estimate @us (within the model's bandwidth terms).
bool chose(const shaddr_selection &s, shaddr_algo algo, double us) {
  return s.algo == algo && std::abs(s.shaddr_us - us) < 1e-4;
}

// The patched MPICH's layers around a libshaddr call (`patch` lines) count against libshaddr
// where the fallback is its release_gather (mpich-posix), and only there.
TEST(Select, ThePatchedMpichsLayersCountAgainstLibshaddrThere) {
  TextFile tf(
      "model.slots.reduce=0.2/1000000\n"
      "model.mpich-posix.reduce=0.3/1000000\n"
      "model.mpich.reduce=0.3/1000000\n"
      "model.patch.reduce=0.2/1000000\n");
  EXPECT_EQ(with_model(tf.path, [](shaddr_comm_t *c, int) {
              if (!chose(ask(c, SHADDR_COLL_REDUCE, 64, SHADDR_FALLBACK_MPICH_POSIX),
                         SHADDR_ALGO_FALLBACK, 0.4))
                return 1;
              if (!chose(ask(c, SHADDR_COLL_REDUCE, 64, SHADDR_FALLBACK_MPICH), SHADDR_ALGO_SLOTS,
                         0.2))
                return 2;
              return 0;
            }),
            0);
}

// The calibration writes the layer's cost at each size it measured (`point.patch`): inside
// that range the plan weighs the point there, beyond it the `model.patch` line.
TEST(Select, ThePatchedMpichsLayersAreWeighedSizeBySize) {
  TextFile tf(
      "model.slots.bcast=0.2/1000000\n"
      "model.mpich-posix.bcast=0.3/1000000\n"
      "model.patch.bcast=0.05/1000000\n"
      "point.patch.bcast=8:0.05@2 1024:0.3@2 8192:0.05@2\n");
  EXPECT_EQ(with_model(tf.path, [](shaddr_comm_t *c, int) {
              const shaddr_fallback posix = SHADDR_FALLBACK_MPICH_POSIX;
              if (!chose(ask(c, SHADDR_COLL_BCAST, 8, posix), SHADDR_ALGO_SLOTS, 0.25)) return 1;
              // 0.2 + 0.3 us against the fallback's 0.3
              if (!chose(ask(c, SHADDR_COLL_BCAST, 1024, posix), SHADDR_ALGO_FALLBACK, 0.5))
                return 2;
              // beyond the points: the model.patch line
              if (std::abs(ask(c, SHADDR_COLL_BCAST, 12000, posix).shaddr_us - 0.25) > 1e-4)
                return 3;
              return 0;
            }),
            0);
}

TEST(Select, ReductionsTheLibraryCannotDoFallBack) {
  TextFile tf("");
  EXPECT_EQ(with_model(tf.path, [](shaddr_comm_t *c, int) {
              auto a = ask(c, SHADDR_COLL_ALLREDUCE, 1 << 20, SHADDR_FALLBACK_NONE, 0);
              if (a.algo != SHADDR_ALGO_FALLBACK) return 1;
              if (ask(c, SHADDR_COLL_ALLREDUCE, 0, SHADDR_FALLBACK_NONE).algo != SHADDR_ALGO_NONE)
                return 2;
              if (ask(c, SHADDR_COLL_BARRIER, 0, SHADDR_FALLBACK_NONE).algo != SHADDR_ALGO_BARRIER)
                return 3;
              return 0;
            }),
            0);
}

// What shaddr_select reports is what the collective runs: the slots and the FIFO are counted
// as fifo_calls, the single-copy algorithms are not.
TEST(Select, ReportsTheAlgorithmTheCollectiveRuns) {
  TextFile tf("");
  EXPECT_EQ(run_forked(2, [&](const shaddr_host &h) {
              setenv("SHADDR_BACKEND", "cma", 1);
              setenv("SHADDR_HEAP", "off", 1);
              shaddr_comm_t *c = nullptr;
              if (shaddr_comm_create(&h, &c)) return 100;
              int rc = 0;
              std::vector<double> in(1 << 18, 1.0), out(1 << 18);
              for (size_t bytes : {size_t(8), size_t(4096), size_t(65536), size_t(1) << 21}) {
                for (shaddr_coll coll : {SHADDR_COLL_BCAST, SHADDR_COLL_ALLREDUCE,
                                         SHADDR_COLL_ALLGATHER, SHADDR_COLL_ALLTOALL}) {
                  shaddr_comm_stats before{}, after{};
                  shaddr_comm_get_stats(c, &before);
                  const size_t blk = coll == SHADDR_COLL_ALLGATHER || coll == SHADDR_COLL_ALLTOALL
                                         ? bytes / 2 : bytes;
                  int err = 0;
                  if (coll == SHADDR_COLL_BCAST) err = shaddr_bcast(c, in.data(), bytes, 0);
                  else if (coll == SHADDR_COLL_ALLREDUCE)
                    err = shaddr_allreduce(c, in.data(), out.data(), bytes / 8, SHADDR_DOUBLE,
                                           SHADDR_OP_SUM);
                  else if (coll == SHADDR_COLL_ALLGATHER)
                    err = shaddr_allgather(c, in.data(), blk, out.data());
                  else err = shaddr_alltoall(c, in.data(), blk, out.data());
                  shaddr_comm_get_stats(c, &after);
                  const auto b = ask(c, coll, blk, SHADDR_FALLBACK_NONE);
                  const bool small_b = b.algo == SHADDR_ALGO_FIFO || b.algo == SHADDR_ALGO_SLOTS;
                  const bool counted = after.fifo_calls == before.fifo_calls + 1;
                  if (err || counted != small_b) {
                    std::fprintf(stderr, "rank %d: coll %d, %zu B: %s, fifo_calls +%llu, err %d\n",
                                 h.rank, coll, blk, shaddr_algo_name(b.algo),
                                 static_cast<unsigned long long>(after.fifo_calls -
                                                                 before.fifo_calls),
                                 err);
                    rc = 1;
                  }
                }
              }
              shaddr_comm_free(c);
              return rc;
            }),
            0);
}

// Ranks that would answer differently cannot make a communicator.
TEST(Select, ModelMismatchIsRefusedOnEveryRank) {
  TextFile a("model.mpich.bcast=0.5/1\n"), b("model.mpich.bcast=0.6/1\n"), bad("model.x.y=1\n");
  for (const TextFile *rank1 : {&b, &bad}) {
    EXPECT_EQ(run_forked(2, [&](const shaddr_host &h) {
                setenv("SHADDR_BACKEND", "shm", 1);
                setenv("SHADDR_TUNING_FILE", (h.rank == 1 ? rank1 : &a)->path.c_str(), 1);
                shaddr_comm_t *c = nullptr;
                const int err = shaddr_comm_create(&h, &c);
                const std::string why = shaddr_last_error();
                unsetenv("SHADDR_TUNING_FILE");
                if (err != -EINVAL) return 1;
                if (why.find("model") == std::string::npos) return 2;
                return 0;
              }),
              0);
  }
}

TEST(Select, RejectsBadArguments) {
  shaddr_selection a{};
  shaddr_select_query q{SHADDR_COLL_BCAST, 8, 1, 0, SHADDR_FALLBACK_MPICH};
  EXPECT_EQ(shaddr_select(nullptr, &q, &a), -EINVAL);
  EXPECT_STREQ(shaddr_algo_name(SHADDR_ALGO_FIFO), "fifo");
  EXPECT_STREQ(shaddr_algo_name(SHADDR_ALGO_COUNT), "?");
  TextFile tf("");
  EXPECT_EQ(with_model(tf.path, [](shaddr_comm_t *c, int) {
              shaddr_selection out{};
              shaddr_select_query bad{static_cast<shaddr_coll>(SHADDR_COLL_COUNT), 8, 1, 0,
                                      SHADDR_FALLBACK_MPICH};
              if (shaddr_select(c, &bad, &out) != -EINVAL) return 1;
              bad.coll = SHADDR_COLL_BCAST;
              bad.fallback = SHADDR_FALLBACK_COUNT;
              if (shaddr_select(c, &bad, &out) != -EINVAL) return 2;
              if (shaddr_select(c, nullptr, &out) != -EINVAL) return 3;
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace shaddr
