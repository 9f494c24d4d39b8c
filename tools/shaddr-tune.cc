// SPDX-License-Identifier: MIT
// shaddr-tune: fit the cost model that decides libshaddr's algorithm thresholds on this machine
// and backend, and write them as a tuning file (SHADDR_TUNING_FILE).
//
// For each choice libshaddr makes by size, both algorithms are timed over a range of sizes at
// the given node size; each is fitted to T(s) = alpha + s / beta (least squares, as seed 002's
// model), and the threshold is where the two lines cross:
//   SHADDR_BCAST_FIFO_MAX  Bcast FIFO (two copies, no barrier)  vs message counter (one copy)
//   SHADDR_SLOT_MAX        slots (two copies, no barrier)       vs direct reads (Allgather)
// Usage: shaddr-tune [-n RANKS] [-o FILE]   (SHADDR_BACKEND picks the backend as usual)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "shaddr/coll.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Fit {
  double alpha = 0, beta = 0;  // seconds, bytes per second
};

Fit fit(const std::vector<double> &s, const std::vector<double> &t) {
  const double n = static_cast<double>(s.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < s.size(); i++) {
    sx += s[i];
    sy += t[i];
    sxx += s[i] * s[i];
    sxy += s[i] * t[i];
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  Fit f;
  f.alpha = (sy - slope * sx) / n;
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

// Median time of one collective kind at `bytes`, under the given environment setting.
enum Kind { kBcast, kAllgather };

int measure(int ranks, Kind kind, const char *var, const char *value,
            const std::vector<size_t> &sizes, std::vector<double> *times) {
  setenv(var, value, 1);
  // Rank 0 writes its medians into a shared pipe-less place: a temporary file.
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
    for (size_t bytes : sizes) {
      std::vector<char> a(bytes * h.size + 1, 1), b(bytes * h.size + 1);
      std::vector<double> samples;
      const int iters = bytes > (256u << 10) ? 30 : 300;
      for (int i = -10; i < iters; i++) {
        shaddr_barrier(c);
        const double t0 = now();
        if (kind == kBcast) shaddr_bcast(c, a.data(), bytes, i & 1 ? 0 : h.size - 1);
        else shaddr_allgather(c, a.data(), bytes, b.data());
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
  unsetenv(var);
  FILE *in = std::fopen(path, "r");
  times->clear();
  for (double t; in && std::fscanf(in, "%lf", &t) == 1;) times->push_back(t);
  if (in) std::fclose(in);
  unlink(path);
  return rc || times->size() != sizes.size() ? -1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  int ranks = 2;
  const char *outpath = nullptr;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "-n") && i + 1 < argc) ranks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-o") && i + 1 < argc) outpath = argv[++i];
    else {
      std::fprintf(stderr, "usage: shaddr-tune [-n RANKS] [-o FILE]\n");
      return 2;
    }
  }
  if (ranks < 2) ranks = 2;
  std::string report;
  char line[512];

  // Bcast: FIFO (forced with a huge FIFO limit) against the message counter (limit 0).
  const std::vector<size_t> bsizes = {1024, 4096, 16384, 65536, 262144};
  std::vector<double> tf, tc;
  std::fprintf(stderr, "shaddr-tune: Bcast, %d ranks: FIFO vs message counter...\n", ranks);
  if (measure(ranks, kBcast, "SHADDR_BCAST_FIFO_MAX", "1073741824", bsizes, &tf) ||
      measure(ranks, kBcast, "SHADDR_BCAST_FIFO_MAX", "0", bsizes, &tc))
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
  if (measure(ranks, kAllgather, "SHADDR_SLOT_MAX", "4096", gsizes, &tf) ||
      measure(ranks, kAllgather, "SHADDR_SLOT_MAX", "0", gsizes, &tc))
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
