// SPDX-License-Identifier: MIT
// Selection (shaddr_select() in coll.h): which algorithm libshaddr runs for a call, and whether
// the caller should run its own implementation instead, from a cost model.
//
// choose_algorithm() is the one place that picks libshaddr's algorithm from the settings that
// decide it (SHADDR_BCAST_FIFO_MAX, SHADDR_SLOT_MAX, streams, ring) and the backend; the
// collectives call it, and shaddr_select() reports it.
//
// The model: the time of each algorithm, and of each fallback, is a curve measured at a
// reference node size: the lower envelope of up to kMaxLines alpha-beta lines
// (t = alpha + bytes / bandwidth). One line fits one algorithm of libshaddr; an MPI switches
// algorithms by size, so its curve has a few. For another node size both sides are scaled
// alike (alpha by log2 n, bytes by the blocks a rank receives), so that the 2-rank crossover
// holds until the tuning file carries lines measured at that size. Shipped lines were measured
// on this project's reference machine (select.cc); `model.<who>.<coll>=` lines in
// SHADDR_TUNING_FILE replace them (shaddr-tune writes libshaddr's, shaddr-compare --model the
// fallbacks').
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shaddr/coll.h"

namespace shaddr {

class Comm;
struct Tuning;

// Who a curve describes: libshaddr's small paths (any backend), its single-copy algorithms per
// backend, and the fallbacks.
enum class Who : uint8_t {
  kFifo,
  kSlots,
  kHeap,
  kSegment,
  kWindow,
  kCma,
  kShm,
  kMpich,
  kOpenmpi,
  kMpichPosix,
  // Not an algorithm: what the patched MPICH's own layers add around a libshaddr call (its
  // curves are measured through the interposer, release_gather's through the patched MPICH).
  // Added to libshaddr's side when the fallback is mpich-posix.
  kPatch,
  kCount
};

// "bcast", "allreduce", ...: the collective's name in `model.` lines.
const char *coll_name(shaddr_coll c);

struct CostLine {
  double alpha_us;  // fixed cost
  double gbps;      // bytes per nanosecond (GB/s); 0: the line is unset
};

constexpr int kMaxLines = 4;

struct CostCurve {
  CostLine lines[kMaxLines];
  int ref_ranks;  // node size the lines were measured at (0: no curve)
  // Microseconds at @bytes on @ranks ranks of collective @coll (lower envelope of the lines).
  double time_us(shaddr_coll coll, size_t bytes, int ranks) const;
};

class CostModel {
 public:
  // The shipped curves, then the tuning file's `model.` lines over them. 0, or -EINVAL with
  // *why naming the bad line.
  int load(std::string *why);
  const CostCurve &curve(Who w, shaddr_coll c) const {
    return curves_[static_cast<int>(w)][c];
  }
  // Hash of every curve: equal on every rank, or the ranks could decide differently.
  uint64_t hash() const;
  // Parses `model.<who>.<coll>=<alpha_us>/<GB/s>[@<ranks>] ...` (one line of the tuning file,
  // without its newline) into the model; `=-` removes the curve. 0, 1 if @line is not a model
  // line, -EINVAL.
  int parse_line(const std::string &line, std::string *why);

 private:
  CostCurve curves_[static_cast<int>(Who::kCount)][SHADDR_COLL_COUNT]{};
};

// The algorithm libshaddr runs for @coll of @bytes (per-rank block where the collective has
// blocks) on @c, with the settings and backend of @c; `bcast_segmented`: shaddr_bcast_segmented.
// Never SHADDR_ALGO_FALLBACK.
shaddr_algo choose_algorithm(const Comm &c, shaddr_coll coll, size_t bytes,
                             bool bcast_segmented = false);

// shaddr_select() for a checked query.
shaddr_selection select(const Comm &c, const shaddr_select_query &q);

}  // namespace shaddr
