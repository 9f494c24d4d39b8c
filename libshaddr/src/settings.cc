// SPDX-License-Identifier: MIT
#include "settings.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace shaddr {
namespace {

// SHADDR_TUNING_FILE: lines NAME=VALUE (as the variables below; # comments). The environment
// wins over the file. Read once per communicator creation.
std::string tuning_file_value(const char *name) {
  const char *path = std::getenv("SHADDR_TUNING_FILE");
  if (!path || !*path) return "";
  std::ifstream in(path);
  const std::string key = std::string(name) + "=";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  return "";
}

}  // namespace

size_t env_size(const char *name, size_t dflt) {
  const char *e = std::getenv(name);
  const std::string from_file = e && *e ? "" : tuning_file_value(name);
  const char *v = e && *e ? e : from_file.c_str();
  if (!*v) return dflt;
  char *end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 0);
  if (end && (*end == 'k' || *end == 'K')) n <<= 10;
  if (end && (*end == 'm' || *end == 'M')) n <<= 20;
  return n;
}

bool configured(const char *name) {
  const char *e = std::getenv(name);
  return (e && *e) || !tuning_file_value(name).empty();
}

bool verbose() {
  const char *v = std::getenv("SHADDR_VERBOSE");
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace shaddr
