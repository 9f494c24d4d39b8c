// SPDX-License-Identifier: MIT
// The topology's pure parts (CPU sets, locations, the grouping, SHADDR_TOPOLOGY) and its sysfs
// reader, the fallback where hwloc is unavailable. hwloc's reader is topology_hwloc.cc.
#include "topology.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "settings.h"
#include "size_parse.h"

namespace shaddr {

// --- CpuSet ---

void CpuSet::add(int cpu) {
  const size_t w = static_cast<size_t>(cpu) / 64;
  if (bits_.size() <= w) bits_.resize(w + 1, 0);
  bits_[w] |= uint64_t{1} << (cpu % 64);
}

bool CpuSet::has(int cpu) const {
  const size_t w = static_cast<size_t>(cpu) / 64;
  return cpu >= 0 && w < bits_.size() && (bits_[w] >> (cpu % 64) & 1);
}

int CpuSet::count() const {
  int n = 0;
  for (uint64_t w : bits_) n += std::popcount(w);
  return n;
}

int CpuSet::first() const {
  for (size_t w = 0; w < bits_.size(); w++)
    if (bits_[w]) return static_cast<int>(w * 64) + std::countr_zero(bits_[w]);
  return -1;
}

int CpuSet::last() const {
  for (size_t w = bits_.size(); w-- > 0;)
    if (bits_[w]) return static_cast<int>(w * 64) + 63 - std::countl_zero(bits_[w]);
  return -1;
}

bool CpuSet::subset_of(const CpuSet &other) const {
  for (size_t w = 0; w < bits_.size(); w++)
    if (bits_[w] & ~(w < other.bits_.size() ? other.bits_[w] : 0)) return false;
  return true;
}

CpuSet CpuSet::operator&(const CpuSet &other) const {
  CpuSet r;
  r.bits_.resize(std::min(bits_.size(), other.bits_.size()));
  for (size_t w = 0; w < r.bits_.size(); w++) r.bits_[w] = bits_[w] & other.bits_[w];
  return r;
}

bool CpuSet::operator==(const CpuSet &other) const {
  return subset_of(other) && other.subset_of(*this);
}

std::vector<int> CpuSet::cpus() const {
  std::vector<int> v;
  for (size_t w = 0; w < bits_.size(); w++)
    for (uint64_t b = bits_[w]; b; b &= b - 1)
      v.push_back(static_cast<int>(w * 64) + std::countr_zero(b));
  return v;
}

std::string CpuSet::str() const {
  std::string s;
  const std::vector<int> v = cpus();
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) j++;
    s += (s.empty() ? "" : ",") + std::to_string(v[i]);
    if (j > i) s += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return s;
}

int CpuSet::parse(std::string_view list, CpuSet *out, std::string *why) {
  constexpr uint64_t kMaxCpu = 1u << 20;  // far beyond any machine; bounds the bitmap
  CpuSet set;
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.remove_suffix(1);
  while (!list.empty() && list.front() == ' ') list.remove_prefix(1);
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string_view part = list.substr(pos, comma - pos);
    const size_t dash = part.find('-');
    uint64_t lo = 0, hi = 0;
    const bool ok =
        parse_size(part.substr(0, dash), &lo, false) == SizeError::kNone &&
        (dash == std::string_view::npos
             ? (hi = lo, true)
             : parse_size(part.substr(dash + 1), &hi, false) == SizeError::kNone) &&
        lo <= hi && hi < kMaxCpu;
    if (!ok) {
      *why = "'" + std::string(part) + "' is not a CPU number or range lo-hi (in '" +
             std::string(list) + "')";
      return -EINVAL;
    }
    for (uint64_t c = lo; c <= hi; c++) set.add(static_cast<int>(c));
    pos = comma + 1;
  }
  *out = std::move(set);
  return 0;
}

// --- levels ---

const char *level_name(Level l) {
  static const char *const kNames[kLevels] = {"package", "numa", "l3", "l2"};
  return kNames[static_cast<size_t>(l)];
}

