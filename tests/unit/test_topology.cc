// SPDX-License-Identifier: MIT
// The topology: levels read from hwloc XML machines (tests/unit/topology/, made by its
// `generate` from hwloc synthetic descriptions), from a sysfs tree, and from this host; the
// grouping of ranks bound to given CPUs; SHADDR_TOPOLOGY; the locations' encoding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "settings.h"
#include "topology.h"

namespace shaddr {
namespace {

Topology load(const char *name) {
  Topology t;
  std::string why;
  const std::string path = std::string(SHADDR_TOPOLOGY_DATA) + "/" + name + ".xml";
  EXPECT_EQ(load_topology_hwloc(path.c_str(), &t, &why), 0) << why;
  return t;
}

CpuSet cpus_of(const char *list) {
  CpuSet s;
  std::string why;
  EXPECT_EQ(CpuSet::parse(list, &s, &why), 0) << why;
  return s;
}

// One rank bound to each CPU of @cpus, node rank i on cpus[i].
std::vector<RankLocation> bound_to(const Topology &t, const std::vector<int> &cpus) {
  std::vector<RankLocation> r;
  for (int c : cpus) {
    CpuSet one;
    one.add(c);
    r.push_back(locate(t, one, c));
  }
  return r;
}

std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int c = lo; c <= hi; c++) v.push_back(c);
  return v;
}

size_t domains(const Topology &t, Level l) { return t.at(l).size(); }

// The machine's number of CPUs and of domains per level (package, numa, l3, l2).
void expect_shape(const Topology &t, int cpus, const std::array<size_t, kLevels> &counts) {
  EXPECT_EQ(t.cpus.count(), cpus) << t.source;
  for (Level l : kAllLevels)
    EXPECT_EQ(domains(t, l), counts[static_cast<size_t>(l)]) << level_name(l) << " " << t.source;
}

// Every group of @g's level @i has @size ranks.
void expect_groups(const Grouping &g, size_t i, Level level, size_t groups, size_t size) {
  ASSERT_LT(i, g.levels.size()) << describe(g);
  const LevelGroups &lv = g.levels[i];
  EXPECT_EQ(lv.level, level) << describe(g);
  ASSERT_EQ(lv.groups(), groups) << describe(g);
  for (size_t grp = 0; grp < groups; grp++)
    EXPECT_EQ(static_cast<size_t>(std::count(lv.group.begin(), lv.group.end(), grp)), size)
        << level_name(level) << " group " << grp;
  for (size_t r = 0; r < lv.group.size(); r++)  // the leader is the group's lowest rank
    EXPECT_LE(lv.leader[static_cast<size_t>(lv.group[r])], static_cast<int>(r));
}

TEST(Topology, CpuSetParsesAndPrintsCpulists) {
  CpuSet s = cpus_of("0-3,8, 10-11\n");
  EXPECT_EQ(s.count(), 7);
  EXPECT_EQ(s.str(), "0-3,8,10-11");
  EXPECT_EQ(s.first(), 0);
  EXPECT_EQ(s.last(), 11);
  EXPECT_TRUE(cpus_of("2-3").subset_of(s));
  EXPECT_FALSE(cpus_of("3-4").subset_of(s));
  EXPECT_EQ((s & cpus_of("3-9")).str(), "3,8");
  EXPECT_EQ(cpus_of("200").str(), "200");
  std::string why;
  for (const char *bad : {"1-", "3-1", "x", "1,,2", "-1", "2000000"}) {
    EXPECT_EQ(CpuSet::parse(bad, &s, &why), -EINVAL) << bad;
    EXPECT_NE(why.find('\''), std::string::npos) << why;
  }
}

TEST(Topology, EpycNps4Levels) {
  const Topology t = load("epyc9654-2s-nps4");
  expect_shape(t, 384, {2, 8, 24, 0});  // a per-core L2 is not a shared cache
  // Linux's numbering: the second threads of the cores are 192-383.
  EXPECT_EQ(t.at(Level::kPackage)[0].cpus.str(), "0-95,192-287");
  EXPECT_EQ(t.at(Level::kNuma)[1].cpus.str(), "24-47,216-239");
  EXPECT_EQ(t.at(Level::kNuma)[1].os_index, 1);
  EXPECT_EQ(t.at(Level::kL3)[2].cpus.str(), "16-23,208-215");
  EXPECT_EQ(t.at(Level::kL3)[2].cache_bytes, 32u << 20);
}

