// SPDX-License-Identifier: MIT
// Differential tests of the collectives against a reference computed from every rank's
// (deterministic) inputs, across forked ranks: sizes 0, 1, 7, 4095, 4096, 4097, 1 MiB + 3;
// every root; every op x type pair MPI allows; in place and not; node sizes 1, 2, 3, 4, 7, 8
// (oversubscribed); each backend of SHADDR_TEST_BACKENDS (default "cma shm" on the host; the VM
// run adds segment and window and slot-straddling sizes). Reductions are compared bitwise (the
// significant bytes of each element) on every rank.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <new>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../heap/heap.h"
#include "bootstrap.h"
#include "coll_rules.h"
#include "comm.h"
#include "reduce_ops.h"
#include "shaddr/coll.h"

using namespace shaddr;

namespace {

// SHADDR_TEST_NODE_SIZES overrides (the VM run uses fewer: TCG is slow).
std::vector<int> node_sizes() {
  const char *env = std::getenv("SHADDR_TEST_NODE_SIZES");
  std::istringstream in(env && *env ? env : "1 2 3 4 7 8");
  std::vector<int> out;
  for (int n; in >> n;) out.push_back(n);
  return out;
}
const size_t kSizes[] = {0, 1, 7, 4095, 4096, 4097, (1u << 20) + 3};

std::vector<std::string> test_backends() {
  const char *env = std::getenv("SHADDR_TEST_BACKENDS");
  std::istringstream in(env && *env ? env : "cma shm");
  std::vector<std::string> out;
  for (std::string b; in >> b;) out.push_back(b);
  return out;
}

// "heap+<inner>": the heap layer over <inner> (SHADDR_BACKEND=<inner>); it needs the heap in
// this process (ctest's unit.coll_on_heap preloads libshaddr-heap.so).
std::string backend_setting(const std::string &b) {
  return b.rfind("heap+", 0) == 0 ? b.substr(5) : b;
}

// Why the heap is not on in this process, or "" if it is.
std::string heap_missing() {
  using Fn = const heap::Api *(*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, heap::kApiSymbol));
  if (!fn) return "libshaddr-heap is not loaded (LD_PRELOAD it)";
  const heap::Status st = fn()->status();
  return st.on ? "" : st.reason;
}

// The sizes at node size n: kSizes, the last size through the control block's slots there and
// the first past them (SHADDR_SLOT_MAX's default depends on n), and extra sizes for backends
// whose mappings are slot-sized (window: 16 MiB default slot).
std::vector<size_t> sizes(int n) {
  std::vector<size_t> v(std::begin(kSizes), std::end(kSizes));
  for (size_t s : {slot_max_default(n), slot_max_default(n) + 1})
    if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  if (const char *big = std::getenv("SHADDR_TEST_BIG_SIZES")) {
    std::istringstream in(big);
    for (size_t s; in >> s;) v.push_back(s);
  }
  return v;
}

#define REQUIRE(cond, code, ...)                                   \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, " [%s]\n", shaddr_last_error());        \
      return code;                                                 \
    }                                                              \
  } while (0)

unsigned char byte_of(int rank, uint64_t salt, size_t i) {
  uint64_t x = (rank + 1) * 0x9E3779B97F4A7C15ull ^ salt * 0xBF58476D1CE4E5B9ull ^ i * 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<unsigned char>(x ^ (x >> 17));
}

void fill(unsigned char *p, size_t n, int rank, uint64_t salt) {
  for (size_t i = 0; i < n; i++) p[i] = byte_of(rank, salt, i);
}

bool check(const unsigned char *p, size_t n, int rank, uint64_t salt, size_t *bad) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != byte_of(rank, salt, i)) {
      *bad = i;
      return false;
    }
  return true;
}

// shaddr_allgather of `bytes` per rank, in place and not; 0 or the failing REQUIRE's code.
int allgather_both_ways(shaddr_comm_t *c, int rank, int size, size_t bytes, uint64_t salt) {
  size_t bad;
  for (bool ip : {false, true}) {
    std::vector<unsigned char> send(bytes + 1), recv(bytes * size + 1, 0xEE);
    fill(send.data(), bytes, rank, salt);
    const void *sb = send.data();
    if (ip) {
      std::memcpy(recv.data() + rank * bytes, send.data(), bytes);
      sb = SHADDR_IN_PLACE;
    }
    REQUIRE(shaddr_allgather(c, sb, bytes, recv.data()) == 0, 1, "allgather %zu", bytes);
    for (int r = 0; r < size; r++)
      REQUIRE(check(recv.data() + r * bytes, bytes, r, salt, &bad), 2, "allgather %zu in_place %d block %d byte %zu", bytes, ip, r, bad);
  }
  return 0;
}

// Runs body(comm, rank, size) on n forked ranks with the given backend.
template <typename Body>
int on_ranks(int n, const std::string &backend, Body body) {
  if (backend.rfind("heap+", 0) == 0 && !heap_missing().empty()) {
    std::fprintf(stderr, "backend %s: %s\n", backend.c_str(), heap_missing().c_str());
    return 89;
  }
  setenv("SHADDR_BACKEND", backend_setting(backend).c_str(), 1);
  int r = run_forked(n, [&](const shaddr_host &h) {
    alarm(300);  // a watchdog: a stalled collective fails the test instead of hanging it
    const int rank = h.rank;
    shaddr_comm_t *comm = nullptr;
    REQUIRE(shaddr_comm_create(&h, &comm) == 0, 90, "comm_create");
    // One rank has no peer whose heap it could read: no heap layer.
    const std::string want = h.size == 1 ? backend_setting(backend) : backend;
    REQUIRE(want == shaddr_comm_backend(comm), 91, "backend %s", shaddr_comm_backend(comm));
    int res = body(comm, h.rank, h.size);
    REQUIRE(shaddr_comm_free(comm) == 0, 92, "comm_free");
    return res;
  });
  unsetenv("SHADDR_BACKEND");
  return r;
}

class Coll : public ::testing::TestWithParam<std::string> {};

TEST_P(Coll, Barrier) {
  for (int n : node_sizes()) {
    // Each rank bumps a shared counter between barriers; after barrier k everyone sees k * n.
    auto *count = static_cast<std::atomic<int> *>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(count, MAP_FAILED);
    new (count) std::atomic<int>(0);
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                for (int k = 1; k <= 50; k++) {
                  count->fetch_add(1);
                  REQUIRE(shaddr_barrier(c) == 0, 1, "barrier");
                  REQUIRE(count->load() >= k * size, 2, "barrier %d let rank through early", k);
                  REQUIRE(shaddr_barrier(c) == 0, 3, "barrier");
                }
                return 0;
              }),
              0)
        << "n=" << n;
    munmap(count, 4096);
  }
}

// A peer that dies leaves the others with EOWNERDEAD, not a hang (the watchdog would fire).
TEST_P(Coll, PeerThatDiedIsReportedNotWaitedFor) {
  setenv("SHADDR_BACKEND", backend_setting(GetParam()).c_str(), 1);
  EXPECT_EQ(run_forked(3, [&](const shaddr_host &h) {
              alarm(300);
              const int rank = h.rank;
              shaddr_comm_t *comm = nullptr;
              REQUIRE(shaddr_comm_create(&h, &comm) == 0, 90, "comm_create");
              if (rank == 2) _exit(0);  // gone without a word
              const int rc = shaddr_barrier(comm);
              REQUIRE(rc == -EOWNERDEAD, 1, "barrier with a dead peer returned %d", rc);
              shaddr_comm_free(comm);
              return 0;
            }),
            0);
  unsetenv("SHADDR_BACKEND");
}

// A peer may do its part and exit between a waiter's last look at the flag and its check that
// the peer lives (one leaves a closing barrier as soon as it has seen everyone arrive). The waiter must look again before calling the peer dead. Here the peer is gone and
// the flag "turns up" exactly at that second look: the liveness check comes after 4095 waits.
TEST_P(Coll, PeerThatExitedAfterItsPartIsNotDead) {
  setenv("SHADDR_BACKEND", backend_setting(GetParam()).c_str(), 1);
  // Waits that never sleep, so the peer is looked at after exactly 4096 looks at the flag (a
  // sleep counts as 256: wait.h).
  setenv("SHADDR_WAIT", "spin", 1);
  EXPECT_EQ(run_forked(2, [&](const shaddr_host &h) {
              alarm(300);
              const int rank = h.rank;
              shaddr_comm_t *comm = nullptr;
              REQUIRE(shaddr_comm_create(&h, &comm) == 0, 90, "comm_create");
              if (rank == 1) _exit(0);
              usleep(200000);  // rank 1 is gone (a zombie until run_forked reaps it)
              int looks = 0;
              const int rc = shaddr::from_handle(comm)->wait_until(1, [&] { return ++looks >= 4096; });
              REQUIRE(rc == 0 && looks == 4096, 1, "wait_until: %d after %d looks", rc, looks);
              looks = 0;  // and a flag that never turns up is a dead peer
              const int dead = shaddr::from_handle(comm)->wait_until(1, [&] { return ++looks > 1 << 20; });
              REQUIRE(dead == -EOWNERDEAD, 2, "wait_until: %d after %d looks", dead, looks);
              shaddr_comm_free(comm);
              return 0;
            }),
            0);
  unsetenv("SHADDR_BACKEND");
  unsetenv("SHADDR_WAIT");
}

