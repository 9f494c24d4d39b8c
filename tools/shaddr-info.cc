// SPDX-License-Identifier: MIT
// shaddr-info: what the loaded shaddr module reports — ABI version, features, counters; and
// (--settings) every setting as libshaddr declares it; (--calibration-path) where this machine's
// calibration is read from; (--model) what libshaddr's cost model reads here, as JSON;
// (--plan) the limits of the plan a node communicator of this process alone gets, as JSON;
// (--topology) the machine's or an hwloc XML file's levels and how they group ranks.
#include <getopt.h>
#include <linux/shaddr.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <string>
#include <vector>

#include "shaddr/coll.h"
#include "shaddr/settings.h"
#include "shaddr/shaddr.h"
#include "plan_model.h"
#include "settings.h"
#include "topology.h"

namespace {

constexpr const char *kStatsDir = "/sys/class/misc/" SHADDR_DEVICE_NAME "/stats";

void usage(FILE *out) {
  std::fprintf(out,
               "Usage: shaddr-info [--help] [--settings[=markdown]] [--calibration-path]\n"
               "                   [--model] [--plan[=FALLBACK]]\n"
               "       shaddr-info --topology [FILE.xml] [--cpus LIST] [--json]\n"
               "Prints the shaddr kernel module's ABI version and features (from the\n"
               "SHADDR_IOC_VERSION ioctl on $SHADDR_DEVICE or /dev/shaddr) and its counters\n"
               "(%s/*). Exit status 0 if the module answered, 1 otherwise.\n"
               "--settings: every setting (name, kind, default, scope, meaning) instead, and\n"
               "the value this environment gives it; =markdown: docs/settings.md's table.\n"
               "--calibration-path: the file libshaddr reads this machine's calibration from\n"
               "(`off` when $SHADDR_CALIBRATION is off); tools/shaddr-model calibrate writes it.\n"
               "--model: what libshaddr's cost model reads in this environment, as one JSON\n"
               "object: {\"calibration\": {\"path\", \"read\", \"date\"}, \"tuning_file\",\n"
               "\"error\"}; exit status 1 when the model cannot be read (a communicator would\n"
               "not be made).\n"
               "--plan[=FALLBACK]: the limits of the plan that a node communicator of this\n"
               "process alone gets against FALLBACK (none, mpich, openmpi, mpich-posix;\n"
               "default mpich), as one JSON object: {\"fallback\", \"ranks\", \"backend\",\n"
               "\"limits\": {\"slot_max\", \"bcast_fifo_max\", \"hier_segment\",\n"
               "\"hier_mesh_max\", \"bcast_levels_min\", \"allgather_levels_min\",\n"
               "\"reduce_levels_min\", \"allreduce_levels_min\"}}\n"
               "(docs/selection.md; a process alone has no levels: 0); exit status 1 when no\n"
               "communicator can be made.\n"
               "--topology: this machine's packages, NUMA nodes and shared caches (hwloc, else\n"
               "sysfs), or those of an hwloc XML FILE (lstopo's output), where this process\n"
               "runs, and with --cpus LIST (\"0-23,48\") how ranks bound one to each CPU of\n"
               "LIST would be grouped under $SHADDR_TOPOLOGY (docs/topology.md); --json: the\n"
               "levels and that grouping as one JSON object, for tools (not where this process\n"
               "runs).\n",
               kStatsDir);
}

std::string features_string(uint64_t f) {
  static const struct {
    uint64_t bit;
    const char *name;
  } names[] = {{SHADDR_FEAT_WINDOWS, "windows"},
               {SHADDR_FEAT_SEGMENTS, "segments"},
               {SHADDR_FEAT_HUGE_MAP, "huge-map"},
               {SHADDR_FEAT_READ_ONLY_PAGES, "read-only-pages"}};
  std::string s;
  for (const auto &n : names) {
    if (f & n.bit) {
      s += s.empty() ? "" : " ";
      s += n.name;
      f &= ~n.bit;
    }
  }
  if (f) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%sunknown:0x%llx", s.empty() ? "" : " ",
                  static_cast<unsigned long long>(f));
    s += buf;
  }
  return s.empty() ? "(none)" : s;
}

