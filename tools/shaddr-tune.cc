// SPDX-License-Identifier: MIT
// shaddr-tune: fit the cost model that decides libshaddr's algorithm thresholds on this machine
// and backend, and write them as a tuning file (SHADDR_TUNING_FILE).
//
// For each choice libshaddr makes by size, both algorithms are timed over a range of sizes at
// the given node size; each is fitted to T(s) = alpha + s / beta (least squares, the usual
// alpha-beta model), and the threshold is where the two lines cross:
//   SHADDR_BCAST_FIFO_MAX  Bcast FIFO (two copies, no barrier)  vs message counter (one copy)
//   SHADDR_SLOT_MAX        slots (two copies, no barrier)       vs direct reads (Allgather)
// With --model it also writes the cost model's lines of libshaddr on this backend (model.<who>.
// <coll>=alpha_us/GBps@ranks, plan_model.h): every collective's small path and single-copy
// path, forced, timed and fitted. shaddr_select() weighs them against the fallbacks' lines.
// Usage: shaddr-tune [-n RANKS] [--model] [-o FILE]   (SHADDR_BACKEND picks the backend)
#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "plan_model.h"
#include "size_parse.h"
#include "shaddr/coll.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Fit {
  double alpha = 0, beta = 0;  // seconds, bytes per second
};

// Least squares of the relative error (weights 1/t^2): sizes spanning three decades would
// otherwise leave alpha to the largest one's noise.
Fit fit(const std::vector<double> &s, const std::vector<double> &t) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < s.size(); i++) {
    const double w = t[i] > 0 ? 1.0 / (t[i] * t[i]) : 0;
    sw += w;
    sx += w * s[i];
    sy += w * t[i];
    sxx += w * s[i] * s[i];
    sxy += w * s[i] * t[i];
  }
  const double den = sw * sxx - sx * sx;
  const double slope = den > 0 ? (sw * sxy - sx * sy) / den : 0;
  Fit f;
  f.alpha = sw > 0 ? (sy - slope * sx) / sw : 0;
  f.beta = slope > 0 ? 1.0 / slope : 1e30;
  return f;
}

// Size where a (cheaper start) stops beating b; clamped to [lo, hi].
size_t crossover(const Fit &a, const Fit &b, size_t lo, size_t hi) {
  const double ia = 1.0 / a.beta, ib = 1.0 / b.beta;
  if (ia <= ib) return a.alpha <= b.alpha ? hi : lo;
  const double s = (b.alpha - a.alpha) / (ia - ib);
  if (s < static_cast<double>(lo)) return lo;
  if (s > static_cast<double>(hi)) return hi;
  return static_cast<size_t>(s);
}

// One call of collective kind on `bytes` (the message, or one rank's block).
int run_one(shaddr_comm_t *c, shaddr_coll kind, size_t bytes, int i, int size, char *a, char *b) {
  const int root = i & 1 ? 0 : size - 1;
  const size_t doubles = bytes / sizeof(double);
  switch (kind) {
    case SHADDR_COLL_BARRIER: return shaddr_barrier(c);
    case SHADDR_COLL_BCAST: return shaddr_bcast(c, a, bytes, root);
    case SHADDR_COLL_REDUCE:
      return shaddr_reduce(c, a, b, doubles, SHADDR_DOUBLE, SHADDR_OP_SUM, root);
    case SHADDR_COLL_ALLREDUCE:
      return shaddr_allreduce(c, a, b, doubles, SHADDR_DOUBLE, SHADDR_OP_SUM);
    case SHADDR_COLL_GATHER: return shaddr_gather(c, a, bytes, b, root);
    case SHADDR_COLL_SCATTER: return shaddr_scatter(c, a, bytes, b, root);
    case SHADDR_COLL_ALLGATHER: return shaddr_allgather(c, a, bytes, b);
    default: return shaddr_alltoall(c, a, bytes, b);
  }
}

