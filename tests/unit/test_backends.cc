// SPDX-License-Identifier: MIT
// Bootstrap and backends end to end across forked ranks. On the host (no module) auto picks
// cma; inside the VM (tests/kmod runs this binary there too) it picks segment.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend.h"
#include "bootstrap.h"

using namespace shaddr;

namespace {

class ScopedBackendEnv {
 public:
  explicit ScopedBackendEnv(const char *value) {
    if (value)
      setenv("SHADDR_BACKEND", value, 1);
    else
      unsetenv("SHADDR_BACKEND");
  }
  ~ScopedBackendEnv() { unsetenv("SHADDR_BACKEND"); }
};

bool module_present() { return access("/dev/shaddr", F_OK) == 0; }

unsigned char pattern(int rank, size_t i) { return static_cast<unsigned char>(rank * 31 + i * 7 + 1); }

// Every rank: a buffer of `size` bytes at an odd offset; read each peer's, write a marker into
// each peer's, check its own markers. Returns 0 or a distinct failure code.
int exchange(const shaddr_host &h, size_t size, std::string *backend_name) {
  std::unique_ptr<Backend> be;
  std::string reason;
  if (select_backend(h, &be, &reason)) return 10;
  if (backend_name) *backend_name = be->name();
  std::vector<unsigned char> storage(size + 64 + h.size);
  unsigned char *buf = storage.data() + 3;  // deliberately unaligned
  for (size_t i = 0; i < size; i++) buf[i] = pattern(h.rank, i);
  unsigned char *marks = buf + size;       // one marker byte per rank
  std::memset(marks, 0, h.size);
  uint64_t mine = reinterpret_cast<uintptr_t>(buf);
  std::vector<uint64_t> addrs(h.size);
  if (h.allgather(&mine, addrs.data(), sizeof(mine), h.ctx)) return 11;
  std::vector<unsigned char> got(size);
  for (int p = 0; p < h.size; p++) {
    if (int err = size ? be->read(p, addrs[p], got.data(), size) : 0) {
      std::fprintf(stderr, "rank %d: read of %zu bytes from rank %d: %s\n", h.rank, size, p,
                   std::strerror(-err));
      return 12;
    }
    for (size_t i = 0; i < size; i++)
      if (got[i] != pattern(p, i)) return 13;
    RegCache::Ref ref;
    int err = be->map(p, addrs[p], size ? size : 1, &ref);
    if (err == 0) {
      if (size && std::memcmp(ref.ptr, got.data(), size)) return 14;
      be->unmap(p, ref);
    } else if (err != -ENOTSUP && err != -ENOSPC) {  // copy-only, or more than one mapping
      return 15;
    }
    unsigned char mark = static_cast<unsigned char>(0x80 + h.rank);
    if (be->write(p, addrs[p] + size + h.rank, &mark, 1)) return 16;
  }
  if (h.barrier(h.ctx)) return 17;
  for (int p = 0; p < h.size; p++)
    if (marks[p] != 0x80 + p) return 18;
  if (h.barrier(h.ctx)) return 19;  // keep buffers alive until every peer is done
  return 0;
}

}  // namespace

TEST(Bootstrap, AllgatherAndBarrierAcrossForkedRanks) {
  for (int n = 1; n <= 5; n++) {
    int rc = run_forked(n, [n](const shaddr_host &h) {
      if (h.size != n) return 2;
      int v = 100 + h.rank;
      std::vector<int> all(n);
      for (int round = 0; round < 50; round++) {
        if (h.allgather(&v, all.data(), sizeof(v), h.ctx)) return 3;
        for (int r = 0; r < n; r++)
          if (all[r] != 100 + r) return 4;
        if (h.barrier(h.ctx)) return 5;
      }
      return 0;
    });
    EXPECT_EQ(rc, 0) << "n=" << n;
  }
}

TEST(Bootstrap, AFailingRankIsReported) {
  EXPECT_EQ(run_forked(3, [](const shaddr_host &h) { return h.rank == 2 ? 7 : 0; }), 7);
  EXPECT_EQ(run_forked(0, [](const shaddr_host &) { return 0; }), -EINVAL);
}

