// SPDX-License-Identifier: MIT
// A tiny bootstrap that needs no MPI: fork a group of processes connected by socketpairs to
// rank 0, and give each a struct shaddr_host whose allgather/barrier run over them. For tests
// and benchmarks of the core.
#pragma once

#include <functional>

#include "shaddr/host.h"

namespace shaddr {

// Runs fn(host) in n processes: this one as rank 0 and n-1 forked children. Children exit
// with fn's result; returns 0 if every rank's fn returned 0, else the first non-zero result
// (a child killed by a signal counts as 128 + signal).
int run_forked(int n, const std::function<int(const shaddr_host &)> &fn);

}  // namespace shaddr
