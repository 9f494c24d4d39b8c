// SPDX-License-Identifier: MIT
// The topology read with hwloc (this machine's, or an hwloc XML file's), and this machine's
// topology read once per process: hwloc, else sysfs (topology.cc), saying why.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "settings.h"
#include "topology.h"

#if SHADDR_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace shaddr {

#if SHADDR_HAVE_HWLOC
namespace {

CpuSet from_bitmap(hwloc_const_bitmap_t b) {
  CpuSet set;
  for (int i = hwloc_bitmap_first(b); i >= 0; i = hwloc_bitmap_next(b, i)) set.add(i);
  return set;
}

// The topology's objects of @type with CPUs (a memory-only NUMA node has none) into @level.
void add_level(hwloc_topology_t topo, hwloc_obj_type_t type, std::vector<Domain> *level) {
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, type, nullptr); o;
       o = hwloc_get_next_obj_by_type(topo, type, o)) {
    if (!o->cpuset || hwloc_bitmap_iszero(o->cpuset)) continue;
    const bool cache = hwloc_obj_type_is_cache(type);
    level->push_back(Domain{o->os_index == HWLOC_UNKNOWN_INDEX ? -1 : static_cast<int>(o->os_index),
                            cache ? o->attr->cache.size : 0, from_bitmap(o->cpuset)});
  }
}

}  // namespace

int load_topology_hwloc(const char *xml_path, Topology *out, std::string *why) {
  // hwloc 2.x's ABI; a library of another major than the headers' would misread every object.
  if ((hwloc_get_api_version() >> 16) != (HWLOC_API_VERSION >> 16)) {
    *why = "libhwloc's API " + std::to_string(hwloc_get_api_version() >> 16) +
           ".x differs from the headers' (" + std::to_string(HWLOC_API_VERSION >> 16) + ".x)";
    return -ENOTSUP;
  }
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo)) {
    *why = std::string("hwloc_topology_init: ") + std::strerror(errno);
    return -errno;
  }
  // The whole machine, not this process's cgroup: every rank must see the same domains.
  hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  if (xml_path && hwloc_topology_set_xml(topo, xml_path)) {
    *why = std::string("hwloc cannot read XML ") + xml_path + ": " + std::strerror(errno);
    hwloc_topology_destroy(topo);
    return -EINVAL;
  }
  if (hwloc_topology_load(topo)) {
    *why = std::string("hwloc_topology_load") + (xml_path ? std::string(" of ") + xml_path : "") +
           ": " + std::strerror(errno);
    hwloc_topology_destroy(topo);
    return -EINVAL;
  }
  Topology t;
  t.cpus = from_bitmap(hwloc_topology_get_topology_cpuset(topo));
  add_level(topo, HWLOC_OBJ_PACKAGE, &t.domains[static_cast<size_t>(Level::kPackage)]);
  add_level(topo, HWLOC_OBJ_NUMANODE, &t.domains[static_cast<size_t>(Level::kNuma)]);
  add_level(topo, HWLOC_OBJ_L3CACHE, &t.domains[static_cast<size_t>(Level::kL3)]);
  add_level(topo, HWLOC_OBJ_L2CACHE, &t.domains[static_cast<size_t>(Level::kL2)]);
  // Cores: a topology without Core objects (some XML) counts each CPU as one.
  std::vector<CpuSet> cores;
  const hwloc_obj_type_t core = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0
                                    ? HWLOC_OBJ_CORE
                                    : HWLOC_OBJ_PU;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, core, nullptr); o;
       o = hwloc_get_next_obj_by_type(topo, core, o))
    cores.push_back(from_bitmap(o->cpuset));
  if (t.at(Level::kPackage).empty())  // a machine hwloc finds no package in: one
    t.domains[static_cast<size_t>(Level::kPackage)].push_back(Domain{0, 0, t.cpus});
  const unsigned v = hwloc_get_api_version();
  t.source = "hwloc (API " + std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) +
             ")" +
             (xml_path ? std::string(", XML file ") + xml_path
                       : hwloc_topology_is_thissystem(topo) ? std::string(", this machine")
                                                            : std::string(", not this machine "
                                                                          "(HWLOC_XMLFILE or "
                                                                          "HWLOC_SYNTHETIC)"));
  hwloc_topology_destroy(topo);
  finish_topology(&t, cores);
  *out = std::move(t);
  return 0;
}

#else

int load_topology_hwloc(const char *, Topology *, std::string *why) {
  *why = "libshaddr was built without hwloc (libhwloc-dev was missing when CMake ran; "
         "`make deps` installs it)";
  return -ENOTSUP;
}

#endif

const Topology &machine_topology() {
  static Topology topo;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    if (!load_topology_hwloc(nullptr, &topo, &why)) return;
    std::string sysfs_why;
    if (load_topology_sysfs("/sys/devices/system", &topo, &sysfs_why)) {
      // Nothing to read the machine from: no domain at all, so every grouping is flat and its
      // notes say that no rank's CPU is in a domain.
      topo = Topology{};
      topo.source = "none (hwloc: " + why + "; sysfs: " + sysfs_why + ")";
      return;
    }
    topo.source += " (hwloc: " + why + ")";
    if (verbose()) std::fprintf(stderr, "shaddr: topology from %s\n", topo.source.c_str());
  });
  return topo;
}

}  // namespace shaddr