TEST_P(Coll, Bcast) {
  for (int n : node_sizes())
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                for (size_t bytes : sizes(size))
                  for (int root = 0; root < size; root++) {
                    std::vector<unsigned char> buf(bytes + 1);
                    unsigned char *p = buf.data() + 1;  // unaligned
                    const uint64_t salt = bytes * 131 + root;
                    if (rank == root) fill(p, bytes, root, salt);
                    else std::memset(p, 0xEE, bytes);
                    REQUIRE(shaddr_bcast(c, p, bytes, root) == 0, 1, "bcast %zu root %d", bytes, root);
                    size_t bad;
                    REQUIRE(check(p, bytes, root, salt, &bad), 2, "bcast %zu root %d: byte %zu", bytes, root, bad);
                  }
                return 0;
              }),
              0)
        << "n=" << n;
}

// Multi-stream Bcast (the message cut into streams, each relayed by one rank), forced down to
// small sizes.
TEST_P(Coll, BcastMultiStream) {
  setenv("SHADDR_BCAST_STREAMS_MIN", "65536", 1);
  for (int streams : {2, 3})
    for (int n : {3, 4, 5}) {
      setenv("SHADDR_BCAST_STREAMS", std::to_string(streams).c_str(), 1);
      EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                  for (size_t bytes : {size_t(65536), size_t(65537), size_t(3u << 20) + 1})
                    for (int root = 0; root < size; root++) {
                      std::vector<unsigned char> buf(bytes, 0xEE);
                      if (rank == root) fill(buf.data(), bytes, root, bytes + root);
                      REQUIRE(shaddr_bcast(c, buf.data(), bytes, root) == 0, 1, "bcast");
                      size_t bad;
                      REQUIRE(check(buf.data(), bytes, root, bytes + root, &bad), 2,
                              "multistream %zu root %d byte %zu", bytes, root, bad);
                    }
                  return 0;
                }),
                0)
          << "n=" << n << " streams=" << streams;
    }
  unsetenv("SHADDR_BCAST_STREAMS");
  unsetenv("SHADDR_BCAST_STREAMS_MIN");
}

// The root's data arrives in pieces (the multi-node leader's case); readers follow it. Also
// where a plain Bcast of the size would run in streams (SHADDR_BCAST_STREAMS_MIN 64K): only
// the root has a data source, and the choice of algorithm once depended on it, so the root
// ran the message counter while the others waited for streams.
TEST_P(Coll, BcastSegmented) {
  for (const char *streams_min : {"", "65536"})
  for (int n : {2, 3, 5}) {
    if (*streams_min) setenv("SHADDR_BCAST_STREAMS_MIN", streams_min, 1);
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                for (size_t bytes : {size_t(5000), size_t(300000), size_t(1u << 20) + 7}) {
                  const int root = size - 1;
                  std::vector<unsigned char> buf(bytes, 0xEE);
                  struct Src {
                    unsigned char *p;
                    size_t next;
                    uint64_t salt;
                    int root;
                  } src{buf.data(), 0, bytes, root};
                  auto ready = [](size_t off, size_t len, void *ctx) {
                    auto *s = static_cast<Src *>(ctx);
                    if (off != s->next) return -EPROTO;
                    for (size_t i = off; i < off + len; i++) s->p[i] = byte_of(s->root, s->salt, i);
                    s->next = off + len;
                    usleep(100);  // data "arriving"
                    return 0;
                  };
                  REQUIRE(shaddr_bcast_segmented(c, buf.data(), bytes, root, 65536,
                                                 rank == root ? +ready : nullptr, &src) == 0,
                          1, "segmented bcast %zu", bytes);
                  size_t bad;
                  REQUIRE(check(buf.data(), bytes, root, bytes, &bad), 2, "segmented %zu: byte %zu", bytes, bad);
                }
                // A failing source: every rank reports the failure.
                std::vector<unsigned char> buf(200000);
                auto failing = [](size_t off, size_t, void *) { return off >= 65536 ? -EIO : 0; };
                int err = shaddr_bcast_segmented(c, buf.data(), buf.size(), 0, 65536,
                                                 rank == 0 ? +failing : nullptr, nullptr);
                REQUIRE(err != 0, 3, "a failed source must fail the Bcast everywhere");
                REQUIRE(shaddr_barrier(c) == 0, 4, "barrier after failure");
                return 0;
              }),
              0)
        << "n=" << n << " SHADDR_BCAST_STREAMS_MIN=" << streams_min;
    unsetenv("SHADDR_BCAST_STREAMS_MIN");
  }
}

// Significant bytes of one element: long double has 6 padding bytes, pair types pad.
bool same_element(shaddr_dtype t, const unsigned char *a, const unsigned char *b) {
  switch (t) {
  case SHADDR_LONG_DOUBLE: return !std::memcmp(a, b, 10);
  case SHADDR_C_LONG_DOUBLE_COMPLEX: return !std::memcmp(a, b, 10) && !std::memcmp(a + 16, b + 16, 10);
  case SHADDR_FLOAT_INT: case SHADDR_2INT: case SHADDR_2FLOAT: return !std::memcmp(a, b, 8);
  case SHADDR_DOUBLE_INT: case SHADDR_LONG_INT: return !std::memcmp(a, b, 12);
  case SHADDR_SHORT_INT: return !std::memcmp(a, b, 2) && !std::memcmp(a + 4, b + 4, 4);
  case SHADDR_LONG_DOUBLE_INT: return !std::memcmp(a, b, 10) && !std::memcmp(a + 16, b + 16, 4);
  default: return !std::memcmp(a, b, shaddr_dtype_size(t));
  }
}

// Inputs valid for the type: bools 0/1, pairs with small values (ties happen) and indices.
void make_input(shaddr_dtype t, unsigned char *p, size_t count, int rank, uint64_t salt) {
  const size_t es = shaddr_dtype_size(t);
  std::memset(p, 0, count * es);
  std::mt19937_64 rng(salt * 1000003 + rank);
  for (size_t i = 0; i < count; i++) {
    unsigned char *e = p + i * es;
    const int small = static_cast<int>(rng() % 7) - 3;
    switch (t) {
    case SHADDR_C_BOOL: e[0] = rng() & 1; break;
    case SHADDR_FLOAT: { float v = small + (rng() % 1000) / 64.0f; std::memcpy(e, &v, 4); break; }
    case SHADDR_DOUBLE: { double v = small * 0.1 + (rng() % 1000) / 3.0; std::memcpy(e, &v, 8); break; }
    case SHADDR_LONG_DOUBLE: { long double v = small / 3.0L; std::memcpy(e, &v, sizeof v); break; }
    case SHADDR_C_FLOAT_COMPLEX: { float v[2] = {small * 0.5f, (rng() % 9) * 0.25f}; std::memcpy(e, v, 8); break; }
    case SHADDR_C_DOUBLE_COMPLEX: { double v[2] = {small / 7.0, (rng() % 9) / 3.0}; std::memcpy(e, v, 16); break; }
    case SHADDR_C_LONG_DOUBLE_COMPLEX: { long double v[2] = {small / 7.0L, (rng() % 9) / 3.0L}; std::memcpy(e, v, 32); break; }
    case SHADDR_FLOAT_INT: { float v = small; int k = rank; std::memcpy(e, &v, 4); std::memcpy(e + 4, &k, 4); break; }
    case SHADDR_DOUBLE_INT: { double v = small; int k = rank * 3; std::memcpy(e, &v, 8); std::memcpy(e + 8, &k, 4); break; }
    case SHADDR_LONG_INT: { long v = small; int k = 9 - rank; std::memcpy(e, &v, 8); std::memcpy(e + 8, &k, 4); break; }
    case SHADDR_2INT: { int v[2] = {small, rank}; std::memcpy(e, v, 8); break; }
    case SHADDR_SHORT_INT: { short v = small; int k = rank; std::memcpy(e, &v, 2); std::memcpy(e + 4, &k, 4); break; }
    case SHADDR_LONG_DOUBLE_INT: { long double v = small; int k = rank; std::memcpy(e, &v, sizeof v); std::memcpy(e + 16, &k, 4); break; }
    case SHADDR_2FLOAT: { float v[2] = {static_cast<float>(small), static_cast<float>(rank)}; std::memcpy(e, v, 8); break; }
    case SHADDR_2DOUBLE: { double v[2] = {static_cast<double>(small), rank * 2.0}; std::memcpy(e, v, 16); break; }
    default:
      for (size_t b = 0; b < es; b++) e[b] = static_cast<unsigned char>(rng());
    }
  }
}