// 1048576 -> "1M": the exact binary suffix, as the settings' grammar reads it.
std::string human(uint64_t v, bool size) {
  if (v == UINT64_MAX) return "2^64-1";
  static const char suffix[] = "KMGT";
  int k = -1;
  while (size && v && v % 1024 == 0 && k < 3) {
    v /= 1024;
    k++;
  }
  return std::to_string(v) + (k >= 0 ? std::string(1, suffix[k]) : "");
}

std::string kind_of(const shaddr_setting_desc &d) {
  std::string kind = d.kind;
  if (*d.type) kind += std::string(", ") + d.type;
  const bool size = !std::strcmp(d.type, "size");
  if (size || !std::strcmp(d.type, "integer"))
    kind += " " + human(d.min_value, size) + "–" + human(d.max_value, size);
  if (*d.choices) {
    std::string words = d.choices;
    for (size_t p = 0; (p = words.find(' ', p)) != std::string::npos; p += 3)
      words.replace(p, 1, "`, `");
    kind += ": `" + words + "`";
  }
  return kind;
}

// The settings table: docs/settings.md's (markdown) or a plain listing with the values in force.
int print_settings(bool markdown) {
  shaddr_setting_desc d{};
  if (markdown) {
    std::printf("| setting | kind | default | scope | meaning |\n|---|---|---|---|---|\n");
    for (unsigned i = 0; shaddr_setting_describe(i, &d) == 0; i++) {
      const std::string kind = kind_of(d);
      std::printf("| `%s` | %s | %s | %s | %s |\n", d.name, kind.c_str(), d.default_value,
                  *d.scope ? d.scope : "—", d.doc);
    }
    return 0;
  }
  for (unsigned i = 0; shaddr_setting_describe(i, &d) == 0; i++) {
    const char *v = std::getenv(d.name);
    std::printf("%s\n  %s; default %s%s%s%s\n  %s\n", d.name, kind_of(d).c_str(),
                d.default_value, *d.scope ? "; " : "", d.scope,
                v ? (std::string("; set here to ") + v).c_str() : "", d.doc);
  }
  return 0;
}

// The calibration's path as libshaddr forms it, so that tools never derive the machine key.
int print_calibration_path() {
  if (shaddr::SettingsReader().text("SHADDR_CALIBRATION", "") == "off") {
    std::printf("off\n");
    return 0;
  }
  std::string path(256, '\0');
  int n = shaddr_calibration_path(path.data(), path.size());
  if (n >= 0 && static_cast<size_t>(n) >= path.size()) {
    path.resize(static_cast<size_t>(n) + 1);
    n = shaddr_calibration_path(path.data(), path.size());
  }
  if (n < 0) {
    std::fprintf(stderr, "shaddr-info: no calibration path: %s\n", std::strerror(-n));
    return 1;
  }
  path.resize(static_cast<size_t>(n));
  std::printf("%s\n", path.c_str());
  return 0;
}