int Topology::domain_holding(Level l, const CpuSet &set) const {
  if (set.empty()) return -1;
  const std::vector<Domain> &d = at(l);
  for (size_t i = 0; i < d.size(); i++)
    if (set.subset_of(d[i].cpus)) return static_cast<int>(i);
  return -1;
}

int Topology::domain_of_cpu(Level l, int cpu) const {
  const std::vector<Domain> &d = at(l);
  for (size_t i = 0; i < d.size(); i++)
    if (d[i].cpus.has(cpu)) return static_cast<int>(i);
  return -1;
}

// --- the sysfs reader ---

namespace {

bool read_line(const std::string &path, std::string *out) {
  std::ifstream in(path);
  return static_cast<bool>(std::getline(in, *out));
}

// Adds @cpus as a domain of @level unless a domain of the same CPUs is there.
void add_domain(std::vector<Domain> *level, const CpuSet &cpus, int os_index, uint64_t bytes) {
  for (const Domain &d : *level)
    if (d.cpus == cpus) return;
  level->push_back(Domain{os_index, bytes, cpus});
}

int read_int(const std::string &path) {
  std::string s;
  uint64_t v = 0;
  return read_line(path, &s) && parse_size(s, &v, false) == SizeError::kNone && v < INT32_MAX
             ? static_cast<int>(v)
             : -1;
}

}  // namespace

void finish_topology(Topology *t, const std::vector<CpuSet> &cores) {
  for (auto &level : t->domains)
    std::sort(level.begin(), level.end(),
              [](const Domain &a, const Domain &b) { return a.cpus.first() < b.cpus.first(); });
  for (Level l : {Level::kL3, Level::kL2}) {
    std::vector<Domain> &d = t->domains[static_cast<size_t>(l)];
    const bool shared = std::any_of(d.begin(), d.end(), [&](const Domain &dom) {
      return std::count_if(cores.begin(), cores.end(), [&](const CpuSet &core) {
               return core.subset_of(dom.cpus);
             }) > 1;
    });
    if (!shared) d.clear();
  }
}

int load_topology_sysfs(const std::string &root, Topology *out, std::string *why) {
  Topology t;
  std::string online;
  if (!read_line(root + "/cpu/online", &online)) {
    *why = "cannot read " + root + "/cpu/online";
    return -ENOENT;
  }
  if (int err = CpuSet::parse(online, &t.cpus, why)) {
    *why = root + "/cpu/online: " + *why;
    return err;
  }
  std::vector<CpuSet> cores;
  for (int cpu : t.cpus.cpus()) {
    const std::string dir = root + "/cpu/cpu" + std::to_string(cpu);
    std::string list;
    CpuSet set;
    std::string ignored;
    // Older kernels name the package's CPUs core_siblings_list, the core's thread_siblings_list.
    if ((read_line(dir + "/topology/package_cpus_list", &list) ||
         read_line(dir + "/topology/core_siblings_list", &list)) &&
        !CpuSet::parse(list, &set, &ignored))
      add_domain(&t.domains[static_cast<size_t>(Level::kPackage)], set,
                 read_int(dir + "/topology/physical_package_id"), 0);
    if ((read_line(dir + "/topology/core_cpus_list", &list) ||
         read_line(dir + "/topology/thread_siblings_list", &list)) &&
        !CpuSet::parse(list, &set, &ignored) &&
        std::find(cores.begin(), cores.end(), set) == cores.end())
      cores.push_back(set);
    for (int k = 0;; k++) {
      const std::string idx = dir + "/cache/index" + std::to_string(k);
      std::string type, size;
      const int level = read_int(idx + "/level");
      if (level < 0 || !read_line(idx + "/type", &type)) break;
      if ((level != 2 && level != 3) || type == "Instruction") continue;
      if (!read_line(idx + "/shared_cpu_list", &list) || CpuSet::parse(list, &set, &ignored))
        continue;
      uint64_t bytes = 0;  // sysfs writes "1024K", "32M": the one size grammar
      if (!read_line(idx + "/size", &size) || parse_size(size, &bytes, true) != SizeError::kNone)
        bytes = 0;
      add_domain(&t.domains[static_cast<size_t>(level == 3 ? Level::kL3 : Level::kL2)], set,
                 read_int(idx + "/id"), bytes);
    }
  }
  // NUMA nodes: node/nodeN/cpulist; a kernel without NUMA has no node/ and one node 0.
  std::error_code ec;
  std::vector<Domain> &numa = t.domains[static_cast<size_t>(Level::kNuma)];
  for (const auto &entry : std::filesystem::directory_iterator(root + "/node", ec)) {
    const std::string name = entry.path().filename();
    uint64_t id = 0;
    std::string list;
    CpuSet set;
    std::string ignored;
    if (name.rfind("node", 0) != 0 ||
        parse_size(std::string_view(name).substr(4), &id, false) != SizeError::kNone ||
        !read_line(entry.path() / "cpulist", &list) || CpuSet::parse(list, &set, &ignored))
      continue;
    set = set & t.cpus;
    if (!set.empty()) add_domain(&numa, set, static_cast<int>(id), 0);  // memory-only: no CPU
  }
  if (numa.empty()) numa.push_back(Domain{0, 0, t.cpus});
  if (t.at(Level::kPackage).empty())
    t.domains[static_cast<size_t>(Level::kPackage)].push_back(Domain{0, 0, t.cpus});
  finish_topology(&t, cores);
  t.source = "sysfs " + root;
  *out = std::move(t);
  return 0;
}