// The reference: x0 op x1 op ... op xn-1, element by element, in rank order.
std::vector<unsigned char> reference(shaddr_op op, shaddr_dtype t, size_t count, int n, uint64_t salt) {
  const size_t es = shaddr_dtype_size(t);
  std::vector<unsigned char> acc(count * es + 1), in(count * es + 1);
  make_input(t, acc.data(), count, 0, salt);
  for (int r = 1; r < n; r++) {
    make_input(t, in.data(), count, r, salt);
    reduce_apply(op, t, acc.data(), in.data(), count);
  }
  return acc;
}

int reduce_case(shaddr_comm_t *c, int rank, int size, shaddr_op op, shaddr_dtype t, size_t count,
                int root, bool in_place, bool all) {
  const size_t es = shaddr_dtype_size(t);
  const uint64_t salt = count * 7919 + op * 131 + t * 17 + root;
  std::vector<unsigned char> send(count * es + 1), recv(count * es + 1, 0xCC);
  make_input(t, send.data(), count, rank, salt);
  const bool gets = all || rank == root;
  const void *sb = send.data();
  if (in_place && gets) {
    std::memcpy(recv.data(), send.data(), count * es);
    sb = SHADDR_IN_PLACE;
  }
  int err = all ? shaddr_allreduce(c, sb, recv.data(), count, t, op)
                : shaddr_reduce(c, sb, recv.data(), count, t, op, root);
  REQUIRE(err == 0, 1, "%s op %d type %d count %zu root %d", all ? "allreduce" : "reduce", op, t, count, root);
  if (!gets) return 0;
  const std::vector<unsigned char> want = reference(op, t, count, size, salt);
  for (size_t i = 0; i < count; i++)
    REQUIRE(same_element(t, recv.data() + i * es, want.data() + i * es), 2,
            "%s op %d type %d count %zu root %d in_place %d: element %zu differs",
            all ? "allreduce" : "reduce", op, t, count, root, in_place, i);
  return 0;
}

// Every op x type pair MPI allows, at a slot-sized and a partitioned count.
TEST_P(Coll, AllreduceEveryOpAndType) {
  for (int n : {2, 3, 4})
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                int pairs = 0;
                for (int op = 0; op < SHADDR_OP_COUNT; op++)
                  for (int t = 0; t < SHADDR_DTYPE_COUNT; t++) {
                    if (shaddr_op_supported(shaddr_op(op), shaddr_dtype(t))) {
                      REQUIRE(shaddr_allreduce(c, nullptr, nullptr, 1, shaddr_dtype(t), shaddr_op(op)) == -ENOTSUP,
                              3, "unsupported pair must be -ENOTSUP on every rank");
                      continue;
                    }
                    pairs++;
                    for (size_t count : {size_t(1), size_t(7), size_t(5003)})
                      if (int e = reduce_case(c, rank, size, shaddr_op(op), shaddr_dtype(t), count, 0, count == 7, true)) return e;
                  }
                REQUIRE(pairs > 100, 4, "only %d op/type pairs supported", pairs);
                return 0;
              }),
              0)
        << "n=" << n;
}

TEST_P(Coll, ReduceAndAllreduceSizesRootsInPlace) {
  for (int n : node_sizes())
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                for (size_t bytes : sizes(size)) {
                  const size_t count = bytes / 8;
                  for (bool in_place : {false, true}) {
                    if (int e = reduce_case(c, rank, size, SHADDR_OP_SUM, SHADDR_DOUBLE, count, 0, in_place, true)) return e;
                    if (int e = reduce_case(c, rank, size, SHADDR_OP_MAX, SHADDR_INT32, bytes / 4, 0, in_place, true)) return e;
                    for (int root = 0; root < size; root++)
                      if (int e = reduce_case(c, rank, size, SHADDR_OP_SUM, SHADDR_FLOAT, bytes / 4, root, in_place, false)) return e;
                  }
                  if (int e = reduce_case(c, rank, size, SHADDR_OP_BXOR, SHADDR_UINT8, bytes, size / 2, false, false)) return e;
                }
                return 0;
              }),
              0)
        << "n=" << n;
}

// The direct Reduce (2 ranks, beyond the slots): every type (with an op MPI defines on it),
// both roots, in place and not, at counts just past a slot, odd, straddling pages and reduce
// units, larger than a slot and than the Bcast FIFO's slots, up to the largest that goes direct;
// with the operands at an odd offset from a page.
TEST_P(Coll, ReduceDirectEveryTypeSizeRootInPlace) {
  Tuning t = Tuning::from_env(2);
  t.slot_max = std::min<size_t>(t.slot_max, NodeBlockConfig{}.reduce_slot_bytes);  // as the plan
  const size_t unit = t.reduce_unit;
  EXPECT_EQ(on_ranks(2, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
              const shaddr_op ops[] = {SHADDR_OP_SUM, SHADDR_OP_BXOR, SHADDR_OP_LAND,
                                       SHADDR_OP_MAXLOC, SHADDR_OP_MIN};
              for (int ti = 0; ti < SHADDR_DTYPE_COUNT; ti++) {
                const shaddr_dtype type = shaddr_dtype(ti);
                shaddr_op op = SHADDR_OP_COUNT;
                for (shaddr_op o : ops)
                  if (op == SHADDR_OP_COUNT && !shaddr_op_supported(o, type)) op = o;
                REQUIRE(op != SHADDR_OP_COUNT, 5, "no op for type %d", ti);
                const size_t es = shaddr_dtype_size(type);
                // Bytes: just past a slot, a page + odd, a reduce unit +- an element, 3 units
                // and a bit, the largest that goes direct (rounded down to elements, at least
                // one past a slot).
                size_t largest = t.slot_max + 1, above = size_t(1) << 30;  // direct / not
                REQUIRE(!reduce_direct_wins(size, above, t), 9, "1 GiB goes direct");
                while (above - largest > 1) {
                  const size_t mid = largest + (above - largest) / 2;
                  (reduce_direct_wins(size, mid, t) ? largest : above) = mid;
                }
                for (size_t want : {t.slot_max + 1, size_t(4096 * 3 + 5), unit - 1, unit + 1,
                                    3 * unit + 8 * es + 1, size_t(8192 + 1), largest}) {
                  const size_t count = std::max(want / es, t.slot_max / es + 1);
                  REQUIRE(reduce_direct_wins(size, count * es, t), 6, "%zu B would not go direct", count * es);
                  for (int root = 0; root < size; root++)
                    for (bool in_place : {false, true})
                      if (int e = reduce_case(c, rank, size, op, type, count, root, in_place, false))
                        return e;
                }
                // An operand that starts at an odd address in its page, byte types only.
                if (es == 1) {
                  const size_t count = 3 * 4096 + 11;
                  std::vector<unsigned char> send(count + 4096), recv(count + 4096);
                  unsigned char *sp = send.data() + 4093 - reinterpret_cast<uintptr_t>(send.data()) % 4096;
                  make_input(type, sp, count, rank, 99);
                  REQUIRE(shaddr_reduce(c, sp, recv.data() + 1, count, type, op, 1) == 0, 7, "odd offset");
                  if (rank == 1) {
                    const std::vector<unsigned char> ref = [&] {
                      std::vector<unsigned char> acc(count), in(count);
                      make_input(type, acc.data(), count, 0, 99);
                      make_input(type, in.data(), count, 1, 99);
                      reduce_apply(op, type, acc.data(), in.data(), count);
                      return acc;
                    }();
                    REQUIRE(!std::memcmp(recv.data() + 1, ref.data(), count), 8, "odd offset: wrong result");
                  }
                }
              }
              return 0;
            }),
            0);
}