// @s as a JSON string.
std::string json(const std::string &s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", ch);
      out += esc;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string json_or_null(const std::string &s) { return s.empty() ? "null" : json(s); }

// What a node communicator made here would load as its cost model (plan_model.h): which
// calibration it reads, of when, and the tuning file; tools read this, not libshaddr's
// SHADDR_VERBOSE prose.
int print_model() {
  shaddr::CostModel m;
  std::string why;
  const int err = m.load(&why);
  const std::string path = shaddr::calibration_path();
  const std::string tuning = shaddr::SettingsReader().text("SHADDR_TUNING_FILE", "");
  std::printf("{\"calibration\": {\"path\": %s, \"read\": %s, \"date\": %s}, "
              "\"tuning_file\": %s, \"error\": %s}\n",
              json_or_null(path).c_str(), !err && !m.calibration().empty() ? "true" : "false",
              json_or_null(err ? "" : m.calibration_date()).c_str(), json_or_null(tuning).c_str(),
              err ? json(why).c_str() : "null");
  return err ? 1 : 0;
}

// The plan's limits (coll.h shaddr_plan_limits) as libshaddr decides them here, from a node
// communicator of this one process: tools read them (shaddr-bench-multihost: the hierarchy's
// piece size), not shaddr_plan_format's text. slot_max and bcast_fifo_max depend on the node
// size and the backend; the hierarchy's limits do not.
int print_plan(const char *fallback_name) {
  static const char *const kFallbacks[] = {"none", "mpich", "openmpi", "mpich-posix"};
  static_assert(std::size(kFallbacks) == SHADDR_FALLBACK_COUNT);
  int f = 0;
  while (f < SHADDR_FALLBACK_COUNT && std::strcmp(kFallbacks[f], fallback_name)) f++;
  if (f == SHADDR_FALLBACK_COUNT) {
    std::fprintf(stderr, "shaddr-info: --plan=%s: not none, mpich, openmpi or mpich-posix\n",
                 fallback_name);
    return 2;
  }
  shaddr_host host{};
  host.size = 1;
  host.allgather = [](const void *send, void *recv, size_t bytes, void *) {
    std::memcpy(recv, send, bytes);
    return 0;
  };
  host.barrier = [](void *) { return 0; };
  shaddr_comm_t *comm = nullptr;
  if (int err = shaddr_comm_create(&host, &comm)) {
    std::fprintf(stderr, "shaddr-info: no node communicator: %s (%s)\n", shaddr_last_error(),
                 std::strerror(-err));
    return 1;
  }
  const shaddr_plan *p = shaddr_comm_plan(comm, static_cast<shaddr_fallback>(f));
  if (p)
    std::printf("{\"fallback\": %s, \"ranks\": %d, \"backend\": %s, \"limits\": "
                "{\"slot_max\": %zu, \"bcast_fifo_max\": %zu, \"hier_segment\": %zu, "
                "\"hier_mesh_max\": %zu, \"bcast_levels_min\": %zu, "
                "\"allgather_levels_min\": %zu, \"reduce_levels_min\": %zu, "
                "\"allreduce_levels_min\": %zu}}\n",
                json(kFallbacks[f]).c_str(), p->ranks, json(shaddr_comm_backend(comm)).c_str(),
                p->limits.slot_max, p->limits.bcast_fifo_max, p->limits.hier_segment,
                p->limits.hier_mesh_max, p->limits.bcast_levels_min,
                p->limits.allgather_levels_min, p->limits.reduce_levels_min,
                p->limits.allreduce_levels_min);
  else
    std::fprintf(stderr, "shaddr-info: no plan: %s\n", shaddr_last_error());
  shaddr_comm_free(comm);
  return p ? 0 : 1;
}

std::string bytes_text(uint64_t b) {
  return b >= (1u << 20) && b % (1u << 20) == 0 ? std::to_string(b >> 20) + " MiB"
         : b >= 1024 && b % 1024 == 0           ? std::to_string(b >> 10) + " KiB"
                                                : std::to_string(b) + " B";
}

// Ranks bound one to each CPU of @rank_cpus, located in @topo: 0, or 2 with a message when a
// CPU is not in it.
int locate_ranks(const shaddr::Topology &topo, const std::vector<int> &rank_cpus,
                 std::vector<shaddr::RankLocation> *ranks) {
  for (int c : rank_cpus) {
    if (!topo.cpus.has(c)) {
      std::fprintf(stderr, "shaddr-info: --cpus: cpu %d is not in the topology (%s)\n", c,
                   topo.cpus.str().c_str());
      return 2;
    }
    shaddr::CpuSet one;
    one.add(c);
    ranks->push_back(shaddr::locate(topo, one, c));
  }
  return 0;
}

std::string json_ints(const std::vector<int> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string json_levels(shaddr::LevelMask mask) {
  std::string s = "[";
  for (shaddr::Level l : shaddr::kAllLevels)
    if (mask & shaddr::level_bit(l)) s += (s.size() > 1 ? ", " : "") + json(level_name(l));
  return s + "]";
}

// --topology --json: what the text shows of the levels and the grouping, as one object, so that
// tools (tools/shaddr_bench/topomodel.py) read it without parsing prose.
void print_topology_json(const shaddr::Topology &topo, const shaddr::TopologyChoice &choice,
                         const std::vector<int> &rank_cpus,
                         const std::vector<shaddr::RankLocation> &ranks) {
  using namespace shaddr;
  std::printf("{\"source\": %s, \"cpus\": %s, \"levels\": {", json(topo.source).c_str(),
              json(topo.cpus.str()).c_str());
  for (size_t i = 0; i < kLevels; i++) {
    std::printf("%s%s: [", i ? ", " : "", json(level_name(kAllLevels[i])).c_str());
    const std::vector<Domain> &doms = topo.domains[i];
    for (size_t d = 0; d < doms.size(); d++)
      std::printf("%s{\"os_index\": %d, \"cpus\": %s, \"cache_bytes\": %llu}", d ? ", " : "",
                  doms[d].os_index, json(doms[d].cpus.str()).c_str(),
                  static_cast<unsigned long long>(doms[d].cache_bytes));
    std::printf("]");
  }
  std::printf("}, \"setting\": {\"automatic\": %s, \"levels\": %s}",
              choice.automatic ? "true" : "false", json_levels(choice.levels).c_str());
  if (!ranks.empty()) {
    const Grouping g = group_ranks(ranks, choice.levels);
    std::printf(", \"rank_cpus\": %s, \"grouping\": {\"levels\": [", json_ints(rank_cpus).c_str());
    for (size_t i = 0; i < g.levels.size(); i++) {
      const LevelGroups &lv = g.levels[i];
      std::printf("%s{\"level\": %s, \"same_as\": %s, \"group\": %s, \"leader\": %s, "
                  "\"domain\": %s}",
                  i ? ", " : "", json(level_name(lv.level)).c_str(),
                  json_levels(lv.same_as).c_str(), json_ints(lv.group).c_str(),
                  json_ints(lv.leader).c_str(), json_ints(lv.domain).c_str());
    }
    std::printf("], \"notes\": [");
    for (size_t i = 0; i < g.notes.size(); i++)
      std::printf("%s%s", i ? ", " : "", json(g.notes[i]).c_str());
    std::printf("]}");
  }
  std::printf("}\n");
}

// The levels (each domain with its CPUs), this process's place in them (the machine only),
// and the grouping of ranks bound to the CPUs of @cpus_arg (one rank per CPU, in its order);
// @as_json: levels and grouping as JSON (print_topology_json).
int print_topology(const char *file, const char *cpus_arg, bool as_json) {
  using namespace shaddr;
  TopologyChoice choice;
  std::string why;
  if (topology_choice_from_env(&choice, &why)) {
    std::fprintf(stderr, "shaddr-info: %s\n", why.c_str());
    return 2;
  }
  // One rank per CPU, in the order given, each CPU once: "8-15,0-7" puts node rank 0 on cpu 8.
  std::vector<int> rank_cpus;
  for (std::string_view rest = cpus_arg ? cpus_arg : ""; !rest.empty();) {
    const size_t comma = std::min(rest.find(','), rest.size());
    CpuSet part;
    if (CpuSet::parse(rest.substr(0, comma), &part, &why) || part.empty()) {
      std::fprintf(stderr, "shaddr-info: --cpus %s: %s\n", cpus_arg,
                   part.empty() && why.empty() ? "an empty part" : why.c_str());
      return 2;
    }
    for (int c : part.cpus())
      if (std::find(rank_cpus.begin(), rank_cpus.end(), c) == rank_cpus.end())
        rank_cpus.push_back(c);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  Topology loaded;
  if (file && load_topology_hwloc(file, &loaded, &why)) {
    std::fprintf(stderr, "shaddr-info: %s\n", why.c_str());
    return 1;
  }
  const Topology &topo = file ? loaded : machine_topology();
  std::vector<RankLocation> ranks;
  if (int err = locate_ranks(topo, rank_cpus, &ranks)) return err;
  if (as_json) {
    print_topology_json(topo, choice, rank_cpus, ranks);
    return 0;
  }
  std::printf("source:      %s\ncpus:        %s (%d)\n", topo.source.c_str(),
              topo.cpus.str().c_str(), topo.cpus.count());
  for (Level l : kAllLevels) {
    const std::vector<Domain> &doms = topo.at(l);
    std::printf("%-12s %zu domain%s%s\n", (std::string(level_name(l)) + ":").c_str(),
                doms.size(), doms.size() == 1 ? "" : "s",
                doms.empty() && (l == Level::kL3 || l == Level::kL2)
                    ? " (none shared by more than one core)"
                    : "");
    for (const Domain &d : doms) {
      std::printf("  %-8s %-4s cpus %s (%d)", level_name(l),
                  d.os_index >= 0 ? std::to_string(d.os_index).c_str() : "?",
                  d.cpus.str().c_str(), d.cpus.count());
      if (d.cache_bytes) std::printf(", %s", bytes_text(d.cache_bytes).c_str());
      std::printf("\n");
    }
  }
  std::string levels;
  for (Level l : kAllLevels)
    if (choice.levels & level_bit(l))
      levels += std::string(levels.empty() ? "" : ",") + level_name(l);
  std::printf("SHADDR_TOPOLOGY: %s\n", choice.automatic ? "auto (every level)"
                                         : choice.levels ? levels.c_str()
                                                         : "flat");
  if (!file) {
    RankLocation me;
    CpuSet allowed;
    if (locate_self(topo, &me, &allowed, &why)) {
      std::printf("this process: not located: %s\n", why.c_str());
    } else {
      std::printf("this process: runs on cpu %d, may run on cpus %s\n", me.cpu,
                  allowed.str().c_str());
      for (Level l : kAllLevels) {
        // The domain by the hardware's number, else (a cache without one) by its first CPU.
        const int32_t first = me.domain[static_cast<size_t>(l)];
        const int d = topo.domain_of_cpu(l, first);
        const int os = d < 0 ? -1 : topo.at(l)[static_cast<size_t>(d)].os_index;
        const std::string name = std::string(level_name(l)) +
                                 (os >= 0 ? " " + std::to_string(os)
                                          : " of cpu " + std::to_string(first));
        std::printf("  %-8s %s\n", level_name(l),
                    d < 0                        ? "none"
                    : me.bound & level_bit(l) ? ("bound inside " + name).c_str()
                                              : ("not bound inside one; runs in " + name +
                                                 " for now")
                                                    .c_str());
      }
    }
  }
  if (!ranks.empty()) {
    std::printf("grouping of %zu ranks bound to cpus %s:\n", ranks.size(), cpus_arg);
    const std::string text = describe(group_ranks(ranks, choice.levels));
    for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
      std::printf("  %s\n", text.substr(pos, nl - pos).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  // --settings[=markdown]: the settings table, as text or as the docs' Markdown.
  static const option kLong[] = {{"settings", optional_argument, nullptr, 's'},
                                 {"calibration-path", no_argument, nullptr, 'c'},
                                 {"model", no_argument, nullptr, 'm'},
                                 {"plan", optional_argument, nullptr, 'P'},
                                 {"topology", no_argument, nullptr, 't'},
                                 {"cpus", required_argument, nullptr, 'p'},
                                 {"json", no_argument, nullptr, 'j'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  bool topology = false, as_json = false;
  const char *cpus = nullptr;
  for (int c; (c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1;) {
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 't' || c == 'p' || c == 'j') {
      topology = true;
      if (c == 'p') cpus = optarg;
      if (c == 'j') as_json = true;
      continue;
    }
    if (c == 'c') return print_calibration_path();
    if (c == 'm') return print_model();
    if (c == 'P') return print_plan(optarg ? optarg : "mpich");
    if (c == 's' && !optarg) return print_settings(false);
    if (c == 's' && !std::strcmp(optarg, "markdown")) return print_settings(true);
    if (c == 's') std::fprintf(stderr, "shaddr-info: --settings=%s: not markdown\n", optarg);
    usage(stderr);
    return 2;
  }
  if (topology && optind + 1 >= argc)
    return print_topology(optind < argc ? argv[optind] : nullptr, cpus, as_json);
  if (optind < argc) {
    std::fprintf(stderr, "shaddr-info: unknown argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }

  shaddr_module_info info{};
  int err = shaddr_module_query(&info);
  std::printf("device:      %s\n", shaddr_device_path());
  if (err && err != -EPROTO) {
    std::printf("module:      not usable: %s\n", shaddr_last_error());
    return 1;
  }
  std::printf("abi:         %u.%u (libshaddr speaks %u.x)%s\n", info.abi_major, info.abi_minor,
              shaddr_abi_major(), err ? "  MISMATCH" : "");
  std::printf("features:    %s\n", features_string(info.features).c_str());

  std::error_code ec;
  std::filesystem::directory_iterator it(kStatsDir, ec);
  if (ec) {
    std::printf("counters:    unavailable (%s: %s)\n", kStatsDir, ec.message().c_str());
  } else {
    std::printf("counters:    (%s)\n", kStatsDir);
    std::vector<std::filesystem::path> files;
    for (const auto &entry : it) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto &file : files) {
      std::ifstream in(file);
      std::string value;
      std::getline(in, value);
      std::printf("  %-24s %s\n", file.filename().c_str(), value.c_str());
    }
  }
  return err ? 1 : 0;
}
