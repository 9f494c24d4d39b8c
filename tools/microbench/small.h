// SPDX-License-Identifier: MIT
// shaddr-microbench --small: the per-call latency of libshaddr's small-message paths (Bcast,
// Allreduce, Reduce of 8 B - 4 KiB) on forked ranks, and their back-to-back rate.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "common.h"

namespace microbench {

struct SmallResult {
  std::string coll;            // bcast, allreduce, reduce
  size_t bytes = 0;
  int ranks = 0;
  long long calls = 0;         // timed calls per repetition
  double median_us = 0;        // per call, each preceded by a barrier: max over ranks of the
                               // median over repetitions of each rank's median call time
  double back_to_back_us = 0;  // per call, calls issued back to back (no barrier), rank 0
  std::string backend;
};

int run_small(const Options &o, std::vector<SmallResult> *out, std::string *error);
void print_small(const Machine &m, const std::vector<SmallResult> &r, FILE *f);
void json_small(const std::vector<SmallResult> &r, Json *j);

}  // namespace microbench
