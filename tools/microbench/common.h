// SPDX-License-Identifier: MIT
// shaddr-microbench: what both modes share — a clock, medians, the machine's description, and
// the JSON document type of the results.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace microbench {

double now();  // seconds, steady clock
double median(std::vector<double> v);

// Keeps the compiler from dropping a copy whose destination is never read.
inline void clobber() { asm volatile("" ::: "memory"); }

struct Machine {
  std::string cpu;                 // /proc/cpuinfo "model name"
  std::string kernel;              // uname -r
  int cpus = 0;                    // online
  size_t l1d = 0, l2 = 0, l3 = 0;  // cpu0's caches from sysfs, 0 if unknown
  size_t default_chunk = 0;        // the SHADDR_CHUNK libshaddr picks with the variable unset
  bool hypervisor = false;         // "hypervisor" cpu flag: a VM (KVM or TCG)
  std::string loadavg;             // /proc/loadavg when the run started: others' load skews it
};
Machine describe_machine();

std::string human_size(size_t bytes);  // 4K, 512K, 8M (exact powers of two stay exact)

// Run-wide options.
struct Options {
  bool quick = false;             // smoke-test sizes and counts: seconds, not minutes
  int ranks = 0;                  // 0: online CPUs, at least 2
  int repeat = 3;                 // --seed001: passes over the whole table
  int iters = 0;                  // --seed001: iterations per cell (0: by size, 20-500)
  size_t max_message = SIZE_MAX;  // --seed001: largest message row (an emulated guest is slow)
  std::string backends;           // comma-separated list for the micro mode; empty: all four
  std::vector<std::string> argv;  // the command line, quoted into the reports
};

// The results' JSON; keys stay in the order written (readers diff these files).
using Json = nlohmann::ordered_json;

// A measurement as JSON: null if it is not finite (JSON has no NaN or infinity).
inline Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }


}  // namespace microbench
