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
#include "topology.h"

namespace shaddr {

// The machine's NUMA nodes (sysfs node/online; 1 on a kernel without NUMA). Read once.
int machine_numa_nodes();

// The NUMA node this thread is bound inside (its affinity lies in one node's CPUs), else -1:
// an unbound rank's node is only where it runs now. -1 without reading anything on a machine of
// one NUMA node.
int own_numa_node();

// Every node rank's location (topology.h), (*all)[r] for node rank r, as the plan's levels and
// the placement read them. Collective (one allgather) where the machine has several NUMA nodes;
// empty and no exchange where it has one (every rank reads the same sysfs file, so every rank
// takes the same branch). 0 or the allgather's error, equal on every rank.
int gather_rank_locations(const shaddr_host &host, std::vector<RankLocation> *all,
                          std::string *why);
// Each location's NUMA node as own_numa_node() gives it (-1: not bound inside one); all -1 for
// an empty @all (one NUMA node).
std::vector<int> rank_numa_nodes(std::span<const RankLocation> all, int ranks);
// Both at once: every node rank's NUMA node, (*nodes)[r] for node rank r.
int gather_rank_numa_nodes(const shaddr_host &host, std::vector<int> *nodes, std::string *why);

// Tests only (not exported from libshaddr.so, no setting reaches it): this process's rank is
// at @loc instead of where it runs, and locations are exchanged even on a machine of one NUMA
// node, so that a test forks ranks "on" NUMA nodes this host does not have. nullptr: undone.
void set_own_location_for_tests(const RankLocation *loc);

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
