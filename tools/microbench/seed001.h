// SPDX-License-Identifier: MIT
// The segmentation table on this machine (docs/seed001-segmentation.md): intra-node Bcast time
// against message size and segment size, with segment sizes taken from the paper's table and
// from this machine's caches.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace microbench {

struct Seed001Column {
  std::string label;           // "4K", "256K", "not segmented", "libshaddr default"
  std::string relation;        // "L1d", "L2/2", ... or empty
  size_t segment = 0;          // 0: the whole message
  bool default_chunk = false;  // the SHADDR_CHUNK libshaddr picks by itself
  bool defaults = false;       // libshaddr with nothing overridden
};

struct Seed001Table {
  std::string mode;  // "chunk" or "loop"
  std::string how;   // one line: what a cell measures
  std::string backend;
  int ranks = 0;
  std::vector<Seed001Column> columns;
  std::vector<size_t> messages;
  std::vector<std::vector<double>> us;  // [row][column]; < 0: segment larger than message
};

// mode: "chunk", "loop" or "both".
int run_seed001(const Options &o, const Machine &m, const std::string &mode,
                std::vector<Seed001Table> *out, std::string *error);
void print_seed001(const Machine &m, const std::vector<Seed001Table> &t, FILE *out);
void markdown_seed001(const Options &o, const Machine &m, const std::vector<Seed001Table> &t,
                      FILE *out);
void json_seed001(const std::vector<Seed001Table> &t, Json *j);

}  // namespace microbench
