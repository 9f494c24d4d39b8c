// SPDX-License-Identifier: MIT
// shaddr-microbench: libshaddr's core costs and the Bcast segmentation table
// (docs/seed001-segmentation.md), measured on this machine. A benchmark, not a test: it asserts nothing about time.
#include <getopt.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.h"
#include "micro.h"
#include "seed001.h"
#include "small.h"
#include "size_parse.h"

namespace {

void usage(FILE *f) {
  std::fputs(
      "usage: shaddr-microbench [options]\n"
      "  (default)          registration-cache hit and miss cost, copy bandwidth against\n"
      "                     memcpy per backend (segment, window, cma, shm; unavailable ones are\n"
      "                     skipped with the reason), Bcast FIFO throughput at 2 and 4 ranks\n"
      "  --seed001          seed 001's Table 1: Bcast time vs message and segment size\n"
      "  --small            per-call latency of the small-message paths (Bcast, Allreduce,\n"
      "                     Reduce, 8 B-4 KiB; each call after a barrier; medians) and their\n"
      "                     back-to-back time; -n ranks (default 2), --iters calls per\n"
      "                     repetition (default 2000), --repeat repetitions (default 3)\n"
      "  --mode M           with --seed001: chunk, loop or both (default both)\n"
      "  --repeat R         with --seed001: passes over the table, median of them (default 3)\n"
      "  --iters N          with --seed001: iterations per cell (default by size, 20-500)\n"
      "  --max-message B    with --seed001: largest message row (bytes, K or M; default 8M)\n"
      "  --backends LIST    default mode: comma-separated subset of segment,window,cma,shm\n"
      "  -n RANKS           ranks (--seed001: default the online CPUs, at least 2; default\n"
      "                     mode: the larger FIFO run, default 4)\n"
      "  --quick            a few sizes and iterations (the smoke test); numbers meaningless\n"
      "  --json FILE        also write the results as JSON\n"
      "  --markdown FILE    with --seed001: also write the tables as Markdown (the doc's)\n"
      "  -h, --help         this text\n"
      "The backend of the Bcast runs is SHADDR_BACKEND's choice, as in any communicator.\n",
      f);
}

// Bytes, in the SHADDR_* sizes' grammar (size_parse.h); 0 when not a size.
size_t parse_size(const char *text) {
  uint64_t v = 0;
  return shaddr::parse_size(text, &v) == shaddr::SizeError::kNone ? static_cast<size_t>(v) : 0;
}

bool write_file(const char *path, const std::string &text) {
  FILE *f = std::fopen(path, "w");
  if (!f) {
    std::perror(path);
    return false;
  }
  const bool ok = std::fputs(text.c_str(), f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char **argv) {
  using namespace microbench;
  Options o;
  bool seed001 = false, small = false;
  std::string mode = "both";
  const char *json_path = nullptr, *md_path = nullptr;
  for (int i = 0; i < argc; i++) o.argv.push_back(argv[i]);
  enum { kSeed001 = 256, kSmall, kQuick, kMode, kBackends, kIters, kMaxMessage, kRepeat, kJson,
         kMarkdown };
  static const option kLong[] = {{"seed001", no_argument, nullptr, kSeed001},
                                 {"small", no_argument, nullptr, kSmall},
                                 {"quick", no_argument, nullptr, kQuick},
                                 {"mode", required_argument, nullptr, kMode},
                                 {"backends", required_argument, nullptr, kBackends},
                                 {"iters", required_argument, nullptr, kIters},
                                 {"max-message", required_argument, nullptr, kMaxMessage},
                                 {"repeat", required_argument, nullptr, kRepeat},
                                 {"json", required_argument, nullptr, kJson},
                                 {"markdown", required_argument, nullptr, kMarkdown},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  // A count: digits only, within int; -1 (refused below) when not one.
  auto count = [](const char *text) {
    uint64_t v = 0;
    return shaddr::parse_size(text, &v, false) == shaddr::SizeError::kNone && v <= INT_MAX
               ? static_cast<int>(v) : -1;
  };
  bool bad = false;
  for (int c; (c = getopt_long(argc, argv, "n:h", kLong, nullptr)) != -1;) {
    switch (c) {
      case kSeed001: seed001 = true; break;
      case kSmall: small = true; break;
      case kQuick: o.quick = true; break;
      case kMode: mode = optarg; break;
      case kBackends: o.backends = optarg; break;
      case 'n': bad |= (o.ranks = count(optarg)) < 0; break;
      case kIters: bad |= (o.iters = count(optarg)) < 0; break;
      case kMaxMessage: bad |= !(o.max_message = parse_size(optarg)); break;
      case kRepeat: bad |= (o.repeat = count(optarg)) < 0; break;
      case kJson: json_path = optarg; break;
      case kMarkdown: md_path = optarg; break;
      case 'h': usage(stdout); return 0;
      default: bad = true; break;
    }
  }
  if (bad || optind < argc) {
    usage(stderr);
    return 2;
  }
  if ((mode != "chunk" && mode != "loop" && mode != "both") || (o.ranks && o.ranks < 2) ||
      o.repeat < 1 || (md_path && !seed001)) {
    usage(stderr);
    return 2;
  }

  const Machine m = describe_machine();
  Json j = {{"tool", "shaddr-microbench"},
            {"mode", seed001 ? "seed001" : small ? "small" : "micro"},
            {"quick", o.quick},
            {"machine",
             {{"cpu", m.cpu},
              {"kernel", m.kernel},
              {"cpus", m.cpus},
              {"virtual_machine", m.hypervisor},
              {"loadavg_at_start", m.loadavg},
              {"l1d", m.l1d},
              {"l2", m.l2},
              {"l3", m.l3},
              {"default_chunk", m.default_chunk}}}};

  int rc = 0;
  std::string error;
  if (small) {
    std::vector<SmallResult> r;
    rc = run_small(o, &r, &error);
    print_small(m, r, stdout);
    json_small(r, &j);
  } else if (seed001) {
    std::vector<Seed001Table> tables;
    rc = run_seed001(o, m, mode, &tables, &error);
    print_seed001(m, tables, stdout);
    json_seed001(tables, &j);
    if (md_path && !rc) {
      std::string text;
      char *buf = nullptr;
      size_t len = 0;
      FILE *mem = open_memstream(&buf, &len);
      if (mem) {
        markdown_seed001(o, m, tables, mem);
        std::fclose(mem);
        text.assign(buf, len);
        std::free(buf);
      }
      if (!mem || !write_file(md_path, text)) rc = 1;
    }
  } else {
    MicroResults r;
    rc = run_micro(o, &r);
    print_micro(o, m, r, stdout);
    json_micro(r, &j);
  }
  j["error"] = error;
  if (!error.empty()) std::fprintf(stderr, "shaddr-microbench: %s\n", error.c_str());
  if (json_path && !write_file(json_path, j.dump(2) + "\n")) rc = 1;
  return rc ? 1 : 0;
}