// The slots carry kSlotRounds rounds in flight: a writer runs ahead of a slow reader until the
// slot it would write is one the reader has not read yet, and waits there for the reader's
// close, or for the publication that says it is done (an Allreduce round closes nothing).
// Back-to-back small Bcasts from every root, Allreduces and Reduces, with a rank that dozes
// now and then; waiters sleep soon and only a ring wakes them (a lost ring fails the time
// limit), and a slot rewritten too early fails the data checks.
TEST_P(Coll, SlotRoundsAreReusedOnlyWhenEveryRankIsDone) {
  setenv("SHADDR_WAIT", "sleep", 1);
  setenv("SHADDR_WAIT_SLEEP_MAX", "30000000", 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int n : {2, 3, 5})
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                std::mt19937 rng(rank * 7 + 1);
                size_t bad;
                for (int it = 0; it < 600; it++) {
                  const int root = (it / 3) % size;  // several rounds in a row from one root
                  const size_t bytes = 1 + (it * 37) % 4000;
                  std::vector<unsigned char> a(bytes);
                  if (rank == root) fill(a.data(), bytes, root, it);
                  REQUIRE(shaddr_bcast(c, a.data(), bytes, root) == 0, 1, "bcast %zu", bytes);
                  REQUIRE(check(a.data(), bytes, root, it, &bad), 2, "bcast %d %zu: byte %zu", it, bytes, bad);
                  if (rank == it % size && rng() % 4 == 0) usleep(rng() % 300);  // a slow reader
                  if (it % 5 == 0) {
                    int64_t v[3] = {rank + it, 1, -rank}, r[3];
                    REQUIRE(shaddr_allreduce(c, v, r, 3, SHADDR_INT64, SHADDR_OP_SUM) == 0, 3, "allreduce");
                    REQUIRE(r[0] == int64_t(size) * it + size * (size - 1) / 2 && r[1] == size, 4, "allreduce %d", it);
                  }
                  if (it % 7 == 0) {
                    int32_t v = rank + it, r = 0;
                    REQUIRE(shaddr_reduce(c, &v, &r, 1, SHADDR_INT32, SHADDR_OP_MAX, root) == 0, 5, "reduce");
                    REQUIRE(rank != root || r == size - 1 + it, 6, "reduce %d", it);
                  }
                }
                return 0;
              }),
              0)
        << "n=" << n;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 25.0) << "a wait was not woken by a ring (it slept until SHADDR_WAIT_SLEEP_MAX)";
  unsetenv("SHADDR_WAIT");
  unsetenv("SHADDR_WAIT_SLEEP_MAX");
}

// v-layouts with a different, possibly zero, size per rank and gaps between blocks.
struct VLayout {
  std::vector<size_t> counts, displs;
  size_t total = 0;
  VLayout(int n, size_t base, uint64_t salt) {
    size_t at = 3;
    for (int r = 0; r < n; r++) {
      counts.push_back((base * (r + 1) + salt) % (base + 1) + (r % 3 == 1 ? 0 : 1) * (r == 1 ? 0 : 1));
      displs.push_back(at);
      at += counts.back() + (r & 1) * 5;
    }
    total = at;
  }
};

// The call ledger (shaddr_call_agree): equal tokens agree; a differing token or a forwarded
// call makes every rank that asks get -EXDEV, including ranks that find their peers already past
// the call (a forwarding rank runs ahead without waiting), and the ledger stays in step after.
TEST_P(Coll, CallLedgerAgreesOnlyOnEqualTokens) {
  for (int n : node_sizes()) {
    if (n < 2) continue;
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                for (int k = 0; k < 40; k++) {
                  // Rounds: 0 all equal; 1 the last rank's token differs; 2 the last rank
                  // forwards; 3 rank 0 forwards three calls in a row while the others ask on
                  // the first; then everyone agrees again.
                  const int kind = k % 4;
                  const uint64_t token = 0x1234 + k;
                  if (kind == 0) {
                    REQUIRE(shaddr_call_agree(c, token) == 0, 1, "round %d: equal tokens", k);
                  } else if (kind == 1) {
                    const int rc = shaddr_call_agree(c, rank == size - 1 ? token + 1 : token);
                    REQUIRE(rc == -EXDEV, 2, "round %d: a differing token gave %d", k, rc);
                  } else if (kind == 2) {
                    const int rc = shaddr_call_agree(
                        c, rank == size - 1 ? SHADDR_CALL_FORWARDED : token);
                    REQUIRE(rank == size - 1 ? rc == 0 : rc == -EXDEV, 3,
                            "round %d: a forwarded call gave %d", k, rc);
                  } else {
                    if (rank == 0) {
                      for (int f = 0; f < 3; f++)
                        REQUIRE(shaddr_call_agree(c, SHADDR_CALL_FORWARDED) == 0, 4, "forward");
                    } else {
                      REQUIRE(shaddr_call_agree(c, token) == -EXDEV, 5,
                              "round %d: the peer forwarded and ran ahead", k);
                      REQUIRE(shaddr_call_agree(c, SHADDR_CALL_FORWARDED) == 0, 6, "forward");
                      REQUIRE(shaddr_call_agree(c, SHADDR_CALL_FORWARDED) == 0, 7, "forward");
                    }
                  }
                  // Interleaved with collectives: the ledger is apart from their sequence.
                  REQUIRE(shaddr_barrier(c) == 0, 8, "barrier");
                }
                return 0;
              }),
              0)
        << "n=" << n;
  }
}

namespace {

enum class Kind {
  kBcast, kReduce, kAllreduce, kGather, kScatter, kAllgather, kAlltoall,
  kAllgatherv, kGatherv, kScatterv, kAlltoallv
};
constexpr Kind kKinds[] = {Kind::kBcast,      Kind::kReduce,    Kind::kAllreduce, Kind::kGather,
                           Kind::kScatter,    Kind::kAllgather, Kind::kAlltoall,
                           Kind::kAllgatherv, Kind::kGatherv,   Kind::kScatterv,  Kind::kAlltoallv};

// One collective of @kind on @bytes per rank (int64 elements for the reductions), root 1 % n:
// its return code, and in *ok whether this rank's output is right (rc 0) or untouched (rc != 0:
// still the 0xEE it was filled with).
int run_kind(shaddr_comm_t *c, Kind kind, size_t bytes, int rank, int size, uint64_t salt,
             bool *ok) {
  const int root = 1 % size;
  const size_t total = bytes * size;
  std::vector<unsigned char> send(total + 1), recv(total + 1, 0xEE);
  std::vector<size_t> counts(size, bytes), displs(size);
  for (int r = 0; r < size; r++) displs[r] = r * bytes;
  size_t bad = 0;
  int rc = 0;
  *ok = true;
  switch (kind) {
    case Kind::kBcast: {
      if (rank == root) fill(recv.data(), bytes, root, salt);
      rc = shaddr_bcast(c, recv.data(), bytes, root);
      *ok = rank == root || (rc ? recv[0] == 0xEE : check(recv.data(), bytes, root, salt, &bad));
      return rc;
    }
    case Kind::kReduce:
    case Kind::kAllreduce: {
      const size_t count = bytes / sizeof(int64_t);
      std::vector<int64_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; i++) in[i] = int64_t(salt + i) * (rank + 1);
      const int to = kind == Kind::kReduce ? root : -1;
      rc = to < 0 ? shaddr_allreduce(c, in.data(), out.data(), count, SHADDR_INT64, SHADDR_OP_SUM)
                  : shaddr_reduce(c, in.data(), out.data(), count, SHADDR_INT64, SHADDR_OP_SUM,
                                  to);
      if (to >= 0 && rank != to) return rc;
      for (size_t i = 0; i < count && *ok; i++)
        *ok = out[i] == (rc ? -1 : int64_t(salt + i) * size * (size + 1) / 2);
      return rc;
    }
    case Kind::kGather:
    case Kind::kGatherv:
    case Kind::kAllgather:
    case Kind::kAllgatherv: {
      fill(send.data(), bytes, rank, salt);
      const bool rooted = kind == Kind::kGather || kind == Kind::kGatherv;
      rc = kind == Kind::kGather    ? shaddr_gather(c, send.data(), bytes, recv.data(), root)
           : kind == Kind::kGatherv ? shaddr_gatherv(c, send.data(), bytes, recv.data(),
                                                     counts.data(), displs.data(), root)
           : kind == Kind::kAllgather
               ? shaddr_allgather(c, send.data(), bytes, recv.data())
               : shaddr_allgatherv(c, send.data(), bytes, recv.data(), counts.data(),
                                   displs.data());
      if (rooted && rank != root) return rc;
      for (int r = 0; r < size && *ok; r++)
        *ok = rc ? recv[r * bytes] == 0xEE : check(recv.data() + r * bytes, bytes, r, salt, &bad);
      return rc;
    }
    case Kind::kScatter:
    case Kind::kScatterv:
    case Kind::kAlltoall:
    case Kind::kAlltoallv: {
      for (int r = 0; r < size; r++) fill(send.data() + r * bytes, bytes, rank * size + r, salt);
      const bool rooted = kind == Kind::kScatter || kind == Kind::kScatterv;
      rc = kind == Kind::kScatter    ? shaddr_scatter(c, send.data(), bytes, recv.data(), root)
           : kind == Kind::kScatterv ? shaddr_scatterv(c, send.data(), counts.data(),
                                                       displs.data(), recv.data(), bytes, root)
           : kind == Kind::kAlltoall
               ? shaddr_alltoall(c, send.data(), bytes, recv.data())
               : shaddr_alltoallv(c, send.data(), counts.data(), displs.data(), recv.data(),
                                  counts.data(), displs.data());
      const int blocks = rooted ? 1 : size;
      for (int r = 0; r < blocks && *ok; r++) {
        const int from = rooted ? root : r;
        *ok = rc ? recv[r * bytes] == 0xEE
                 : check(recv.data() + r * bytes, bytes, from * size + rank, salt, &bad);
      }
      return rc;
    }
  }
  return -1;
}

