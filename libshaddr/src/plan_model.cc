// SPDX-License-Identifier: MIT
// The cost model the plan is built from: its curves and points, the shipped ones
// (plan_model.inc), the calibration file and the tuning file's lines. See plan_model.h.
#include "plan_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "../heap/heap.h"
#include "hash.h"
#include "settings.h"

namespace shaddr {
namespace {

constexpr const char *kWhoNames[] = {"fifo", "slots", "heap",    "segment",     "window", "cma",
                                     "shm",  "mpich", "openmpi", "mpich-posix", "patch"};
static_assert(std::size(kWhoNames) == static_cast<size_t>(Who::kCount));

constexpr const char *kCollNames[] = {"barrier", "bcast",     "reduce",   "allreduce",
                                      "gather",  "scatter",   "allgather", "alltoall"};
static_assert(std::size(kCollNames) == SHADDR_COLL_COUNT);

// A heap+<inner> backend serves a peer's buffer from its heap file when the buffer is in the
// heap, which a preloaded libshaddr-heap.so makes true of malloc'd buffers of SHADDR_HEAP_MIN
// (16 KiB) and more. The model takes the heap's curve where the buffer peers read from is that
// default size or more (source_bytes()) and the inner backend's below. A constant, not the
// setting: each rank reads its own SHADDR_HEAP_MIN, and the answer must be the same on every
// rank.
constexpr size_t kHeapModelMin = heap::kDefaultMinSize;

// --- the shipped curves ---------------------------------------------------------------------
// Measured on the reference machine (docs/selection.md: AMD EPYC, 2 cores, Debian 12), 2
// ranks, by the commands written there. Each entry: who, collective, then up to kMaxLines
// (alpha us, GB/s) pairs.
struct Shipped {
  Who who;
  shaddr_coll coll;
  CostLine lines[kMaxLines];
};

#include "plan_model.inc"

bool parse_double(std::string_view s, double *out) {
  if (s.empty() || s.size() > 40) return false;
  char buf[48];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = 0;
  char *end = nullptr;
  const double v = std::strtod(buf, &end);
  if (end != buf + s.size() || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

double log2_at_least_1(int n) { return n > 2 ? std::log2(static_cast<double>(n)) : 1.0; }

// The buffer a peer reads from, for a call of @bytes (one block where the collective has
// blocks) at node size n: an Alltoall's and a Scatter's send buffer holds n blocks. Saturates
// (no such buffer exists): a wrapped product made the largest sizes look small to the model.
size_t source_bytes(shaddr_coll coll, size_t bytes, int n) {
  const bool n_blocks = coll == SHADDR_COLL_ALLTOALL || coll == SHADDR_COLL_SCATTER;
  const size_t ranks = n > 1 ? static_cast<size_t>(n) : 1;
  if (!n_blocks) return bytes;
  return bytes > SIZE_MAX / ranks ? SIZE_MAX : bytes * ranks;
}

// Blocks of the per-rank size a rank receives (or sends, for the roots' side) at node size n.
double blocks(shaddr_coll coll, int n) {
  switch (coll) {
    case SHADDR_COLL_GATHER:
    case SHADDR_COLL_SCATTER:
    case SHADDR_COLL_ALLGATHER:
    case SHADDR_COLL_ALLTOALL:
      return n > 1 ? n - 1 : 1;
    default:
      return 1;
  }
}

Who backend_who(BackendKind kind, bool heap, size_t bytes) {
  if (heap && bytes >= kHeapModelMin) return Who::kHeap;
  switch (kind) {
    case BackendKind::kSegment: return Who::kSegment;
    case BackendKind::kWindow: return Who::kWindow;
    case BackendKind::kShm: return Who::kShm;
    default: return Who::kCma;
  }
}

Who fallback_who(shaddr_fallback f) {
  switch (f) {
    case SHADDR_FALLBACK_MPICH: return Who::kMpich;
    case SHADDR_FALLBACK_OPENMPI: return Who::kOpenmpi;
    default: return Who::kMpichPosix;
  }
}

// The curve that times @algo of @coll on a backend of @kind.
Who algo_who(shaddr_algo algo, BackendKind kind, bool heap, size_t bytes) {
  if (algo == SHADDR_ALGO_FIFO) return Who::kFifo;
  if (algo == SHADDR_ALGO_SLOTS) return Who::kSlots;
  return backend_who(kind, heap, bytes);
}

// The size-independent part of a machine's identity: what a calibration measured depends on.
std::string machine_key() {
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') == std::string::npos ? 0 : line.find(':') + 1);
      break;
    }
  struct sysinfo si {};
  sysinfo(&si);
  const unsigned long long mem_gib =
      (static_cast<unsigned long long>(si.totalram) * si.mem_unit + (1ull << 29)) >> 30;
  struct utsname u {};
  uname(&u);
  const std::string all = cpu + "|" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + "|" +
                          std::to_string(mem_gib) + "|" + u.release;
  const uint64_t h = hash_bytes(all.data(), all.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// `<bytes>:<us>[@<ranks>] ...` (or `-`) into @curve's points; @bad(what) makes the error.
// @times: the points are a path's times (not a layer's cost, which can be higher at a small
// size than at a larger one).
template <typename Bad>
int parse_points(std::string_view rest, CostCurve *curve, bool times, Bad &&bad) {
  std::vector<CostPoint> pts;
  int ranks = 2;
  if (rest != "-") {
    while (!rest.empty()) {
      const size_t sp = rest.find(' ');
      std::string_view item = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
      if (item.empty()) continue;
      if (pts.size() == 256) return bad("too many points");
      const size_t at = item.find('@');
      int r = 2;
      if (at != std::string_view::npos) {
        double d;
        if (!parse_double(item.substr(at + 1), &d) || d < 1 || d > 1 << 20 || d != std::floor(d))
          return bad("bad @<ranks>");
        r = static_cast<int>(d);
        item = item.substr(0, at);
      }
      if (!pts.empty() && r != ranks) return bad("points of one line at different node sizes");
      ranks = r;
      const size_t colon = item.find(':');
      CostPoint p{};
      if (colon == std::string_view::npos || !parse_double(item.substr(0, colon), &p.bytes) ||
          !parse_double(item.substr(colon + 1), &p.us) || p.us <= 0 || p.bytes < 1)
        return bad("bad <bytes>:<us>");
      if (!pts.empty() && p.bytes <= pts.back().bytes) return bad("sizes not increasing");
      pts.push_back(p);
    }
    if (pts.size() < 2) return bad("fewer than two points");
    // A call of a path is not slower than a larger one of the same path: a point above a later
    // one is noise (the first size also pays the warm-up), which would flip the plan there.
    if (times)
      for (size_t i = pts.size() - 1; i-- > 0;) pts[i].us = std::min(pts[i].us, pts[i + 1].us);
  }
  curve->points = std::move(pts);
  curve->points_ranks = ranks;
  return 0;
}

}  // namespace

const char *coll_name(shaddr_coll c) {
  return static_cast<unsigned>(c) < std::size(kCollNames) ? kCollNames[c] : "?";
}

double CostCurve::time_us(shaddr_coll coll, size_t bytes, int ranks) const {
  const double x = static_cast<double>(bytes);
  if (points.size() >= 2 && x >= points.front().bytes && x <= points.back().bytes &&
      points_ranks > 0) {
    size_t i = 1;
    while (points[i].bytes < x) i++;
    const CostPoint &a = points[i - 1], &b = points[i];
    double t = b.us;
    if (x < b.bytes) {
      const double f = (std::log(std::max(x, 1.0)) - std::log(std::max(a.bytes, 1.0))) /
                       (std::log(b.bytes) - std::log(std::max(a.bytes, 1.0)));
      t = std::exp(std::log(a.us) + f * (std::log(b.us) - std::log(a.us)));
    }
    if (ranks == points_ranks) return t;
    const double sa = log2_at_least_1(ranks) / log2_at_least_1(points_ranks);
    const double sb = blocks(coll, ranks) / blocks(coll, points_ranks);
    return t * std::max(sa, sb);
  }
  double best = -1;
  for (const CostLine &l : lines) {
    if (l.gbps <= 0) continue;
    const double t = l.alpha_us + static_cast<double>(bytes) / (l.gbps * 1e3);
    if (best < 0 || t < best) best = t;
  }
  if (best < 0 || ref_ranks <= 0) return -1;
  if (ranks == ref_ranks) return best;
  // Scale both terms alike by what grows with the node (plan_model.h): the crossover of two curves
  // measured at the same size stays where it was.
  const double a = log2_at_least_1(ranks) / log2_at_least_1(ref_ranks);
  const double b = blocks(coll, ranks) / blocks(coll, ref_ranks);
  return best * std::max(a, b);
}

int CostModel::parse_rates(std::string_view raw, std::string *why, const char *source) {
  std::string_view rest = raw.substr(raw.find('=') + 1);
  if (rest == "-") {
    numa_ = LevelRates{};
    return 0;
  }
  double v[4];
  for (int i = 0; i < 4; i++) {
    const size_t end = i < 3 ? rest.find('/') : rest.size();
    const std::string field(rest.substr(0, end));
    char *stop = nullptr;
    v[i] = end == std::string_view::npos ? -1 : std::strtod(field.c_str(), &stop);
    if (field.empty() || !stop || *stop || !(v[i] > 0) || v[i] > 1e6) {
      *why = std::string(source) + ": `" + std::string(raw) +
             "`: expected level.numa=<one local>/<one remote>/<all local>/<all remote> (GB/s, "
             "each above 0) or =-";
      return -EINVAL;
    }
    rest.remove_prefix(i < 3 ? end + 1 : end);
  }
  numa_ = LevelRates{v[0], v[1], v[2], v[3]};
  return 0;
}

int CostModel::parse_line(const std::string &raw, std::string *why, const char *source) {
  std::string_view line(raw);
  if (line.substr(0, 11) == "level.numa=") return parse_rates(line, why, source);
  constexpr std::string_view prefix = "model.", point_prefix = "point.";
  const bool is_point = line.substr(0, point_prefix.size()) == point_prefix;
  if (!is_point && line.substr(0, prefix.size()) != prefix) return 1;
  line.remove_prefix(prefix.size());
  const size_t dot = line.find('.'), eq = line.find('=');
  auto bad = [&](const char *what) {
    *why = std::string(source) + ": `" + raw + "`: " + what +
           (is_point ? " (expected point.<who>.<collective>=<bytes>:<us>[@<ranks>] ... or =-)"
                     : " (expected model.<who>.<collective>=<alpha_us>/<GB/s>[@<ranks>] ... or "
                       "=-)");
    return -EINVAL;
  };
  if (dot == std::string_view::npos || eq == std::string_view::npos || eq < dot)
    return bad("not a model line");
  const std::string_view who_s = line.substr(0, dot), coll_s = line.substr(dot + 1, eq - dot - 1);
  int who = -1, coll = -1;
  for (size_t i = 0; i < std::size(kWhoNames); i++)
    if (who_s == kWhoNames[i]) who = static_cast<int>(i);
  for (size_t i = 0; i < std::size(kCollNames); i++)
    if (coll_s == kCollNames[i]) coll = static_cast<int>(i);
  if (who < 0) return bad("unknown <who>");
  if (coll < 0) return bad("unknown collective");
  std::string_view rest = line.substr(eq + 1);
  if (is_point) {
    curves_[who][coll].points_file = file_;
    return parse_points(rest, &curves_[who][coll], who != static_cast<int>(Who::kPatch), bad);
  }
  CostCurve curve{};
  if (curves_[who][coll].points_file == file_) {
    curve.points = std::move(curves_[who][coll].points);
    curve.points_ranks = curves_[who][coll].points_ranks;
    curve.points_file = file_;
  }
  if (rest == "-") {  // no curve: nothing to weigh (libshaddr runs)
    curves_[who][coll] = curve;
    return 0;
  }
  curve.ref_ranks = 2;
  int n = 0;
  while (!rest.empty()) {
    const size_t sp = rest.find(' ');
    std::string_view item = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    if (item.empty()) continue;
    if (n == kMaxLines) return bad("too many lines");
    const size_t at = item.find('@');
    if (at != std::string_view::npos) {
      double r;
      if (!parse_double(item.substr(at + 1), &r) || r < 1 || r > 1 << 20 || r != std::floor(r))
        return bad("bad @<ranks>");
      curve.ref_ranks = static_cast<int>(r);
      item = item.substr(0, at);
    }
    const size_t slash = item.find('/');
    CostLine l{};
    if (slash == std::string_view::npos || !parse_double(item.substr(0, slash), &l.alpha_us) ||
        !parse_double(item.substr(slash + 1), &l.gbps) || l.gbps <= 0)
      return bad("bad <alpha_us>/<GB/s>");
    curve.lines[n++] = l;
  }
  if (!n) return bad("no line");
  curves_[who][coll] = curve;
  return 0;
}

int CostModel::load(std::string *why) {
  for (const Shipped &s : kShipped) {
    CostCurve &c = curves_[static_cast<int>(s.who)][s.coll];
    std::copy(std::begin(s.lines), std::end(s.lines), c.lines);
    c.ref_ranks = 2;
  }
  calibration_.clear();
  calibration_date_.clear();
  SettingsReader in;
  const std::string cal = calibration_path();
  struct stat st {};
  const int missing = cal.empty() || stat(cal.c_str(), &st) == 0 ? 0 : errno;
  if (!cal.empty() && !missing) {
    if (int err = read_file(cal, ModelFile::kCalibration, why)) {
      *why += " (shaddr-model calibrate --force writes it again; SHADDR_CALIBRATION=off ignores it)";
      return err;
    }
    calibration_ = cal;
  } else if (const std::string set = in.text("SHADDR_CALIBRATION", "");
             !set.empty() && set != "off") {
    // Named by the user: a file that is not there is an error, not the shipped model.
    *why = "SHADDR_CALIBRATION: " + set + ": " + std::strerror(missing);
    return -ENOENT;
  }
  const std::string path = in.text("SHADDR_TUNING_FILE", "");
  if (path.empty()) return 0;
  return read_file(path, ModelFile::kTuningFile, why);
}

int CostModel::read_file(const std::string &path, ModelFile which, std::string *why) {
  const bool calibration = which == ModelFile::kCalibration;
  const char *source = calibration ? "the calibration" : "SHADDR_TUNING_FILE";
  file_++;
  std::ifstream in(path);
  if (!in) {
    *why = std::string(source) + ": cannot read " + path;
    return -ENOENT;
  }
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // The calibration's header names its date: `# date: <when>`.
    if (calibration && line.rfind("# date:", 0) == 0 && calibration_date_.empty()) {
      const size_t b = line.find_first_not_of(' ', 7);
      calibration_date_ = b == std::string::npos ? "" : line.substr(b);
    }
    if (int err = parse_line(line, why, source); err < 0) return err;
  }
  return 0;
}

double CostModel::shaddr_us(shaddr_coll coll, shaddr_algo algo, BackendKind kind, bool heap,
                            size_t bytes, int ranks, bool in_place,
                            shaddr_fallback fallback) const {
  const Who mine = algo_who(algo, kind, heap, source_bytes(coll, bytes, ranks));
  double t = curve(mine, coll).time_us(coll, bytes, ranks);
  if (t < 0) return t;
  // An in-place partitioned Allreduce first copies its input (coll.h's in-place guarantee).
  if (in_place && algo == SHADDR_ALGO_PARTITIONED) {
    const double copy = curve(Who::kFifo, SHADDR_COLL_BCAST).time_us(SHADDR_COLL_BCAST, bytes, 2);
    if (copy > 0) t += copy / 2;  // the FIFO's two copies: one copy's time
  }
  if (fallback == SHADDR_FALLBACK_MPICH_POSIX) {
    const double layer = curve(Who::kPatch, coll).time_us(coll, bytes, ranks);
    if (layer > 0) t += layer;
  }
  return t;
}

double CostModel::fallback_us(shaddr_fallback fallback, shaddr_coll coll, size_t bytes,
                              int ranks) const {
  if (fallback == SHADDR_FALLBACK_NONE) return -1;
  return curve(fallback_who(fallback), coll).time_us(coll, bytes, ranks);
}

std::string calibration_path() {
  const std::string set = SettingsReader().text("SHADDR_CALIBRATION", "");
  if (!set.empty()) return set == "off" ? std::string() : set;
  const std::string base = user_cache_dir();
  if (base.empty()) return {};
  return base + "/shaddr/calibration/" + machine_key() + ".model";
}

uint64_t CostModel::hash() const {
  uint64_t h = kHashSeed;
  auto mix = [&h](const void *p, size_t n) { h = hash_bytes(p, n, h); };
  mix(&numa_, sizeof(numa_));
  for (const auto &row : curves_)
    for (const CostCurve &c : row) {
      mix(&c.ref_ranks, sizeof(c.ref_ranks));
      for (const CostLine &l : c.lines) {
        mix(&l.alpha_us, sizeof(l.alpha_us));
        mix(&l.gbps, sizeof(l.gbps));
      }
      mix(&c.points_ranks, sizeof(c.points_ranks));
      for (const CostPoint &p : c.points) {
        mix(&p.bytes, sizeof(p.bytes));
        mix(&p.us, sizeof(p.us));
      }
    }
  return h;
}

}  // namespace shaddr

extern "C" {

SHADDR_API int shaddr_calibration_path(char *buf, size_t len) {
  if (!buf && len) return -EINVAL;
  const std::string p = shaddr::calibration_path();
  if (p.empty() && !shaddr::SettingsReader().is_set("SHADDR_CALIBRATION")) return -ENOENT;
  return std::snprintf(buf, len, "%s", p.c_str());
}

}  // extern "C"
