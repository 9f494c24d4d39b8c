// SPDX-License-Identifier: MIT
// The cost model the plan (plan.h) is built from; shaddr_select() (plan_select.cc) explains a
// plan's step with its times.
//
// The model: the time of each algorithm, and of each fallback, is a curve measured at a
// reference node size: the lower envelope of up to kMaxLines alpha-beta lines
// (t = alpha + bytes / bandwidth). One line fits one algorithm of libshaddr; an MPI switches
// algorithms by size, so its curve has a few. For another node size both sides are scaled
// alike (alpha by log2 n, bytes by the blocks a rank receives), so that the 2-rank crossover
// holds until the tuning file carries lines measured at that size. Shipped lines were measured
// on this project's reference machine (plan_model.inc); `model.<who>.<coll>=` lines in
// SHADDR_TUNING_FILE replace them (shaddr-tune writes libshaddr's, shaddr-compare --model the
// fallbacks'). A calibration of this machine (shaddr_calibration_path(), written by
// `shaddr-model calibrate`) is read between the two; besides lines it holds the measured points
// (`point.` lines), which the model interpolates between where it has them, so that the plan
// never prefers a path measured slower at a measured size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"

#include "shaddr/coll.h"

namespace shaddr {

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

struct CostPoint {
  double bytes;
  double us;
};

struct CostCurve {
  CostLine lines[kMaxLines];
  int ref_ranks;  // node size the lines were measured at (0: no lines)
  std::vector<CostPoint> points;  // measured, by increasing size (empty: none)
  int points_ranks;               // node size the points were measured at
  int points_file;                // the file they came from (CostModel::file_)
  // Microseconds at @bytes on @ranks ranks of collective @coll: between measured points, their
  // log-log interpolation; elsewhere the lower envelope of the lines (-1: no curve).
  double time_us(shaddr_coll coll, size_t bytes, int ranks) const;
};

// The files the model reads over its shipped curves, in this order (load()).
enum class ModelFile : uint8_t {
  kCalibration,  // this machine's (calibration_path()): its header's date is kept
  kTuningFile,   // SHADDR_TUNING_FILE
};

// The calibration's copy rates between NUMA nodes (`level.numa=` line, GB/s; tools/bench/
// numa_copy.cc measures them): one core, and every core of a node at once, copying from memory
// bound to its own node (local) or to another (remote; the slowest pair). 0: not measured.
struct LevelRates {
  double one_local = 0, one_remote = 0, all_local = 0, all_remote = 0;
  bool known() const { return one_remote > 0 && all_remote > 0; }
};

class CostModel {
 public:
  // The shipped curves, then the tuning file's `model.` lines over them. 0, or -EINVAL with
  // *why naming the bad line.
  int load(std::string *why);
  // The calibration load() read (empty: none) and the date its header gives.
  const std::string &calibration() const { return calibration_; }
  const std::string &calibration_date() const { return calibration_date_; }
  const CostCurve &curve(Who w, shaddr_coll c) const {
    return curves_[static_cast<int>(w)][c];
  }
  const LevelRates &numa_rates() const { return numa_; }
  // Hash of every curve and rate: equal on every rank, or the ranks could decide differently.
  uint64_t hash() const;
  // Parses `model.<who>.<coll>=<alpha_us>/<GB/s>[@<ranks>] ...`,
  // `point.<who>.<coll>=<bytes>:<us>[@<ranks>] ...` or
  // `level.numa=<one local>/<one remote>/<all local>/<all remote>` (one line of the tuning
  // file, without its newline) into the model; `=-` removes the lines, the points or the rates.
  // 0, 1 if @line is none of them, -EINVAL with *why naming the line (@source: the file's name).
  int parse_line(const std::string &line, std::string *why, const char *source = "SHADDR_TUNING_FILE");

  // The model's time of libshaddr's @algo for @coll of @bytes on @ranks ranks over a backend of
  // @kind (under the heap layer: @heap), where the caller's fallback is @fallback (the patched
  // MPICH adds its own layers' cost); -1 without a curve.
  double shaddr_us(shaddr_coll coll, shaddr_algo algo, BackendKind kind, bool heap, size_t bytes,
                   int ranks, bool in_place, shaddr_fallback fallback) const;
  // The model's time of @fallback; -1 without a curve (or SHADDR_FALLBACK_NONE).
  double fallback_us(shaddr_fallback fallback, shaddr_coll coll, size_t bytes, int ranks) const;

 private:
  int read_file(const std::string &path, ModelFile which, std::string *why);

  int parse_rates(std::string_view raw, std::string *why, const char *source);

  CostCurve curves_[static_cast<int>(Who::kCount)][SHADDR_COLL_COUNT]{};
  LevelRates numa_{};
  std::string calibration_, calibration_date_;
  // Files read so far: a `model.` line drops the points another file gave its curve (a tuning
  // file's line is meant whole), not those of its own file.
  int file_ = 0;
};

// shaddr_calibration_path() (coll.h); empty when none can be formed or SHADDR_CALIBRATION=off.
std::string calibration_path();

}  // namespace shaddr