// Median time (max over ranks) of one collective kind at each of `sizes`, with the
// environment variables `vars` set (they force one algorithm).
int measure(int ranks, shaddr_coll kind, const std::vector<std::pair<const char *, const char *>> &vars,
            const std::vector<size_t> &sizes, std::vector<double> *times, std::string *backend) {
  for (const auto &[var, value] : vars) setenv(var, value, 1);
  // Rank 0 writes its medians into a temporary file.
  char path[] = "/tmp/shaddr-tune.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  close(fd);
  const int rc = shaddr::run_forked(ranks, [&](const shaddr_host &h) {
    shaddr_comm_t *c = nullptr;
    if (shaddr_comm_create(&h, &c)) {
      std::fprintf(stderr, "shaddr-tune: %s\n", shaddr_last_error());
      return 1;
    }
    FILE *out = h.rank == 0 ? std::fopen(path, "w") : nullptr;
    if (out) std::fprintf(out, "%s\n", shaddr_comm_backend(c));
    for (size_t bytes : sizes) {
      // malloc'd, as an application's buffers: a preloaded shared heap serves the big ones.
      const size_t len = bytes * static_cast<size_t>(h.size) + 64;
      std::unique_ptr<char, decltype(&std::free)> a(static_cast<char *>(std::calloc(len, 1)),
                                                   &std::free);
      std::unique_ptr<char, decltype(&std::free)> b(static_cast<char *>(std::calloc(len, 1)),
                                                   &std::free);
      if (!a || !b) return 1;
      std::vector<double> samples;
      const int iters = bytes > (256u << 10) ? 20 : 200;
      for (int i = -10; i < iters; i++) {
        shaddr_barrier(c);
        const double t0 = now();
        if (run_one(c, kind, bytes, i, h.size, a.get(), b.get())) {
          std::fprintf(stderr, "shaddr-tune: %s of %zu B: %s\n", shaddr::coll_name(kind), bytes,
                       shaddr_last_error());
          return 1;
        }
        const double dt = now() - t0;
        double worst = 0;
        std::vector<double> all(h.size);
        h.allgather(&dt, all.data(), sizeof(double), h.ctx);
        for (double x : all) worst = std::max(worst, x);
        if (i >= 0) samples.push_back(worst);
      }
      std::sort(samples.begin(), samples.end());
      if (out) std::fprintf(out, "%.9g\n", samples[samples.size() / 2]);
    }
    if (out) std::fclose(out);
    shaddr_comm_free(c);
    return 0;
  });
  for (const auto &[var, value] : vars) unsetenv(var);
  FILE *in = std::fopen(path, "r");
  times->clear();
  char be[64] = "";
  if (in && std::fscanf(in, "%63s", be) == 1) *backend = be;
  for (double t; in && std::fscanf(in, "%lf", &t) == 1;) times->push_back(t);
  if (in) std::fclose(in);
  unlink(path);
  return rc || times->size() != sizes.size() ? -1 : 0;
}

// The cost model's name of libshaddr's single-copy side on `backend` (plan_model.h's Who): a
// heap+<inner> backend's buffers of 64 KiB and more are in the heap.
std::string direct_who(const std::string &backend, size_t smallest) {
  if (backend.rfind("heap+", 0) == 0) return smallest >= (64u << 10) ? "heap" : backend.substr(5);
  return backend;
}

std::string model_line(const std::string &who, shaddr_coll k, const Fit &f, int ranks) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "model.%s.%s=%.3f/%.3f@%d\n", who.c_str(), shaddr::coll_name(k),
                std::max(f.alpha * 1e6, 0.0), f.beta / 1e9, ranks);
  return buf;
}

}  // namespace

