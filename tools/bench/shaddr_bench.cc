// SPDX-License-Identifier: MIT
// shaddr-bench: MPI collective latency: every rank leaves the same start line, times its own
// calls, and the slowest rank's mean is reported.
//
// For each collective and size: `--warmup` untimed calls, then `--iters` timed calls, each
// preceded by a dissemination barrier of empty PMPI_Sendrecv messages (the same start line
// for every contender; see start_line())
// and timed alone; each rank averages its own times; the report gives the max over ranks (what
// an application waits for), the min and the mean. Between calls the send buffers get new contents (iteration-dependent) and the
// receive buffers are poisoned, outside the timed region, so nothing can be served from an
// earlier result and no buffer stays cache-hot unless `--cache-hot` asks for it. `--validate`
// checks every result against the expected values (`--corrupt-for-test` flips one received
// byte to prove that a wrong result is caught). Buffers come from malloc (page-aligned, as an
// application's arrays do: with libshaddr-heap preloaded those of 64 KiB and more are in the
// shared heap). `--churn` uses fresh memory (a new mmap, outside any heap) for
// every call: the registration-cache worst case, and it records what stays mapped (see
// MappingProbe) and the mapping system calls per call. `--first-call` times the first call at each
// size apart, before the warm-up.
//
// Sizes: Bcast/Reduce/Allreduce/pingpong: the message (vector) size; Allgather: the data each
// rank contributes; Alltoall: the block each rank sends to each peer. Reductions are MPI_SUM
// on MPI_INT32_T (size / 4 elements). `pingpong` (ranks 0 and 1, one-way time = round trip / 2)
// gives the point-to-point alpha/beta of the cost model.
#include <dlfcn.h>
#include <fcntl.h>
#include <getopt.h>
#include <mpi.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "shaddr_interpose.h"
#include "size_parse.h"