// --- locations ---

RankLocation locate(const Topology &topo, const CpuSet &allowed, int cpu) {
  RankLocation loc;
  loc.cpu = cpu;
  const CpuSet mine = allowed & topo.cpus;
  for (Level l : kAllLevels) {
    const size_t i = static_cast<size_t>(l);
    int d = topo.domain_holding(l, mine);
    if (d >= 0) loc.bound |= level_bit(l);
    else d = topo.domain_of_cpu(l, cpu);
    loc.domain[i] = d >= 0 ? topo.at(l)[static_cast<size_t>(d)].cpus.first() : -1;
  }
  return loc;
}

int locate_self(const Topology &topo, RankLocation *out, CpuSet *allowed, std::string *why) {
  // The kernel refuses a mask shorter than its nr_cpu_ids: grow until it fits.
  for (size_t ncpus = std::max(1024, topo.cpus.last() + 1);; ncpus *= 2) {
    cpu_set_t *mask = CPU_ALLOC(ncpus);
    if (!mask) return -ENOMEM;
    const size_t bytes = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(bytes, mask);
    if (sched_getaffinity(0, bytes, mask)) {
      const int err = errno;
      CPU_FREE(mask);
      if (err == EINVAL && ncpus < (1u << 20)) continue;
      *why = std::string("sched_getaffinity: ") + std::strerror(err);
      return -err;
    }
    CpuSet set;
    for (size_t c = 0; c < ncpus; c++)
      if (CPU_ISSET_S(c, bytes, mask)) set.add(static_cast<int>(c));
    CPU_FREE(mask);
    const int cpu = sched_getcpu();
    if (cpu < 0) {
      *why = std::string("sched_getcpu: ") + std::strerror(errno);
      return -errno;
    }
    *out = locate(topo, set, cpu);
    *allowed = std::move(set);
    return 0;
  }
}

