// SPDX-License-Identifier: MIT
// Selection: libshaddr's algorithm for a call (choose_algorithm) and the cost model that weighs
// it against the caller's fallback (shaddr_select). See select.h.
#include "select.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "../heap/heap.h"
#include "coll_rules.h"
#include "comm.h"
#include "error.h"

namespace shaddr {
namespace {

constexpr const char *kWhoNames[] = {"fifo", "slots", "heap",    "segment",     "window", "cma",
                                     "shm",  "mpich", "openmpi", "mpich-posix", "patch"};
static_assert(std::size(kWhoNames) == static_cast<size_t>(Who::kCount));

constexpr const char *kCollNames[] = {"barrier", "bcast",     "reduce",   "allreduce",
                                      "gather",  "scatter",   "allgather", "alltoall"};
static_assert(std::size(kCollNames) == SHADDR_COLL_COUNT);

constexpr const char *kAlgoNames[] = {"fallback", "none",        "fifo", "slots", "direct",
                                      "streams",  "ring", "partitioned", "root", "barrier"};
static_assert(std::size(kAlgoNames) == SHADDR_ALGO_COUNT);
static_assert(sizeof(shaddr_coll) == sizeof(int) && sizeof(shaddr_fallback) == sizeof(int) &&
              sizeof(shaddr_algo) == sizeof(int));

// A heap+<inner> backend serves a peer's buffer from its heap file when the buffer is in the
// heap, which a preloaded libshaddr-heap.so makes true of malloc'd buffers of SHADDR_HEAP_MIN
// (16 KiB) and more. The model takes the heap's curve where the buffer peers read from is that
// default size or more (source_bytes()) and the inner backend's below. A constant, not the
// setting: each rank reads its own SHADDR_HEAP_MIN, and the answer must be the same on every
// rank.
constexpr size_t kHeapModelMin = heap::kDefaultMinSize;

// --- the shipped curves ---------------------------------------------------------------------
// Measured on the reference machine (README, "Selection": AMD EPYC, 2 cores, Debian 12), 2
// ranks, by the commands written there. Each entry: who, collective, then up to kMaxLines
// (alpha us, GB/s) pairs.
struct Shipped {
  Who who;
  shaddr_coll coll;
  CostLine lines[kMaxLines];
};

#include "select_model.inc"

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
// blocks) at node size n: an Alltoall's and a Scatter's send buffer holds n blocks.
size_t source_bytes(shaddr_coll coll, size_t bytes, int n) {
  const bool n_blocks = coll == SHADDR_COLL_ALLTOALL || coll == SHADDR_COLL_SCATTER;
  return n_blocks ? bytes * static_cast<size_t>(n) : bytes;
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

Who backend_who(const char *name, size_t bytes) {
  constexpr std::string_view heap_prefix = "heap+";
  std::string_view be(name);
  if (be.substr(0, heap_prefix.size()) == heap_prefix) {
    if (bytes >= kHeapModelMin) return Who::kHeap;
    be.remove_prefix(heap_prefix.size());
  }
  if (be == "segment") return Who::kSegment;
  if (be == "window") return Who::kWindow;
  if (be == "shm") return Who::kShm;
  if (be == "heap") return Who::kHeap;
  return Who::kCma;
}

Who fallback_who(shaddr_fallback f) {
  switch (f) {
    case SHADDR_FALLBACK_MPICH: return Who::kMpich;
    case SHADDR_FALLBACK_OPENMPI: return Who::kOpenmpi;
    default: return Who::kMpichPosix;
  }
}

// The curve that times @algo of @coll on backend @backend.
Who algo_who(shaddr_algo algo, const char *backend, size_t bytes) {
  if (algo == SHADDR_ALGO_FIFO) return Who::kFifo;
  if (algo == SHADDR_ALGO_SLOTS) return Who::kSlots;
  return backend_who(backend, bytes);
}

}  // namespace

const char *coll_name(shaddr_coll c) {
  return static_cast<unsigned>(c) < std::size(kCollNames) ? kCollNames[c] : "?";
}

double CostCurve::time_us(shaddr_coll coll, size_t bytes, int ranks) const {
  double best = -1;
  for (const CostLine &l : lines) {
    if (l.gbps <= 0) continue;
    const double t = l.alpha_us + static_cast<double>(bytes) / (l.gbps * 1e3);
    if (best < 0 || t < best) best = t;
  }
  if (best < 0 || ref_ranks <= 0) return -1;
  if (ranks == ref_ranks) return best;
  // Scale both terms alike by what grows with the node (select.h): the crossover of two curves
  // measured at the same size stays where it was.
  const double a = log2_at_least_1(ranks) / log2_at_least_1(ref_ranks);
  const double b = blocks(coll, ranks) / blocks(coll, ref_ranks);
  return best * std::max(a, b);
}

int CostModel::parse_line(const std::string &raw, std::string *why) {
  std::string_view line(raw);
  constexpr std::string_view prefix = "model.";
  if (line.substr(0, prefix.size()) != prefix) return 1;
  line.remove_prefix(prefix.size());
  const size_t dot = line.find('.'), eq = line.find('=');
  auto bad = [&](const char *what) {
    *why = "SHADDR_TUNING_FILE: `" + raw + "`: " + what +
           " (expected model.<who>.<collective>=<alpha_us>/<GB/s>[@<ranks>] ... or =-)";
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
  CostCurve curve{};
  std::string_view rest = line.substr(eq + 1);
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
  const char *path = std::getenv("SHADDR_TUNING_FILE");
  if (!path || !*path) return 0;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (int err = parse_line(line, why); err < 0) return err;
  }
  return 0;
}

uint64_t CostModel::hash() const {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const unsigned char *>(p)[i]) * 1099511628211ull;
  };
  for (const auto &row : curves_)
    for (const CostCurve &c : row) {
      mix(&c.ref_ranks, sizeof(c.ref_ranks));
      for (const CostLine &l : c.lines) {
        mix(&l.alpha_us, sizeof(l.alpha_us));
        mix(&l.gbps, sizeof(l.gbps));
      }
    }
  return h;
}