namespace {

enum class Coll { bcast, reduce, allreduce, allgather, alltoall, barrier, pingpong };
const char *const kCollNames[] = {"bcast",    "reduce",  "allreduce", "allgather",
                                  "alltoall", "barrier", "pingpong"};
constexpr int kNumColls = 7;

struct Options {
  std::vector<Coll> colls;
  size_t min_size = 8, max_size = 64u << 20;
  int iters = 0;  // 0: by size (see iters_for)
  int warmup = -1;
  bool validate = false, churn = false, first_call = false, cache_hot = false;
  bool corrupt = false;
  std::string json, csv, label;
};

[[noreturn]] void usage(int rc) {
  std::fputs(
      "Usage: shaddr-bench [options]   (under mpiexec)\n"
      "  --coll LIST       comma-separated: bcast,reduce,allreduce,allgather,alltoall,barrier,\n"
      "                    pingpong, or all (default: all but pingpong)\n"
      "  --sizes MIN:MAX   bytes, K/M/G/T (or KiB...) suffixes, doubling (default 8:64M)\n"
      "  --iters N         timed calls per size (default: 200 up to 1 MiB, fewer above)\n"
      "  --warmup N        untimed calls per size (default: iters / 10, at least 2)\n"
      "  --validate        check every result; exit 1 if any is wrong\n"
      "  --churn           fresh buffers (new mmap) for every call\n"
      "  --first-call      also time the first call at each size, before the warm-up\n"
      "  --cache-hot       fill buffers once and reuse them unchanged (cache-hot illusion)\n"
      "  --corrupt-for-test  flip one received byte on the last rank (proves --validate fails)\n"
      "  --label NAME      contender name written into the JSON\n"
      "  --json FILE       results as JSON      --csv FILE   results as CSV\n",
      rc ? stderr : stdout);
  std::exit(rc);
}

size_t parse_size(const std::string &s) {
  uint64_t v = 0;
  if (shaddr::parse_size(s, &v) != shaddr::SizeError::kNone) usage(2);
  return static_cast<size_t>(v);
}

Options parse(int argc, char **argv) {
  Options o;
  std::string colls = "bcast,reduce,allreduce,allgather,alltoall,barrier";
  enum { kColl = 256, kSizes, kIters, kWarmup, kValidate, kChurn, kFirstCall, kCacheHot,
         kCorrupt, kLabel, kJson, kCsv };
  static const option kLong[] = {
      {"coll", required_argument, nullptr, kColl},
      {"sizes", required_argument, nullptr, kSizes},
      {"iters", required_argument, nullptr, kIters},
      {"warmup", required_argument, nullptr, kWarmup},
      {"validate", no_argument, nullptr, kValidate},
      {"churn", no_argument, nullptr, kChurn},
      {"first-call", no_argument, nullptr, kFirstCall},
      {"cache-hot", no_argument, nullptr, kCacheHot},
      {"corrupt-for-test", no_argument, nullptr, kCorrupt},
      {"label", required_argument, nullptr, kLabel},
      {"json", required_argument, nullptr, kJson},
      {"csv", required_argument, nullptr, kCsv},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  // A count: digits only (size_parse.h without a suffix), within int.
  auto count = [](const char *text) {
    uint64_t v = 0;
    if (shaddr::parse_size(text, &v, false) != shaddr::SizeError::kNone || v > INT_MAX) usage(2);
    return static_cast<int>(v);
  };
  for (int c; (c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1;) {
    switch (c) {
      case kColl: colls = optarg; break;
      case kSizes: {
        const std::string v = optarg;
        const size_t colon = v.find(':');
        if (colon == std::string::npos) o.min_size = o.max_size = parse_size(v);
        else {
          o.min_size = parse_size(v.substr(0, colon));
          o.max_size = parse_size(v.substr(colon + 1));
        }
        if (o.min_size == 0 || o.max_size < o.min_size) usage(2);
        break;
      }
      case kIters: o.iters = count(optarg); break;
      case kWarmup: o.warmup = count(optarg); break;
      case kValidate: o.validate = true; break;
      case kChurn: o.churn = true; break;
      case kFirstCall: o.first_call = true; break;
      case kCacheHot: o.cache_hot = true; break;
      case kCorrupt: o.corrupt = true; break;
      case kLabel: o.label = optarg; break;
      case kJson: o.json = optarg; break;
      case kCsv: o.csv = optarg; break;
      case 'h': usage(0);
      default: usage(2);  // getopt_long named the unknown option
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "shaddr-bench: unexpected argument %s\n", argv[optind]);
    usage(2);
  }
  if (colls == "all") colls += ",pingpong";
  size_t p = 0;
  while (p <= colls.size()) {
    size_t q = colls.find(',', p);
    if (q == std::string::npos) q = colls.size();
    const std::string name = colls.substr(p, q - p);
    if (name == "all") {
      for (int c = 0; c < kNumColls - 1; c++) o.colls.push_back(static_cast<Coll>(c));
    } else if (!name.empty()) {
      int c = 0;
      while (c < kNumColls && name != kCollNames[c]) c++;
      if (c == kNumColls) { std::fprintf(stderr, "shaddr-bench: unknown collective %s\n", name.c_str()); usage(2); }
      o.colls.push_back(static_cast<Coll>(c));
    }
    p = q + 1;
  }
  if (o.iters < 0 || o.colls.empty()) usage(2);
  return o;
}

int iters_for(const Options &o, size_t size) {
  if (o.iters > 0) return o.iters;
  const size_t budget = 256u << 20;  // bytes per size and rank, roughly
  return static_cast<int>(std::clamp<size_t>(budget / std::max<size_t>(size, 1), 5, 200));
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The value of 64-bit word k of the data that rank src sends to rank dst in call `iter`.
inline uint64_t pattern(uint64_t src, uint64_t dst, uint64_t iter, uint64_t k) {
  uint64_t x = (src << 48) ^ (dst << 32) ^ (iter << 8) ^ (k * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  return x * 0xBF58476D1CE4E5B9ull;
}

void fill(void *buf, size_t bytes, int src, int dst, uint64_t iter) {
  auto *b = static_cast<unsigned char *>(buf);
  size_t k = 0;
  for (; (k + 1) * 8 <= bytes; k++) {
    const uint64_t v = pattern(src, dst, iter, k);
    std::memcpy(b + k * 8, &v, 8);
  }
  if (k * 8 < bytes) {
    const uint64_t v = pattern(src, dst, iter, k);
    std::memcpy(b + k * 8, &v, bytes - k * 8);
  }
}

// Returns the number of wrong bytes (at most counting up to the first mismatching words).
size_t check(const void *buf, size_t bytes, int src, int dst, uint64_t iter) {
  const auto *b = static_cast<const unsigned char *>(buf);
  size_t bad = 0;
  for (size_t k = 0; k * 8 < bytes; k++) {
    const uint64_t v = pattern(src, dst, iter, k);
    const size_t n = std::min<size_t>(8, bytes - k * 8);
    if (std::memcmp(b + k * 8, &v, n) != 0) bad++;
  }
  return bad;
}

// Reduction operands: small values so that the MPI_SUM of up to 2^15 ranks cannot overflow.
inline int32_t operand(int rank, uint64_t iter, size_t i) {
  return static_cast<int32_t>(pattern(rank, 0, iter, i) & 0xffff) - 0x8000;
}

// A buffer that is either kept (normal) or replaced by fresh memory every call (--churn).
// Kept buffers are malloc'd (so a preloaded malloc such as libshaddr-heap's serves them, as it
// serves an application); @fresh_mmap buffers are mapped anew, which no allocator reuses.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  ~Buffer() { release(); }
  void *get(size_t bytes, bool fresh, bool fresh_mmap) {
    bytes = std::max<size_t>(bytes, 8);
    if (p_ && !fresh && bytes <= len_) return p_;
    // Allocate the new buffer before releasing the old one, so the address changes as well.
    void *q = nullptr;
    const bool use_mmap = fresh && fresh_mmap;
    if (use_mmap) {
      q = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (q == MAP_FAILED) { std::perror("shaddr-bench: mmap"); MPI_Abort(MPI_COMM_WORLD, 3); }
    } else if (posix_memalign(&q, 4096, bytes) != 0) {
      std::fprintf(stderr, "shaddr-bench: posix_memalign of %zu bytes failed\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    release();
    p_ = q;
    len_ = bytes;
    mapped_ = use_mmap;
    return p_;
  }

 private:
  void release() {
    if (p_ && mapped_) munmap(p_, len_);
    else std::free(p_);
    p_ = nullptr;
  }
  void *p_ = nullptr;
  size_t len_ = 0;
  bool mapped_ = false;
};

// What the run holds mapped of its peers' memory, sampled in --churn mode after every call
// (outside the timed region): the interposer's registration-cache counters when it is preloaded
// (looked up with dlsym, so the benchmark runs unchanged without it) and, where the module is
// loaded, its node-wide counts of live windows, segment attachments and pinned pages (sysfs;
// read by one rank).
class MappingProbe {
 public:
  struct Sample {
    uint64_t misses = 0, bytes_mapped = 0;       // this process (interposer)
    long long open_files = -1, windows = -1, attachments = -1, pages_pinned = -1;  // node (module)
  };

  explicit MappingProbe(bool read_module) {
    get_ = reinterpret_cast<int (*)(shaddr_interpose_stats *)>(
        dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats"));
    module_ = read_module && access(kStatsDir, R_OK) == 0;
  }
  bool has_cache() const { return get_ != nullptr; }
  bool has_module() const { return module_; }

  Sample take() const {
    Sample s;
    shaddr_interpose_stats st{};
    if (get_ && get_(&st) == 0) {
      s.misses = st.cache_misses;
      s.bytes_mapped = st.bytes_mapped;
    }
    if (module_) {
      s.open_files = read_counter("open_files");
      s.windows = read_counter("windows");
      s.attachments = read_counter("attachments");
      s.pages_pinned = read_counter("pages_pinned");
    }
    return s;
  }

 private:
  static constexpr const char *kStatsDir = "/sys/class/misc/shaddr/stats";

  static long long read_counter(const char *name) {
    const std::string path = std::string(kStatsDir) + "/" + name;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[32] = "";
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n > 0 ? std::atoll(buf) : -1;
  }

  int (*get_)(shaddr_interpose_stats *) = nullptr;
  bool module_ = false;
};

struct Result {
  Coll coll;
  size_t bytes;
  int iters, warmup;
  double t_avg = 0, t_min = 0, t_max = 0;  // seconds: mean, min and max over ranks of per-rank means
  double first = -1;                        // max over ranks of the first call, or -1
  long long errors = 0;                     // wrong words over all ranks and calls
  // --churn only, -1 where unknown: registration-cache misses per timed call (max over ranks),
  // most bytes of peers' memory one rank had mapped, most open files of the device / live
  // windows / attachments / pinned pages on the node, all sampled after every call.
  double misses_per_call = -1;
  long long bytes_mapped_max = -1, open_files_max = -1, windows_max = -1, attachments_max = -1,
            pages_pinned_max = -1;
};

class Bench {
 public:
  Bench(const Options &o, int rank, int size)
      : o_(o), rank_(rank), n_(size), probe_(o.churn && rank == 0) {}

  // The start line before every call, the same for every contender: a dissemination barrier of
  // empty point-to-point messages (PMPI), whose ranks leave within one message's latency of
  // each other. Not MPI_Barrier: the interposer takes it to libshaddr, and even PMPI_Barrier
  // differs between contenders (MPICH's runs a Bcast of one byte on the node, which the
  // patched MPICH gives to libshaddr's slots); a barrier's exit is skewed (the leader of a
  // Bcast-based one leaves first), and a different skew before the call moved into its time:
  // the patched MPICH's 8 KiB Bcast measured 1.65 us on the selection's default and 1.04 with
  // every call below 1 GB forced to release_gather, where both ran release_gather.
  void start_line() const {
    for (int k = 1; k < n_; k <<= 1)
      PMPI_Sendrecv(nullptr, 0, MPI_BYTE, (rank_ + k) % n_, kStartTag, nullptr, 0, MPI_BYTE,
                    (rank_ - k + n_) % n_, kStartTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }

  Result run(Coll c, size_t bytes) {
    Result r{c, bytes, iters_for(o_, bytes), 0};
    r.warmup = o_.warmup >= 0 ? o_.warmup : std::max(2, r.iters / 10);
    long long errors = 0;
    double first = 0, sum = 0;
    const bool active = c != Coll::pingpong || rank_ < 2;
    uint64_t call = 0;
    const int total = (o_.first_call ? 1 : 0) + r.warmup + r.iters;
    // --churn: the most seen of each count, and the samples before and after the timed calls.
    MappingProbe::Sample most, timed_from, last;
    if (o_.churn) timed_from = last = probe_.take();
    for (int i = 0; i < total; i++, call++) {
      const bool fresh = o_.churn || (o_.first_call && i == 0);
      if (active) prepare(c, bytes, call, fresh || i == 0);
      start_line();
      double t = 0;
      if (active) {
        const double t0 = now();
        invoke(c, bytes);
        t = now() - t0;
        if (c == Coll::pingpong) t /= 2;
      }
      if (o_.first_call && i == 0) first = t;
      else if (i >= total - r.iters) sum += t;
      if (o_.validate && active) errors += verify(c, bytes, call);
      if (o_.churn) {
        last = probe_.take();
        if (i == total - r.iters - 1) timed_from = last;
        most.bytes_mapped = std::max(most.bytes_mapped, last.bytes_mapped);
        most.open_files = std::max(most.open_files, last.open_files);
        most.windows = std::max(most.windows, last.windows);
        most.attachments = std::max(most.attachments, last.attachments);
        most.pages_pinned = std::max(most.pages_pinned, last.pages_pinned);
      }
    }
    if (o_.churn) {
      most.misses = last.misses - timed_from.misses;  // during the timed calls
      aggregate_mappings(most, r);
    }
    // Aggregate the per-rank means (for pingpong only ranks 0 and 1 take part).
    const double mean = sum / r.iters;
    double agg[3];
    const int ncontrib = c == Coll::pingpong ? std::min(n_, 2) : n_;
    double in_sum = active ? mean : 0, in_min = active ? mean : 1e300, in_max = active ? mean : 0;
    MPI_Allreduce(&in_sum, &agg[0], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&in_min, &agg[1], 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&in_max, &agg[2], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    r.t_avg = agg[0] / ncontrib;
    r.t_min = agg[1];
    r.t_max = agg[2];
    if (o_.first_call) MPI_Allreduce(&first, &r.first, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&errors, &r.errors, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return r;
  }

 private:
  static constexpr int kRoot = 0;
  static constexpr int kStartTag = 0x5ad;  // start_line()'s messages

  // Max over ranks of what each rank saw; the module's counters come from rank 0 alone.
  void aggregate_mappings(const MappingProbe::Sample &most, Result &r) {
    const int cache = probe_.has_cache() ? 1 : 0;
    int all_cache = 0;
    MPI_Allreduce(&cache, &all_cache, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    const double per_call = static_cast<double>(most.misses) / r.iters;
    const long long mapped = static_cast<long long>(most.bytes_mapped);
    double max_per_call = 0;
    long long max_mapped = 0;
    long long module[4] = {most.open_files, most.windows, most.attachments, most.pages_pinned};
    MPI_Allreduce(&per_call, &max_per_call, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&mapped, &max_mapped, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(module, 4, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (all_cache) {
      r.misses_per_call = max_per_call;
      r.bytes_mapped_max = max_mapped;
    }
    r.open_files_max = module[0];
    r.windows_max = module[1];
    r.attachments_max = module[2];
    r.pages_pinned_max = module[3];
  }

  size_t send_bytes(Coll c, size_t b) const { return c == Coll::alltoall ? b * n_ : b; }
  size_t recv_bytes(Coll c, size_t b) const {
    return (c == Coll::allgather || c == Coll::alltoall) ? b * n_ : b;
  }
  int dst_key(Coll c) const { return c == Coll::bcast ? 0xffff : rank_; }

  void prepare(Coll c, size_t b, uint64_t call, bool fresh) {
    if (c == Coll::barrier) return;
    const bool refill = !o_.cache_hot || fresh;
    sbuf_p_ = sbuf_.get(send_bytes(c, b), fresh, o_.churn);
    rbuf_p_ = rbuf_.get(recv_bytes(c, b), fresh, o_.churn);
    const uint64_t it = o_.cache_hot ? 0 : call;
    if (!refill) return;
    switch (c) {
      case Coll::bcast:
        if (rank_ == kRoot) fill(rbuf_p_, b, kRoot, 0xffff, it);
        else std::memset(rbuf_p_, 0xA5, b);
        break;
      case Coll::reduce:
      case Coll::allreduce: {
        auto *v = static_cast<int32_t *>(sbuf_p_);
        for (size_t i = 0; i < b / 4; i++) v[i] = operand(rank_, it, i);
        std::memset(rbuf_p_, 0xA5, b);
        break;
      }
      case Coll::allgather:
        fill(sbuf_p_, b, rank_, 0xffff, it);
        std::memset(rbuf_p_, 0xA5, b * n_);
        break;
      case Coll::alltoall:
        for (int d = 0; d < n_; d++) fill(static_cast<char *>(sbuf_p_) + d * b, b, rank_, d, it);
        std::memset(rbuf_p_, 0xA5, b * n_);
        break;
      case Coll::pingpong:
        if (rank_ == 0) fill(sbuf_p_, b, 0, 1, it);
        std::memset(rbuf_p_, 0xA5, b);
        break;
      case Coll::barrier:
        break;
    }
  }

  void invoke(Coll c, size_t b) {
    const int count = static_cast<int>(b);
    switch (c) {
      case Coll::bcast:
        MPI_Bcast(rbuf_p_, count, MPI_BYTE, kRoot, MPI_COMM_WORLD);
        break;
      case Coll::reduce:
        MPI_Reduce(sbuf_p_, rbuf_p_, static_cast<int>(b / 4), MPI_INT32_T, MPI_SUM, kRoot,
                   MPI_COMM_WORLD);
        break;
      case Coll::allreduce:
        MPI_Allreduce(sbuf_p_, rbuf_p_, static_cast<int>(b / 4), MPI_INT32_T, MPI_SUM,
                      MPI_COMM_WORLD);
        break;
      case Coll::allgather:
        MPI_Allgather(sbuf_p_, count, MPI_BYTE, rbuf_p_, count, MPI_BYTE, MPI_COMM_WORLD);
        break;
      case Coll::alltoall:
        MPI_Alltoall(sbuf_p_, count, MPI_BYTE, rbuf_p_, count, MPI_BYTE, MPI_COMM_WORLD);
        break;
      case Coll::barrier:
        MPI_Barrier(MPI_COMM_WORLD);
        break;
      case Coll::pingpong:
        // Rank 0 sends sbuf and receives the echo into rbuf; rank 1 echoes what it received.
        if (rank_ == 0) {
          MPI_Send(sbuf_p_, count, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
          MPI_Recv(rbuf_p_, count, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(rbuf_p_, count, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(rbuf_p_, count, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
        break;
    }
  }

  long long verify(Coll c, size_t b, uint64_t call) {
    const uint64_t it = o_.cache_hot ? 0 : call;
    if (o_.corrupt && rank_ == n_ - 1 && c != Coll::barrier && b > 0) {
      auto *p = static_cast<unsigned char *>(rbuf_p_);
      p[b / 2] ^= 0x40;
    }
    long long bad = 0;
    switch (c) {
      case Coll::bcast:
        bad = check(rbuf_p_, b, kRoot, 0xffff, it);
        break;
      case Coll::reduce:
      case Coll::allreduce: {
        if (c == Coll::reduce && rank_ != kRoot) break;
        const auto *v = static_cast<const int32_t *>(rbuf_p_);
        for (size_t i = 0; i < b / 4; i++) {
          int32_t want = 0;
          for (int r = 0; r < n_; r++) want += operand(r, it, i);
          if (v[i] != want) bad++;
        }
        if (o_.corrupt && rank_ == n_ - 1 && b / 4 == 0) bad++;  // nothing reduced to corrupt
        break;
      }
      case Coll::allgather:
        for (int s = 0; s < n_; s++)
          bad += check(static_cast<const char *>(rbuf_p_) + s * b, b, s, 0xffff, it);
        break;
      case Coll::alltoall:
        for (int s = 0; s < n_; s++)
          bad += check(static_cast<const char *>(rbuf_p_) + s * b, b, s, rank_, it);
        break;
      case Coll::pingpong:
        bad = check(rbuf_p_, b, 0, 1, it);
        break;
      case Coll::barrier:
        if (o_.corrupt && rank_ == n_ - 1) bad = 1;  // no data: report the planted failure
        break;
    }
    return bad;
  }

  const Options &o_;
  int rank_, n_;
  Buffer sbuf_, rbuf_;
  void *sbuf_p_ = nullptr, *rbuf_p_ = nullptr;
  MappingProbe probe_;
};

std::string library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, static_cast<size_t>(len));
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options o = parse(argc, argv);
  const std::string mode = o.churn ? "churn" : o.cache_hot ? "cache-hot" : "varying";

  Bench bench(o, rank, size);
  std::vector<Result> results;
  if (rank == 0)
    std::printf("# shaddr-bench: %d ranks, %s, buffers %s%s\n# %-10s %10s %6s %12s %12s %12s%s%s\n",
                size, library_version().c_str(), mode.c_str(), o.validate ? ", validated" : "",
                "coll", "bytes", "iters", "max_us", "min_us", "avg_us",
                o.first_call ? "     first_us" : "", o.validate ? "  errors" : "");
  for (Coll c : o.colls) {
    if (c == Coll::pingpong && size < 2) continue;
    for (size_t b = o.min_size; b <= o.max_size; b *= 2) {
      if (c == Coll::barrier && b != o.min_size) break;  // one size: it moves no data
      const Result r = bench.run(c, c == Coll::barrier ? 0 : b);
      results.push_back(r);
      if (rank == 0) {
        std::printf("  %-10s %10zu %6d %12.3f %12.3f %12.3f", kCollNames[static_cast<int>(c)],
                    r.bytes, r.iters, r.t_max * 1e6, r.t_min * 1e6, r.t_avg * 1e6);
        if (o.first_call) std::printf(" %12.3f", r.first * 1e6);
        if (o.validate) std::printf("  %6lld%s", r.errors, r.errors ? " WRONG" : "");
        if (r.misses_per_call >= 0)
          std::printf("  misses/call %.2f, mapped <= %lld B", r.misses_per_call, r.bytes_mapped_max);
        if (r.windows_max >= 0)
          std::printf(", module: open files <= %lld, windows <= %lld, attachments <= %lld, "
                      "pinned <= %lld", r.open_files_max, r.windows_max, r.attachments_max,
                      r.pages_pinned_max);
        std::printf("\n");
        std::fflush(stdout);
      }
      if (b > o.max_size / 2) break;
    }
  }
  long long errors = 0;
  for (const Result &r : results) errors += r.errors;
  const char *verdict = !o.validate ? "off" : errors ? "failed" : "passed";

  if (rank == 0 && !o.json.empty()) {
    std::ofstream f(o.json);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    // Key order kept as written before (readers diff these files).
    using Json = nlohmann::ordered_json;
    auto num_or_null = [](auto v) { return v >= 0 ? Json(v) : Json(nullptr); };
    Json rows = Json::array();
    for (const Result &r : results) {
      Json row = {{"coll", kCollNames[static_cast<int>(r.coll)]},
                  {"bytes", r.bytes},
                  {"iters", r.iters},
                  {"warmup", r.warmup},
                  {"t_max_us", r.t_max * 1e6},
                  {"t_min_us", r.t_min * 1e6},
                  {"t_avg_us", r.t_avg * 1e6},
                  {"first_call_us", r.first >= 0 ? Json(r.first * 1e6) : Json(nullptr)},
                  {"errors", r.errors}};
      if (o.churn) {
        row["misses_per_call"] = num_or_null(r.misses_per_call);
        row["bytes_mapped_max"] = num_or_null(r.bytes_mapped_max);
        row["open_files_max"] = num_or_null(r.open_files_max);
        row["windows_max"] = num_or_null(r.windows_max);
        row["attachments_max"] = num_or_null(r.attachments_max);
        row["pages_pinned_max"] = num_or_null(r.pages_pinned_max);
      }
      rows.push_back(std::move(row));
    }
    const Json doc = {{"tool", "shaddr-bench"},
                      {"label", o.label},
                      {"mpi", library_version()},
                      {"host", host},
                      {"ranks", size},
                      {"mode", mode},
                      {"validation", verdict},
                      {"errors", errors},
                      {"results", std::move(rows)}};
    // Invalid UTF-8 (a host or MPI string) is replaced, not thrown over.
    f << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
    if (!f) std::fprintf(stderr, "shaddr-bench: cannot write %s\n", o.json.c_str());
  }
  if (rank == 0 && !o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "label,coll,bytes,iters,warmup,mode,t_max_us,t_min_us,t_avg_us,first_call_us,errors\n";
    for (const Result &r : results) {
      char line[512];
      std::snprintf(line, sizeof line, "%s,%s,%zu,%d,%d,%s,%.4f,%.4f,%.4f,%s,%lld\n",
                    o.label.c_str(), kCollNames[static_cast<int>(r.coll)], r.bytes, r.iters,
                    r.warmup, mode.c_str(), r.t_max * 1e6, r.t_min * 1e6, r.t_avg * 1e6,
                    r.first >= 0 ? std::to_string(r.first * 1e6).c_str() : "", r.errors);
      f << line;
    }
  }
  if (rank == 0 && o.validate)
    std::printf("# validation %s (%lld wrong words)\n", verdict, errors);
  MPI_Finalize();
  return errors ? 1 : 0;
}