TEST(Backend, AutoSelectsTheBestAvailable) {
  ScopedBackendEnv env(nullptr);
  std::string name;
  ASSERT_EQ(run_forked(2, [&](const shaddr_host &h) {
              int rc = exchange(h, 4097, &name);
              if (!rc && h.rank == 0) {
                const char *want = module_present() ? "segment" : "cma";
                if (name != want) return 20;
              }
              return rc;
            }),
            0);
}

TEST(Backend, CmaEndToEnd) {
  ScopedBackendEnv env("cma");
  for (int n : {1, 2, 3, 4})
    for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4097}, (size_t{1} << 20) + 3})
      EXPECT_EQ(run_forked(n, [size](const shaddr_host &h) { return exchange(h, size, nullptr); }),
                0)
          << "n=" << n << " size=" << size;
}

TEST(Backend, SegmentEndToEndOrAClearReason) {
  ScopedBackendEnv env("segment");
  if (!module_present()) {
    std::string reason;
    int rc = run_forked(2, [&](const shaddr_host &h) {
      std::unique_ptr<Backend> be;
      int err = select_backend(h, &be, &reason);
      return err == -ENOENT && reason.find("failed on rank 0") != std::string::npos ? 0 : 1;
    });
    EXPECT_EQ(rc, 0);
    return;
  }
  for (int n : {1, 2, 3, 4})
    for (size_t size : {size_t{1}, size_t{4095}, size_t{4097}, (size_t{1} << 20) + 3,
                        (size_t{5} << 20) + 1})
      EXPECT_EQ(run_forked(n, [size](const shaddr_host &h) { return exchange(h, size, nullptr); }),
                0)
          << "n=" << n << " size=" << size;
}

TEST(Backend, SegmentCacheHitsOnRepeatedAccess) {
  if (!module_present()) GTEST_SKIP() << "needs the shaddr module (runs in the VM)";
  ScopedBackendEnv env("segment");
  EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
              std::unique_ptr<Backend> be;
              std::string reason;
              if (select_backend(h, &be, &reason)) return 1;
              std::vector<char> buf(1 << 16, static_cast<char>(h.rank));
              uint64_t mine = reinterpret_cast<uintptr_t>(buf.data()), addrs[2];
              if (h.allgather(&mine, addrs, sizeof(mine), h.ctx)) return 2;
              const int peer = 1 - h.rank;
              char c;
              for (int i = 0; i < 100; i++)
                if (be->read(peer, addrs[peer] + i * 64, &c, 1) || c != peer) return 3;
              const RegCacheStats *st = be->cache_stats(peer);
              if (!st || st->misses != 1 || st->hits != 99) return 4;
              return h.barrier(h.ctx) ? 5 : 0;
            }),
            0);
}

TEST(Backend, UnknownNamesAreRefused) {
  ScopedBackendEnv env("bogus");
  std::string reason;
  EXPECT_EQ(run_forked(1, [&](const shaddr_host &h) {
              std::unique_ptr<Backend> be;
              return select_backend(h, &be, &reason) == -EINVAL ? 0 : 1;
            }),
            0);
}

TEST(Backend, WindowEndToEndOrAClearReason) {
  ScopedBackendEnv env("window");
  if (!module_present()) {
    EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
                std::unique_ptr<Backend> be;
                std::string reason;
                int err = select_backend(h, &be, &reason);
                return err == -ENOENT && reason.find("failed on rank 0") != std::string::npos ? 0
                                                                                            : 1;
              }),
              0);
    return;
  }
  // Sizes past one 16 MiB block make read() walk several windows.
  for (int n : {1, 2, 3, 4})
    for (size_t size : {size_t{1}, size_t{4097}, (size_t{1} << 20) + 3, (size_t{33} << 20) + 1})
      EXPECT_EQ(run_forked(n, [size](const shaddr_host &h) { return exchange(h, size, nullptr); }),
                0)
          << "n=" << n << " size=" << size;
}