namespace {

constexpr uint32_t kLocationFormat = 0x5ad70001;  // "shaddr topology", version 1

void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

void encode_location(const RankLocation &loc, uint8_t out[kLocationBytes]) {
  put32(out, kLocationFormat);
  put32(out + 4, static_cast<uint32_t>(loc.cpu));
  put32(out + 8, loc.bound);
  for (size_t i = 0; i < kLevels; i++)
    put32(out + 12 + 4 * i, static_cast<uint32_t>(loc.domain[i]));
}

int decode_location(const uint8_t in[kLocationBytes], RankLocation *out, std::string *why) {
  RankLocation loc;
  loc.cpu = static_cast<int32_t>(get32(in + 4));
  loc.bound = get32(in + 8);
  bool ok = get32(in) == kLocationFormat && loc.cpu >= -1 && !(loc.bound & ~kAllLevelsMask);
  for (size_t i = 0; i < kLevels; i++) {
    loc.domain[i] = static_cast<int32_t>(get32(in + 12 + 4 * i));
    ok = ok && loc.domain[i] >= -1;
  }
  if (!ok) {
    *why = "not a rank location of this libshaddr (format or values out of range)";
    return -EINVAL;
  }
  *out = loc;
  return 0;
}

int gather_locations(const shaddr_host &host, const RankLocation &mine,
                     std::vector<RankLocation> *all, std::string *why) {
  uint8_t bytes[kLocationBytes];
  encode_location(mine, bytes);
  std::vector<uint8_t> every(kLocationBytes * static_cast<size_t>(host.size));
  if (int err = host.allgather(bytes, every.data(), kLocationBytes, host.ctx)) {
    *why = "allgather of the ranks' locations failed";
    return err;
  }
  all->assign(static_cast<size_t>(host.size), RankLocation{});
  for (size_t r = 0; r < all->size(); r++)
    if (decode_location(every.data() + r * kLocationBytes, &(*all)[r], why)) {
      *why = "node rank " + std::to_string(r) + "'s location: " + *why;
      return -EINVAL;
    }
  return 0;
}

// --- the grouping ---

namespace {

// Ranks grouped by their domain at @l: groups numbered in the order of their lowest rank.
LevelGroups split(std::span<const RankLocation> ranks, Level l) {
  LevelGroups g{l, 0, {}, {}, {}};
  std::map<int32_t, int> group_of_domain;
  for (size_t r = 0; r < ranks.size(); r++) {
    const int32_t d = ranks[r].domain[static_cast<size_t>(l)];
    auto [it, fresh] = group_of_domain.emplace(d, static_cast<int>(g.leader.size()));
    if (fresh) {
      g.leader.push_back(static_cast<int>(r));
      g.domain.push_back(d);
    }
    g.group.push_back(it->second);
  }
  return g;
}

// Whether every group of @fine lies inside one group of @coarse.
bool nests(const LevelGroups &fine, const LevelGroups &coarse) {
  std::vector<int> parent(fine.groups(), -1);
  for (size_t r = 0; r < fine.group.size(); r++) {
    int &p = parent[static_cast<size_t>(fine.group[r])];
    if (p >= 0 && p != coarse.group[r]) return false;
    p = coarse.group[r];
  }
  return true;
}

}  // namespace

Grouping group_ranks(std::span<const RankLocation> ranks, LevelMask wanted) {
  Grouping out;
  std::vector<LevelGroups> candidates;
  for (Level l : kAllLevels) {
    if (!(wanted & level_bit(l))) continue;
    const std::string name = level_name(l);
    const size_t i = static_cast<size_t>(l);
    auto missing = std::find_if(ranks.begin(), ranks.end(),
                                [&](const RankLocation &r) { return r.domain[i] < 0; });
    if (missing != ranks.end()) {
      out.notes.push_back(name + ": not used: the CPU of rank " +
                          std::to_string(missing - ranks.begin()) + " is in no " + name +
                          " domain" + (l == Level::kL3 || l == Level::kL2
                                           ? " (no such cache shared by several cores)"
                                           : ""));
      continue;
    }
    auto loose = std::find_if(ranks.begin(), ranks.end(),
                              [&](const RankLocation &r) { return !(r.bound & level_bit(l)); });
    if (loose != ranks.end()) {
      out.notes.push_back(name + ": not used: rank " + std::to_string(loose - ranks.begin()) +
                          " is not bound inside one " + name +
                          " domain (it may run in several; bind the ranks to use this level)");
      continue;
    }
    LevelGroups g = split(ranks, l);
    if (g.groups() < 2) {
      out.notes.push_back(name + ": not used: every rank is in one domain");
      continue;
    }
    if (g.groups() == ranks.size()) {
      out.notes.push_back(name + ": not used: no two ranks share a domain");
      continue;
    }
    candidates.push_back(std::move(g));
  }
  // Coarse to fine: fewer groups first; equal counts in the levels' order.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const LevelGroups &a, const LevelGroups &b) {
                     return a.groups() < b.groups();
                   });
  for (LevelGroups &g : candidates) {
    if (!out.levels.empty()) {
      LevelGroups &coarser = out.levels.back();
      if (coarser.group == g.group) {
        coarser.same_as |= level_bit(g.level);
        continue;
      }
      if (!nests(g, coarser)) {
        out.notes.push_back(std::string(level_name(g.level)) + ": not used: its domains cross " +
                            level_name(coarser.level) + "'s");
        continue;
      }
    }
    out.levels.push_back(std::move(g));
  }
  return out;
}