// run_kind() for a call whose records differ: it must count neither as a failure nor as a
// call through the slots or the FIFO (it moved nothing); -1 if it did.
int run_differing(shaddr_comm_t *c, Kind kind, size_t bytes, int rank, int size, uint64_t token,
                  bool *ok) {
  shaddr_comm_stats before{}, after{};
  shaddr_comm_get_stats(c, &before);
  const int rc = run_kind(c, kind, bytes, rank, size, token, ok);
  shaddr_comm_get_stats(c, &after);
  return after.failures != before.failures || after.fifo_calls != before.fifo_calls ? -1 : rc;
}

// shaddr_call_announce: the collective that follows, each of the eleven, settles the agreement,
// a slot round after publishing its own slot. Equal tokens run it; a differing token, a rank
// that forwarded the call, or one that forwarded and ran ahead make every rank that announced
// get -EXDEV from the collective with its output untouched; and the rounds stay in step after
// (the next agreed call of every kind is right), on the slots and past them. @doze: a rank now
// and then late to its record. 0, or the failing REQUIRE's code.
int announced_calls(shaddr_comm_t *c, int rank, int size, const std::vector<size_t> &sizes,
                    bool doze) {
  uint64_t token = 0x5150;
  for (size_t bytes : sizes)
    for (Kind kind : kKinds)
      for (int scenario = 0; scenario < 4; scenario++) {
        const int k = static_cast<int>(kind);
        token++;
        // A rank late to its record now and then: its peers lie down waiting for it.
        if (doze && rank == static_cast<int>(token % size) && token % 3 == 0) usleep(token % 400);
        bool ok = false;
        int rc = 0;
        if (scenario == 0) {  // equal
          REQUIRE(shaddr_call_announce(c, token) == 0, 1, "announce");
          rc = run_kind(c, kind, bytes, rank, size, token, &ok);
          REQUIRE(rc == 0 && ok, 2, "kind %d %zu B: equal tokens: rc %d ok %d", k, bytes, rc, ok);
        } else if (scenario == 1) {  // the last rank's token differs
          REQUIRE(shaddr_call_announce(c, rank == size - 1 ? token + 1 : token) == 0, 3, "announce");
          rc = run_differing(c, kind, bytes, rank, size, token, &ok);
          REQUIRE(rc == -EXDEV && ok, 4, "kind %d %zu B: a differing token: rc %d ok %d", k, bytes, rc, ok);
        } else if (scenario == 2) {  // the last rank forwards
          if (rank == size - 1) {
            REQUIRE(shaddr_call_agree(c, SHADDR_CALL_FORWARDED) == 0, 5, "forward");
          } else {
            REQUIRE(shaddr_call_announce(c, token) == 0, 6, "announce");
            rc = run_differing(c, kind, bytes, rank, size, token, &ok);
            REQUIRE(rc == -EXDEV && ok, 7, "kind %d %zu B: a rank forwarded: rc %d ok %d", k, bytes, rc, ok);
          }
        } else {  // rank 0 forwards three calls and runs ahead
          if (rank == 0) {
            for (int f = 0; f < 3; f++)
              REQUIRE(shaddr_call_agree(c, SHADDR_CALL_FORWARDED) == 0, 8, "forward");
          } else {
            REQUIRE(shaddr_call_announce(c, token) == 0, 9, "announce");
            rc = run_differing(c, kind, bytes, rank, size, token, &ok);
            REQUIRE(rc == -EXDEV && ok, 10, "kind %d %zu B: the peer ran ahead: rc %d ok %d", k, bytes, rc, ok);
            for (int f = 0; f < 2; f++)
              REQUIRE(shaddr_call_agree(c, SHADDR_CALL_FORWARDED) == 0, 11, "forward");
          }
        }
        // In step after: one agreed call of every kind, through the slots. The first one's
        // root (the Bcast's) is late: a reader must not take what it published for the call
        // that did not run for this call's data.
        for (Kind next : kKinds) {
          token++;
          REQUIRE(shaddr_call_announce(c, token) == 0, 12, "announce");
          if (next == kKinds[0] && rank == 1 % size) usleep(2000);
          rc = run_kind(c, next, 64, rank, size, token, &ok);
          REQUIRE(rc == 0 && ok, 13, "after kind %d %zu B scenario %d: kind %d: rc %d ok %d", k, bytes, scenario, static_cast<int>(next), rc, ok);
        }
      }
  // Calls whose records differed (-EXDEV) are the agreement's answer, not failures of the
  // collective.
  shaddr_comm_stats st{};
  REQUIRE(shaddr_comm_get_stats(c, &st) == 0 && st.failures == 0, 14,
          "%llu failures counted", (unsigned long long)st.failures);
  return 0;
}

}  // namespace

TEST_P(Coll, AnnouncedCallIsSettledByTheCollective) {
  for (int n : node_sizes()) {
    if (n < 2) continue;
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                return announced_calls(c, rank, size, {64, slot_max_default(size) + 8}, false);
              }),
              0)
        << "n=" << n;
  }
}

// The same calls with waiters that sleep soon and are woken only by a ring (as
// SleepingWaitersAreWokenByTheRankTheyWaitFor): a call's record defers its ring to the
// collective that follows (Comm::announce_pending), which must ring it on every way out -
// agreed, -EXDEV, nothing to move - or a peer asleep on the record sleeps 30 s.
TEST_P(Coll, SleepingWaitersAreWokenByTheLedgersRecords) {
  setenv("SHADDR_WAIT", "sleep", 1);
  setenv("SHADDR_WAIT_SLEEP_MAX", "30000000", 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int n : {2, 3})
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                return announced_calls(c, rank, size, {0, 64, slot_max_default(size) + 8}, true);
              }),
              0)
        << "n=" << n;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 25.0) << "a wait was not woken by a ring (it slept until SHADDR_WAIT_SLEEP_MAX)";
  unsetenv("SHADDR_WAIT");
  unsetenv("SHADDR_WAIT_SLEEP_MAX");
}