TEST(Backend, WindowSlotsAreCappedAndReused) {
  if (!module_present()) GTEST_SKIP() << "needs the shaddr module (runs in the VM)";
  ScopedBackendEnv env("window");
  setenv("SHADDR_WINDOW_SLOT", "1M", 1);
  EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
              std::unique_ptr<Backend> be;
              std::string reason;
              if (select_backend(h, &be, &reason)) return 1;
              // 8 blocks of 1 MiB, visited twice: more blocks than slots forces evictions.
              const size_t block = 1 << 20;
              std::vector<char> storage(9 * block, static_cast<char>(h.rank + 1));
              uint64_t mine = reinterpret_cast<uintptr_t>(storage.data()), addrs[2];
              if (h.allgather(&mine, addrs, sizeof(mine), h.ctx)) return 2;
              const int peer = 1 - h.rank;
              for (int pass = 0; pass < 2; pass++)
                for (size_t b = 0; b < 8; b++) {
                  char c = 0;
                  if (be->read(peer, addrs[peer] + b * block, &c, 1) || c != peer + 1) return 3;
                }
              // Two windows' worth cannot be one mapping: the caller is told to copy.
              const uintptr_t edge = (addrs[peer] + 2 * block) & ~uintptr_t(block - 1);
              RegCache::Ref ref;
              if (be->map(peer, edge - 1, 2, &ref) != -ENOSPC) return 4;
              char two[2];
              if (be->read(peer, edge - 1, two, 2) || two[0] != peer + 1 || two[1] != peer + 1)
                return 5;
              const RegCacheStats *st = be->cache_stats(peer);
              if (!st || st->entries > 3 || st->evictions == 0) return 6;
              return h.barrier(h.ctx) ? 7 : 0;
            }),
            0);
  unsetenv("SHADDR_WINDOW_SLOT");
}

// A peer frees its buffer and maps new memory at the same address: the reader's cached mapping
// must show the new pages (the module's coherence), never the freed ones.
int reuse_after_free(const shaddr_host &h) {
  std::unique_ptr<Backend> be;
  std::string reason;
  if (select_backend(h, &be, &reason)) return 1;
  const size_t len = 3 << 20;  // crosses 1 MiB window blocks and a 2 MiB attach granule
  void *buf = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) return 2;
  std::memset(buf, 'a', len);
  uint64_t mine = reinterpret_cast<uintptr_t>(buf), addrs[2];
  if (h.allgather(&mine, addrs, sizeof(mine), h.ctx)) return 3;
  const int peer = 1 - h.rank;
  const size_t probes[] = {0, (1 << 20) - 1, 1 << 20, (2 << 20) + 5, len - 1};
  int rc = 0;
  for (int round = 0; round < 2 && !rc; round++) {
    const char want = round ? 'b' : 'a';
    for (size_t off : probes) {
      char c = 0;
      RegCache::Ref ref;
      if (be->read(peer, addrs[peer] + off, &c, 1) || c != want) rc = 10 + round;
      if (!rc && be->map(peer, addrs[peer] + off, 1, &ref) == 0) {
        if (*static_cast<volatile char *>(ref.ptr) != want) rc = 20 + round;
        be->unmap(peer, ref);
      }
    }
    if (h.barrier(h.ctx)) return 4;
    if (round == 0) {  // free, then reuse the address with other contents
      if (munmap(buf, len)) return 5;
      void *again = mmap(buf, len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (again != buf) return 6;
      std::memset(buf, 'b', len);
    }
    if (h.barrier(h.ctx)) return 7;
  }
  const RegCacheStats *st = be->cache_stats(peer);
  if (!rc && (!st || st->hits == 0)) rc = 30;  // the second round must have hit the cache
  if (h.barrier(h.ctx)) return 8;
  munmap(buf, len);
  return rc;
}

TEST(Backend, MappingsFollowAFreedAndReusedBuffer) {
  if (!module_present()) GTEST_SKIP() << "needs the shaddr module (runs in the VM)";
  setenv("SHADDR_WINDOW_SLOT", "1M", 1);
  for (const char *name : {"segment", "window"}) {
    ScopedBackendEnv env(name);
    EXPECT_EQ(run_forked(2, reuse_after_free), 0) << name;
  }
  unsetenv("SHADDR_WINDOW_SLOT");
}