std::string describe(const Grouping &g) {
  std::ostringstream s;
  if (g.flat()) s << "flat (no level groups these ranks)\n";
  for (const LevelGroups &lv : g.levels) {
    std::map<size_t, int> sizes;  // group size -> how many groups
    std::vector<size_t> size_of(lv.groups(), 0);
    for (int grp : lv.group) size_of[static_cast<size_t>(grp)]++;
    for (size_t n : size_of) sizes[n]++;
    s << level_name(lv.level);
    for (Level o : kAllLevels)
      if (lv.same_as & level_bit(o)) s << " = " << level_name(o);
    s << ": " << lv.groups() << " groups of";
    const char *sep = " ";
    for (auto [n, count] : sizes) {
      s << sep << (sizes.size() > 1 ? std::to_string(count) + "x" : "") << n;
      sep = ", ";
    }
    s << " ranks; leaders";
    for (size_t i = 0; i < lv.groups(); i++) s << (i ? "," : " ") << lv.leader[i];
    s << "\n";
  }
  for (const std::string &n : g.notes) s << n << "\n";
  return s.str();
}

// --- SHADDR_TOPOLOGY ---

int parse_topology_choice(std::string_view text, TopologyChoice *out, std::string *why) {
  auto lower = [](std::string_view s) {
    std::string r(s);
    for (char &c : r) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    while (!r.empty() && (r.back() == ' ' || r.back() == '\t')) r.pop_back();
    while (!r.empty() && (r.front() == ' ' || r.front() == '\t')) r.erase(0, 1);
    return r;
  };
  const std::string all = lower(text);
  if (all == "auto" || all == "flat") {
    *out = TopologyChoice{all == "auto", all == "auto" ? kAllLevelsMask : 0};
    return 0;
  }
  TopologyChoice c{false, 0};
  for (size_t pos = 0; pos <= all.size();) {
    const size_t comma = std::min(all.find(',', pos), all.size());
    const std::string word = lower(std::string_view(all).substr(pos, comma - pos));
    auto it = std::find_if(kAllLevels.begin(), kAllLevels.end(),
                           [&](Level l) { return word == level_name(l); });
    if (it == kAllLevels.end() || (c.levels & level_bit(*it))) {
      *why = (it == kAllLevels.end() ? "'" + word + "' is not a level"
                                     : "'" + word + "' is named twice") +
             ": expected `auto`, `flat` or a comma list of package, numa, l3, l2";
      return -EINVAL;
    }
    c.levels |= level_bit(*it);
    pos = comma + 1;
  }
  *out = c;
  return 0;
}

int check_topology_setting(std::string_view text, uint64_t *value, std::string *why) {
  TopologyChoice c;
  if (int err = parse_topology_choice(text, &c, why)) return err;
  *value = c.encoded();
  return 0;
}

int topology_choice_from_env(TopologyChoice *out, std::string *why) {
  const SettingDef *d = find_setting("SHADDR_TOPOLOGY");
  const std::string text = d ? setting_text(*d) : "";
  *out = TopologyChoice{};
  if (text.empty()) return 0;
  uint64_t ignored = 0;
  return parse_setting(*d, text, &ignored, why) ? -EINVAL : parse_topology_choice(text, out, why);
}

}  // namespace shaddr
