// SPDX-License-Identifier: MIT
// shaddr-copy-limit: the memory-copy limit that intra-node collectives are measured against.
//
// For each size S: single-core memcpy bandwidth (one thread copies S bytes from one buffer to
// another, repeatedly), and all-core copy bandwidth (T threads, each pinned to its own core,
// copy their own S-byte buffers at the same time; bandwidth = T*S / time of the slowest
// thread). Bandwidth counts bytes copied (each read once and written once). The source is
// rewritten between rounds outside the timed region, as shaddr-bench does with its buffers.
// Those two copy buffers their own core keeps in cache. A collective's data is not: the root
// has just written it on its core. So also cross-core copy bandwidth: before every copy one
// core writes the whole source and the other poisons its destination (untimed), then the
// second core copies the source (timed), as a receiver of a single-copy Bcast does.
// Output: a table on stdout, and `--json FILE`.
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "size_parse.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A size on the command line (size_parse.h); a bad one ends the program.
size_t parse_size(const std::string &s) {
  uint64_t v = 0;
  if (const auto err = shaddr::parse_size(s, &v); err != shaddr::SizeError::kNone) {
    std::fprintf(stderr, "shaddr-copy-limit: size %s: %s\n", s.c_str(),
                 shaddr::size_error_text(err));
    std::exit(2);
  }
  return static_cast<size_t>(v);
}

int reps_for(size_t size) {
  return static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / size, 5, 20000));
}

// Runs the calling thread on one CPU (modulo the CPUs there are).
void pin(unsigned cpu) {
  const unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % ncpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Time of `reps` copies of `size` bytes, on each of `threads` threads at once (the slowest).
double timed_copy(size_t size, int threads, int reps) {
  std::vector<std::vector<char>> src(threads), dst(threads);
  for (int t = 0; t < threads; t++) {
    src[t].assign(size, static_cast<char>(t + 1));
    dst[t].assign(size, 0);
  }
  std::vector<double> elapsed(threads, 0);
  std::barrier sync(threads);
  auto body = [&](int t) {
    pin(static_cast<unsigned>(t));
    char *s = src[t].data(), *d = dst[t].data();
    // Rounds of at least ~64 KiB of copying, so the clock's cost is negligible.
    const int per_round = static_cast<int>(std::max<size_t>(1, (size_t{64} << 10) / size));
    double total = 0;
    for (int r = 0; r < reps; r += per_round) {
      s[r % size] = static_cast<char>(r);  // new contents, outside the timed region
      sync.arrive_and_wait();
      const double t0 = now();
      for (int k = 0; k < per_round; k++) {
        std::memcpy(d, s, size);
        asm volatile("" ::"r"(d) : "memory");
      }
      total += now() - t0;
    }
    elapsed[t] = total / (static_cast<double>((reps + per_round - 1) / per_round) * per_round);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; t++) pool.emplace_back(body, t);
  body(0);
  for (auto &th : pool) th.join();
  return *std::max_element(elapsed.begin(), elapsed.end());
}

// Mean time of one copy of `size` bytes that core 0 has just written, made by core 1.
double timed_cross_copy(size_t size) {
  const int reps = static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / size, 5, 2000));
  std::vector<char> src(size), dst(size);
  std::barrier sync(2);
  double total = 0;
  std::thread writer([&] {
    pin(0);
    for (int r = 0; r < reps; r++) {
      std::memset(src.data(), r & 0x7f, size);
      sync.arrive_and_wait();  // written
      sync.arrive_and_wait();  // copied
    }
  });
  pin(1);
  for (int r = 0; r < reps; r++) {
    std::memset(dst.data(), 0xA5, size);
    sync.arrive_and_wait();
    const double t0 = now();
    std::memcpy(dst.data(), src.data(), size);
    asm volatile("" ::"r"(dst.data()) : "memory");
    total += now() - t0;
    sync.arrive_and_wait();
  }
  writer.join();
  return total / reps;
}

}  // namespace

int main(int argc, char **argv) {
  size_t lo = 8, hi = 64u << 20;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string json;
  static const option kLong[] = {{"sizes", required_argument, nullptr, 's'},
                                 {"threads", required_argument, nullptr, 't'},
                                 {"json", required_argument, nullptr, 'j'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  const char *const kUsage =
      "Usage: shaddr-copy-limit [--sizes MIN:MAX] [--threads N (default: all cores)]"
      " [--json FILE]\n";
  for (int c; (c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1;) {
    switch (c) {
      case 's': {
        const std::string v = optarg;
        const size_t colon = v.find(':');
        lo = parse_size(v.substr(0, colon));
        hi = colon == std::string::npos ? lo : parse_size(v.substr(colon + 1));
        break;
      }
      case 't': {
        uint64_t n = 0;
        if (shaddr::parse_size(optarg, &n, false) != shaddr::SizeError::kNone || n > 4096) {
          std::fprintf(stderr, "shaddr-copy-limit: --threads %s: not a count\n", optarg);
          return 2;
        }
        threads = static_cast<int>(n);
        break;
      }
      case 'j': json = optarg; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 2;
    }
  }
  if (optind < argc) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (lo == 0 || hi < lo || threads < 1) return 2;
  struct Row {
    size_t size;
    double one, all, cross;  // bytes per second
  };
  std::vector<Row> rows;
  std::printf("# copy limit: 1 core, %d cores, and across cores (GB/s = 1e9 bytes copied per second)\n",
              threads);
  std::printf("# %10s %12s %12s %12s\n", "bytes", "1core_GBps", "allcore_GBps", "cross_GBps");
  for (size_t s = lo; s <= hi; s *= 2) {
    const int reps = reps_for(s);
    const double t1 = timed_copy(s, 1, reps);
    const double tn = timed_copy(s, threads, reps);
    const double tx = timed_cross_copy(s);
    rows.push_back({s, s / t1, threads * s / tn, s / tx});
    std::printf("  %10zu %12.2f %12.2f %12.2f\n", s, rows.back().one / 1e9, rows.back().all / 1e9,
                rows.back().cross / 1e9);
    std::fflush(stdout);
    if (s > hi / 2) break;
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\n  \"tool\": \"shaddr-copy-limit\",\n  \"threads\": " << threads
      << ",\n  \"results\": [";
    for (size_t i = 0; i < rows.size(); i++)
      f << (i ? "," : "") << "\n    {\"bytes\": " << rows[i].size
        << ", \"one_core_Bps\": " << rows[i].one << ", \"all_core_Bps\": " << rows[i].all
        << ", \"cross_core_Bps\": " << rows[i].cross << "}";
    f << "\n  ]\n}\n";
    if (!f) return 1;
  }
  return 0;
}
