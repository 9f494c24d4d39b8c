// SPDX-License-Identifier: MIT
#include "common.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "comm.h"

namespace microbench {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Machine describe_machine() {
  Machine m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && m.cpu.empty()) m.cpu = val;
    if (key == "flags" && val.find(" hypervisor") != std::string::npos) m.hypervisor = true;
  }
  std::ifstream load("/proc/loadavg");
  std::getline(load, m.loadavg);
  utsname u{};
  if (uname(&u) == 0) m.kernel = u.release;
  m.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  // libshaddr's own reading of the caches and its default chunk: the same code path a
  // communicator takes, with SHADDR_CHUNK unset so the default is what we see.
  const char *set = std::getenv("SHADDR_CHUNK");
  const std::string saved = set ? set : "";
  unsetenv("SHADDR_CHUNK");
  const shaddr::Tuning t = shaddr::Tuning::from_env(2);
  if (set) setenv("SHADDR_CHUNK", saved.c_str(), 1);
  m.l1d = t.l1;
  m.l2 = t.l2;
  m.l3 = t.l3;
  m.default_chunk = t.chunk;
  return m;
}

std::string human_size(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace microbench