int main(int argc, char **argv) {
  int ranks = 2;
  bool model = false;
  const char *outpath = nullptr;
  static const option kLong[] = {{"model", no_argument, nullptr, 'm'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  const char *const kUsage =
      "usage: shaddr-tune [-n RANKS] [--model] [-o FILE]\n"
      "  -n RANKS   ranks of the measured communicator (default 2, at least 2)\n"
      "  --model    also fit the cost model's alpha/beta per algorithm\n"
      "  -o FILE    write the SHADDR_TUNING_FILE there (default: print it)\n";
  for (int c; (c = getopt_long(argc, argv, "n:o:h", kLong, nullptr)) != -1;) {
    uint64_t n = 0;
    switch (c) {
      case 'n':
        if (shaddr::parse_size(optarg, &n, false) != shaddr::SizeError::kNone || n > 4096) {
          std::fputs(kUsage, stderr);
          return 2;
        }
        ranks = static_cast<int>(n);
        break;
      case 'o': outpath = optarg; break;
      case 'm': model = true; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 2;
    }
  }
  if (optind < argc) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (ranks < 2) ranks = 2;
  std::string report;
  char line[512];

  // Bcast: FIFO (forced with a huge FIFO limit) against the message counter (limit 0).
  const std::vector<size_t> bsizes = {1024, 4096, 16384, 65536, 262144};
  std::vector<double> tf, tc;
  std::string be;
  std::fprintf(stderr, "shaddr-tune: Bcast, %d ranks: FIFO vs message counter...\n", ranks);
  if (measure(ranks, SHADDR_COLL_BCAST, {{"SHADDR_BCAST_FIFO_MAX", "1073741824"}}, bsizes, &tf,
              &be) ||
      measure(ranks, SHADDR_COLL_BCAST, {{"SHADDR_BCAST_FIFO_MAX", "0"}}, bsizes, &tc, &be))
    return 1;
  std::vector<double> s(bsizes.begin(), bsizes.end());
  const Fit ff = fit(s, tf), fc = fit(s, tc);
  const size_t fifo_max = crossover(ff, fc, 0, 1u << 20);
  std::snprintf(line, sizeof(line),
                "# Bcast FIFO:            alpha %.2f us, beta %.0f MB/s\n"
                "# Bcast message counter: alpha %.2f us, beta %.0f MB/s\n"
                "SHADDR_BCAST_FIFO_MAX=%zu\n",
                ff.alpha * 1e6, ff.beta / 1e6, fc.alpha * 1e6, fc.beta / 1e6, fifo_max);
  report += line;

  // Allgather: slots against direct reads (slots hold at most 4 KiB per rank).
  const std::vector<size_t> gsizes = {64, 256, 1024, 2048, 4096};
  std::fprintf(stderr, "shaddr-tune: Allgather, %d ranks: slots vs direct reads...\n", ranks);
  if (measure(ranks, SHADDR_COLL_ALLGATHER, {{"SHADDR_SLOT_MAX", "4096"}}, gsizes, &tf, &be) ||
      measure(ranks, SHADDR_COLL_ALLGATHER, {{"SHADDR_SLOT_MAX", "0"}}, gsizes, &tc, &be))
    return 1;
  s.assign(gsizes.begin(), gsizes.end());
  const Fit fs = fit(s, tf), fd = fit(s, tc);
  const size_t slot_max = crossover(fs, fd, 0, 4096);
  std::snprintf(line, sizeof(line),
                "# Allgather slots:       alpha %.2f us, beta %.0f MB/s\n"
                "# Allgather direct:      alpha %.2f us, beta %.0f MB/s\n"
                "SHADDR_SLOT_MAX=%zu\n",
                fs.alpha * 1e6, fs.beta / 1e6, fd.alpha * 1e6, fd.beta / 1e6, slot_max);
  report += line;

  if (model) {
    // The cost model's lines (plan_model.h): every collective's small paths (the slots up to
    // 2 KiB, Bcast's FIFO up to 256 KiB) and single-copy path (from 16 KiB; the heap's from
    // 64 KiB), each forced, fitted to one line, at this node size.
    report += "# cost model of libshaddr on this backend (shaddr_select; plan_model.h)\n";
    const std::vector<size_t> small = {8, 64, 256, 1024, 2048};
    const std::vector<size_t> fifo = {1024, 4096, 16384, 65536, 262144};
    const std::vector<size_t> large = {16384, 65536, 262144, 1u << 20, 4u << 20};
    const std::vector<size_t> heap_large = {65536, 262144, 1u << 20, 4u << 20};
    std::vector<double> t;
    std::fprintf(stderr, "shaddr-tune: cost model, %d ranks...\n", ranks);
    if (measure(ranks, SHADDR_COLL_BARRIER, {}, {0, 0}, &t, &be)) return 1;
    const Fit fb{t[0], 1e30};
    for (int k = SHADDR_COLL_BCAST; k < SHADDR_COLL_COUNT; k++) {
      const auto kind = static_cast<shaddr_coll>(k);
      std::fprintf(stderr, "shaddr-tune:   %s\n", shaddr::coll_name(kind));
      // Alltoall's slot carries all of a rank's blocks.
      std::vector<size_t> sm = small;
      if (kind == SHADDR_COLL_ALLTOALL)
        std::erase_if(sm, [&](size_t b) { return b * static_cast<size_t>(ranks) > 4096; });
      if (measure(ranks, kind, {{"SHADDR_SLOT_MAX", "4096"}}, sm, &t, &be)) return 1;
      report += model_line("slots", kind, fit(std::vector<double>(sm.begin(), sm.end()), t),
                           ranks);
      if (kind == SHADDR_COLL_BCAST) {  // the FIFO, past the slots
        if (measure(ranks, kind, {{"SHADDR_BCAST_FIFO_MAX", "1073741824"}, {"SHADDR_SLOT_MAX", "0"}},
                    fifo, &t, &be))
          return 1;
        report += model_line("fifo", kind, fit(std::vector<double>(fifo.begin(), fifo.end()), t),
                             ranks);
      }
      const bool heap = be.rfind("heap+", 0) == 0;
      const std::vector<size_t> &lg = heap ? heap_large : large;
      if (measure(ranks, kind, {{"SHADDR_BCAST_FIFO_MAX", "0"}, {"SHADDR_SLOT_MAX", "0"}}, lg, &t,
                  &be))
        return 1;
      report += model_line(direct_who(be, lg.front()), kind,
                           fit(std::vector<double>(lg.begin(), lg.end()), t), ranks);
    }
    report += model_line(direct_who(be, 0), SHADDR_COLL_BARRIER, fb, ranks);
  }

  const char *backend = std::getenv("SHADDR_BACKEND");
  std::string header = "# shaddr tuning file, written by shaddr-tune -n " +
                       std::to_string(ranks) + " (backend " +
                       (backend && *backend ? backend : "auto") +
                       "); model T(s) = alpha + s / beta per algorithm, threshold at the crossing\n";
  std::fputs((header + report).c_str(), stdout);
  if (outpath) {
    FILE *f = std::fopen(outpath, "w");
    if (!f) {
      std::perror(outpath);
      return 1;
    }
    std::fputs((header + report).c_str(), f);
    std::fclose(f);
    std::fprintf(stderr, "shaddr-tune: wrote %s (use SHADDR_TUNING_FILE=%s)\n", outpath, outpath);
  }
  return 0;
}
