// SPDX-License-Identifier: MIT
// The micro mode: libshaddr's core costs per backend (registration cache, copy bandwidth
// against memcpy, Bcast FIFO throughput), in one run.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace microbench {

struct CopyPoint {
  size_t bytes = 0;
  double gb_per_s = 0;         // backend read() from the peer
  double memcpy_gb_per_s = 0;  // local memcpy of the same size, measured just before
  double ratio = 0;            // gb_per_s / memcpy_gb_per_s
};

struct BackendResult {
  std::string name;
  bool available = false;
  std::string reason;        // why not available, or what was skipped
  bool cached = false;       // has a registration cache (maps peers' memory)
  double hit_ns = 0;         // map+unmap of a cached range: no system call
  double miss_ns = 0;        // map+unmap that misses: the backend's system calls
  double miss_fraction = 0;  // of the timed lookups, the share that missed
  size_t granularity = 0;    // mapping unit found by probing
  double read_call_ns = 0;   // one 64-byte read() from the peer
  std::vector<CopyPoint> copy;
};

struct FifoResult {
  int ranks = 0;
  size_t bytes = 0;
  long long messages = 0;
  double msgs_per_s = 0;
  double gb_per_s = 0;  // payload delivered to each reader
  std::string backend;
};

struct MicroResults {
  std::vector<BackendResult> backends;
  std::vector<FifoResult> fifo;
  std::string fifo_error;
};

int run_micro(const Options &o, MicroResults *r);
void print_micro(const Options &o, const Machine &m, const MicroResults &r, FILE *out);
void json_micro(const MicroResults &r, Json *j);

}  // namespace microbench
