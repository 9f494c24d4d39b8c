// SPDX-License-Identifier: MIT
// Memory where its readers are (docs/topology.md, "Placement"): which NUMA node each node rank
// is bound to, read from the topology, and the system call that gives a range of shared memory
// a preferred node before its pages exist. On a machine with one NUMA node nothing here reads
// the topology or exchanges anything: the node block's layout and every page stay as they were.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "shaddr/host.h"

namespace shaddr {

// The machine's NUMA nodes (sysfs node/online; 1 on a kernel without NUMA). Read once.
int machine_numa_nodes();

// The NUMA node this thread is bound inside (its affinity lies in one node's CPUs), else -1:
// an unbound rank's node is only where it runs now. -1 without reading anything on a machine of
// one NUMA node.
int own_numa_node();

// Every node rank's NUMA node as own_numa_node() gives it, (*nodes)[r] for node rank r.
// Collective (one allgather of the ranks' locations, topology.h) where the machine has several
// NUMA nodes; all -1 and no exchange where it has one (every rank reads the same sysfs file, so
// every rank takes the same branch). 0 or the allgather's error, equal on every rank.
int gather_rank_numa_nodes(const shaddr_host &host, std::vector<int> *nodes, std::string *why);

// Whether per-rank placement can change anything: the ranks are bound inside at least two
// different NUMA nodes. Otherwise every page lands on the one node anyway (first touch) and the
// page-aligned layout would only cost memory.
bool placement_pays(std::span<const int> nodes);

// Gives [p, p + bytes) (p page-aligned) the preferred NUMA node @node (mbind MPOL_PREFERRED):
// pages allocated there later come from @node while it has free memory, from another node when
// it has none (MPOL_BIND would make a fault on a full node a SIGBUS). For shared memory (memfd,
// shm) the policy belongs to the object, so it holds for every process's faults. 0 or -errno.
int prefer_numa_node(void *p, size_t bytes, int node);

// How prefer_numa_node() does it, for SHADDR_VERBOSE=1.
const char *placement_method();

}  // namespace shaddr
