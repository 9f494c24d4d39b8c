// SPDX-License-Identifier: MIT
// Failures in the middle of a collective (SHADDR_FAIL_INJECT: every n-th exposure, mapping or
// read of a rank fails): every rank must return the same error, in-place input must be as it
// was (so a caller's fallback computes from the original data), the statistics must count
// each failure once, and the calls that succeed must be right. Forked ranks, each backend of
// SHADDR_TEST_BACKENDS (default "cma shm" on the host; the VM runs the module's: a failed
// exposure must never be read there, where reading it would raise SIGBUS); 3 ranks (partitioned
// Reduce) and 2 (direct Reduce: the root reads both operands).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "coll_rules.h"
#include "comm.h"
#include "shaddr/coll.h"

namespace {

// Larger than the slots and the Bcast FIFO: the paths with exposures, mappings and reads.
constexpr size_t kCount = 40000;  // doubles (partitioned reduction) and bytes per block
// The Reduce at 2 ranks: direct, and several reduce units long (SHADDR_REDUCE_UNIT: 32 KiB here).
constexpr size_t kDirectCount = 12000;  // doubles
size_t reduce_count(int ranks) { return ranks == 2 ? kDirectCount : kCount; }

double value(int rank, size_t i) { return static_cast<double>((rank + 1) * 1000 + i % 997); }

struct Tally {
  int failed = 0, passed = 0;
};

// One rank's run of every case; returns 0 or a code naming the first violation (printed).
int run_cases(const shaddr_host &h, Tally *out) {
  shaddr_comm_t *c = nullptr;
  if (shaddr_comm_create(&h, &c) != 0) {
    std::fprintf(stderr, "rank %d: create: %s\n", h.rank, shaddr_last_error());
    return 1;
  }
  const int n = h.size, me = h.rank;
  int bad = 0;
  auto agreed = [&](int rc, const char *what) {
    std::vector<int> all(n);
    if (h.allgather(&rc, all.data(), sizeof rc, h.ctx)) return false;
    for (int r = 0; r < n; r++)
      if (all[r] != rc) {
        std::fprintf(stderr, "%s: rank %d returned %d, rank %d %d\n", what, me, rc, r, all[r]);
        bad = bad ? bad : 2;
        return false;
      }
    // The agreed error is the first in rank order: the injected -ECANCELED, also what a peer
    // gets when it finds an exposure that failed (kExposureFailed, never read).
    (rc ? out->failed : out->passed)++;
    if (rc && rc != -ECANCELED) {
      std::fprintf(stderr, "%s: returned %d, not the injected -ECANCELED\n", what, rc);
      bad = bad ? bad : 3;
    }
    return true;
  };
  auto check = [&](bool ok, int code, const char *what) {
    if (!ok && !bad) {
      std::fprintf(stderr, "rank %d: %s\n", me, what);
      bad = code;
    }
  };

  for (int round = 0; round < 4; round++) {  // every rank makes every call, even after a bad one
    // Allreduce and Reduce in place: partitioned; a failure must restore the input.
    std::vector<double> buf(kCount), orig(kCount);
    for (size_t i = 0; i < kCount; i++) orig[i] = buf[i] = value(me, i);
    int rc = shaddr_allreduce(c, SHADDR_IN_PLACE, buf.data(), kCount, SHADDR_DOUBLE,
                              SHADDR_OP_SUM);
    if (agreed(rc, "allreduce in place")) {
      double sum0 = 0;
      for (int r = 0; r < n; r++) sum0 += value(r, 0);
      check(rc ? buf == orig : buf[0] == sum0, 10, "allreduce in place: input not restored / wrong");
    }
    const int root = round % n;
    const size_t rn = reduce_count(n);
    buf.resize(rn);
    orig.resize(rn);
    for (size_t i = 0; i < rn; i++) buf[i] = value(me, i);
    rc = shaddr_reduce(c, me == root ? SHADDR_IN_PLACE : buf.data(),
                       me == root ? buf.data() : nullptr, rn, SHADDR_DOUBLE, SHADDR_OP_SUM,
                       root);
    if (agreed(rc, "reduce in place") && me == root) {
      double sum1 = 0;
      for (int r = 0; r < n; r++) sum1 += value(r, rn - 1);
      check(rc ? buf == orig : buf[rn - 1] == sum1, 11, "reduce in place: not restored / wrong");
    }
    // Alltoall in place: blocks taken from and replaced in the receive buffer.
    std::vector<unsigned char> a(kCount * n), a0;
    for (int p = 0; p < n; p++)
      std::memset(a.data() + p * kCount, me * 16 + p + 1, kCount);
    a0 = a;
    rc = shaddr_alltoall(c, SHADDR_IN_PLACE, kCount, a.data());
    if (agreed(rc, "alltoall in place")) {
      bool ok = true;
      for (int p = 0; p < n && !rc; p++) ok = ok && a[p * kCount + 7] == p * 16 + me + 1;
      check(rc ? a == a0 : ok, 12, "alltoall in place: not restored / wrong");
    }
    // Bcast, Allgather, Gather: outputs only; the successes must be right.
    std::vector<unsigned char> b(kCount * 8, me == root ? 0x5a : 0);
    rc = shaddr_bcast(c, b.data(), b.size(), root);
    if (agreed(rc, "bcast") && !rc) check(b[b.size() - 1] == 0x5a, 13, "bcast wrong");
    std::vector<unsigned char> mine(kCount, static_cast<unsigned char>(me + 1)), all(kCount * n);
    rc = shaddr_allgather(c, mine.data(), kCount, all.data());
    if (agreed(rc, "allgather") && !rc)
      for (int p = 0; p < n; p++) check(all[p * kCount + 5] == p + 1, 14, "allgather wrong");
    rc = shaddr_gather(c, mine.data(), kCount, me == root ? all.data() : nullptr, root);
    agreed(rc, "gather");
  }
  shaddr_comm_stats st{};
  shaddr_comm_get_stats(c, &st);
  if (!bad && st.failures != static_cast<uint64_t>(out->failed)) {
    std::fprintf(stderr, "rank %d: %llu failures counted, %d calls failed\n", me,
                 static_cast<unsigned long long>(st.failures), out->failed);
    bad = 4;
  }
  shaddr_comm_free(c);
  return bad;
}

TEST(Fallback, InjectedFailuresAreAgreedAndRestoreInPlaceInput) {
  const char *env = std::getenv("SHADDR_TEST_BACKENDS");
  std::istringstream backends(env && *env ? env : "cma shm");
  for (std::string name; backends >> name;)
  for (int ranks : {3, 2}) {
    const char *backend = name.c_str();
    // The Reduce of this test must take the algorithm this sweep is meant to reach.
    shaddr::Tuning t = shaddr::Tuning::from_env(ranks);
    ASSERT_EQ(shaddr::reduce_direct_wins(ranks, reduce_count(ranks) * sizeof(double), t),
              ranks == 2);
    int failed = 0, passed = 0;
    for (const char *every : {"1", "2", "3", "5", "7", "11"}) {
      for (const char *rank : {"", "0", "1", "2"}) {
        if (*rank && std::atoi(rank) >= ranks) continue;
        setenv("SHADDR_BACKEND", backend, 1);
        setenv("SHADDR_FAIL_INJECT", every, 1);
        if (*rank) setenv("SHADDR_FAIL_INJECT_RANK", rank, 1);
        else unsetenv("SHADDR_FAIL_INJECT_RANK");
        Tally t;
        const int rc = shaddr::run_forked(ranks, [&](const shaddr_host &h) {
          return run_cases(h, &t);  // rank 0 runs here: its tally is the one kept
        });
        EXPECT_EQ(rc, 0) << backend << " " << ranks << " ranks SHADDR_FAIL_INJECT=" << every
                         << " rank '" << rank << "'";
        failed += t.failed;
        passed += t.passed;
      }
    }
    // The sweep reached failures and successes alike.
    EXPECT_GT(failed, 20) << backend << " " << ranks << " ranks";
    EXPECT_GT(passed, 20) << backend << " " << ranks << " ranks";
  }
  unsetenv("SHADDR_BACKEND");
  unsetenv("SHADDR_FAIL_INJECT");
  unsetenv("SHADDR_FAIL_INJECT_RANK");
}

}  // namespace