// shm: owners expose (a copy into staging); readers map or copy the exposure.
int shm_exchange(const shaddr_host &h, size_t size) {
  std::unique_ptr<Backend> be;
  std::string reason;
  if (select_backend(h, &be, &reason)) return 10;
  if (std::string(be->name()) != "shm" || !be->stages()) return 11;
  std::vector<unsigned char> buf(size + 1);
  for (size_t i = 0; i < size; i++) buf[i + 1] = pattern(h.rank, i);
  uintptr_t remote = 0;
  if (size && be->expose(buf.data() + 1, size, &remote)) return 12;
  std::memset(buf.data(), 0, buf.size());  // the exposure is a copy: later changes do not show
  uint64_t mine = remote, addrs[16];
  if (h.allgather(&mine, addrs, sizeof(mine), h.ctx)) return 13;
  std::vector<unsigned char> got(size);
  for (int p = 0; p < h.size; p++) {
    if (!size) continue;
    if (be->read(p, addrs[p], got.data(), size)) return 14;
    for (size_t i = 0; i < size; i++)
      if (got[i] != pattern(p, i)) return 15;
    RegCache::Ref ref;
    if (be->map(p, addrs[p], size, &ref) || std::memcmp(ref.ptr, got.data(), size)) return 16;
    be->unmap(p, ref);
    unsigned char c = 0;
    if (be->write(p, addrs[p], &c, 1) != -ENOTSUP) return 17;
  }
  if (h.barrier(h.ctx)) return 18;
  be->end_exposures();
  return 0;
}

TEST(Backend, ShmEndToEnd) {
  ScopedBackendEnv env("shm");
  for (int n : {1, 2, 3, 4})
    for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4097}, (size_t{1} << 20) + 3})
      EXPECT_EQ(run_forked(n, [size](const shaddr_host &h) { return shm_exchange(h, size); }), 0)
          << "n=" << n << " size=" << size;
}

TEST(Backend, ShmStagingLimitsAreEnforced) {
  ScopedBackendEnv env("shm");
  setenv("SHADDR_SHM_STAGING", "64K", 1);
  EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
              std::unique_ptr<Backend> be;
              std::string reason;
              if (select_backend(h, &be, &reason)) return 1;
              std::vector<char> big(64 << 10), half(30 << 10);
              uintptr_t at;
              if (be->expose(big.data(), big.size(), &at) != -ENOBUFS) return 2;
              if (be->expose(half.data(), half.size(), &at)) return 3;
              if (be->expose(half.data(), half.size(), &at)) return 4;
              if (be->expose(half.data(), half.size(), &at) != -ENOBUFS) return 5;
              be->end_exposures();  // the collective is over: the staging area is free again
              if (be->expose(half.data(), half.size(), &at)) return 6;
              RegCache::Ref ref;
              if (be->map(1 - h.rank, 60 << 10, 8 << 10, &ref) != -EFAULT) return 7;
              return h.barrier(h.ctx) ? 8 : 0;
            }),
            0);
  // Ranks that disagree on the staging size are refused on every rank.
  EXPECT_EQ(run_forked(2, [](const shaddr_host &h) {
              setenv("SHADDR_SHM_STAGING", h.rank ? "128K" : "64K", 1);
              std::unique_ptr<Backend> be;
              std::string reason;
              return select_backend(h, &be, &reason) == -EINVAL ? 0 : 1;
            }),
            0);
  unsetenv("SHADDR_SHM_STAGING");
}

TEST(Backend, BadPeerIsEINVAL) {
  ScopedBackendEnv env("cma");
  EXPECT_EQ(run_forked(1, [](const shaddr_host &h) {
              std::unique_ptr<Backend> be;
              std::string reason;
              if (select_backend(h, &be, &reason)) return 1;
              char c;
              return be->read(5, 0, &c, 1) == -EINVAL && be->read(-1, 0, &c, 1) == -EINVAL ? 0 : 2;
            }),
            0);
}