TEST(Topology, EpycOneRankPerCoreGroupsByPackageNumaAndL3) {
  const Topology t = load("epyc9654-2s-nps4");
  const Grouping g = group_ranks(bound_to(t, range(0, 191)), kAllLevelsMask);
  ASSERT_EQ(g.levels.size(), 3u) << describe(g);
  expect_groups(g, 0, Level::kPackage, 2, 96);
  expect_groups(g, 1, Level::kNuma, 8, 24);
  expect_groups(g, 2, Level::kL3, 24, 8);
  EXPECT_EQ(g.levels[1].leader, (std::vector<int>{0, 24, 48, 72, 96, 120, 144, 168}));
  EXPECT_EQ(g.levels[2].domain[23], 184);
  // Every thread a rank: node ranks 192-383 sit on the cores' second threads.
  const Grouping all = group_ranks(bound_to(t, range(0, 383)), kAllLevelsMask);
  expect_groups(all, 1, Level::kNuma, 8, 48);
  expect_groups(all, 2, Level::kL3, 24, 16);
  EXPECT_EQ(all.levels[2].group[200], all.levels[2].group[8]);  // cpu 200 is cpu 8's sibling
}

TEST(Topology, GroupingIsTheSameOnPermutedRanks) {
  const Topology t = load("epyc9654-2s-nps4");
  std::vector<int> cpus = range(0, 383);
  std::mt19937 rng(54);
  for (int round = 0; round < 5; round++) {
    std::shuffle(cpus.begin(), cpus.end(), rng);
    cpus.resize(round == 0 ? 384 : 100 + 50 * round);
    const std::vector<RankLocation> ranks = bound_to(t, cpus);
    const Grouping g = group_ranks(ranks, kAllLevelsMask);
    // The same input gives the same result (what every rank computes).
    const Grouping again = group_ranks(ranks, kAllLevelsMask);
    ASSERT_EQ(g.levels.size(), again.levels.size());
    for (size_t i = 0; i < g.levels.size(); i++)
      EXPECT_EQ(g.levels[i].group, again.levels[i].group);
    // Reversed rank order: the same levels, and two ranks share a group in one order exactly
    // where they do in the other; in each order the leader is the group's lowest rank.
    std::vector<RankLocation> reversed(ranks.rbegin(), ranks.rend());
    const Grouping r = group_ranks(reversed, kAllLevelsMask);
    ASSERT_EQ(g.levels.size(), r.levels.size()) << describe(g) << describe(r);
    const size_t n = ranks.size();
    for (size_t i = 0; i < g.levels.size(); i++) {
      EXPECT_EQ(g.levels[i].level, r.levels[i].level);
      for (size_t a = 0; a < n; a += 7)
        for (size_t b = 0; b < n; b += 5)
          ASSERT_EQ(g.levels[i].group[a] == g.levels[i].group[b],
                    r.levels[i].group[n - 1 - a] == r.levels[i].group[n - 1 - b]);
      // Each group's domain, whatever the order, is the one of its ranks' CPUs.
      for (size_t a = 0; a < n; a++)
        EXPECT_EQ(g.levels[i].domain[static_cast<size_t>(g.levels[i].group[a])],
                  ranks[a].domain[static_cast<size_t>(g.levels[i].level)]);
    }
  }
}

TEST(Topology, IceLakeFoldsPackageNumaAndL3IntoOneLevel) {
  const Topology t = load("icelake-2s-48c");
  expect_shape(t, 96, {2, 2, 2, 0});
  const Grouping g = group_ranks(bound_to(t, range(0, 47)), kAllLevelsMask);
  ASSERT_EQ(g.levels.size(), 1u) << describe(g);
  expect_groups(g, 0, Level::kPackage, 2, 24);
  EXPECT_EQ(g.levels[0].same_as, level_bit(Level::kNuma) | level_bit(Level::kL3));
  // Only NUMA asked for: the same split, under its own name.
  const Grouping numa = group_ranks(bound_to(t, range(0, 47)), level_bit(Level::kNuma));
  ASSERT_EQ(numa.levels.size(), 1u);
  EXPECT_EQ(numa.levels[0].level, Level::kNuma);
}

