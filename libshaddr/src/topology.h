// SPDX-License-Identifier: MIT
// The node's topology as collectives need it: which CPUs share a package, a NUMA node, a shared
// cache (L3; L2 where it is shared by several cores, as A64FX's per-CMG L2). Read once per
// process (hwloc, else sysfs: topology_hwloc.cc / topology.cc), each rank located in it by the
// CPUs it is bound to, and the node communicator's ranks grouped into levels by a pure function
// of their gathered locations, so that every rank derives the same groups (docs/topology.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shaddr/host.h"

namespace shaddr {

// A set of CPUs by their OS numbers (Linux's and hwloc's "P#"), as a bitmap.
class CpuSet {
 public:
  void add(int cpu);
  bool has(int cpu) const;
  bool empty() const { return count() == 0; }
  int count() const;
  int first() const;  // -1 when empty
  int last() const;   // -1 when empty
  bool subset_of(const CpuSet &other) const;
  CpuSet operator&(const CpuSet &other) const;
  bool operator==(const CpuSet &other) const;
  std::vector<int> cpus() const;
  std::string str() const;  // "0-23,192-215", sysfs's cpulist grammar; "" when empty
  // Parses a cpulist ("0-3,8,10-11"; spaces and a trailing newline allowed). 0, or -EINVAL
  // with *why naming the bad part.
  static int parse(std::string_view list, CpuSet *out, std::string *why);

