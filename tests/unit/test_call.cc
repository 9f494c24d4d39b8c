// SPDX-License-Identifier: MIT
// The per-call entry (struct shaddr_call in coll.h): the route forwards below the plan's
// lib_from on the compare alone and looks the plan up once above it, records a forwarded call
// so that a peer that announced it learns it, announces a call for libshaddr with a token made
// from the call, and hands down the plan's own step, which the collective then runs.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "plan_test_util.h"
#include "shaddr/coll.h"

namespace shaddr {
namespace {

#define REQUIRE(cond, code, ...)          \
  do {                                    \
    if (!(cond)) {                        \
      std::fprintf(stderr, __VA_ARGS__);  \
      std::fprintf(stderr, "\n");         \
      return code;                        \
    }                                     \
  } while (0)

// SHADDR_MIN=1000: every collective's calls below 1000 B go to the fallback, the others to
// libshaddr, whatever the model says.
const std::vector<std::pair<std::string, std::string>> kMin1000 = {{"SHADDR_MIN", "1000"}};

shaddr_call call_of(shaddr_coll coll, size_t bytes, int root = -1, uint64_t extra = 0,
                    unsigned flags = 0) {
  return shaddr_call{coll, flags, bytes, root, extra, nullptr, 0};
}

TEST(Call, TokenIsTheCall) {
  const shaddr_call a = call_of(SHADDR_COLL_BCAST, 4096, 0);
  shaddr_call b = a;
  EXPECT_EQ(shaddr_call_token(&a), shaddr_call_token(&b));
  // How it is recorded, and the outputs, are not the call.
  b.flags = SHADDR_CALL_PREPARE | SHADDR_CALL_FALLBACK;
  b.step = reinterpret_cast<const shaddr_plan_step *>(&b);
  b.lib_any = 1;
  EXPECT_EQ(shaddr_call_token(&a), shaddr_call_token(&b));
  const shaddr_call differ[] = {
      call_of(SHADDR_COLL_BCAST, 4096, 1),
      call_of(SHADDR_COLL_BCAST, 4097, 0),
      call_of(SHADDR_COLL_BCAST, 4096, 0, 1),
      call_of(SHADDR_COLL_REDUCE, 4096, 0),
      call_of(SHADDR_COLL_BCAST, 4096, 0, 0, SHADDR_PLAN_SEGMENTED),
      call_of(SHADDR_COLL_BCAST, 4096, 0, 0, SHADDR_CALL_V),
  };
  for (const shaddr_call &d : differ) {
    EXPECT_NE(shaddr_call_token(&a), shaddr_call_token(&d));
    EXPECT_NE(shaddr_call_token(&d), SHADDR_CALL_FORWARDED);
  }
  const shaddr_call r1 = call_of(SHADDR_COLL_REDUCE, 64, 0,
                                 SHADDR_CALL_EXTRA_REDUCE(SHADDR_INT32, SHADDR_OP_SUM));
  const shaddr_call r2 = call_of(SHADDR_COLL_REDUCE, 64, 0,
                                 SHADDR_CALL_EXTRA_REDUCE(SHADDR_INT32, SHADDR_OP_MAX));
  EXPECT_NE(shaddr_call_token(&r1), shaddr_call_token(&r2));
}

TEST(Call, RefusesBadArguments) {
  shaddr_call c = call_of(static_cast<shaddr_coll>(SHADDR_COLL_COUNT), 8);
  EXPECT_EQ(shaddr_call_decide(nullptr, nullptr), -EINVAL);
  EXPECT_EQ(shaddr_call_decide(nullptr, &c), -EINVAL);
  EXPECT_EQ(shaddr_call_route(nullptr, SHADDR_FALLBACK_MPICH, &c), -EINVAL);
  EXPECT_EQ(shaddr_call_commit(nullptr, &c, 1), -EINVAL);
  // No plan: everything is the fallback's.
  c = call_of(SHADDR_COLL_BCAST, size_t(1) << 30, 0);
  EXPECT_EQ(shaddr_call_decide(nullptr, &c), SHADDR_ROUTE_FALLBACK);
  EXPECT_EQ(c.lib_any, 0);
  EXPECT_EQ(shaddr_plan_intern(nullptr), nullptr);
}

// The route's answer and step are the plan's: a compare below lib_from, the lookup above.
TEST(Call, RouteIsThePlansLookup) {
  EXPECT_EQ(on_ranks(2, "shm", kMin1000, [&](shaddr_comm_t *c, int) {
              const shaddr_plan *p = shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH);
              REQUIRE(p, 1, "no plan");
              for (int coll = SHADDR_COLL_BCAST; coll < SHADDR_COLL_COUNT; coll++) {
                const auto co = static_cast<shaddr_coll>(coll);
                REQUIRE(p->lib_from[coll] == 1000, 2, "coll %d: lib_from %zu", coll,
                        p->lib_from[coll]);
                for (size_t bytes : {size_t{0}, size_t{8}, size_t{999}, size_t{1000},
                                     size_t{65536}}) {
                  // decide records nothing: the same answers on both ranks without a collective
                  shaddr_call call = call_of(co, bytes);
                  const int r = shaddr_call_decide(p, &call);
                  REQUIRE(call.lib_any == 1, 3, "coll %d: lib_any", coll);
                  if (bytes < 1000) {
                    REQUIRE(r == SHADDR_ROUTE_FALLBACK && !call.step, 4,
                            "coll %d, %zu B: %d, step %p", coll, bytes, r,
                            static_cast<const void *>(call.step));
                    continue;
                  }
                  const shaddr_plan_step *want = shaddr_plan_lookup(p, co, bytes, 0);
                  REQUIRE(call.step == want, 5, "coll %d, %zu B: another step", coll, bytes);
                  REQUIRE(r == (want->use_fallback ? SHADDR_ROUTE_FALLBACK
                                                   : SHADDR_ROUTE_LIBSHADDR),
                          6, "coll %d, %zu B: %d", coll, bytes, r);
                }
              }
              // SHADDR_CALL_FALLBACK wins over the plan; an unsized call is libshaddr's.
              shaddr_call f = call_of(SHADDR_COLL_BCAST, 65536, 0, 0, SHADDR_CALL_FALLBACK);
              REQUIRE(shaddr_call_decide(p, &f) == SHADDR_ROUTE_FALLBACK && !f.step, 7, "fallback");
              shaddr_call u = call_of(SHADDR_COLL_GATHER, 0, 0, 0, SHADDR_CALL_V | SHADDR_CALL_UNSIZED);
              REQUIRE(shaddr_call_decide(p, &u) == SHADDR_ROUTE_LIBSHADDR && !u.step, 8, "unsized");
              // An interned copy is shared by equal plans and decides alike.
              const shaddr_plan *kept = shaddr_plan_intern(p);
              REQUIRE(kept && kept != p && shaddr_plan_intern(p) == kept, 9, "intern");
              shaddr_call k = call_of(SHADDR_COLL_BCAST, 65536, 0);
              REQUIRE(shaddr_call_decide(kept, &k) == SHADDR_ROUTE_LIBSHADDR, 10, "interned");
              return 0;
            }),
            0);
}

// Routed calls on every rank: forwarded ones cost no wait, a call for libshaddr runs the
// handed-down step; a rank that forwards what another announced makes the announcer's
// collective return -EXDEV, and the ledger stays in step after.
TEST(Call, RouteRecordsAndHandsDown) {
  EXPECT_EQ(on_ranks(2, "shm", kMin1000, [&](shaddr_comm_t *c, int rank) {
              std::vector<char> buf(1 << 16, static_cast<char>(rank == 0 ? 7 : 0));
              for (int round = 0; round < 3; round++) {
                // Forwarded on the compare alone: recorded, nothing to run here.
                shaddr_call f = call_of(SHADDR_COLL_BCAST, 8, 0);
                REQUIRE(shaddr_call_route(c, SHADDR_FALLBACK_MPICH, &f) == SHADDR_ROUTE_FALLBACK,
                        1, "8 B routed to libshaddr");
                // A Barrier is not recorded: the ranks need not route it alike here.
                if (rank == 0) {
                  shaddr_call b = call_of(SHADDR_COLL_BARRIER, 0);
                  REQUIRE(shaddr_call_route(c, SHADDR_FALLBACK_MPICH, &b) >= 0, 2, "barrier");
                }
                // For libshaddr: announced, then the collective runs the step handed down.
                shaddr_call l = call_of(SHADDR_COLL_BCAST, 65536, 0);
                REQUIRE(shaddr_call_route(c, SHADDR_FALLBACK_MPICH, &l) == SHADDR_ROUTE_LIBSHADDR,
                        3, "64 KiB forwarded");
                REQUIRE(l.step == shaddr_plan_lookup(shaddr_comm_plan(c, SHADDR_FALLBACK_MPICH),
                                                     SHADDR_COLL_BCAST, 65536, 0),
                        13, "the route's step is not the plan's");
                shaddr_comm_stats before{}, after{};
                shaddr_comm_get_stats(c, &before);
                REQUIRE(shaddr_bcast(c, buf.data(), 65536, 0) == 0, 4, "bcast: %s",
                        shaddr_last_error());
                shaddr_comm_get_stats(c, &after);
                REQUIRE(after.runs[SHADDR_COLL_BCAST][l.step->algo] ==
                            before.runs[SHADDR_COLL_BCAST][l.step->algo] + 1,
                        5, "the step's %s did not run", shaddr_algo_name(l.step->algo));
                REQUIRE(buf[65535] == 7, 6, "data");
                // Prepared: rank 1 cannot carry it out and commits it as forwarded; rank 0's
                // collective learns it and returns -EXDEV with nothing moved.
                shaddr_call p = call_of(SHADDR_COLL_ALLREDUCE, 4096, -1,
                                        SHADDR_CALL_EXTRA_REDUCE(SHADDR_UINT8, SHADDR_OP_MAX),
                                        SHADDR_CALL_PREPARE);
                REQUIRE(shaddr_call_route(c, SHADDR_FALLBACK_MPICH, &p) == SHADDR_ROUTE_LIBSHADDR,
                        7, "4 KiB Allreduce forwarded");
                const int ready = rank == 0;
                REQUIRE(shaddr_call_commit(c, &p, ready) ==
                            (ready ? SHADDR_ROUTE_LIBSHADDR : SHADDR_ROUTE_FALLBACK),
                        8, "commit");
                if (ready) {
                  std::vector<char> out(4096, 3);
                  const int rc = shaddr_allreduce(c, buf.data(), out.data(), 4096, SHADDR_UINT8,
                                                  SHADDR_OP_MAX);
                  REQUIRE(rc == -EXDEV, 9, "round %d: allreduce gave %d", round, rc);
                  REQUIRE(out[0] == 3, 10, "output written");
                }
                // Calls that differ (the bytes): every rank's collective returns -EXDEV.
                shaddr_call d = call_of(SHADDR_COLL_BCAST, rank ? 2048 : 4096, 0);
                REQUIRE(shaddr_call_route(c, SHADDR_FALLBACK_MPICH, &d) == SHADDR_ROUTE_LIBSHADDR,
                        11, "differing call forwarded");
                const int rc = shaddr_bcast(c, buf.data(), d.bytes, 0);
                REQUIRE(rc == -EXDEV, 12, "round %d: differing bcast gave %d", round, rc);
              }
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace shaddr