TEST_P(Coll, GatherScatter) {
  for (int n : node_sizes())
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                for (size_t bytes : sizes(size))
                  for (int root = 0; root < size; root++) {
                    const uint64_t salt = bytes + root * 7;
                    size_t bad;
                    // Gather (and in place at the root).
                    for (bool ip : {false, true}) {
                      std::vector<unsigned char> send(bytes + 1), recv(bytes * size + 1, 0xEE);
                      fill(send.data(), bytes, rank, salt);
                      const void *sb = send.data();
                      if (ip && rank == root) {
                        std::memcpy(recv.data() + rank * bytes, send.data(), bytes);
                        sb = SHADDR_IN_PLACE;
                      }
                      REQUIRE(shaddr_gather(c, sb, bytes, recv.data(), root) == 0, 1, "gather %zu", bytes);
                      if (rank == root)
                        for (int r = 0; r < size; r++)
                          REQUIRE(check(recv.data() + r * bytes, bytes, r, salt, &bad), 2, "gather %zu root %d block %d byte %zu", bytes, root, r, bad);
                    }
                    // Scatter: block r of the root goes to rank r.
                    for (bool ip : {false, true}) {
                      std::vector<unsigned char> send(bytes * size + 1), recv(bytes + 1, 0xEE);
                      if (rank == root)
                        for (int r = 0; r < size; r++) fill(send.data() + r * bytes, bytes, r, salt + 1);
                      void *rb = ip && rank == root ? const_cast<void *>(SHADDR_IN_PLACE) : recv.data();
                      REQUIRE(shaddr_scatter(c, send.data(), bytes, rb, root) == 0, 3, "scatter %zu", bytes);
                      if (rb != SHADDR_IN_PLACE)
                        REQUIRE(check(recv.data(), bytes, rank, salt + 1, &bad), 4, "scatter %zu root %d byte %zu", bytes, root, bad);
                    }
                  }
                // v-variants.
                for (size_t base : {size_t(0), size_t(5), size_t(4097), size_t(70000)})
                  for (int root = 0; root < size; root++) {
                    VLayout L(size, base, root);
                    size_t bad;
                    std::vector<unsigned char> send(L.counts[rank] + 1), recv(L.total + 1, 0xEE);
                    fill(send.data(), L.counts[rank], rank, base);
                    REQUIRE(shaddr_gatherv(c, send.data(), L.counts[rank], recv.data(), L.counts.data(), L.displs.data(), root) == 0, 5, "gatherv");
                    if (rank == root)
                      for (int r = 0; r < size; r++)
                        REQUIRE(check(recv.data() + L.displs[r], L.counts[r], r, base, &bad), 6, "gatherv block %d", r);
                    std::vector<unsigned char> all(L.total + 1), mine(L.counts[rank] + 1);
                    if (rank == root)
                      for (int r = 0; r < size; r++) fill(all.data() + L.displs[r], L.counts[r], r, base + 9);
                    REQUIRE(shaddr_scatterv(c, all.data(), L.counts.data(), L.displs.data(), mine.data(), L.counts[rank], root) == 0, 7, "scatterv");
                    REQUIRE(check(mine.data(), L.counts[rank], rank, base + 9, &bad), 8, "scatterv byte %zu", bad);
                  }
                return 0;
              }),
              0)
        << "n=" << n;
}

TEST_P(Coll, AllgatherAlltoall) {
  for (int n : node_sizes())
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                size_t bad;
                for (size_t bytes : sizes(size)) {
                  const uint64_t salt = bytes * 3;
                  if (int e = allgather_both_ways(c, rank, size, bytes, salt)) return e;
                  // Alltoall: block p of rank r carries salt (r, p).
                  if (bytes * size * size > (64u << 20)) continue;
                  for (bool ip : {false, true}) {
                    std::vector<unsigned char> send(bytes * size + 1), recv(bytes * size + 1, 0xEE);
                    for (int p = 0; p < size; p++) fill(send.data() + p * bytes, bytes, rank, salt + p);
                    const void *sb = send.data();
                    if (ip) {
                      std::memcpy(recv.data(), send.data(), bytes * size);
                      sb = SHADDR_IN_PLACE;
                    }
                    REQUIRE(shaddr_alltoall(c, sb, bytes, recv.data()) == 0, 3, "alltoall %zu", bytes);
                    for (int r = 0; r < size; r++)
                      REQUIRE(check(recv.data() + r * bytes, bytes, r, salt + rank, &bad), 4, "alltoall %zu in_place %d from %d byte %zu", bytes, ip, r, bad);
                  }
                }
                for (size_t base : {size_t(0), size_t(3), size_t(4096), size_t(100000)}) {
                  VLayout L(size, base, 1);
                  std::vector<unsigned char> send(L.counts[rank] + 1), recv(L.total + 1, 0xEE);
                  fill(send.data(), L.counts[rank], rank, base);
                  REQUIRE(shaddr_allgatherv(c, send.data(), L.counts[rank], recv.data(), L.counts.data(), L.displs.data()) == 0, 5, "allgatherv");
                  for (int r = 0; r < size; r++)
                    REQUIRE(check(recv.data() + L.displs[r], L.counts[r], r, base, &bad), 6, "allgatherv block %d", r);
                  // Alltoallv: rank r sends (r + p) % 3 * base / 2 + p bytes to p.
                  auto amount = [&](int from, int to) { return (from + to) % 3 * base / 2 + to; };
                  std::vector<size_t> sc(size), sd(size), rc(size), rd(size);
                  size_t st = 0, rt = 0;
                  for (int p = 0; p < size; p++) {
                    sc[p] = amount(rank, p); sd[p] = st; st += sc[p] + 1;
                    rc[p] = amount(p, rank); rd[p] = rt; rt += rc[p] + 2;
                  }
                  std::vector<unsigned char> s2(st + 1), r2(rt + 1, 0xEE);
                  for (int p = 0; p < size; p++) fill(s2.data() + sd[p], sc[p], rank, base * 5 + p);
                  REQUIRE(shaddr_alltoallv(c, s2.data(), sc.data(), sd.data(), r2.data(), rc.data(), rd.data()) == 0, 7, "alltoallv");
                  for (int p = 0; p < size; p++)
                    REQUIRE(check(r2.data() + rd[p], rc[p], p, base * 5 + rank, &bad), 8, "alltoallv from %d byte %zu", p, bad);
                }
                return 0;
              }),
              0)
        << "n=" << n;
}

// 10,000 mixed collectives with random sizes and roots (same sequence on every rank, from one
// seed): no corruption, no stall (the watchdog), and the mappings stay within the caps.
TEST_P(Coll, RandomSoak) {
  const int n = 4;
  const int iterations = std::getenv("SHADDR_SOAK_ITERATIONS") ? std::atoi(std::getenv("SHADDR_SOAK_ITERATIONS")) : 10000;
  EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
              std::mt19937_64 rng(20261122);
              std::vector<unsigned char> a, b;
              size_t bad;
              for (int it = 0; it < iterations; it++) {
                const int kind = rng() % 6, root = rng() % size;
                size_t bytes = rng() % 64 == 0 ? rng() % (3u << 20) : rng() % 20000;
                a.assign(bytes * size + 8, 0);
                b.assign(bytes * size + 8, 0xEE);
                switch (kind) {
                case 0:
                  if (rank == root) fill(a.data(), bytes, root, it);
                  REQUIRE(shaddr_bcast(c, a.data(), bytes, root) == 0, 1, "soak %d bcast", it);
                  REQUIRE(check(a.data(), bytes, root, it, &bad), 2, "soak %d bcast", it);
                  break;
                case 1: {
                  const size_t count = bytes / 4;
                  std::vector<int32_t> v(count + 1), r(count + 1);
                  for (size_t i = 0; i < count; i++) v[i] = static_cast<int32_t>(i * (rank + 1) + it);
                  REQUIRE(shaddr_allreduce(c, v.data(), r.data(), count, SHADDR_INT32, SHADDR_OP_SUM) == 0, 3, "soak %d allreduce", it);
                  for (size_t i = 0; i < count; i++)
                    REQUIRE(r[i] == static_cast<int32_t>(i * (size * (size + 1) / 2) + size * it), 4, "soak %d allreduce elem %zu", it, i);
                  break;
                }
                case 2:
                  fill(a.data(), bytes, rank, it);
                  REQUIRE(shaddr_allgather(c, a.data(), bytes, b.data()) == 0, 5, "soak %d allgather", it);
                  for (int r = 0; r < size; r++) REQUIRE(check(b.data() + r * bytes, bytes, r, it, &bad), 6, "soak %d allgather", it);
                  break;
                case 3:
                  bytes /= size;
                  for (int p = 0; p < size; p++) fill(a.data() + p * bytes, bytes, rank, it * 8 + p);
                  REQUIRE(shaddr_alltoall(c, a.data(), bytes, b.data()) == 0, 7, "soak %d alltoall", it);
                  for (int r = 0; r < size; r++) REQUIRE(check(b.data() + r * bytes, bytes, r, it * 8 + rank, &bad), 8, "soak %d alltoall", it);
                  break;
                case 4:
                  fill(a.data(), bytes, rank, it);
                  REQUIRE(shaddr_gather(c, a.data(), bytes, b.data(), root) == 0, 9, "soak %d gather", it);
                  if (rank == root)
                    for (int r = 0; r < size; r++) REQUIRE(check(b.data() + r * bytes, bytes, r, it, &bad), 10, "soak %d gather", it);
                  break;
                default:
                  REQUIRE(shaddr_barrier(c) == 0, 11, "soak %d barrier", it);
                }
              }
              shaddr_comm_stats st;
              REQUIRE(shaddr_comm_get_stats(c, &st) == 0, 12, "stats");
              REQUIRE(st.failures == 0, 13, "%llu failures", (unsigned long long)st.failures);
              // Caps: segment keeps <= 256 cached 2 MiB pieces per peer; window <= slots.
              REQUIRE(st.bytes_mapped <= uint64_t(size) * 256 * (2u << 20), 14, "%llu bytes mapped", (unsigned long long)st.bytes_mapped);
              return 0;
            }),
            0);
}

