// SPDX-License-Identifier: MIT
// Micro mode. Each backend is measured in its own pair of forked ranks: rank 1 owns the memory,
// rank 0 (this process, so results need no shipping) maps and reads it.
#include "micro.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend.h"
#include "bootstrap.h"
#include "shaddr/coll.h"

namespace microbench {
namespace {

constexpr size_t kKiB = 1024, kMiB = kKiB * kKiB;
// Virtual range whose pieces the miss loop cycles through: more pieces than any backend
// caches (segment: 256 x 2 MiB), never touched, so a miss is the system-call path alone.
constexpr size_t kMissRegion = 1024 * kMiB;
constexpr size_t kMaxGranularity = 256 * kMiB;  // largest window slot

// An anonymous mapping, unmapped on scope exit.
class Mapping {
 public:
  explicit Mapping(size_t len, bool reserve_only) : len_(len) {
    const int extra = reserve_only ? MAP_NORESERVE : 0;
    void *p =
        mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
    p_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
    if (p_ && !reserve_only) std::memset(p_, 0x5a, len);  // resident, like a real buffer
  }
  ~Mapping() {
    if (p_) munmap(p_, len_);
  }
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;
  char *get() const { return p_; }

 private:
  char *p_ = nullptr;
  size_t len_;
};

using Factory = int (*)(const shaddr_host &, std::unique_ptr<shaddr::Backend> *, std::string *);

struct Named {
  const char *name;
  Factory make;
};
constexpr Named kBackends[] = {
    {"segment", shaddr::make_segment_backend},
    {"window", shaddr::make_window_backend},
    {"cma", shaddr::make_cma_backend},
    {"shm", shaddr::make_shm_backend},
};

std::vector<size_t> copy_sizes(bool quick) {
  if (quick) return {4 * kKiB, 64 * kKiB, 1 * kMiB};
  std::vector<size_t> v;
  for (size_t s = 4 * kKiB; s <= 64 * kMiB; s *= 4) v.push_back(s);
  return v;
}

// What the owner tells the reader.
struct Published {
  uint64_t copy_addr;    // the exposed copy buffer, as read()/map() want it
  uint64_t region_addr;  // the miss region, aligned to kMaxGranularity (0: none)
  int expose_err;
};

// Median GB/s of `fn` copying `bytes`, batched so each sample copies at least ~1 MiB.
template <typename F>
double bandwidth(size_t bytes, bool quick, F fn) {
  const size_t inner = std::max<size_t>(1, kMiB / bytes);
  const size_t budget = quick ? 4 * kMiB : 512 * kMiB;
  const size_t samples = std::clamp<size_t>(budget / (inner * bytes), quick ? 2 : 5, 50);
  std::vector<double> t;
  for (size_t s = 0; s <= samples; s++) {  // sample 0 warms up
    const double t0 = now();
    for (size_t i = 0; i < inner; i++)
      if (fn()) return -1;
    const double dt = now() - t0;
    if (s) t.push_back(dt);
  }
  return static_cast<double>(inner * bytes) / median(t) / 1e9;
}

// Median cost of one call of fn in ns, over short batches (~20 us each). A median of short
// batches, not a mean over one long loop: on a loaded machine (more runnable tasks than cores)
// a long loop measures this process's share of a CPU; a batch that fits in one time slice
// measures the call.
template <typename F>
double per_call_ns(bool quick, F fn) {
  double t0 = now();
  for (int i = 0; i < 10; i++)
    if (fn()) return -1;
  const double one = (now() - t0) / 10;
  const int batch = std::clamp(static_cast<int>(20e-6 / std::max(one, 1e-9)), 10, 10000);
  const int batches = quick ? 5 : 500;
  std::vector<double> t;
  for (int b = 0; b < batches; b++) {
    t0 = now();
    for (int i = 0; i < batch; i++)
      if (fn()) return -1;
    t.push_back((now() - t0) / batch * 1e9);
  }
  return median(t);
}

// Rank 0's side for one backend: every measurement, into r.
int measure_reader(shaddr::Backend &be, const Published &peer, const Options &o, BackendResult *r) {
  const int p = 1;
  const size_t max_copy = copy_sizes(o.quick).back();
  Mapping dst(max_copy, false), src(max_copy, false);
  if (!dst.get() || !src.get()) return -ENOMEM;

  // One small read: the fixed cost of a transfer (a system call on cma, a cache hit elsewhere).
  {
    if (int err = be.read(p, peer.copy_addr, dst.get(), 64)) return err;
    r->read_call_ns =
        per_call_ns(o.quick, [&] { return be.read(p, peer.copy_addr, dst.get(), 64); });
    if (r->read_call_ns < 0) return -EIO;
  }

  const shaddr::RegCacheStats *st = be.cache_stats(p);
  r->cached = st != nullptr;
  if (r->cached) {
    // Hit: the same page again and again.
    shaddr::RegCache::Ref ref;
    if (int err = be.map(p, peer.copy_addr, 4096, &ref)) return err;
    be.unmap(p, ref);
    const uint64_t h0 = st->hits, m0 = st->misses;
    r->hit_ns = per_call_ns(o.quick, [&] {
      if (int err = be.map(p, peer.copy_addr, 4096, &ref)) return err;
      be.unmap(p, ref);
      return 0;
    });
    if (r->hit_ns < 0) return -EIO;
    if (st->misses != m0 || st->hits == h0) r->reason += "hit loop missed; ";

    // Miss: find the mapping unit (the first offset from an aligned base that misses), then
    // cycle through more units than the cache holds, so LRU evicts one for every lookup.
    const uintptr_t base = peer.region_addr;
    if (int err = be.map(p, base, 4096, &ref)) return err;
    be.unmap(p, ref);
    size_t gran = 0;
    for (size_t g = 4096; g <= kMaxGranularity && !gran; g *= 2) {
      const uint64_t m0 = st->misses;
      if (int err = be.map(p, base + g, 4096, &ref)) return err;
      be.unmap(p, ref);
      if (st->misses != m0) gran = g;
    }
    r->granularity = gran;
    const size_t units = gran ? kMissRegion / gran : 0;
    if (units < 2) {
      r->reason += "mapping unit not found: no miss cost; ";
    } else {
      const size_t n = std::max<size_t>(units * (o.quick ? 1 : 4), o.quick ? 16 : 256);
      for (size_t i = 0; i < units; i++) {  // warm: the cache full of this region
        if (int err = be.map(p, base + i * gran, 4096, &ref)) return err;
        be.unmap(p, ref);
      }
      // Each lookup timed alone (a miss is microseconds: the clock's cost is noise) and
      // counted as a miss only if the cache says so; the median of the misses is the cost.
      std::vector<double> miss_t;
      for (size_t i = 0; i < n; i++) {
        const uint64_t m0 = st->misses;
        const double t0 = now();
        if (int err = be.map(p, base + (i % units) * gran, 4096, &ref)) return err;
        be.unmap(p, ref);
        const double dt = now() - t0;
        if (st->misses != m0) miss_t.push_back(dt * 1e9);
      }
      r->miss_fraction = static_cast<double>(miss_t.size()) / static_cast<double>(n);
      if (!miss_t.empty())
        r->miss_ns = median(miss_t);
      else
        r->reason += "the miss loop never missed; ";
    }
  }

  // Copy bandwidth, read from the peer against local memcpy, size by size.
  for (size_t s : copy_sizes(o.quick)) {
    CopyPoint c;
    c.bytes = s;
    c.memcpy_gb_per_s = bandwidth(s, o.quick, [&] {
      std::memcpy(dst.get(), src.get(), s);
      clobber();
      return 0;
    });
    int err = 0;
    c.gb_per_s = bandwidth(s, o.quick, [&] {
      err = be.read(p, peer.copy_addr, dst.get(), s);
      clobber();
      return err;
    });
    if (err) return err;
    c.ratio = c.gb_per_s / c.memcpy_gb_per_s;
    r->copy.push_back(c);
  }
  return 0;
}

BackendResult run_backend(const Named &b, const Options &o) {
  BackendResult r;
  r.name = b.name;
  const size_t max_copy = copy_sizes(o.quick).back();
  const int rc = shaddr::run_forked(2, [&](const shaddr_host &h) {
    std::unique_ptr<shaddr::Backend> be;
    std::string why;
    if (b.make(h, &be, &why) != 0) {
      if (h.rank == 0) r.reason = why;  // says what failed and the errno text
      return 0;                         // not available here: skipped, not a failure
    }
    // The owner's memory lives until the final barrier.
    std::unique_ptr<Mapping> copy_buf, region;
    Published mine{};
    if (h.rank == 1) {
      copy_buf = std::make_unique<Mapping>(max_copy, false);
      region = std::make_unique<Mapping>(kMissRegion + kMaxGranularity, true);
      if (!copy_buf->get() || !region->get()) {
        mine.expose_err = -ENOMEM;
      } else {
        mine.expose_err = be->expose(copy_buf->get(), max_copy, &mine.copy_addr);
        const uintptr_t a = reinterpret_cast<uintptr_t>(region->get());
        mine.region_addr = (a + kMaxGranularity - 1) / kMaxGranularity * kMaxGranularity;
      }
    }
    Published all[2];
    if (int err = h.allgather(&mine, all, sizeof(mine), h.ctx)) return -err;
    int err = 0;
    if (h.rank == 0) {
      r.available = true;
      if (all[1].expose_err) {
        r.reason += std::string("the owner could not expose its buffer: ") +
                    std::strerror(-all[1].expose_err) + "; ";
        err = all[1].expose_err;
      } else {
        err = measure_reader(*be, all[1], o, &r);
        if (err) r.reason += std::string("measurement failed: ") + std::strerror(-err) + "; ";
      }
    }
    h.barrier(h.ctx);
    if (h.rank == 1) be->end_exposures();
    return err ? 1 : 0;
  });
  if (rc && r.reason.empty()) r.reason = "a rank failed (status " + std::to_string(rc) + ")";
  if (r.reason.size() > 2 && r.reason.compare(r.reason.size() - 2, 2, "; ") == 0)
    r.reason.resize(r.reason.size() - 2);  // notes are joined with "; "
  return r;
}

// Bcast FIFO throughput: the root streams `count` messages through shaddr_bcast with the FIFO
// forced for every size; the clock stops when the closing barrier shows every reader has them.
int run_fifo(int ranks, const Options &o, std::vector<FifoResult> *out, std::string *error) {
  const std::vector<size_t> sizes = {64, 1024, 8128, 64 * kKiB};  // 8128: one FIFO slot
  const char *old = std::getenv("SHADDR_BCAST_FIFO_MAX");
  const std::string saved = old ? old : "";
  setenv("SHADDR_BCAST_FIFO_MAX", "1G", 1);
  std::vector<FifoResult> res;
  const int rc = shaddr::run_forked(ranks, [&](const shaddr_host &h) {
    shaddr_comm_t *c = nullptr;
    if (shaddr_comm_create(&h, &c)) {
      if (h.rank == 0) *error = std::string("shaddr_comm_create: ") + shaddr_last_error();
      return 1;
    }
    std::vector<char> buf(sizes.back(), 1);
    int err = 0;
    for (size_t s : sizes) {
      // Warm up and calibrate: enough messages for ~0.3 s at the rate just seen (an emulated
      // or oversubscribed node is 100x slower than a quiet one), as rank 0 decides for all.
      const int probe = o.quick ? 10 : 100;
      double t0 = now();
      for (int i = 0; i < probe && !err; i++) err = shaddr_bcast(c, buf.data(), s, 0);
      if (!err) err = shaddr_barrier(c);
      const double per = (now() - t0) / probe;
      long long n =
          o.quick ? 50 : std::clamp<long long>(static_cast<long long>(0.3 / per), 200, 20000);
      std::vector<long long> all(h.size);
      if (!err) err = h.allgather(&n, all.data(), sizeof(n), h.ctx);
      n = all[0];
      t0 = now();
      for (long long i = 0; i < n && !err; i++) err = shaddr_bcast(c, buf.data(), s, 0);
      if (!err) err = shaddr_barrier(c);
      const double t = now() - t0;
      if (err) break;
      if (h.rank == 0) {
        FifoResult f;
        f.ranks = h.size;
        f.bytes = s;
        f.messages = n;
        f.msgs_per_s = static_cast<double>(n) / t;
        f.gb_per_s = static_cast<double>(n) * static_cast<double>(s) / t / 1e9;
        f.backend = shaddr_comm_backend(c);
        res.push_back(f);
      }
    }
    if (err && h.rank == 0) *error = std::string("shaddr_bcast: ") + shaddr_last_error();
    shaddr_comm_free(c);
    return err ? 1 : 0;
  });
  if (old)
    setenv("SHADDR_BCAST_FIFO_MAX", saved.c_str(), 1);
  else
    unsetenv("SHADDR_BCAST_FIFO_MAX");
  out->insert(out->end(), res.begin(), res.end());
  if (rc && error->empty()) *error = "a rank failed (status " + std::to_string(rc) + ")";
  return rc;
}

}  // namespace

int run_micro(const Options &o, MicroResults *r) {
  for (const Named &b : kBackends) {
    if (!o.backends.empty() &&
        ("," + o.backends + ",").find(std::string(",") + b.name + ",") == std::string::npos)
      continue;
    std::fprintf(stderr, "shaddr-microbench: backend %s...\n", b.name);
    r->backends.push_back(run_backend(b, o));
  }
  int rc = 0;
  std::vector<int> rank_counts = {2};
  if (o.ranks > 2)
    rank_counts.push_back(o.ranks);
  else if (!o.quick)
    rank_counts.push_back(4);  // more ranks than cores: the backoff at work
  for (int n : rank_counts) {
    std::fprintf(stderr, "shaddr-microbench: Bcast FIFO, %d ranks...\n", n);
    if (run_fifo(n, o, &r->fifo, &r->fifo_error)) rc = 1;
  }
  for (const BackendResult &b : r->backends)
    if (b.available && !b.reason.empty()) rc = 1;  // measured, but something failed
  return rc;
}

void print_micro(const Options &o, const Machine &m, const MicroResults &r, FILE *out) {
  (void)o;
  std::fprintf(out, "shaddr-microbench on %s (%d CPUs; L1d %s, L2 %s, L3 %s), kernel %s\n\n",
               m.cpu.c_str(), m.cpus, human_size(m.l1d).c_str(), human_size(m.l2).c_str(),
               human_size(m.l3).c_str(), m.kernel.c_str());
  std::fprintf(out, "Registration cache and transfer cost (rank 0 reading rank 1)\n");
  std::fprintf(out, "  %-8s %10s %12s %11s %10s %14s\n", "backend", "hit ns", "miss ns",
               "miss share", "unit", "64 B read ns");
  for (const BackendResult &b : r.backends) {
    if (!b.available) {
      std::fprintf(out, "  %-8s skipped: %s\n", b.name.c_str(), b.reason.c_str());
      continue;
    }
    if (b.cached)
      std::fprintf(out, "  %-8s %10.1f %12.1f %10.0f%% %10s %14.1f\n", b.name.c_str(), b.hit_ns,
                   b.miss_ns, b.miss_fraction * 100, human_size(b.granularity).c_str(),
                   b.read_call_ns);
    else
      std::fprintf(out, "  %-8s %10s %12s %11s %10s %14.1f\n", b.name.c_str(), "-", "-", "-", "-",
                   b.read_call_ns);
    if (!b.reason.empty()) std::fprintf(out, "           note: %s\n", b.reason.c_str());
  }
  std::fprintf(out, "  (- : copy-only backend, no mappings to cache)\n\n");

  std::fprintf(out, "Copy bandwidth, read from a peer, GB/s (ratio to local memcpy)\n");
  std::fprintf(out, "  %-8s", "size");
  std::vector<const BackendResult *> ok;
  for (const BackendResult &b : r.backends)
    if (b.available && !b.copy.empty()) ok.push_back(&b);
  if (!ok.empty()) {
    std::fprintf(out, " %10s", "memcpy");
    for (const BackendResult *b : ok) std::fprintf(out, " %17s", b->name.c_str());
    std::fprintf(out, "\n");
    for (size_t i = 0; i < ok[0]->copy.size(); i++) {
      std::fprintf(out, "  %-8s %10.2f", human_size(ok[0]->copy[i].bytes).c_str(),
                   ok[0]->copy[i].memcpy_gb_per_s);
      for (const BackendResult *b : ok)
        if (i < b->copy.size())
          std::fprintf(out, " %9.2f (%4.2fx)", b->copy[i].gb_per_s, b->copy[i].ratio);
      std::fprintf(out, "\n");
    }
    std::fprintf(out,
                 "  (memcpy column: the first backend's run; each backend's ratio uses the "
                 "memcpy measured just before it)\n\n");
  } else {
    std::fprintf(out, "\n  no backend measured\n\n");
  }

  std::fprintf(out, "Bcast FIFO throughput (root 0 streaming; per reader)\n");
  std::fprintf(out, "  %5s %8s %9s %12s %8s  %s\n", "ranks", "size", "messages", "msgs/s", "GB/s",
               "backend");
  for (const FifoResult &f : r.fifo)
    std::fprintf(out, "  %5d %8s %9lld %12.0f %8.3f  %s\n", f.ranks, human_size(f.bytes).c_str(),
                 f.messages, f.msgs_per_s, f.gb_per_s, f.backend.c_str());
  if (!r.fifo_error.empty()) std::fprintf(out, "  error: %s\n", r.fifo_error.c_str());
}

void json_micro(const MicroResults &r, Json *j) {
  Json backends = Json::array();
  for (const BackendResult &b : r.backends) {
    Json o = {{"name", b.name}, {"available", b.available}, {"reason", b.reason}};
    if (b.available) {
      o["cached"] = b.cached;
      o["read_call_ns"] = number(b.read_call_ns);
      if (b.cached) {
        o["hit_ns"] = number(b.hit_ns);
        o["miss_ns"] = number(b.miss_ns);
        o["miss_fraction"] = number(b.miss_fraction);
        o["granularity"] = b.granularity;
      }
      Json copy = Json::array();
      for (const CopyPoint &c : b.copy)
        copy.push_back({{"bytes", c.bytes},
                        {"gb_per_s", number(c.gb_per_s)},
                        {"memcpy_gb_per_s", number(c.memcpy_gb_per_s)},
                        {"ratio", number(c.ratio)}});
      o["copy"] = std::move(copy);
    }
    backends.push_back(std::move(o));
  }
  (*j)["backends"] = std::move(backends);
  Json fifo = Json::array();
  for (const FifoResult &f : r.fifo)
    fifo.push_back({{"ranks", f.ranks},
                    {"bytes", f.bytes},
                    {"messages", f.messages},
                    {"msgs_per_s", number(f.msgs_per_s)},
                    {"gb_per_s", number(f.gb_per_s)},
                    {"backend", f.backend}});
  (*j)["fifo"] = std::move(fifo);
  (*j)["fifo_error"] = r.fifo_error;
}

}  // namespace microbench