 private:
  std::vector<uint64_t> bits_;
};

// The levels, coarse to fine as they usually nest (the grouping checks, never assumes, it).
enum class Level : uint8_t { kPackage, kNuma, kL3, kL2 };
constexpr size_t kLevels = 4;
constexpr std::array<Level, kLevels> kAllLevels = {Level::kPackage, Level::kNuma, Level::kL3,
                                                   Level::kL2};
using LevelMask = uint32_t;  // bit (1 << level)
constexpr LevelMask kAllLevelsMask = (1u << kLevels) - 1;
constexpr LevelMask level_bit(Level l) { return 1u << static_cast<unsigned>(l); }
const char *level_name(Level l);  // "package", "numa", "l3", "l2"

// One domain of a level: its CPUs and the hardware's number for it (NUMA node, physical package
// id, cache id; -1 where the source gives none). Its id in a RankLocation is its first CPU, which
// every source (hwloc, sysfs) agrees on.
struct Domain {
  int os_index = -1;
  uint64_t cache_bytes = 0;  // caches only, 0 if unknown
  CpuSet cpus;
};

struct Topology {
  std::string source;  // what it was read from, and for a fallback why
  CpuSet cpus;         // every CPU of the machine
  // Per level, sorted by first CPU. A cache level holds only caches shared by several cores
  // (a private cache groups nothing); a level may be empty (no L3, no shared L2).
  std::array<std::vector<Domain>, kLevels> domains;
  const std::vector<Domain> &at(Level l) const { return domains[static_cast<size_t>(l)]; }
  // The index in at(@l) of the domain holding every CPU of @set (non-empty), or -1.
  int domain_holding(Level l, const CpuSet &set) const;
  // The index in at(@l) of the domain holding @cpu, or -1.
  int domain_of_cpu(Level l, int cpu) const;
};

// Reads the topology from Linux's sysfs below @root ("/sys/devices/system": cpu/online,
// cpu/cpuN/topology, cpu/cpuN/cache/indexK, node/nodeN/cpulist). The fallback where hwloc is
// unavailable; @root is a parameter so tests can give it a tree of their own. 0, or a negative
// errno with *why.
int load_topology_sysfs(const std::string &root, Topology *out, std::string *why);

// For the readers: sorts each level's domains by first CPU and keeps a cache level only if one of
// its caches holds more than one of @cores (each core's CPUs), as both readers must.
void finish_topology(Topology *t, const std::vector<CpuSet> &cores);

// Reads the topology with hwloc: this machine's (@xml_path nullptr) or an hwloc XML file's
// (lstopo's output). -ENOTSUP when libshaddr was built without hwloc. (topology_hwloc.cc)
int load_topology_hwloc(const char *xml_path, Topology *out, std::string *why);

// This machine's topology, read once per process: hwloc, else sysfs (its source says why;
// SHADDR_VERBOSE=1 prints it). (topology_hwloc.cc)
const Topology &machine_topology();

// Where one rank is, as the node's ranks exchange it. Per level, the domain holding every CPU
// the rank may run on (bound there), else the domain of the CPU it ran on when located (not
// bound: the kernel may move it, and the grouping does not use such a level).
struct RankLocation {
  int32_t cpu = -1;       // the CPU it ran on when located
  LevelMask bound = 0;    // levels where its affinity lies inside one domain
  std::array<int32_t, kLevels> domain{-1, -1, -1, -1};  // the domain's first CPU; -1: none
};
// A rank bound to the CPUs @allowed that runs on @cpu.
RankLocation locate(const Topology &topo, const CpuSet &allowed, int cpu);
// The calling thread (sched_getaffinity, sched_getcpu); *allowed gets its affinity. 0 or -errno.
int locate_self(const Topology &topo, RankLocation *out, CpuSet *allowed, std::string *why);

// A fixed-size little-endian encoding, for the node communicator's allgather.
constexpr size_t kLocationBytes = 4 + 4 + 4 + 4 * kLevels;
void encode_location(const RankLocation &loc, uint8_t out[kLocationBytes]);
// 0, or -EINVAL with *why if @in is not an encoding of this version.
int decode_location(const uint8_t in[kLocationBytes], RankLocation *out, std::string *why);
// Every node rank's location, by one allgather through @host (collective); (*all)[r] is node
// rank r's. Every rank decodes the same bytes, so all get the same result: 0, or the same
// negative errno with *why.
int gather_locations(const shaddr_host &host, const RankLocation &mine,
                     std::vector<RankLocation> *all, std::string *why);

// The ranks grouped at one level: which group each rank is in, each group's leader (its lowest
// rank) and domain (first CPU). Groups are numbered in the order of their leaders.
struct LevelGroups {
  Level level;
  LevelMask same_as = 0;  // other levels that split these ranks identically (folded into this)
  std::vector<int> group;   // per rank
  std::vector<int> leader;  // per group
  std::vector<int> domain;  // per group
  size_t groups() const { return leader.size(); }
  // The number of ranks in each group.
  std::vector<size_t> sizes() const {
    std::vector<size_t> n(groups());
    for (int g : group) n[static_cast<size_t>(g)]++;
    return n;
  }
};
struct Grouping {
  std::vector<LevelGroups> levels;  // coarse to fine, each nested in the one before; empty: flat
  std::vector<std::string> notes;   // why each wanted level is not among them
  bool flat() const { return levels.empty(); }
};
// Groups the node's ranks (@ranks[i] is node rank i's location) at the levels of @wanted. A level
// is used only where every rank is bound inside one of its domains, it splits the ranks into
// two or more groups not all of one rank, and its groups nest inside the coarser levels' (levels
// ordered by their number of groups); a level that splits them as a coarser one does is folded
// into it. Deterministic: equal input gives an equal result on every rank.
Grouping group_ranks(std::span<const RankLocation> ranks, LevelMask wanted);
std::string describe(const Grouping &g);  // one line per level, then the notes

// SHADDR_TOPOLOGY: `auto` (every level the grouping finds; the plan weighs them), `flat`
// (none), or a comma list of levels (`numa,l3`, any order, any case). 0, or -EINVAL with *why
// saying what is expected.
struct TopologyChoice {
  bool automatic = true;
  LevelMask levels = kAllLevelsMask;
  uint64_t encoded() const { return levels | (automatic ? 1u << kLevels : 0); }
};
int parse_topology_choice(std::string_view text, TopologyChoice *out, std::string *why);
// The settings table's check of SHADDR_TOPOLOGY (settings.h): *value is the choice encoded.
int check_topology_setting(std::string_view text, uint64_t *value, std::string *why);
// SHADDR_TOPOLOGY from the environment (unset: auto).
int topology_choice_from_env(TopologyChoice *out, std::string *why);

}  // namespace shaddr