TEST(Topology, A64fxGroupsByCmg) {
  const Topology t = load("a64fx");
  expect_shape(t, 48, {1, 4, 0, 4});  // each CMG's L2 is shared by its 12 cores
  ASSERT_EQ(domains(t, Level::kL2), 4u);
  EXPECT_EQ(t.at(Level::kL2)[3].cpus.str(), "36-47");
  const Grouping g = group_ranks(bound_to(t, range(0, 47)), kAllLevelsMask);
  ASSERT_EQ(g.levels.size(), 1u) << describe(g);
  expect_groups(g, 0, Level::kNuma, 4, 12);
  EXPECT_EQ(g.levels[0].same_as, level_bit(Level::kL2));
  EXPECT_NE(describe(g).find("package: not used: every rank is in one domain"), std::string::npos)
      << describe(g);
}

TEST(Topology, OneNumaLaptopIsFlat) {
  const Topology t = load("laptop-8c");
  expect_shape(t, 16, {1, 1, 1, 0});
  const Grouping g = group_ranks(bound_to(t, range(0, 15)), kAllLevelsMask);
  EXPECT_TRUE(g.flat()) << describe(g);
  EXPECT_EQ(g.notes.size(), kLevels) << describe(g);
}

TEST(Topology, FewRanksUseOnlyTheLevelsThatSplitThem) {
  const Topology t = load("epyc9654-2s-nps4");
  // Two ranks in each L3 of NUMA node 0 and one on package 1: numa splits them as package
  // does (folded into it), l3 further; a group of one rank (the one on package 1) is a group.
  const Grouping g = group_ranks(bound_to(t, {0, 1, 8, 9, 16, 17, 96}), kAllLevelsMask);
  ASSERT_EQ(g.levels.size(), 2u) << describe(g);
  EXPECT_EQ(g.levels[0].level, Level::kPackage);
  EXPECT_EQ(g.levels[0].group, (std::vector<int>{0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(g.levels[0].same_as, level_bit(Level::kNuma));
  EXPECT_EQ(g.levels[1].level, Level::kL3);
  EXPECT_EQ(g.levels[1].group, (std::vector<int>{0, 0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(g.levels[1].leader, (std::vector<int>{0, 2, 4, 6}));
  // One rank per package: no two share anything.
  EXPECT_TRUE(group_ranks(bound_to(t, {0, 96}), kAllLevelsMask).flat());
  // One rank: flat.
  EXPECT_TRUE(group_ranks(bound_to(t, {5}), kAllLevelsMask).flat());
}

TEST(Topology, UnboundRanksLeaveTheirLevelsOut) {
  const Topology t = load("epyc9654-2s-nps4");
  std::vector<RankLocation> ranks = bound_to(t, range(0, 191));
  // Rank 5 may run anywhere in package 0 (as `--bind-to socket`): packages still group the
  // ranks, NUMA nodes and L3s do not (where it runs is a guess the kernel may undo).
  ranks[5] = locate(t, t.at(Level::kPackage)[0].cpus, 30);
  EXPECT_EQ(ranks[5].domain[static_cast<size_t>(Level::kNuma)], 24) << "where it runs now";
  EXPECT_FALSE(ranks[5].bound & level_bit(Level::kNuma));
  const Grouping g = group_ranks(ranks, kAllLevelsMask);
  ASSERT_EQ(g.levels.size(), 1u) << describe(g);
  EXPECT_EQ(g.levels[0].level, Level::kPackage);
  EXPECT_NE(describe(g).find("numa: not used: rank 5 is not bound"), std::string::npos)
      << describe(g);
  // Not bound at all: flat.
  ranks[7] = locate(t, t.cpus, 150);
  EXPECT_TRUE(group_ranks(ranks, kAllLevelsMask).flat());
}

TEST(Topology, LevelsThatDoNotNestAreLeftOut) {
  // Hand-made: two NUMA domains {0,1},{2,3} and two L3 domains {0,2},{1,3} (no machine is
  // like that, but nothing guarantees the levels nest: the grouping checks).
  std::vector<RankLocation> ranks(4);
  for (int r = 0; r < 4; r++) {
    ranks[r].cpu = r;
    ranks[r].bound = kAllLevelsMask;
    ranks[r].domain = {0, r < 2 ? 0 : 2, r % 2, -1};
  }
  // 4 ranks, 2 groups each: numa (first in the levels' order) is kept, l3 crosses it.
  Grouping g = group_ranks(ranks, level_bit(Level::kNuma) | level_bit(Level::kL3));
  ASSERT_EQ(g.levels.size(), 1u) << describe(g);
  EXPECT_EQ(g.levels[0].level, Level::kNuma);
  EXPECT_NE(describe(g).find("l3: not used: its domains cross numa's"), std::string::npos);
}

TEST(Topology, ChoiceRestrictsTheLevels) {
  const Topology t = load("epyc9654-2s-nps4");
  const std::vector<RankLocation> ranks = bound_to(t, range(0, 191));
  TopologyChoice c;
  std::string why;
  ASSERT_EQ(parse_topology_choice("L3, numa", &c, &why), 0) << why;
  EXPECT_FALSE(c.automatic);
  const Grouping g = group_ranks(ranks, c.levels);
  ASSERT_EQ(g.levels.size(), 2u);
  EXPECT_EQ(g.levels[0].level, Level::kNuma);
  EXPECT_EQ(g.levels[1].level, Level::kL3);
  ASSERT_EQ(parse_topology_choice("flat", &c, &why), 0);
  EXPECT_TRUE(group_ranks(ranks, c.levels).flat());
  ASSERT_EQ(parse_topology_choice("auto", &c, &why), 0);
  EXPECT_TRUE(c.automatic);
  EXPECT_EQ(c.levels, kAllLevelsMask);
  TopologyChoice list;
  ASSERT_EQ(parse_topology_choice("numa,l3", &list, &why), 0);
  const TopologyChoice numa_l3{false, level_bit(Level::kNuma) | level_bit(Level::kL3)};
  EXPECT_EQ(list.encoded(), numa_l3.encoded());
  EXPECT_NE(list.encoded(), c.encoded());
  for (const char *bad : {"", "numa,", "numa,numa", "socket", "auto,numa", "flat,l3"}) {
    EXPECT_EQ(parse_topology_choice(bad, &c, &why), -EINVAL) << bad;
    EXPECT_NE(why.find("expected `auto`, `flat` or a comma list"), std::string::npos) << why;
  }
}

// The declared setting refuses a bad value by its name, so agree_settings() refuses it on every
// rank when a node communicator is created; two spellings of one choice are equal.
TEST(Topology, SettingIsDeclaredAndChecked) {
  const SettingDef *d = find_setting("SHADDR_TOPOLOGY");
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->equal);
  EXPECT_EQ(d->layer, SettingLayer::kLibrary);
  uint64_t a = 0, b = 0;
  std::string why;
  EXPECT_EQ(parse_setting(*d, "numa,package", &a, &why), 0) << why;
  EXPECT_EQ(parse_setting(*d, "PACKAGE,numa", &b, &why), 0) << why;
  EXPECT_EQ(a, b);
  EXPECT_EQ(parse_setting(*d, "numa,cores", &a, &why), -EINVAL);
  EXPECT_EQ(why.rfind("SHADDR_TOPOLOGY=numa,cores: 'cores' is not a level", 0), 0u) << why;
  setenv("SHADDR_TOPOLOGY", "l3", 1);
  TopologyChoice c;
  EXPECT_EQ(topology_choice_from_env(&c, &why), 0) << why;
  EXPECT_EQ(c.levels, level_bit(Level::kL3));
  setenv("SHADDR_TOPOLOGY", "numa;l3", 1);
  EXPECT_EQ(topology_choice_from_env(&c, &why), -EINVAL);
  EXPECT_NE(why.find("SHADDR_TOPOLOGY=numa;l3"), std::string::npos) << why;
  unsetenv("SHADDR_TOPOLOGY");
  EXPECT_EQ(topology_choice_from_env(&c, &why), 0);
  EXPECT_TRUE(c.automatic);
}

TEST(Topology, LocationsSurviveTheirEncoding) {
  const Topology t = load("epyc9654-2s-nps4");
  const RankLocation loc = locate(t, t.at(Level::kNuma)[3].cpus, 80);
  uint8_t bytes[kLocationBytes];
  encode_location(loc, bytes);
  RankLocation back;
  std::string why;
  ASSERT_EQ(decode_location(bytes, &back, &why), 0) << why;
  EXPECT_EQ(back.cpu, 80);
  EXPECT_EQ(back.bound, loc.bound);
  EXPECT_EQ(back.domain, loc.domain);
  EXPECT_EQ(back.domain[static_cast<size_t>(Level::kNuma)], 72);
  EXPECT_EQ(back.bound, level_bit(Level::kPackage) | level_bit(Level::kNuma));
  bytes[0] ^= 1;  // another format
  EXPECT_EQ(decode_location(bytes, &back, &why), -EINVAL);
  encode_location(loc, bytes);
  bytes[8] = 0xf0;  // a level that does not exist
  EXPECT_EQ(decode_location(bytes, &back, &why), -EINVAL);
}

// Node ranks (forked processes) each located on its own CPU of the EPYC exchange their
// locations and all derive the grouping the locations give.
TEST(Topology, GatheredLocationsGiveEveryRankTheSameGroups) {
  const Topology t = load("epyc9654-2s-nps4");
  const std::vector<int> cpus = {100, 0, 1, 30, 101, 31, 8};  // node rank r on cpus[r]
  const Grouping want = group_ranks(bound_to(t, cpus), kAllLevelsMask);
  ASSERT_EQ(want.levels.size(), 3u) << describe(want);
  EXPECT_EQ(run_forked(static_cast<int>(cpus.size()), [&](const shaddr_host &h) {
              std::vector<RankLocation> all;
              std::string why;
              if (gather_locations(h, bound_to(t, {cpus[static_cast<size_t>(h.rank)]})[0], &all,
                                   &why)) {
                std::fprintf(stderr, "rank %d: %s\n", h.rank, why.c_str());
                return 1;
              }
              const Grouping g = group_ranks(all, kAllLevelsMask);
              if (g.levels.size() != want.levels.size()) return 2;
              for (size_t i = 0; i < g.levels.size(); i++)
                if (g.levels[i].group != want.levels[i].group ||
                    g.levels[i].leader != want.levels[i].leader)
                  return 3;
              return 0;
            }),
            0);
}

TEST(Topology, HwlocRefusesAFileThatIsNoTopology) {
  Topology t;
  std::string why;
  EXPECT_NE(load_topology_hwloc("/nonexistent/machine.xml", &t, &why), 0);
  EXPECT_NE(why.find("/nonexistent/machine.xml"), std::string::npos) << why;
}

// A sysfs tree of a 2-package machine (2 cores x 2 threads per package, an L3 per package, a
// private L2 per core), NUMA nodes 0 and 1 and a memory-only node 2, as Linux lays it out.
class TopologySysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shaddr-topology-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    put("cpu/online", "0-7\n");
    for (int c = 0; c < 8; c++) {
      const int pkg = c % 4 < 2 ? 0 : 1;  // cpus 0,1,4,5 package 0; threads c and c+4 a core
      const std::string dir = "cpu/cpu" + std::to_string(c);
      put(dir + "/topology/physical_package_id", std::to_string(pkg) + "\n");
      put(dir + "/topology/package_cpus_list", pkg ? "2-3,6-7\n" : "0-1,4-5\n");
      const std::string core = std::to_string(c % 4) + "," + std::to_string(c % 4 + 4) + "\n";
      put(dir + "/topology/core_cpus_list", core);
      cache(dir + "/cache/index0", 1, "Data", core, "48K");
      cache(dir + "/cache/index1", 1, "Instruction", core, "32K");
      cache(dir + "/cache/index2", 2, "Unified", core, "2048K");
      cache(dir + "/cache/index3", 3, "Unified", pkg ? "2-3,6-7\n" : "0-1,4-5\n", "32M");
    }
    put("node/node0/cpulist", "0-1,4-5\n");
    put("node/node1/cpulist", "2-3,6-7\n");
    put("node/node2/cpulist", "\n");
    put("node/online", "0-2\n");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void put(const std::string &rel, const std::string &text) {
    const std::filesystem::path p = std::filesystem::path(root_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void cache(const std::string &dir, int level, const char *type, const std::string &shared,
             const char *size) {
    put(dir + "/level", std::to_string(level) + "\n");
    put(dir + "/type", std::string(type) + "\n");
    put(dir + "/shared_cpu_list", shared);
    put(dir + "/size", std::string(size) + "\n");
  }
  std::string root_;
};

TEST_F(TopologySysfs, FallbackReadsTheLevels) {
  Topology t;
  std::string why;
  ASSERT_EQ(load_topology_sysfs(root_, &t, &why), 0) << why;
  EXPECT_EQ(t.cpus.str(), "0-7");
  ASSERT_EQ(domains(t, Level::kPackage), 2u);
  EXPECT_EQ(t.at(Level::kPackage)[1].cpus.str(), "2-3,6-7");
  EXPECT_EQ(t.at(Level::kPackage)[1].os_index, 1);
  ASSERT_EQ(domains(t, Level::kNuma), 2u) << "the memory-only node has no CPU";
  EXPECT_EQ(t.at(Level::kNuma)[0].cpus.str(), "0-1,4-5");
  ASSERT_EQ(domains(t, Level::kL3), 2u);
  EXPECT_EQ(t.at(Level::kL3)[0].cache_bytes, 32u << 20);
  EXPECT_EQ(domains(t, Level::kL2), 0u) << "each L2 holds one core (two threads)";
  const Grouping g = group_ranks(bound_to(t, range(0, 7)), kAllLevelsMask);
  ASSERT_EQ(g.levels.size(), 1u) << describe(g);
  expect_groups(g, 0, Level::kPackage, 2, 4);
  EXPECT_EQ(g.levels[0].same_as, level_bit(Level::kNuma) | level_bit(Level::kL3));
}

TEST_F(TopologySysfs, FallbackWithoutNumaNodesHasOne) {
  std::filesystem::remove_all(root_ + "/node");
  Topology t;
  std::string why;
  ASSERT_EQ(load_topology_sysfs(root_, &t, &why), 0) << why;
  ASSERT_EQ(domains(t, Level::kNuma), 1u);
  EXPECT_EQ(t.at(Level::kNuma)[0].cpus.str(), "0-7");
  std::filesystem::remove(root_ + "/cpu/online");
  EXPECT_EQ(load_topology_sysfs(root_, &t, &why), -ENOENT);
  EXPECT_NE(why.find("cpu/online"), std::string::npos);
}

// This machine: hwloc and sysfs agree on its packages and NUMA nodes, this process is located
// in them, and ranks on its CPUs group by NUMA node exactly where some node holds two of them
// and there are several nodes. This host has one NUMA node, one package and no shared cache:
// flat. A guest's test (tests/kmod) says with SHADDR_TEST_NUMA_NODES how many nodes it has.
TEST(Topology, ThisMachine) {
  const Topology &t = machine_topology();
  ASSERT_FALSE(t.cpus.empty()) << t.source;
  if (const char *want = std::getenv("SHADDR_TEST_NUMA_NODES")) {
    EXPECT_EQ(domains(t, Level::kNuma), static_cast<size_t>(std::atoi(want))) << t.source;
  }
  Topology sysfs;
  std::string why;
  ASSERT_EQ(load_topology_sysfs("/sys/devices/system", &sysfs, &why), 0) << why;
  for (Level l : {Level::kPackage, Level::kNuma}) {
    ASSERT_EQ(domains(sysfs, l), domains(t, l)) << level_name(l) << " " << t.source;
    for (size_t i = 0; i < domains(t, l); i++)
      EXPECT_EQ(sysfs.at(l)[i].cpus, t.at(l)[i].cpus) << level_name(l) << " " << i;
  }
  const Grouping g = group_ranks(bound_to(t, t.cpus.cpus()), kAllLevelsMask);
  const bool by_numa = std::any_of(g.levels.begin(), g.levels.end(), [](const LevelGroups &lv) {
    return lv.level == Level::kNuma || (lv.same_as & level_bit(Level::kNuma));
  });
  const auto &nodes = t.at(Level::kNuma);
  EXPECT_EQ(by_numa, nodes.size() > 1 && std::any_of(nodes.begin(), nodes.end(), [](auto &d) {
                       return d.cpus.count() > 1;
                     })) << describe(g);
  if (nodes.size() == 1 && domains(t, Level::kPackage) == 1 && domains(t, Level::kL3) <= 1 &&
      domains(t, Level::kL2) <= 1) {
    EXPECT_TRUE(g.flat()) << describe(g);
  }
  RankLocation me;
  CpuSet allowed;
  ASSERT_EQ(locate_self(t, &me, &allowed, &why), 0) << why;
  EXPECT_TRUE(t.cpus.has(me.cpu));
  EXPECT_TRUE(allowed.has(me.cpu));
  EXPECT_EQ(static_cast<bool>(me.bound & level_bit(Level::kNuma)),
            t.domain_holding(Level::kNuma, allowed) >= 0);
}

}  // namespace
}  // namespace shaddr