shaddr_algo choose_algorithm(const Comm &c, shaddr_coll coll, size_t bytes,
                             bool bcast_segmented) {
  const Tuning &t = c.tuning();
  const Backend &be = c.backend();
  const int n = c.size();
  if (coll == SHADDR_COLL_BARRIER) return n > 1 ? SHADDR_ALGO_BARRIER : SHADDR_ALGO_NONE;
  if (n == 1 || bytes == 0) return SHADDR_ALGO_NONE;
  // The collectives' own rules (coll_rules.h), in the order the collectives apply them.
  switch (coll) {
    case SHADDR_COLL_BCAST:
      if (bcast_slot_fits(bytes, t)) return SHADDR_ALGO_SLOTS;
      if (bcast_fifo_wins(
              bytes, bcast_fifo_always(be.stages(), be.heap_stats() != nullptr, bcast_segmented), t))
        return SHADDR_ALGO_FIFO;
      if (bcast_streams_win(n, bytes, bcast_segmented, be.stages(), t)) return SHADDR_ALGO_STREAMS;
      return SHADDR_ALGO_DIRECT;
    case SHADDR_COLL_REDUCE:
      if (reduce_slots_fit(bytes, t)) return SHADDR_ALGO_SLOTS;
      return reduce_direct_wins(n, bytes, t) ? SHADDR_ALGO_ROOT : SHADDR_ALGO_PARTITIONED;
    case SHADDR_COLL_ALLREDUCE:
      return reduce_slots_fit(bytes, t) ? SHADDR_ALGO_SLOTS : SHADDR_ALGO_PARTITIONED;
    case SHADDR_COLL_ALLGATHER:
      if (gather_slots_fit(bytes, t)) return SHADDR_ALGO_SLOTS;
      if (allgather_ring_wins(n, be.stages(), be.max_mappings(), t)) return SHADDR_ALGO_RING;
      return SHADDR_ALGO_DIRECT;
    case SHADDR_COLL_ALLTOALL:
      return bytes <= SIZE_MAX / static_cast<size_t>(n) &&
                     gather_slots_fit(bytes * static_cast<size_t>(n), t)
                 ? SHADDR_ALGO_SLOTS
                 : SHADDR_ALGO_DIRECT;
    default:  // Gather, Scatter
      return gather_slots_fit(bytes, t) ? SHADDR_ALGO_SLOTS : SHADDR_ALGO_DIRECT;
  }
}