// Waits that sleep (SHADDR_WAIT=sleep: after 16 pauses and 2 yields, as on an oversubscribed
// node) must be woken by the rank they wait for: with a sleep cap of 30 s, one wait left without
// a ring would stall the mix below for 30 s. Every kind of wait: barrier, Bcast through the FIFO,
// the message counter and multi-stream, reductions through the slots and direct, Allgather,
// Alltoall, Gather; 5 ranks.
TEST_P(Coll, SleepingWaitersAreWokenByTheRankTheyWaitFor) {
  setenv("SHADDR_WAIT", "sleep", 1);
  setenv("SHADDR_WAIT_SLEEP_MAX", "30000000", 1);
  setenv("SHADDR_BCAST_STREAMS_MIN", "65536", 1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(on_ranks(5, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
              size_t bad;
              for (int it = 0; it < 40; it++) {
                for (size_t bytes : {size_t(8), size_t(5000), size_t(300000)}) {
                  const int root = it % size;
                  std::vector<unsigned char> a(bytes * size + 8, 0), b(bytes * size + 8, 0xEE);
                  if (rank == root) fill(a.data(), bytes, root, it);
                  REQUIRE(shaddr_bcast(c, a.data(), bytes, root) == 0, 1, "bcast %zu", bytes);
                  REQUIRE(check(a.data(), bytes, root, it, &bad), 2, "bcast %zu", bytes);
                  const size_t count = bytes / 8;
                  std::vector<int64_t> v(count + 1, rank + it), r(count + 1, 0);
                  REQUIRE(shaddr_allreduce(c, v.data(), r.data(), count, SHADDR_INT64, SHADDR_OP_SUM) == 0, 3, "allreduce");
                  for (size_t i = 0; i < count; i++)
                    REQUIRE(r[i] == int64_t(size) * it + size * (size - 1) / 2, 4, "allreduce %zu", i);
                  fill(a.data(), bytes, rank, it);
                  REQUIRE(shaddr_allgather(c, a.data(), bytes, b.data()) == 0, 5, "allgather");
                  for (int p = 0; p < size; p++) REQUIRE(check(b.data() + p * bytes, bytes, p, it, &bad), 6, "allgather");
                  REQUIRE(shaddr_alltoall(c, b.data(), bytes / size, a.data()) == 0, 7, "alltoall");
                  REQUIRE(shaddr_gather(c, b.data(), bytes / size, a.data(), root) == 0, 8, "gather");
                  REQUIRE(shaddr_barrier(c) == 0, 9, "barrier");
                }
              }
              return 0;
            }),
            0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 25.0) << "a wait was not woken by a ring (it slept until SHADDR_WAIT_SLEEP_MAX)";
  unsetenv("SHADDR_WAIT");
  unsetenv("SHADDR_WAIT_SLEEP_MAX");
  unsetenv("SHADDR_BCAST_STREAMS_MIN");
}

// The ring Allgather(v) (chosen on its own where the backend cannot map every peer at once:
// window at more ranks than slots + 1), forced: blocks above the slot size, v-layouts with gaps
// and empty blocks, in place, displacements that differ between ranks; a count mismatch fails
// on every rank without a hang and the communicator goes on. shm declines the ring (its
// exposures are copies): the same checks.
TEST_P(Coll, AllgathervRing) {
  setenv("SHADDR_ALLGATHER_RING", "1", 1);
  for (int n : node_sizes())
    EXPECT_EQ(on_ranks(n, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
                size_t bad;
                for (size_t bytes : sizes(size))
                  if (int e = allgather_both_ways(c, rank, size, bytes, bytes * 7 + 1)) return e;
                for (size_t base : {size_t(4096), size_t(100000), size_t(1) << 20}) {
                  for (bool ip : {false, true}) {
                    VLayout L(size, base, 5);
                    std::vector<unsigned char> send(L.counts[rank] + 1), recv(L.total + 1, 0xEE);
                    fill(send.data(), L.counts[rank], rank, base);
                    const void *sb = send.data();
                    if (ip) {
                      std::memcpy(recv.data() + L.displs[rank], send.data(), L.counts[rank]);
                      sb = SHADDR_IN_PLACE;
                    }
                    REQUIRE(shaddr_allgatherv(c, sb, L.counts[rank], recv.data(), L.counts.data(), L.displs.data()) == 0, 3, "ring allgatherv %zu", base);
                    for (int r = 0; r < size; r++)
                      REQUIRE(check(recv.data() + L.displs[r], L.counts[r], r, base, &bad), 4, "ring allgatherv %zu in_place %d block %d byte %zu", base, ip, r, bad);
                  }
                }
                // Each rank's own displacements (MPI lets them differ): rank r puts block i
                // at slot (i + r) % size, so a block is elsewhere in every buffer, and the
                // buffers' lengths are equal (a misplaced read would not be out of bounds);
                // at 1 MiB block 1 is empty (in some buffer the last: past its span's end).
                for (size_t unit : {size_t(100000), size_t(1) << 20}) {
                  std::vector<size_t> vc(size, unit), vd(size);
                  if (unit > 100000 && size > 1) vc[1] = 0;
                  for (int i = 0; i < size; i++) vd[i] = ((i + rank) % size) * (unit + 64);
                  std::vector<unsigned char> send(unit), recv(size * (unit + 64), 0xEE);
                  fill(send.data(), unit, rank, unit);
                  REQUIRE(shaddr_allgatherv(c, send.data(), vc[rank], recv.data(), vc.data(), vd.data()) == 0, 7, "ring allgatherv, own displacements, %zu", unit);
                  for (int r = 0; r < size; r++)
                    REQUIRE(check(recv.data() + vd[r], vc[r], r, unit, &bad), 8, "ring allgatherv, own displacements, %zu: block %d byte %zu", unit, r, bad);
                }
                if (size > 1) {
                  const size_t unit = 8192;
                  std::vector<size_t> vc(size, unit), vd(size);
                  for (int r = 0; r < size; r++) vd[r] = r * unit;
                  std::vector<char> sb(2 * unit), rb(size * unit);
                  int err = shaddr_allgatherv(c, sb.data(), rank == size - 1 ? 2 * unit : unit, rb.data(), vc.data(), vd.data());
                  REQUIRE(err == -EMSGSIZE, 5, "ring allgatherv size mismatch: %d", err);
                  REQUIRE(shaddr_barrier(c) == 0, 6, "barrier after the mismatch");
                }
                return 0;
              }),
              0);
  unsetenv("SHADDR_ALLGATHER_RING");
}

// The heap layer really served peers' heap buffers: every rank reads 1 MiB from each peer's
// malloc'd buffer (in the heap) and counts it in its heap statistics.
TEST_P(Coll, HeapTransfersHappen) {
  if (GetParam().rfind("heap+", 0) != 0) GTEST_SKIP() << "not a heap backend";
  EXPECT_EQ(on_ranks(3, GetParam(), [&](shaddr_comm_t *c, int rank, int size) {
              const size_t bytes = 1 << 20;
              std::vector<unsigned char> send(bytes), recv(bytes * size);
              fill(send.data(), bytes, rank, 77);
              REQUIRE(shaddr_allgather(c, send.data(), bytes, recv.data()) == 0, 1, "allgather");
              size_t bad;
              for (int r = 0; r < size; r++)
                REQUIRE(check(recv.data() + r * bytes, bytes, r, 77, &bad), 2, "block %d byte %zu", r, bad);
              const HeapStats *hs = from_handle(c)->backend().heap_stats();
              REQUIRE(hs && hs->peers == 2u && hs->bytes >= 2 * bytes, 3, "heap bytes %llu",
                      hs ? (unsigned long long)hs->bytes : 0ull);
              return 0;
            }),
            0);
}

