// SPDX-License-Identifier: MIT
#include "small.h"

#include <algorithm>
#include <cstring>

#include "bootstrap.h"
#include "shaddr/coll.h"

namespace microbench {
namespace {

enum class Kind { bcast, allreduce, reduce };
const char *const kNames[] = {"bcast", "allreduce", "reduce"};

int call(shaddr_comm_t *c, Kind k, char *buf, char *out, size_t bytes) {
  switch (k) {
    case Kind::bcast: return shaddr_bcast(c, buf, bytes, 0);
    case Kind::allreduce: return shaddr_allreduce(c, buf, out, bytes / 4, SHADDR_INT32, SHADDR_OP_SUM);
    case Kind::reduce: return shaddr_reduce(c, buf, out, bytes / 4, SHADDR_INT32, SHADDR_OP_SUM, 0);
  }
  return -1;
}

}  // namespace

// Each timed call is preceded by shaddr_barrier (every rank starts together, as in
// shaddr-bench) and the input is rewritten outside the timed region. Medians, not means: on a
// shared host a preempted call costs milliseconds.
int run_small(const Options &o, std::vector<SmallResult> *out, std::string *error) {
  const int ranks = o.ranks ? o.ranks : 2;
  const int reps = o.quick ? 2 : std::max(o.repeat, 1);
  const long long calls = o.quick ? 50 : (o.iters ? o.iters : 2000);
  std::vector<SmallResult> res;
  const int rc = shaddr::run_forked(ranks, [&](const shaddr_host &h) {
    shaddr_comm_t *c = nullptr;
    if (shaddr_comm_create(&h, &c)) {
      if (h.rank == 0) *error = std::string("shaddr_comm_create: ") + shaddr_last_error();
      return 1;
    }
    std::vector<char> buf(4096, 1), dst(4096);
    std::vector<double> t(static_cast<size_t>(calls)), per_rep;
    int err = 0;
    for (Kind k : {Kind::bcast, Kind::allreduce, Kind::reduce}) {
      for (size_t bytes = 8; bytes <= 4096 && !err; bytes *= 2) {
        per_rep.clear();
        double b2b = 0;
        for (int rep = 0; rep < reps && !err; rep++) {
          for (int i = 0; i < 20 && !err; i++) err = call(c, k, buf.data(), dst.data(), bytes);
          for (long long i = 0; i < calls && !err; i++) {
            std::memset(buf.data(), static_cast<int>(i + h.rank), bytes);
            err = shaddr_barrier(c);
            const double t0 = now();
            if (!err) err = call(c, k, buf.data(), dst.data(), bytes);
            t[static_cast<size_t>(i)] = now() - t0;
          }
          per_rep.push_back(median(t));
          if (!err) err = shaddr_barrier(c);
          const double t0 = now();
          for (long long i = 0; i < calls && !err; i++) err = call(c, k, buf.data(), dst.data(), bytes);
          if (!err) err = shaddr_barrier(c);
          const double b = (now() - t0) / static_cast<double>(calls);
          b2b = rep ? std::min(b2b, b) : b;
        }
        if (err) break;
        double mine = median(per_rep), all_max = 0;
        std::vector<double> all(h.size);
        if ((err = h.allgather(&mine, all.data(), sizeof mine, h.ctx))) break;
        all_max = *std::max_element(all.begin(), all.end());
        if (h.rank == 0) {
          SmallResult r;
          r.coll = kNames[static_cast<int>(k)];
          r.bytes = bytes;
          r.ranks = h.size;
          r.calls = calls;
          r.median_us = all_max * 1e6;
          r.back_to_back_us = b2b * 1e6;
          r.backend = shaddr_comm_backend(c);
          res.push_back(r);
        }
      }
    }
    if (err && h.rank == 0) *error = std::string("small: ") + shaddr_last_error();
    shaddr_comm_free(c);
    return err ? 1 : 0;
  });
  out->insert(out->end(), res.begin(), res.end());
  if (rc && error->empty()) *error = "a rank failed (status " + std::to_string(rc) + ")";
  return rc;
}

void print_small(const Machine &m, const std::vector<SmallResult> &r, FILE *f) {
  std::fprintf(f, "# small-message latency, %s, %d CPUs, load at start %s\n", m.cpu.c_str(),
               m.cpus, m.loadavg.c_str());
  std::fprintf(f, "# %-10s %6s %5s %8s %12s %14s\n", "coll", "bytes", "ranks", "backend",
               "median_us", "back2back_us");
  for (const SmallResult &s : r)
    std::fprintf(f, "  %-10s %6zu %5d %8s %12.3f %14.3f\n", s.coll.c_str(), s.bytes, s.ranks,
                 s.backend.c_str(), s.median_us, s.back_to_back_us);
}

void json_small(const std::vector<SmallResult> &r, Json *j) {
  Json out = Json::array();
  for (const SmallResult &s : r)
    out.push_back({{"coll", s.coll},
                   {"bytes", s.bytes},
                   {"ranks", s.ranks},
                   {"calls", s.calls},
                   {"median_us", number(s.median_us)},
                   {"back_to_back_us", number(s.back_to_back_us)},
                   {"backend", s.backend}});
  (*j)["small"] = std::move(out);
}

}  // namespace microbench
