// SPDX-License-Identifier: MIT
#include "placement.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>

#include "topology.h"

namespace shaddr {
namespace {

// linux/mempolicy.h's values, stable ABI; libnuma's numaif.h is not needed for two constants.
constexpr int kMpolPreferred = 1;

const RankLocation *g_test_location = nullptr;  // set_own_location_for_tests()

// The sysfs reader (0.6 ms here), not hwloc's (40 ms, docs/topology.md): the NUMA node numbers
// are the same in both, and libshaddr.so does not link hwloc. Read once, on a NUMA machine only.
const Topology *numa_topology() {
  static const Topology *topo = [] {
    auto *t = new Topology;
    std::string why;
    if (load_topology_sysfs("/sys/devices/system", t, &why)) *t = Topology{};
    return t;
  }();
  return topo;
}

int node_of(const Topology &topo, const RankLocation &loc) {
  const auto numa = static_cast<size_t>(Level::kNuma);
  if (!(loc.bound & level_bit(Level::kNuma)) || loc.domain[numa] < 0) return -1;
  const int d = topo.domain_of_cpu(Level::kNuma, loc.domain[numa]);
  return d < 0 ? -1 : topo.at(Level::kNuma)[static_cast<size_t>(d)].os_index;
}

RankLocation own_location() {
  RankLocation me;
  CpuSet allowed;
  std::string why;
  // A rank that cannot locate itself (no sched_getaffinity) is a rank without a node, not an
  // error: placement only ever changes speed.
  if (locate_self(*numa_topology(), &me, &allowed, &why)) me = RankLocation{};
  return me;
}

}  // namespace

int machine_numa_nodes() {
  static const int nodes = [] {
    std::ifstream in("/sys/devices/system/node/online");
    std::string list, why;
    CpuSet set;  // a node list has the CPU list's grammar ("0-1,3")
    if (!std::getline(in, list) || CpuSet::parse(list, &set, &why)) return 1;
    return std::max(1, set.count());
  }();
  return nodes;
}

int own_numa_node() {
  if (machine_numa_nodes() < 2) return -1;
  return node_of(*numa_topology(), own_location());
}

int gather_rank_locations(const shaddr_host &host, std::vector<RankLocation> *all,
                          std::string *why) {
  all->clear();
  if (machine_numa_nodes() < 2 && !g_test_location) return 0;
  return gather_locations(host, g_test_location ? *g_test_location : own_location(), all, why);
}

std::vector<int> rank_numa_nodes(std::span<const RankLocation> all, int ranks) {
  std::vector<int> nodes(static_cast<size_t>(ranks), -1);
  for (size_t r = 0; r < all.size() && r < nodes.size(); r++)
    nodes[r] = node_of(*numa_topology(), all[r]);
  return nodes;
}

int gather_rank_numa_nodes(const shaddr_host &host, std::vector<int> *nodes, std::string *why) {
  std::vector<RankLocation> all;
  if (int err = gather_rank_locations(host, &all, why)) return err;
  *nodes = rank_numa_nodes(all, host.size);
  return 0;
}

void set_own_location_for_tests(const RankLocation *loc) {
  static RankLocation kept;
  if (loc) kept = *loc;
  g_test_location = loc ? &kept : nullptr;
}

bool placement_pays(std::span<const int> nodes) {
  int first = -1;
  for (int n : nodes) {
    if (n < 0) continue;
    if (first < 0) first = n;
    if (n != first) return true;
  }
  return false;
}

int prefer_numa_node(void *p, size_t bytes, int node) {
  if (node < 0 || node >= 1024) return -EINVAL;
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
  mask[static_cast<size_t>(node) / (8 * sizeof(unsigned long))] |=
      1ul << (static_cast<size_t>(node) % (8 * sizeof(unsigned long)));
  // maxnode counts bits plus one (the kernel drops the last bit: mbind(2), BUGS).
  if (syscall(SYS_mbind, p, bytes, kMpolPreferred, mask, 1024 + 1, 0)) return -errno;
  return 0;
}

const char *placement_method() {
  return "mbind(MPOL_PREFERRED) by system call, before the pages are touched";
}

}  // namespace shaddr