// A Bcast of 1 MiB under the heap layer reads the root's buffer where it is, on a staging inner
// backend (shm) too, whose Bcast takes the FIFO at every size without the heap; and a root
// buffer outside the heap (mmap) still arrives, staged (shm) or read (cma).
TEST_P(Coll, HeapBcastReadsTheRootsBufferInPlace) {
  if (GetParam().rfind("heap+", 0) != 0) GTEST_SKIP() << "not a heap backend";
  EXPECT_EQ(on_ranks(3, GetParam(), [&](shaddr_comm_t *c, int rank, int) {
              const size_t bytes = 1 << 20;
              const int root = 1;
              std::vector<unsigned char> heap_buf(bytes);  // malloc'd: in the heap
              void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
              REQUIRE(m != MAP_FAILED, 1, "mmap");
              auto *outside = static_cast<unsigned char *>(m);
              shaddr_comm_stats before{}, after{};
              const HeapStats *hs = from_handle(c)->backend().heap_stats();
              REQUIRE(hs, 2, "no heap layer");
              const uint64_t heap_bytes = hs->bytes;
              REQUIRE(shaddr_comm_get_stats(c, &before) == 0, 3, "stats");
              for (unsigned char *buf : {heap_buf.data(), outside}) {
                if (rank == root) fill(buf, bytes, root, 91);
                else std::memset(buf, 0, bytes);
                REQUIRE(shaddr_bcast(c, buf, bytes, root) == 0, 4, "bcast");
                size_t bad;
                REQUIRE(check(buf, bytes, root, 91, &bad), 5, "byte %zu", bad);
              }
              REQUIRE(shaddr_comm_get_stats(c, &after) == 0, 6, "stats");
              REQUIRE(after.fifo_calls == before.fifo_calls, 7, "%llu Bcasts took the FIFO",
                      (unsigned long long)(after.fifo_calls - before.fifo_calls));
              // The heap buffer's bytes came from the root's heap (and the mmap'd one's not).
              if (rank != root)
                REQUIRE(hs->bytes - heap_bytes == bytes, 8, "heap bytes %llu",
                        (unsigned long long)(hs->bytes - heap_bytes));
              munmap(m, bytes);
              return 0;
            }),
            0);
}

INSTANTIATE_TEST_SUITE_P(Via, Coll, ::testing::ValuesIn(test_backends()), [](const auto &info) {
  std::string name = info.param;  // test names are letters, digits and '_'
  for (char &ch : name)
    if (ch == '+') ch = '_';
  return name;
});

// Bad input: documented errors and a message, never a crash (no communicator needed).
TEST(CollApi, BadInput) {
  EXPECT_EQ(shaddr_comm_create(nullptr, nullptr), -EINVAL);
  EXPECT_NE(std::string(shaddr_last_error()), "");
  shaddr_host h{0, 0, nullptr, nullptr, nullptr};
  shaddr_comm_t *c = nullptr;
  EXPECT_EQ(shaddr_comm_create(&h, &c), -EINVAL);
  EXPECT_EQ(shaddr_comm_free(nullptr), 0);
  EXPECT_STREQ(shaddr_last_error(), "");  // a call that succeeds clears the last failure's text
  EXPECT_EQ(shaddr_comm_rank(nullptr), -EINVAL);
  EXPECT_EQ(shaddr_comm_size(nullptr), -EINVAL);
  EXPECT_STREQ(shaddr_comm_backend(nullptr), "");
  EXPECT_EQ(shaddr_comm_get_stats(nullptr, nullptr), -EINVAL);
  EXPECT_EQ(shaddr_barrier(nullptr), -EINVAL);
  char buf[8];
  EXPECT_EQ(shaddr_bcast(nullptr, buf, 8, 0), -EINVAL);
  EXPECT_EQ(shaddr_reduce(nullptr, buf, buf, 1, SHADDR_INT32, SHADDR_OP_SUM, 0), -EINVAL);
  EXPECT_EQ(shaddr_allreduce(nullptr, buf, buf, 1, SHADDR_INT32, SHADDR_OP_SUM), -EINVAL);
  EXPECT_EQ(shaddr_gather(nullptr, buf, 1, buf, 0), -EINVAL);
  EXPECT_EQ(shaddr_gatherv(nullptr, buf, 1, buf, nullptr, nullptr, 0), -EINVAL);
  EXPECT_EQ(shaddr_scatter(nullptr, buf, 1, buf, 0), -EINVAL);
  EXPECT_EQ(shaddr_scatterv(nullptr, buf, nullptr, nullptr, buf, 1, 0), -EINVAL);
  EXPECT_EQ(shaddr_allgather(nullptr, buf, 1, buf), -EINVAL);
  EXPECT_EQ(shaddr_allgatherv(nullptr, buf, 1, buf, nullptr, nullptr), -EINVAL);
  EXPECT_EQ(shaddr_alltoall(nullptr, buf, 1, buf), -EINVAL);
  EXPECT_EQ(shaddr_alltoallv(nullptr, buf, nullptr, nullptr, buf, nullptr, nullptr), -EINVAL);
  EXPECT_EQ(shaddr_bcast_segmented(nullptr, buf, 8, 0, 0, nullptr, nullptr), -EINVAL);
}

// Bad input on a live communicator: every rank sees the same error for shared arguments.
TEST(CollApi, BadInputOnComm) {
  EXPECT_EQ(on_ranks(2, test_backends()[0], [&](shaddr_comm_t *c, int rank, int) {
              char buf[64] = {};
              size_t counts[2] = {1, 1}, displs[2] = {0, 1};
              REQUIRE(shaddr_bcast(c, buf, 8, 2) == -EINVAL, 1, "root out of range");
              REQUIRE(shaddr_bcast(c, buf, 8, -1) == -EINVAL, 2, "negative root");
              REQUIRE(shaddr_reduce(c, buf, buf, 1, SHADDR_INT32, SHADDR_OP_SUM, 5) == -EINVAL, 3, "reduce root");
              REQUIRE(shaddr_allreduce(c, buf, buf, 1, SHADDR_DTYPE_COUNT, SHADDR_OP_SUM) == -EINVAL, 4, "bad type");
              REQUIRE(shaddr_allreduce(c, buf, buf, 1, SHADDR_INT32, SHADDR_OP_COUNT) == -EINVAL, 5, "bad op");
              REQUIRE(shaddr_allreduce(c, buf, buf, 1, SHADDR_FLOAT, SHADDR_OP_BAND) == -ENOTSUP, 6, "float band");
              REQUIRE(shaddr_allreduce(c, buf, buf, 1, SHADDR_C_DOUBLE_COMPLEX, SHADDR_OP_MAX) == -ENOTSUP, 7, "complex max");
              REQUIRE(shaddr_allreduce(c, buf, buf, SIZE_MAX / 2, SHADDR_INT64, SHADDR_OP_SUM) == -EOVERFLOW, 8, "overflow");
              REQUIRE(shaddr_gatherv(c, buf, 1, buf, nullptr, displs, rank) == -EINVAL, 9, "gatherv NULL counts at root");
              REQUIRE(shaddr_alltoall(c, buf, SIZE_MAX / 2, buf) == -EOVERFLOW, 10, "alltoall overflow");
              // A size mismatch found during the transfer fails on every rank, then all goes on.
              int err = shaddr_gatherv(c, buf, rank == 1 ? 2 : 1, buf + 8, counts, displs, 0);
              REQUIRE(err == -EMSGSIZE, 11, "gatherv size mismatch: %d", err);
              // The same for Allgatherv, through the slots (8 B) and direct reads (8 KiB).
              for (size_t unit : {size_t(8), size_t(8192)}) {
                std::vector<char> sb(3 * unit), rb(4 * unit);
                size_t vc[2] = {unit, unit}, vd[2] = {0, 2 * unit};
                err = shaddr_allgatherv(c, sb.data(), rank == 1 ? 2 * unit : unit, rb.data(), vc, vd);
                REQUIRE(err == -EMSGSIZE, 13, "allgatherv size mismatch (%zu B): %d", unit, err);
              }
              REQUIRE(shaddr_barrier(c) == 0, 12, "barrier after errors");
                            return 0;
            }),
            0);
}

}  // namespace

namespace {

// SHADDR_TUNING_FILE is read, the environment wins over it, and unknown lines are ignored.
TEST(CollTuning, FileAndEnvironment) {
  char path[] = "/tmp/shaddr-tuning-test.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "# comment\nSHADDR_CHUNK=12345\nSHADDR_SLOT_MAX=100\nOTHER=1\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  setenv("SHADDR_TUNING_FILE", path, 1);
  Tuning t = Tuning::from_env(2);
  EXPECT_EQ(t.chunk, 12345u);
  EXPECT_EQ(t.slot_max, 100u);
  setenv("SHADDR_CHUNK", "64k", 1);
  t = Tuning::from_env(2);
  EXPECT_EQ(t.chunk, 65536u);
  unsetenv("SHADDR_CHUNK");
  unsetenv("SHADDR_TUNING_FILE");
  unlink(path);
  t = Tuning::from_env(2);
  EXPECT_GE(t.chunk, 4096u);
  EXPECT_EQ(t.slot_max, 16384u);  // the default: 16 KiB / (n - 1), at least 4 KiB
  EXPECT_EQ(Tuning::from_env(3).slot_max, 8192u);
  EXPECT_EQ(Tuning::from_env(5).slot_max, 4096u);
  EXPECT_EQ(Tuning::from_env(64).slot_max, 4096u);
}

}  // namespace