shaddr_selection select(const Comm &c, const shaddr_select_query &q) {
  shaddr_selection out{};
  out.algo = choose_algorithm(c, q.coll, q.bytes);
  const bool reduction = q.coll == SHADDR_COLL_REDUCE || q.coll == SHADDR_COLL_ALLREDUCE;
  if (reduction && !q.reducible) {
    out.algo = SHADDR_ALGO_FALLBACK;
    out.why = "libshaddr cannot reduce this datatype with this op";
    return out;
  }
  if (out.algo == SHADDR_ALGO_NONE) {
    out.why = "nothing to move";
    return out;
  }
  const CostModel &m = c.model();
  const int n = c.size();
  const Who mine = algo_who(out.algo, c.backend().name(), source_bytes(q.coll, q.bytes, n));
  out.shaddr_us = m.curve(mine, q.coll).time_us(q.coll, q.bytes, n);
  // An in-place partitioned Allreduce first copies its input (coll.h's in-place guarantee).
  if (out.shaddr_us >= 0 && q.in_place && out.algo == SHADDR_ALGO_PARTITIONED) {
    const double copy = m.curve(Who::kFifo, SHADDR_COLL_BCAST).time_us(SHADDR_COLL_BCAST, q.bytes, 2);
    if (copy > 0) out.shaddr_us += copy / 2;  // the FIFO's two copies: one copy's time
  }
  if (q.fallback == SHADDR_FALLBACK_NONE) {
    out.why = "no fallback to weigh";
    return out;
  }
  if (out.shaddr_us >= 0 && q.fallback == SHADDR_FALLBACK_MPICH_POSIX) {
    const double layer = m.curve(Who::kPatch, q.coll).time_us(q.coll, q.bytes, n);
    if (layer > 0) out.shaddr_us += layer;
  }
  out.fallback_us = m.curve(fallback_who(q.fallback), q.coll).time_us(q.coll, q.bytes, n);
  if (out.shaddr_us < 0 || out.fallback_us < 0) {
    // Without a measured curve on either side there is nothing to weigh: libshaddr, as before
    // the model (it is the caller's reason to ask).
    out.why = "no model for this case: libshaddr";
    if (out.fallback_us < 0) out.fallback_us = 0;
    if (out.shaddr_us < 0) out.shaddr_us = 0;
    return out;
  }
  if (out.shaddr_us <= out.fallback_us) {
    out.why = "the model says libshaddr is faster";
  } else {
    out.algo = SHADDR_ALGO_FALLBACK;
    out.why = "the model says the fallback is faster";
  }
  return out;
}

}  // namespace shaddr

using shaddr::Comm;

extern "C" {

SHADDR_API int shaddr_select(const shaddr_comm_t *comm, const struct shaddr_select_query *q,
                             struct shaddr_selection *out) {
  if (!comm || !q || !out) return -EINVAL;
  // A C caller may pass any int in an enum's place: read them as ints.
  int coll, fallback;
  std::memcpy(&coll, &q->coll, sizeof(coll));
  std::memcpy(&fallback, &q->fallback, sizeof(fallback));
  if (coll < 0 || coll >= SHADDR_COLL_COUNT || fallback < 0 || fallback >= SHADDR_FALLBACK_COUNT)
    return -EINVAL;
  *out = shaddr::select(*shaddr::from_handle(comm), *q);
  return 0;
}

SHADDR_API const char *shaddr_algo_name(enum shaddr_algo algo) {
  int a;
  std::memcpy(&a, &algo, sizeof(a));
  return a >= 0 && a < SHADDR_ALGO_COUNT ? shaddr::kAlgoNames[a] : "?";
}

}  // extern "C"
